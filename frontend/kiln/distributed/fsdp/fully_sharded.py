"""FullyShardedDataParallel: torch's sharded data-parallel wrapper on kiln.distributed.

Each FSDP unit (the wrapped module, and every submodule an ``auto_wrap_policy`` picks, wrapped
first) flattens the parameters it owns into one buffer, padded to a multiple of the world
size, and keeps 1/world of it as its only parameter (``_flat_param``): the optimizer, its state
and the gradients the step reads are sharded. The module's parameters become views of a full
buffer the unit all-gathers from the shards before each forward, leaves that require grad;
when a backward has accumulated the gradient of every view the unit's forward reached, the
gradients are flattened and reduce-scattered (averaged over ranks) into the shard's ``.grad``,
and the views' gradients are dropped.

With ``ShardingStrategy.FULL_SHARD`` (the default, as torch's) a unit frees its full buffer
after its forward (the storage is resized to 0 bytes, so the views the autograd graph saved
hold no memory) and gathers it again just before its backward, from a hook on the forward's
outputs; after the reduce-scatter it frees it once more. Between steps, and between a unit's
forward and its backward, a rank then holds only its shards and the gathered buffers of the
units running now. ``SHARD_GRAD_OP`` keeps the full buffer from forward to backward (no second
gather). A unit's parameters must all be trainable or all frozen, and parameters shared by
modules (tied weights) must be in one unit.

``state_dict()`` gathers a full state dict with the module's own names (torch's
FULL_STATE_DICT; with ``FullStateDictConfig(rank0_only=True)`` only rank 0 gets it, the others
an empty one); ``load_state_dict`` takes one and keeps each rank's shard. Under
``FSDP.state_dict_type(model, StateDictType.LOCAL_STATE_DICT)`` each rank saves and loads only
its shards (``<unit path>._flat_param``, plus the buffers), with no communication: a checkpoint
per rank, reloaded at the same world size. ``no_sync()`` lets
gradients accumulate locally; ``clip_grad_norm_`` clips by the norm over all shards.
"""

from __future__ import annotations

import contextlib
import enum
import math
import weakref
from collections import OrderedDict

import kiln
import kiln.distributed as dist
from kiln.distributed import _groups
from kiln.nn.modules.module import Module
from kiln.nn.parallel.distributed import _tensors, reached_leaves

__all__ = ["BackwardPrefetch", "CPUOffload", "FullStateDictConfig", "FullyShardedDataParallel",
           "LocalStateDictConfig", "ShardingStrategy", "StateDictType"]  # fmt: skip


class ShardingStrategy(enum.Enum):
    FULL_SHARD = 1
    SHARD_GRAD_OP = 2
    NO_SHARD = 3
    HYBRID_SHARD = 4


class BackwardPrefetch(enum.Enum):
    BACKWARD_PRE = 1
    BACKWARD_POST = 2


class StateDictType(enum.Enum):
    FULL_STATE_DICT = 1
    LOCAL_STATE_DICT = 2
    SHARDED_STATE_DICT = 3


class FullStateDictConfig:
    def __init__(self, offload_to_cpu: bool = False, rank0_only: bool = False):
        self.offload_to_cpu, self.rank0_only = offload_to_cpu, rank0_only


class LocalStateDictConfig:
    def __init__(self, offload_to_cpu: bool = False):
        self.offload_to_cpu = offload_to_cpu


class CPUOffload:
    def __init__(self, offload_params: bool = False):
        self.offload_params = offload_params


