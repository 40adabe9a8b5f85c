"""The state half of kiln.nn.Module: state_dict / load_state_dict and dtype conversion (_apply, to).

Kept apart from module.py (registration, iteration, hooks, repr) so each file holds one concept;
Module inherits these methods from StateDictMixin.
"""

from __future__ import annotations

from collections import OrderedDict, namedtuple
from collections.abc import Mapping

import kiln
from kiln._factory import channels_last_rank
from kiln.nn.parameter import Parameter

__all__ = ["StateDictMixin"]

_EXTRA_STATE_KEY_SUFFIX = "_extra_state"


class _IncompatibleKeys(namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])):
    """load_state_dict's result: the keys it did not find and the keys it did not expect."""

    __slots__ = ()

    def __repr__(self) -> str:
        if not self.missing_keys and not self.unexpected_keys:
            return "<All keys matched successfully>"
        return super().__repr__()

    __str__ = __repr__


def _same_tensor(a, b) -> bool:
    """Whether `a` is `b`'s data unchanged (same dtype and geometry over the same memory)."""
    return a is b or (
        a.dtype == b.dtype
        and a.data_ptr() == b.data_ptr()
        and a._sizes == b._sizes
        and a.stride() == b.stride()
    )


def _parse_to(args, kwargs):
    """Module.to's arguments: (device, dtype) from positional device/dtype/tensor and kwargs."""
    dev, dt = kwargs.pop("device", None), kwargs.pop("dtype", None)
    kwargs.pop("non_blocking", None)
    kwargs.pop("memory_format", None)
    if kwargs:
        raise TypeError(f"to() got an unexpected keyword argument '{next(iter(kwargs))}'")
    for a in args:
        if isinstance(a, kiln.dtype):
            dt = a
        elif isinstance(a, kiln.Tensor):
            dev, dt = a.device, a.dtype
        elif isinstance(a, (str, kiln.device)):
            dev = a
        elif isinstance(a, bool):
            continue
        elif a is not None:
            raise TypeError(f"to() received an invalid combination of arguments: {a!r}")
    return dev, dt


