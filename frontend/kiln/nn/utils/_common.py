"""Pieces shared by the weight/spectral normalization utilities of kiln.nn.utils.

``norm_except_dim`` and ``weight_norm_from`` are torch's ``torch.norm_except_dim`` and
``torch._weight_norm`` written with kiln ops (kiln has no fused kernel for them), so autograd
differentiates them like any other expression.
"""

from __future__ import annotations

from kiln.nn.modules._hooks import RemovableHandle

__all__ = [
    "add_load_state_dict_pre_hook",
    "add_state_dict_hook",
    "is_conv_transpose",
    "norm_except_dim",
    "weight_norm_from",
]


def norm_except_dim(v, pow: float = 2, dim: int = 0):  # noqa: A002 - torch's argument name
    """The ``pow``-norm of ``v`` over every dimension but ``dim``, shaped to broadcast against
    ``v`` (size 1 except at ``dim``). ``dim == -1`` means the norm of the whole tensor, a 0-d
    result: torch gives -1 that meaning rather than "the last dimension"."""
    if dim == -1:
        return v.norm(pow)
    dim = dim + v.dim() if dim < 0 else dim
    out_shape = [1] * v.dim()
    out_shape[dim] = v.size(dim)
    front = v.movedim(dim, 0) if dim != 0 else v
    return front.reshape(v.size(dim), -1).norm(pow, dim=1).reshape(out_shape)


def weight_norm_from(v, g, dim: int):
    """``torch._weight_norm(v, g, dim)``: ``v`` rescaled so its norm over all dims but ``dim``
    is ``g``."""
    return v * (g / norm_except_dim(v, 2, dim))


def _add_hook(table, hook) -> RemovableHandle:
    handle = RemovableHandle(table)
    table[handle.id] = hook
    return handle


def add_state_dict_hook(module, hook) -> RemovableHandle:
    """torch's ``Module._register_state_dict_hook``: ``hook(module, state_dict, prefix,
    local_metadata)`` runs after the module has written its entries (kiln's Module calls the
    table's hooks that way but has no registration method)."""
    return _add_hook(module._state_dict_hooks, hook)


def add_load_state_dict_pre_hook(module, hook) -> RemovableHandle:
    """torch's ``Module._register_load_state_dict_pre_hook`` (without ``with_module``):
    ``hook(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
    error_msgs)`` may rewrite ``state_dict`` before the module's own keys are loaded."""
    return _add_hook(module._load_state_dict_pre_hooks, hook)


def is_conv_transpose(module) -> bool:
    """Transposed convolutions keep output channels in dim 1 of their weight."""
    from kiln.nn import ConvTranspose1d, ConvTranspose2d, ConvTranspose3d

    return isinstance(module, (ConvTranspose1d, ConvTranspose2d, ConvTranspose3d))
