"""Lazy modules: layers whose input size is read from their first input (torch.nn's
LazyModuleMixin, UninitializedParameter, LazyLinear and LazyConv1d/2d/3d).

A lazy layer holds UninitializedParameters (empty, shapeless placeholders) until its first
forward, when a forward pre-hook materializes them in place (so references to them, such as an
optimizer's, stay valid), initializes them as the eager layer would, and turns the module into
that layer's class (LazyLinear becomes Linear)."""

from __future__ import annotations

import itertools

import kiln
from kiln.nn.modules._hooks import RemovableHandle
from kiln.nn.modules.conv import Conv1d, Conv2d, Conv3d
from kiln.nn.modules.linear import Linear
from kiln.nn.parameter import Parameter

__all__ = [
    "LazyConv1d",
    "LazyConv2d",
    "LazyConv3d",
    "LazyLinear",
    "LazyModuleMixin",
    "UninitializedParameter",
]


class UninitializedParameter(Parameter):
    """A parameter with no shape yet: ``materialize(shape)`` gives it storage and makes it a
    plain Parameter. Module conversions (``.double()``, ``.to(dtype)``) change the dtype it
    will be materialized with."""

    cls_to_become = Parameter

    def __init__(self, requires_grad=True, device=None, dtype=None):
        super().__init__(kiln.empty(0, device=device, dtype=dtype), requires_grad)

    def materialize(self, shape, device=None, dtype=None) -> None:
        """Allocates (uninitialized) storage of ``shape`` in place and becomes a Parameter."""
        device = self.device if device is None else device
        dtype = self.dtype if dtype is None else dtype
        self.data = kiln.empty(shape, device=device, dtype=dtype)
        self.__class__ = self.cls_to_become

    @property
    def shape(self):
        raise RuntimeError(
            "Can't access the shape of an uninitialized parameter or buffer. This error usually "
            "happens in `load_state_dict` when trying to load an uninitialized parameter into "
            "an initialized one. Call `forward` to initialize the parameters before accessing "
            "their attributes."
        )

    def to(self, *args, **kwargs):
        # In place: Module._apply keeps a member that its conversion returns unchanged, so the
        # module keeps this placeholder (with the new dtype) rather than an empty Parameter.
        converted = kiln.Tensor.to(self.detach(), *args, **kwargs)
        if converted.dtype != self.dtype or converted.device != self.device:
            self.data = converted
        return self

    def share_memory_(self):
        raise RuntimeError(
            "Can't share memory on an uninitialized parameter or buffer. Call `forward` to "
            "initialize the parameters before calling `module.share_memory()`."
        )

    def __repr__(self) -> str:
        return f"<{type(self).__name__}>"

    __str__ = __repr__

    def __deepcopy__(self, memo):
        if id(self) not in memo:
            memo[id(self)] = type(self)(self.requires_grad, self.device, self.dtype)
        return memo[id(self)]

    def __reduce_ex__(self, protocol):
        return (type(self), (self.requires_grad,))


def is_lazy(param) -> bool:
    return isinstance(param, UninitializedParameter)


class LazyModuleMixin:
    """Mixed in before a layer class: runs ``initialize_parameters(*args, **kwargs)`` before
    the first forward, then drops its hooks and becomes ``cls_to_become``."""

    cls_to_become = None

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._load_hook = RemovableHandle(self._load_state_dict_pre_hooks)
        self._load_state_dict_pre_hooks[self._load_hook.id] = self._lazy_load_hook
        self._initialize_hook = self.register_forward_pre_hook(
            self._infer_parameters, with_kwargs=True
        )

    def _save_to_state_dict(self, destination, prefix, keep_vars) -> None:
        # An uninitialized parameter is saved as itself (not a detached empty tensor), so a lazy
        # module loading it knows there is nothing to load.
        super()._save_to_state_dict(destination, prefix, keep_vars)
        for name, param in self._parameters.items():
            if is_lazy(param):
                destination[prefix + name] = param

    def _lazy_load_hook(
        self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
    ) -> None:
        """Materializes each uninitialized parameter to the shape of the tensor about to be
        loaded into it."""
        for name, param in itertools.chain(self._parameters.items(), self._buffers.items()):
            key = prefix + name
            if key in state_dict and param is not None and is_lazy(param):
                value = state_dict[key]
                if not is_lazy(value):
                    with kiln.no_grad():
                        param.materialize(value.shape)

    def initialize_parameters(self, *args, **kwargs):
        raise NotImplementedError(
            f"initialize_parameters is not implemented for {self.__class__.__name__}"
        )

    def has_uninitialized_params(self) -> bool:
        members = itertools.chain(self._parameters.values(), self._buffers.values())
        return any(is_lazy(p) for p in members)

    def _infer_parameters(self, module, args, kwargs=None):
        module.initialize_parameters(*args, **(kwargs or {}))
        if module.has_uninitialized_params():
            raise RuntimeError(f"module {self._get_name()} has not been fully initialized")
        module._initialize_hook.remove()
        module._load_hook.remove()
        delattr(module, "_initialize_hook")
        delattr(module, "_load_hook")
        if module.cls_to_become is not None:
            module.__class__ = module.cls_to_become

    def _replicate_for_data_parallel(self):
        raise RuntimeError(
            "Modules with uninitialized parameters can't be used with `DataParallel`. Run a "
            "dummy forward pass to correctly initialize the modules"
        )


