"""kiln.optim.Optimizer: the base class every optimizer builds on (torch.optim.Optimizer).

It owns the bookkeeping that is the same for every algorithm: parameter groups with their
hyperparameters, per-parameter ``state``, ``zero_grad``, step hooks, and a ``state_dict``
whose layout is torch's (``{'state': {index: {...}}, 'param_groups': [{..., 'params':
[index, ...]}]}``) so checkpoints can be inspected and written with the same code as torch's.
Subclasses implement ``step``; their per-tensor math lives in their own modules.
"""

from __future__ import annotations

import functools
import warnings
from collections import OrderedDict, defaultdict
from collections.abc import Iterable
from copy import deepcopy
from itertools import chain
from typing import Any

import kiln
from kiln.nn.modules._hooks import RemovableHandle

__all__ = [
    "Optimizer",
    "register_optimizer_step_post_hook",
    "register_optimizer_step_pre_hook",
    "required",
]

_global_pre_hooks: OrderedDict[int, Any] = OrderedDict()
_global_post_hooks: OrderedDict[int, Any] = OrderedDict()


class _RequiredParameter:
    """The default of a hyperparameter that every parameter group must give (torch's)."""

    def __repr__(self) -> str:
        return "<required parameter>"


required = _RequiredParameter()


def _typename(obj) -> str:
    """How torch.typename names a value in error messages (kiln tensors as kiln.Tensor)."""
    if isinstance(obj, kiln.Tensor):
        return "kiln.Tensor"
    cls = type(obj)
    if cls.__module__ in ("builtins", "__builtin__", None):
        return cls.__qualname__
    return f"{cls.__module__}.{cls.__qualname__}"


def _scalar_dtype(fused=None):
    """The dtype of ``state['step']``: float32 for fused, else float64 only when that is the
    default dtype; the same rule as torch, so state dicts carry the same dtypes."""
    if fused:
        return kiln.float32
    return kiln.float64 if kiln.get_default_dtype() == kiln.float64 else kiln.float32


def _new_step(fused=None):
    """A fresh 0-d step counter, kept as a tensor (not an int) as torch keeps it."""
    return kiln.zeros((), dtype=_scalar_dtype(fused))


def _get_value(x):
    """A Python number from a 0-d tensor (steps, tensor hyperparameters) or a number."""
    return x.item() if isinstance(x, kiln.Tensor) else x


def _to_scalar(x):
    """A one-element tensor hyperparameter squeezed to 0-d; anything else unchanged."""
    if isinstance(x, kiln.Tensor) and x.dim() != 0:
        return x.squeeze()
    return x


def _check_tensor_hyper(name, value):
    """Tensor hyperparameters must hold one element, as torch requires."""
    if isinstance(value, kiln.Tensor) and value.numel() != 1:
        raise ValueError(f"Tensor {name} must be 1-element")