class StateDictMixin:
    """state_dict, load_state_dict and parameter/buffer conversion for kiln.nn.Module."""

    _version: int = 1

    # ------------------------------------------------------------------------------ state_dict

    def get_extra_state(self):
        """Extra picklable state to put in state_dict under ``_extra_state`` (override to use)."""
        raise RuntimeError(
            "Reached a code path in Module.get_extra_state() that should never be called."
        )

    def set_extra_state(self, state) -> None:
        """Restores what get_extra_state returned (override together with it)."""
        raise RuntimeError(
            "Reached a code path in Module.set_extra_state() that should never be called."
        )

    def _has_extra_state(self, method: str) -> bool:
        return getattr(type(self), method) is not getattr(StateDictMixin, method)

    def _save_to_state_dict(self, destination, prefix, keep_vars) -> None:
        for name, param in self._parameters.items():
            if param is not None:
                destination[prefix + name] = param if keep_vars else param.detach()
        for name, buf in self._buffers.items():
            if buf is not None and name not in self._non_persistent_buffers_set:
                destination[prefix + name] = buf if keep_vars else buf.detach()
        if self._has_extra_state("get_extra_state"):
            destination[prefix + _EXTRA_STATE_KEY_SUFFIX] = self.get_extra_state()

    def state_dict(self, *args, destination=None, prefix="", keep_vars=False):
        """An OrderedDict of every parameter and persistent buffer, keyed by dotted name.

        Values are detached aliases (they share memory with the module) unless keep_vars.
        """
        if args:
            destination = args[0] if destination is None else destination
            prefix = args[1] if len(args) > 1 and prefix == "" else prefix
            keep_vars = args[2] if len(args) > 2 and keep_vars is False else keep_vars
        if destination is None:
            destination = OrderedDict()
            destination._metadata = OrderedDict()
        local_metadata = {"version": self._version}
        if hasattr(destination, "_metadata"):
            destination._metadata[prefix[:-1]] = local_metadata
        self._save_to_state_dict(destination, prefix, keep_vars)
        for name, module in self._modules.items():
            if module is not None:
                module.state_dict(
                    destination=destination, prefix=prefix + name + ".", keep_vars=keep_vars
                )
        for hook in self._state_dict_hooks.values():
            result = hook(self, destination, prefix, local_metadata)
            if result is not None:
                destination = result
        return destination

    # ------------------------------------------------------------------------- load_state_dict

    def _load_one(self, key, param, input_param, assign, error_msgs) -> None:
        """Loads input_param into the member `param` stored under state_dict key `key`."""
        if not isinstance(input_param, kiln.Tensor):
            error_msgs.append(
                f'While copying the parameter named "{key}", expected kiln.Tensor or Tensor-like '
                f"object from checkpoint but received {type(input_param)}"
            )
            return
        if param.dim() == 0 and input_param.dim() == 1 and input_param.shape[0] == 1:
            input_param = input_param.select(0, 0)
        if input_param.shape != param.shape:
            error_msgs.append(
                f"size mismatch for {key}: copying a param with shape {input_param.shape} from "
                f"checkpoint, the shape in current model is {param.shape}."
            )
            return
        try:
            if assign:
                name = key.rpartition(".")[2]
                if isinstance(param, Parameter) and not isinstance(input_param, Parameter):
                    input_param = Parameter(input_param, requires_grad=param.requires_grad)
                setattr(self, name, input_param)
            else:
                with kiln.no_grad():  # as torch: loading writes the leaves, it is not an op
                    param.copy_(input_param)
        except Exception as ex:  # noqa: BLE001 - reported with the key, as torch does
            error_msgs.append(
                f'While copying the parameter named "{key}", whose dimensions in the model are '
                f"{param.size()} and whose dimensions in the checkpoint are "
                f"{input_param.size()}, an exception occurred : {ex.args}."
            )

    def _load_from_state_dict(
        self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
    ) -> None:
        """Loads this module's own parameters/persistent buffers (not its children's)."""
        for hook in self._load_state_dict_pre_hooks.values():
            hook(
                state_dict,
                prefix,
                local_metadata,
                strict,
                missing_keys,
                unexpected_keys,
                error_msgs,
            )
        local_state = {k: v for k, v in self._parameters.items() if v is not None}
        for k, v in self._buffers.items():
            if v is not None and k not in self._non_persistent_buffers_set:
                local_state[k] = v
        assign = local_metadata.get("assign_to_params_buffers", False)
        for name, param in local_state.items():
            key = prefix + name
            if key in state_dict:
                self._load_one(key, param, state_dict[key], assign, error_msgs)
            elif strict:
                missing_keys.append(key)
        extra_key = prefix + _EXTRA_STATE_KEY_SUFFIX
        if self._has_extra_state("set_extra_state"):
            if extra_key in state_dict:
                self.set_extra_state(state_dict[extra_key])
            elif strict:
                missing_keys.append(extra_key)
        elif strict and extra_key in state_dict:
            unexpected_keys.append(extra_key)
        if strict:
            for key in state_dict:
                if key.startswith(prefix) and key != extra_key:
                    head = key[len(prefix) :].split(".", 1)
                    known = self._modules if len(head) > 1 else local_state
                    if head[0] not in known:
                        unexpected_keys.append(key)

    def load_state_dict(self, state_dict, strict: bool = True, assign: bool = False):
        """Copies ``state_dict``'s tensors into this module's parameters and buffers (copy_).

        Returns ``(missing_keys, unexpected_keys)``; with ``strict=True`` any missing or
        unexpected key, and in any mode a shape mismatch, raises RuntimeError listing them all.
        """
        if not isinstance(state_dict, Mapping):
            raise TypeError(f"Expected state_dict to be dict-like, got {type(state_dict)}.")
        missing_keys, unexpected_keys, error_msgs = [], [], []
        metadata = getattr(state_dict, "_metadata", None)
        state_dict = OrderedDict(state_dict)

        def load(module, local_state, prefix=""):
            local_metadata = {} if metadata is None else dict(metadata.get(prefix[:-1], {}))
            if assign:
                local_metadata["assign_to_params_buffers"] = True
            module._load_from_state_dict(
                local_state, prefix, local_metadata, True, missing_keys, unexpected_keys, error_msgs
            )
            for name, child in module._modules.items():
                if child is not None:
                    child_prefix = prefix + name + "."
                    child_state = {
                        k: v for k, v in local_state.items() if k.startswith(child_prefix)
                    }
                    load(child, child_state, child_prefix)
            incompatible = _IncompatibleKeys(missing_keys, unexpected_keys)
            for hook in module._load_state_dict_post_hooks.values():
                hook(module, incompatible)

        load(self, state_dict)
        if strict:
            if unexpected_keys:
                keys = ", ".join(f'"{k}"' for k in unexpected_keys)
                error_msgs.insert(0, f"Unexpected key(s) in state_dict: {keys}. ")
            if missing_keys:
                keys = ", ".join(f'"{k}"' for k in missing_keys)
                error_msgs.insert(0, f"Missing key(s) in state_dict: {keys}. ")
        if error_msgs:
            raise RuntimeError(
                "Error(s) in loading state_dict for {}:\n\t{}".format(
                    type(self).__name__, "\n\t".join(error_msgs)
                )
            )
        return _IncompatibleKeys(missing_keys, unexpected_keys)

    # ------------------------------------------------------------------------------ conversion

    def _apply(self, fn, recurse: bool = True):
        """Replaces every parameter and buffer t by fn(t).

        A converted parameter becomes a new Parameter over the converted data; a parameter
        shared by several modules (tied weights) maps to one new Parameter, so ties survive.
        """
        memo = {}
        for module in self.modules() if recurse else [self]:
            for table in (module._parameters, module._buffers):
                for key, value in table.items():
                    if value is None:
                        continue
                    if id(value) not in memo:
                        memo[id(value)] = self._convert_member(value, fn)
                    table[key] = memo[id(value)]
        return self

    @staticmethod
    def _convert_member(value, fn):
        new = fn(value)
        if _same_tensor(new, value):
            return value
        if isinstance(value, Parameter):
            return Parameter(new, requires_grad=value.requires_grad)
        return new

    def to(self, *args, **kwargs):
        """Moves parameters and buffers to a device and casts the floating-point ones to a dtype
        (``to(dtype)``, ``to("cuda")``, ``to(tensor)``, ``to(device=..., dtype=...)``); integer
        buffers keep their dtype."""
        kwargs = dict(kwargs)
        fmt = kwargs.pop("memory_format", None)
        dev, dt = _parse_to(args, kwargs)
        if dt is not None and not dt.is_floating_point:
            raise TypeError(
                f"nn.Module.to only accepts floating point or complex dtypes, but got desired "
                f"dtype={dt}"
            )
        if dev is not None:
            self._apply(lambda t: t.to(dev))
        if dt is not None:
            self._apply(lambda t: t.to(dt) if t.is_floating_point() else t)
        rank = None if fmt is None else channels_last_rank(fmt)
        if rank is not None:  # torch converts only the tensors of that rank
            self._apply(lambda t: t.contiguous(memory_format=fmt) if t.dim() == rank else t)
        return self

    def _cast_floats(self, dt):
        return self._apply(lambda t: t.to(dt) if t.is_floating_point() else t)

    def float(self):
        """Casts floating-point parameters and buffers to float32."""
        return self._cast_floats(kiln.float32)

    def double(self):
        """Casts floating-point parameters and buffers to float64."""
        return self._cast_floats(kiln.float64)

    def half(self):
        """Casts floating-point parameters and buffers to float16."""
        return self._cast_floats(kiln.float16)

    def bfloat16(self):
        """Casts floating-point parameters and buffers to bfloat16."""
        return self._cast_floats(kiln.bfloat16)

    def type(self, dst_type):
        """Casts all parameters and buffers to dst_type (a kiln.dtype)."""
        return self._apply(lambda t: t.to(dst_type))

    def cpu(self):
        """Moves every parameter and buffer to the CPU."""
        return self._apply(lambda t: t.cpu())

    def cuda(self, device=None):
        """Moves every parameter and buffer to a CUDA device (the current one by default)."""
        return self._apply(lambda t: t.cuda(device))

    def share_memory(self):
        """No-op kept for API compatibility."""
        return self