class FullyShardedDataParallel(Module):
    def __init__(self, module, process_group=None, sharding_strategy=None, cpu_offload=None,
                 auto_wrap_policy=None, backward_prefetch=None, mixed_precision=None,
                 ignored_modules=None, param_init_fn=None, device_id=None,
                 sync_module_states=False, forward_prefetch=False, limit_all_gathers=True,
                 use_orig_params=False, ignored_states=None, device_mesh=None):  # fmt: skip
        super().__init__()
        if not dist.is_initialized():
            raise ValueError("Default process group has not been initialized, please make sure "
                             "to call init_process_group.")
        if mixed_precision is not None:
            raise NotImplementedError("kiln's FSDP keeps parameters in their own dtype: use "
                                      "kiln.autocast around the forward for mixed precision")
        if cpu_offload is not None and cpu_offload.offload_params:
            raise NotImplementedError("kiln's FSDP runs on the CPU: there is nothing to offload")
        strategy = ShardingStrategy.FULL_SHARD if sharding_strategy is None else sharding_strategy
        if strategy not in (ShardingStrategy.FULL_SHARD, ShardingStrategy.SHARD_GRAD_OP):
            raise NotImplementedError(f"FullyShardedDataParallel: {strategy} is not supported; "
                                      "use FULL_SHARD or SHARD_GRAD_OP (or DistributedDataParallel "
                                      "for unsharded training)")
        self._reshard = strategy is ShardingStrategy.FULL_SHARD
        self.sharding_strategy = strategy
        self._state_dict_type = StateDictType.FULL_STATE_DICT
        self._state_dict_config = FullStateDictConfig()
        if auto_wrap_policy is not None:
            _auto_wrap(module, auto_wrap_policy, dict(sync_module_states=sync_module_states,
                                                      sharding_strategy=strategy,
                                                      process_group=process_group))
        self._fsdp_wrapped_module = module
        self.process_group = process_group  # None: the world; else a group from new_group
        if process_group is not None and dist.get_rank(process_group) < 0:
            raise ValueError("FullyShardedDataParallel: this rank is not in process_group")
        if sync_module_states:
            with kiln.no_grad():
                for t in _owned_tensors(module):
                    dist.broadcast(t.detach(), src=_groups.source_rank(process_group),
                                   group=process_group)
        self._sync = True
        self._shard(module)

    @property
    def module(self) -> Module:
        return self._fsdp_wrapped_module

    def __getattr__(self, name):
        """Attributes of the wrapped module read through the wrapper, as torch's FSDP does
        (``model.transformer.h[0].attn`` where ``h[0]`` is a unit)."""
        try:
            return super().__getattr__(name)
        except AttributeError:
            if name == "_fsdp_wrapped_module":
                raise
            return getattr(self._fsdp_wrapped_module, name)

    def __getitem__(self, key):
        return self._fsdp_wrapped_module.__getitem__(key)

    # --- flattening --------------------------------------------------------------------------

    def _shard(self, module) -> None:
        owned, seen = [], {}
        for m in _unit_modules(module):
            for name, p in list(m._parameters.items()):
                if p is None:
                    continue
                owned.append((m, name, p))
                seen.setdefault(id(p), p)
        params = list(seen.values())
        for p in params:
            if id(p) in _SHARDED:
                raise ValueError("FullyShardedDataParallel: a parameter shared by modules in "
                                 "different units (tied weights); wrap the modules that share it "
                                 "in one unit")
        if len({p.requires_grad for p in params}) > 1:
            raise ValueError("FullyShardedDataParallel flattens a unit's parameters into one "
                             "buffer: they must all require grad or all not (freeze whole "
                             "units, as torch's FSDP requires without use_orig_params)")
        dtypes = sorted({str(p.dtype) for p in params})
        if len(dtypes) > 1:
            raise ValueError("FullyShardedDataParallel flattens a unit's parameters into one "
                             f"buffer: they must share a dtype, got {dtypes}")
        world, rank = dist.get_world_size(self.process_group), dist.get_rank(self.process_group)
        total = sum(p.numel() for p in params)
        self._chunk = max(1, math.ceil(total / world))
        dtype = params[0].dtype if params else kiln.get_default_dtype()
        self._full = kiln.zeros(self._chunk * world, dtype=dtype)
        views, offset = {}, 0
        with kiln.no_grad():
            for p in params:
                n = p.numel()
                self._full[offset : offset + n].copy_(p.detach().reshape(-1))
                view = self._full[offset : offset + n].view(p.shape)
                view.requires_grad_(p.requires_grad)
                views[id(p)] = (view, offset)
                offset += n
            shard = self._full[rank * self._chunk : (rank + 1) * self._chunk].clone()
        self._flat_param = kiln.nn.Parameter(shard, requires_grad=any(p.requires_grad
                                                                     for p in params))
        for m, name, p in owned:  # the module now reads the gathered views
            del m._parameters[name]
            setattr(m, name, views[id(p)][0])
        self._owned = [(m, name, views[id(p)][0]) for m, name, p in owned]
        for p in params:
            _SHARDED[id(p)] = p  # kept alive: the id names this parameter while it lives
        self._views = [views[id(p)][0] for p in params]
        self._offsets = [views[id(p)][1] for p in params]
        self._ready = [False] * len(self._views)
        self._gathered = None  # the shard's version the full buffer holds
        me = weakref.ref(self)
        self._handles = [v.register_post_accumulate_grad_hook(lambda _, i=i: _on_ready(me, i))
                         for i, v in enumerate(self._views) if v.requires_grad]  # fmt: skip

    def _gather(self) -> None:
        """The full parameters from the shards, unless they are there and no shard changed
        since the last gather (a second forward before the backward). Every rank steps alike,
        so they skip or gather together."""
        version = self._flat_param._version
        released = self._released()
        if version == self._gathered and not released:
            return
        with kiln.no_grad():
            if released:
                self._full._storage_resize_(self._full.numel() * self._full.element_size())
            kept = self._full._version
            dist.all_gather_into_tensor(self._full, self._flat_param.detach(),
                                        group=self.process_group)
            if version == self._gathered:
                # the same values the autograd graph's saved views were made from: they stay
                # valid (a re-gather for the backward, or for a second forward)
                self._full._unsafe_restore_version(kept)
        self._gathered = version

    def _released(self) -> bool:
        return self._full._storage_nbytes() == 0 and self._full.numel() > 0

    def _release(self) -> None:
        """FULL_SHARD: frees the full buffer; the next forward or backward gathers it again."""
        if self._reshard:
            self._full._storage_resize_(0)

    # --- the reduction ------------------------------------------------------------------------

    def _view_ready(self, i) -> None:
        if not self._sync or self._ready[i]:
            return
        self._ready[i] = True
        if all(r or not v.requires_grad for r, v in zip(self._ready, self._views, strict=True)):
            self._reduce_scatter()

    def _reduce_scatter(self) -> None:
        with kiln.no_grad():
            flat = kiln.zeros_like(self._full)
            for view, offset in zip(self._views, self._offsets, strict=True):
                if view.grad is not None:
                    flat[offset : offset + view.numel()].copy_(view.grad.reshape(-1))
                view.grad = None
            shard = kiln.empty(self._chunk, dtype=flat.dtype)
            dist.reduce_scatter_tensor(shard, flat, op=dist.ReduceOp.AVG, group=self.process_group)
            if self._flat_param.grad is None:
                self._flat_param.grad = shard
            else:
                self._flat_param.grad.add_(shard)
        self._ready = [False] * len(self._views)
        self._release()

    # --- Module ---------------------------------------------------------------------------------

    def forward(self, *args, **kwargs):
        self._gather()
        out = self._fsdp_wrapped_module(*args, **kwargs)
        if kiln.is_grad_enabled():
            if self._sync and self._flat_param.requires_grad:
                reached = reached_leaves(out)
                for i, v in enumerate(self._views):  # unused parameters count as ready: zeros
                    if v._impl_id not in reached:
                        self._view_ready(i)
            if self._reshard:
                # a frozen unit's weights are read by the backward too (the gradient of its
                # input); it has no reduce-scatter after, so it stays gathered until its next
                # forward releases it
                me = weakref.ref(self)
                for t in _tensors(out):
                    if t.requires_grad:
                        t.register_hook(lambda g: _before_backward(me))
        self._release()
        return out

    @contextlib.contextmanager
    def no_sync(self):
        """Gradients accumulate locally inside (on the full views); the first backward after it
        reduce-scatters the sum."""
        units = self._units()
        before = [u._sync for u in units]
        for u in units:
            u._sync = False
        try:
            yield
        finally:
            for u, b in zip(units, before, strict=True):
                u._sync = b

    def clip_grad_norm_(self, max_norm, norm_type=2.0):
        """Clips the shards' gradients by the norm of the whole model's gradient (all ranks);
        returns that norm."""
        grads = [p.grad for p in self.parameters() if p.grad is not None]
        norm_type = float(norm_type)
        with kiln.no_grad():
            if norm_type == math.inf:
                local = max((g.abs().max() for g in grads), default=kiln.tensor(0.0))
                total = local.reshape(1).clone()
                dist.all_reduce(total, op=dist.ReduceOp.MAX, group=self.process_group)
                total = total[0]
            else:
                local = sum((g.abs().pow(norm_type).sum() for g in grads), kiln.tensor(0.0))
                total = local.reshape(1).clone()
                dist.all_reduce(total, op=dist.ReduceOp.SUM, group=self.process_group)
                total = total[0].pow(1.0 / norm_type)
            coef = (float(max_norm) / (total + 1e-6)).clamp(max=1.0)
            for g in grads:
                g.mul_(coef)
        return total

    # --- state dicts -----------------------------------------------------------------------------

    def _units(self):
        return [m for m in self.modules() if isinstance(m, FullyShardedDataParallel)]

    def _named_views(self) -> dict:
        """Every owned parameter's full name (the module's own, FSDP levels left out) -> its
        view; buffers likewise -> the buffer."""
        owned = {}
        for unit in self._units():
            for m, name, view in unit._owned:
                owned.setdefault(id(m), []).append((name, view))
        out = OrderedDict()
        for path, m in _paths(self):
            if isinstance(m, FullyShardedDataParallel):
                continue
            for name, view in owned.get(id(m), []):
                out[path + name] = view
            for name, b in m._buffers.items():
                if b is not None and name not in m._non_persistent_buffers_set:
                    out[path + name] = b
        return out

    @staticmethod
    def set_state_dict_type(module, state_dict_type, state_dict_config=None,
                            optim_state_dict_config=None):  # fmt: skip
        """What state_dict()/load_state_dict() of every unit in `module` save and load."""
        if state_dict_type is StateDictType.SHARDED_STATE_DICT:
            raise NotImplementedError(
                "FullyShardedDataParallel: SHARDED_STATE_DICT (DTensor shards) is not supported; "
                "use LOCAL_STATE_DICT for a per-rank checkpoint of the shards, or "
                "FULL_STATE_DICT")
        if state_dict_config is None:
            state_dict_config = (FullStateDictConfig() if state_dict_type is
                                 StateDictType.FULL_STATE_DICT else LocalStateDictConfig())
        for unit in module.modules():
            if isinstance(unit, FullyShardedDataParallel):
                unit._state_dict_type = state_dict_type
                unit._state_dict_config = state_dict_config

    @staticmethod
    @contextlib.contextmanager
    def state_dict_type(module, state_dict_type, state_dict_config=None,
                        optim_state_dict_config=None):  # fmt: skip
        """torch's context manager: set_state_dict_type inside, the previous type after."""
        units = [m for m in module.modules() if isinstance(m, FullyShardedDataParallel)]
        before = [(u._state_dict_type, u._state_dict_config) for u in units]
        FullyShardedDataParallel.set_state_dict_type(module, state_dict_type, state_dict_config)
        try:
            yield
        finally:
            for u, (kind, config) in zip(units, before, strict=True):
                u._state_dict_type, u._state_dict_config = kind, config

    def _named_units(self) -> list:
        """(path with the FSDP levels left out, unit) for every unit, outermost first."""
        return [(path, m) for path, m in _paths(self) if isinstance(m, FullyShardedDataParallel)]

    def _buffers_by_name(self) -> dict:
        views = {id(v) for unit in self._units() for v in unit._views}
        return {k: t for k, t in self._named_views().items() if id(t) not in views}

    def state_dict(self, destination=None, prefix="", keep_vars=False):
        """The full state dict under the module's own names (every rank takes part in the
        gathers, into fresh buffers: a backward pending on the gathered views stays valid); or,
        under LOCAL_STATE_DICT, this rank's shards."""
        out = OrderedDict() if destination is None else destination
        if self._state_dict_type is StateDictType.LOCAL_STATE_DICT:
            for path, unit in self._named_units():
                flat = unit._flat_param
                out[f"{prefix}{path}_flat_param"] = flat if keep_vars else flat.detach().clone()
            for name, b in self._buffers_by_name().items():
                out[prefix + name] = b if keep_vars else b.detach().clone()
            return out
        values = {}
        for unit in self._units():
            full = kiln.empty_like(unit._full)
            with kiln.no_grad():
                dist.all_gather_into_tensor(full, unit._flat_param.detach(),
                                            group=unit.process_group)
            for view, offset in zip(unit._views, unit._offsets, strict=True):
                values[id(view)] = full[offset : offset + view.numel()].view(view.shape)
        if self._state_dict_config.rank0_only and dist.get_rank(self.process_group) != 0:
            return out
        for name, t in self._named_views().items():
            if id(t) in values:
                out[prefix + name] = values[id(t)]
            else:  # a buffer
                out[prefix + name] = t if keep_vars else t.detach().clone()
        return out

    def load_state_dict(self, state_dict, strict=True, assign=False):
        """Loads a full state dict (module names); each rank keeps its shard. Under
        LOCAL_STATE_DICT, loads this rank's shards."""
        if self._state_dict_type is StateDictType.LOCAL_STATE_DICT:
            return self._load_local(state_dict, strict)
        named = self._named_views()
        missing = [k for k in named if k not in state_dict]
        unexpected = [k for k in state_dict if k not in named]
        if strict and (missing or unexpected):
            raise RuntimeError(f"Error(s) in loading state_dict for FullyShardedDataParallel: "
                               f"missing keys {missing}, unexpected keys {unexpected}")
        for unit in self._units():
            unit._gather()
        with kiln.no_grad():
            for name, t in named.items():
                if name in state_dict:
                    t.copy_(state_dict[name])
            rank = dist.get_rank(self.process_group)
            for unit in self._units():
                unit._flat_param.copy_(unit._full[rank * unit._chunk : (rank + 1) * unit._chunk])
                unit._gathered = unit._flat_param._version  # the full buffer holds it
        return missing, unexpected

    def _load_local(self, state_dict, strict):
        shards = {f"{path}_flat_param": unit for path, unit in self._named_units()}
        buffers = self._buffers_by_name()
        expected = list(shards) + list(buffers)
        missing = [k for k in expected if k not in state_dict]
        unexpected = [k for k in state_dict if k not in shards and k not in buffers]
        if strict and (missing or unexpected):
            raise RuntimeError(f"Error(s) in loading a local state_dict for "
                               f"FullyShardedDataParallel: missing keys {missing}, unexpected "
                               f"keys {unexpected}")
        with kiln.no_grad():
            for key, unit in shards.items():
                if key not in state_dict:
                    continue
                got = state_dict[key]
                if tuple(got.shape) != tuple(unit._flat_param.shape):
                    raise RuntimeError(
                        f"FullyShardedDataParallel: the local shard {key} has {got.numel()} "
                        f"elements where this rank's has {unit._flat_param.numel()}: a local "
                        f"state dict loads only at the world size it was saved at (this one: "
                        f"{dist.get_world_size(self.process_group)})")
                unit._flat_param.copy_(got)
                unit._gathered = None  # the next forward gathers the loaded shards
            for key, b in buffers.items():
                if key in state_dict:
                    b.copy_(state_dict[key])
        return missing, unexpected


