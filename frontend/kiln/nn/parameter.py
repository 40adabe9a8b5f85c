"""kiln.nn.Parameter and kiln.nn.Buffer: tensors that a Module registers by assignment.

Both are kiln.Tensor subclasses that alias the data they are built from (no copy), so a
Parameter made from a tensor sees that tensor's storage, as in torch.
"""

from __future__ import annotations

import kiln
from kiln import _C

__all__ = ["Buffer", "Parameter"]


def _default_data():
    return _C._empty((0,), _C.get_default_dtype())


class Parameter(kiln.Tensor):
    """A tensor that is a module parameter: assigning one to a Module attribute registers it.

    ``Parameter(data=None, requires_grad=True)`` aliases ``data`` (shares its storage); with no
    data it is an empty float tensor, like torch's.
    """

    def __init__(self, data=None, requires_grad=True):
        if data is None:
            data = _default_data()
        if not isinstance(data, kiln.Tensor):
            raise TypeError(
                f"Parameter(): expected a kiln.Tensor as data, got {type(data).__name__}"
            )
        if requires_grad and not data.dtype.is_floating_point:
            raise RuntimeError(
                "Only Tensors of floating point and complex dtype can require gradients "
                f"(Parameter got {data.dtype})"
            )
        super().__init__(data)
        self.requires_grad = requires_grad

    def __repr__(self) -> str:
        # Formats a detached alias: kiln.Tensor's repr goes through numpy(), which (as in
        # torch) refuses tensors that require grad.
        body = kiln.Tensor.__repr__(self.detach())
        if self.requires_grad:
            body = body[:-1] + ", requires_grad=True)"
        return "Parameter containing:\n" + body

    __str__ = __repr__

    def __deepcopy__(self, memo):
        if id(self) in memo:
            return memo[id(self)]
        result = type(self)(self.clone(), self.requires_grad)
        memo[id(self)] = result
        return result

    def __reduce_ex__(self, protocol):
        return (Parameter, (self.detach().clone(), self.requires_grad))


class Buffer(kiln.Tensor):
    """A tensor that a Module registers as a buffer when assigned to one of its attributes.

    ``persistent=False`` keeps it out of ``state_dict()`` (like ``register_buffer(...,
    persistent=False)``).
    """

    def __init__(self, data=None, *, persistent=True):
        if data is None:
            data = _default_data()
        if not isinstance(data, kiln.Tensor):
            raise TypeError(f"Buffer(): expected a kiln.Tensor as data, got {type(data).__name__}")
        super().__init__(data)
        self.requires_grad = data.requires_grad
        self.persistent = persistent