class LazyLinear(LazyModuleMixin, Linear):
    """Linear whose in_features is the last dim of its first input."""

    cls_to_become = Linear

    def __init__(self, out_features, bias=True, device=None, dtype=None) -> None:
        super().__init__(0, 0, False)
        self.weight = UninitializedParameter(device=device, dtype=dtype)
        self.out_features = out_features
        if bias:
            self.bias = UninitializedParameter(device=device, dtype=dtype)

    def reset_parameters(self) -> None:
        if not self.has_uninitialized_params() and self.in_features != 0:
            super().reset_parameters()

    def initialize_parameters(self, input) -> None:
        if self.has_uninitialized_params():
            with kiln.no_grad():
                self.in_features = input.shape[-1]
                self.weight.materialize((self.out_features, self.in_features))
                if self.bias is not None:
                    self.bias.materialize((self.out_features,))
                self.reset_parameters()
        if self.in_features == 0:
            if input.shape[-1] != self.weight.shape[-1]:
                raise AssertionError(
                    f"The in_features inferred from input: {input.shape[-1]} is not equal to "
                    f"in_features from self.weight: {self.weight.shape[-1]}"
                )
            self.in_features = input.shape[-1]


class _LazyConvXdMixin(LazyModuleMixin):
    _spatial = 0

    def __init__(self, out_channels, kernel_size, stride=1, padding=0, dilation=1, groups=1,
                 bias=True, padding_mode="zeros", device=None, dtype=None) -> None:  # fmt: skip
        super().__init__(0, 0, kernel_size, stride, padding, dilation, groups, False,
                         padding_mode, device, dtype)  # fmt: skip
        self.weight = UninitializedParameter(device=device, dtype=dtype)
        self.out_channels = out_channels
        if bias:
            self.bias = UninitializedParameter(device=device, dtype=dtype)

    def reset_parameters(self) -> None:
        if not self.has_uninitialized_params() and self.in_channels != 0:
            super().reset_parameters()

    def initialize_parameters(self, input, *args, **kwargs) -> None:
        if self.has_uninitialized_params():
            self.in_channels = self._get_in_channels(input)
            if self.in_channels % self.groups != 0:
                raise ValueError("in_channels must be divisible by groups")
            with kiln.no_grad():
                self.weight.materialize(
                    (self.out_channels, self.in_channels // self.groups, *self.kernel_size)
                )
                if self.bias is not None:
                    self.bias.materialize((self.out_channels,))
                self.reset_parameters()

    def _get_in_channels(self, input) -> int:
        unbatched = self._spatial + 1
        if input.dim() not in (unbatched, unbatched + 1):
            raise RuntimeError(
                f"Expected {unbatched}D (unbatched) or {unbatched + 1}D (batched) input to "
                f"{self.__class__.__name__}, but got input of size: {input.shape}"
            )
        return input.shape[1] if input.dim() == unbatched + 1 else input.shape[0]


class LazyConv1d(_LazyConvXdMixin, Conv1d):
    """Conv1d whose in_channels is read from its first input."""

    cls_to_become = Conv1d
    _spatial = 1


class LazyConv2d(_LazyConvXdMixin, Conv2d):
    """Conv2d whose in_channels is read from its first input."""

    cls_to_become = Conv2d
    _spatial = 2


class LazyConv3d(_LazyConvXdMixin, Conv3d):
    """Conv3d whose in_channels is read from its first input."""

    cls_to_become = Conv3d
    _spatial = 3