_SHARDED: dict = {}  # id -> parameter already flattened into a unit


def _on_ready(ref, i):
    unit = ref()
    if unit is not None:
        unit._view_ready(i)


def _before_backward(ref):
    unit = ref()
    if unit is not None:
        unit._gather()  # a no-op when another output's hook has gathered already


def _paths(module, path=""):
    """(path prefix, module) for `module` and every module below it, in module order, with the
    FSDP levels left out of the paths (a unit has its wrapped module's prefix)."""
    yield path, module
    if isinstance(module, FullyShardedDataParallel):
        yield from _paths(module._fsdp_wrapped_module, path)
        return
    for name, child in module._modules.items():
        if child is not None:
            yield from _paths(child, f"{path}{name}.")


def _unit_modules(module):
    """The modules whose parameters a unit owns: `module` and its descendants, not crossing
    nested units."""
    stack = [module]
    while stack:
        m = stack.pop()
        yield m
        stack.extend(c for c in m._modules.values()
                     if c is not None and not isinstance(c, FullyShardedDataParallel))  # fmt: skip


def _owned_tensors(module):
    for m in _unit_modules(module):
        yield from (p for p in m._parameters.values() if p is not None)
        yield from (b for b in m._buffers.values() if b is not None)


def _unwrapped_numel(module) -> int:
    """How many parameters `module` has outside the units already wrapped in it."""
    return sum(p.numel() for m in _unit_modules(module) for p in m._parameters.values()
               if p is not None)  # fmt: skip


def _auto_wrap(module, policy, kwargs) -> None:
    """Wraps, depth first, the submodules `policy` picks."""
    for name, child in list(module._modules.items()):
        if child is None or isinstance(child, FullyShardedDataParallel):
            continue
        if policy(module=child, recurse=True, nonwrapped_numel=_unwrapped_numel(child)):
            _auto_wrap(child, policy, kwargs)
        if policy(module=child, recurse=False, nonwrapped_numel=_unwrapped_numel(child)):
            setattr(module, name, FullyShardedDataParallel(child, **kwargs))