def _deep_copy(value):
    """copy.deepcopy, with tensors (which kiln cannot pickle) copied by ``clone()``."""
    if isinstance(value, kiln.Tensor):
        return value.clone()
    if isinstance(value, dict):
        return type(value)((k, _deep_copy(v)) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return type(value)(_deep_copy(v) for v in value)
    return deepcopy(value)


def _group_step_pairs(pairs, group, state_keys):
    """The (param, state) pairs a C++ group update can take: the group asks for no
    single-tensor update (``foreach`` not False, not differentiable, lr a number) and the
    parameter, its gradient and those of its `state_keys` tensors that exist are dense
    float32/float64 CPU tensors of one dtype. Returns (taken, rest)."""
    if group["foreach"] is False or group.get("differentiable") or isinstance(group["lr"],
                                                                              kiln.Tensor):
        return [], pairs
    taken, rest = [], []
    for p, s in pairs:
        tensors = [p, p.grad] + [s[k] for k in state_keys if s.get(k) is not None]
        ok = p.dtype in (kiln.float32, kiln.float64) and all(
            t.device.type == "cpu" and t.is_contiguous() and t.dtype == p.dtype for t in tensors)
        (taken if ok else rest).append((p, s))
    return taken, rest


def _use_grad_for_differentiable(func):
    """Runs ``step`` with grad mode set to the ``differentiable`` default (off unless the
    caller wants to differentiate through the update), restoring the caller's mode after."""

    @functools.wraps(func)
    def _use_grad(self, *args, **kwargs):
        with kiln.set_grad_enabled(bool(self.defaults.get("differentiable", False))):
            return func(self, *args, **kwargs)

    return _use_grad


def _with_step_hooks(func):
    """Wraps a class's ``step`` so global and per-instance pre/post hooks run around it."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        self = args[0]
        for pre_hook in chain(_global_pre_hooks.values(), self._optimizer_step_pre_hooks.values()):
            result = pre_hook(self, args, kwargs)
            if result is not None:
                if isinstance(result, tuple) and len(result) == 2:
                    args, kwargs = result
                else:
                    raise RuntimeError(
                        f"{func} must return None or a tuple of (new_args, new_kwargs), "
                        f"but got {result}."
                    )
        out = func(*args, **kwargs)
        for post_hook in chain(
            self._optimizer_step_post_hooks.values(), _global_post_hooks.values()
        ):
            post_hook(self, args, kwargs)
        return out

    wrapper.hooked = True
    return wrapper


def register_optimizer_step_pre_hook(hook) -> RemovableHandle:
    """Registers ``hook(optimizer, args, kwargs)`` to run before every optimizer's step."""
    handle = RemovableHandle(_global_pre_hooks)
    _global_pre_hooks[handle.id] = hook
    return handle


def register_optimizer_step_post_hook(hook) -> RemovableHandle:
    """Registers ``hook(optimizer, args, kwargs)`` to run after every optimizer's step."""
    handle = RemovableHandle(_global_post_hooks)
    _global_post_hooks[handle.id] = hook
    return handle


class Optimizer:
    """Base class for all optimizers.

    ``params`` is an iterable of tensors, of ``(name, tensor)`` pairs, or of dicts (parameter
    groups, each with ``'params'`` and optional per-group hyperparameters); ``defaults`` fills
    the hyperparameters a group leaves out. The order of parameters matters (state dicts
    refer to them by position), so sets are refused.
    """

    def __init__(self, params, defaults: dict[str, Any]) -> None:
        self.defaults = defaults
        self._optimizer_step_pre_hooks: OrderedDict[int, Any] = OrderedDict()
        self._optimizer_step_post_hooks: OrderedDict[int, Any] = OrderedDict()
        self._patch_step_function()
        if isinstance(params, kiln.Tensor):
            raise TypeError(
                "params argument given to the optimizer should be an iterable of Tensors or "
                "dicts, but got " + _typename(params)
            )
        self.state: defaultdict[kiln.Tensor, Any] = defaultdict(dict)
        self.param_groups: list[dict[str, Any]] = []
        param_groups = list(params)
        if len(param_groups) == 0:
            raise ValueError("optimizer got an empty parameter list")
        if not isinstance(param_groups[0], dict):
            param_groups = [{"params": param_groups}]
        for param_group in param_groups:
            self.add_param_group(param_group)

    def _patch_step_function(self) -> None:
        # As torch: the class's step is wrapped once, the first time an instance is made.
        cls = type(self)
        if not getattr(cls.step, "hooked", False):
            cls.step = _with_step_hooks(cls.step)

    def __getstate__(self) -> dict[str, Any]:
        return {"defaults": self.defaults, "state": self.state, "param_groups": self.param_groups}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.__dict__.setdefault("_optimizer_step_pre_hooks", OrderedDict())
        self.__dict__.setdefault("_optimizer_step_post_hooks", OrderedDict())
        self._patch_step_function()
        self.defaults.setdefault("differentiable", False)

    def __repr__(self) -> str:
        out = self.__class__.__name__ + " ("
        for i, group in enumerate(self.param_groups):
            out += f"\nParameter Group {i}\n"
            for key in sorted(group.keys()):
                if key != "params":
                    out += f"    {key}: {group[key]}\n"
        return out + ")"

    def register_step_pre_hook(self, hook) -> RemovableHandle:
        """Registers ``hook(optimizer, args, kwargs)`` to run before this optimizer's step;
        it may return new ``(args, kwargs)``."""
        handle = RemovableHandle(self._optimizer_step_pre_hooks)
        self._optimizer_step_pre_hooks[handle.id] = hook
        return handle

    def register_step_post_hook(self, hook) -> RemovableHandle:
        """Registers ``hook(optimizer, args, kwargs)`` to run after this optimizer's step."""
        handle = RemovableHandle(self._optimizer_step_post_hooks)
        self._optimizer_step_post_hooks[handle.id] = hook
        return handle

    def state_dict(self) -> dict[str, Any]:
        """The optimizer's state with parameters replaced by their position (counted across
        groups), so it can be saved without the parameters and loaded into a fresh
        optimizer over the same model. Tensors in it are the live state, not copies."""
        param_mappings: dict[int, int] = {}
        start_index = 0

        def pack_group(group):
            nonlocal start_index
            packed = {k: v for k, v in group.items() if k != "params"}
            for i, p in enumerate(group["params"], start_index):
                param_mappings.setdefault(id(p), i)
            packed["params"] = [param_mappings[id(p)] for p in group["params"]]
            start_index += len(packed["params"])
            return packed

        param_groups = [pack_group(g) for g in self.param_groups]
        packed_state = {
            (param_mappings[id(k)] if isinstance(k, kiln.Tensor) else k): v
            for k, v in self.state.items()
        }
        return {"state": packed_state, "param_groups": param_groups}

    @staticmethod
    def _cast_state_value(param, value, param_id, param_groups, key=None):
        """A loaded state tensor in the param's dtype and device (``step`` keeps its dtype
        unless the group is fused or capturable, where it must be float32)."""
        fused = capturable = False
        for pg in param_groups:
            if param_id in pg["params"]:
                fused = pg.get("fused", False)
                capturable = pg.get("capturable", False)
                break
        if key == "step":
            if capturable or fused:
                return value.to(dtype=kiln.float32, device=param.device)
            return value
        if param.is_floating_point():
            return value.to(dtype=param.dtype, device=param.device)
        return value.to(device=param.device)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Loads a ``state_dict()`` result; parameters are matched by position, the group
        hyperparameters are taken from the saved groups."""
        groups = self.param_groups
        saved_groups = _deep_copy(state_dict["param_groups"])
        if len(groups) != len(saved_groups):
            raise ValueError("loaded state dict has a different number of parameter groups")
        if any(
            len(g["params"]) != len(s["params"]) for g, s in zip(groups, saved_groups, strict=True)
        ):
            raise ValueError(
                "loaded state dict contains a parameter group "
                "that doesn't match the size of optimizer's group"
            )
        id_map = dict(
            zip(
                chain.from_iterable(g["params"] for g in saved_groups),
                chain.from_iterable(g["params"] for g in groups),
                strict=True,
            )
        )

        def cast(param, value, param_id, key=None):
            if isinstance(value, kiln.Tensor):
                return Optimizer._cast_state_value(
                    param, value, param_id, state_dict["param_groups"], key
                )
            if isinstance(value, dict):
                return {k: cast(param, v, param_id, key=k) for k, v in value.items()}
            if isinstance(value, Iterable) and not isinstance(value, (str, bytes)):
                return type(value)(cast(param, v, param_id) for v in value)
            return value

        state: defaultdict[Any, dict[Any, Any]] = defaultdict(dict)
        for k, v in state_dict["state"].items():
            if k in id_map:
                param = id_map[k]
                state[param] = cast(param, v, k)
            else:
                state[k] = v

        def update_group(group, new_group):
            new_group["params"] = group["params"]
            if "param_names" in group and "param_names" not in new_group:
                new_group["param_names"] = group["param_names"]
            return new_group

        param_groups = [update_group(g, ng) for g, ng in zip(groups, saved_groups, strict=True)]
        self.__setstate__({"state": state, "param_groups": param_groups})

    def _step_each(self, closure, update, group_update=None):
        """The body of ``step``: runs the closure (grad enabled) for its loss, then
        ``update(param, grad, state, group)`` for every parameter that has a gradient.
        ``group_update(pairs, group)``, when given, first takes the group's (param, state)
        pairs it can update in one call and returns the others."""
        loss = None
        if closure is not None:
            with kiln.enable_grad():
                loss = closure()
        for group in self.param_groups:
            pairs = [(p, self._init_state(p, group)) for p in group["params"] if p.grad is not None]
            if group_update is not None:
                pairs = group_update(pairs, group)
            for p, state in pairs:
                update(p, p.grad, state, group)
        return loss

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Clears every parameter's gradient: drops it (the default, and what makes the next
        step skip parameters that get no gradient) or zeros it in place."""
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                if set_to_none:
                    p.grad = None
                    continue
                grad = p.grad
                if getattr(grad, "grad_fn", None) is not None:
                    grad.detach_()
                else:
                    grad.requires_grad_(False)
                grad.zero_()

    def step(self, closure=None):
        """Performs one update; ``closure`` re-evaluates the model and returns the loss."""
        raise NotImplementedError

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """Adds a group of parameters (e.g. layers unfrozen while fine-tuning) with its own
        hyperparameters; missing ones come from ``defaults``."""
        if not isinstance(param_group, dict):
            raise TypeError(f"param_group must be a dict, but got {type(param_group)}")
        params = param_group["params"]
        if isinstance(params, kiln.Tensor):
            param_group["params"] = [params]
        elif isinstance(params, set):
            raise TypeError(
                "optimizer parameters need to be organized in ordered collections, but the "
                "ordering of tensors in sets will change between runs. Please use a list instead."
            )
        else:
            param_group["params"] = list(params)

        tensors, names = [], []
        for param in param_group["params"]:
            if isinstance(param, tuple):
                names.append(param[0])
                tensors.append(param[1])
            else:
                tensors.append(param)
        param_group["params"] = tensors
        if names:
            if len(names) != len(tensors):
                raise ValueError(
                    "all optimizer params should be with/without names. "
                    "Some param names are missing"
                )
            param_group["param_names"] = names

        for param in tensors:
            if not isinstance(param, kiln.Tensor):
                raise TypeError(
                    "optimizer can only optimize Tensors, but one of the params is "
                    + _typename(param)
                )
            leaf = getattr(param, "is_leaf", True) or getattr(param, "retains_grad", False)
            if not self.defaults.get("differentiable", None) and not leaf:
                raise ValueError("can't optimize a non-leaf Tensor")

        for name, default in self.defaults.items():
            if default is required and name not in param_group:
                raise ValueError(
                    "parameter group didn't specify a value of required optimization "
                    f"parameter {name}"
                )
            param_group.setdefault(name, default)

        if len(tensors) != len({id(p) for p in tensors}):
            warnings.warn(
                "optimizer contains a parameter group with duplicate parameters; "
                "in future, this will cause an error; "
                "see github.com/pytorch/pytorch/issues/40967 for more information",
                stacklevel=3,
            )
        seen: set[int] = set()
        for group in self.param_groups:
            seen.update(id(p) for p in group["params"])
            if ("param_names" in param_group) != ("param_names" in group):
                which = "with names" if "param_names" in param_group else "without names"
                raise ValueError(
                    "all optimizer param groups should be with/without names. "
                    f"cannot add param group {which} to the optimizer"
                )
        if not seen.isdisjoint(id(p) for p in tensors):
            raise ValueError("some parameters appear in more than one parameter group")
        self.param_groups.append(param_group)
