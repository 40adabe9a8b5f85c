"""Shape and parameter helpers shared by the distributions (torch.distributions.utils)."""

from __future__ import annotations

import numbers
from functools import update_wrapper

import kiln
import kiln.nn.functional as F

euler_constant = 0.57721566490153286060  # Euler-Mascheroni constant

__all__ = [
    "broadcast_all",
    "clamp_probs",
    "lazy_property",
    "logits_to_probs",
    "probs_to_logits",
    "tril_matrix_to_vec",
    "vec_to_tril_matrix",
]


def _is_number(value) -> bool:
    return isinstance(value, numbers.Number) and not isinstance(value, kiln.Tensor)


def _size(shape=()) -> kiln.Size:
    # kiln.Size slicing and concatenation give plain tuples; torch code compares
    # and prints shapes as Size, so every shape handed out is re-wrapped.
    if isinstance(shape, int):
        return kiln.Size([shape])
    return kiln.Size(list(shape))


def broadcast_all(*values):
    """Broadcast tensors and numbers together; numbers take the first tensor's dtype."""
    if not all(isinstance(v, kiln.Tensor) or _is_number(v) for v in values):
        raise ValueError(
            "Input arguments must all be instances of Number, "
            "torch.Tensor or objects implementing __torch_function__."
        )
    if not all(isinstance(v, kiln.Tensor) for v in values):
        options = {"dtype": kiln.get_default_dtype()}
        for value in values:
            if isinstance(value, kiln.Tensor):
                options = {"dtype": value.dtype, "device": value.device}
                break
        values = [v if isinstance(v, kiln.Tensor) else kiln.tensor(v, **options) for v in values]
    if len(values) == 1:
        return (values[0],)
    return tuple(kiln.broadcast_tensors(*values))


def _lgamma(x):
    """kiln.lgamma with the derivative digamma(x) also at x = 1 and x = 2.

    kiln.lgamma pins those two points to an exact 0 with a ``where`` that also zeroes
    their gradient; there the value is rebuilt as lgamma(x + 2) - log(x) - log(x + 1),
    whose derivative is right, with its own value subtracted back out.
    """
    out = kiln.lgamma(x)
    if not (isinstance(x, kiln.Tensor) and x.requires_grad and kiln.is_grad_enabled()):
        return out
    shifted = kiln.lgamma(x + 2) - kiln.log(x) - kiln.log1p(x)
    exact = (x.detach() == 1) | (x.detach() == 2)
    return kiln.where(exact, shifted - shifted.detach(), out)


def _standard_normal(shape, dtype, device):
    return kiln.randn(tuple(shape), dtype=dtype, device=device)


def _standard_uniform(shape, dtype, device):
    return kiln.rand(tuple(shape), dtype=dtype, device=device)


def _sum_rightmost(value, dim: int):
    """Sum out the ``dim`` rightmost dimensions."""
    if dim == 0:
        return value
    required_shape = tuple(value.shape[:-dim]) + (-1,)
    return value.reshape(required_shape).sum(-1)


def logits_to_probs(logits, is_binary: bool = False):
    if is_binary:
        return kiln.sigmoid(logits)
    return F.softmax(logits, dim=-1)


def clamp_probs(probs):
    """Clamp into [eps, 1 - eps] so logs and logits stay finite."""
    eps = kiln.finfo(probs.dtype).eps
    return probs.clamp(min=eps, max=1 - eps)


def probs_to_logits(probs, is_binary: bool = False):
    ps_clamped = clamp_probs(probs)
    if is_binary:
        return kiln.log(ps_clamped) - kiln.log1p(-ps_clamped)
    return kiln.log(ps_clamped)


class lazy_property:
    """Compute an attribute on first access and cache it on the instance.

    Evaluated under enable_grad so a parameter derived inside ``no_grad``
    (e.g. during ``sample``) still carries its graph when reused later.
    """

    def __init__(self, wrapped):
        self.wrapped = wrapped
        update_wrapper(self, wrapped)

    def __get__(self, instance, obj_type=None):
        if instance is None:
            return _lazy_property_and_property(self.wrapped)
        with kiln.enable_grad():
            value = self.wrapped(instance)
        setattr(instance, self.wrapped.__name__, value)
        return value


class _lazy_property_and_property(lazy_property, property):
    """Looks like a property to documentation tools and like a lazy_property
    to the argument validation in ``Distribution.__init__``."""

    def __init__(self, wrapped):
        property.__init__(self, wrapped)


def tril_matrix_to_vec(mat, diag: int = 0):
    """Lower-triangular entries of a (batched) square matrix, in row order."""
    n = mat.shape[-1]
    if diag < -n or diag >= n:
        raise ValueError(f"diag ({diag}) provided is outside [{-n}, {n - 1}].")
    rows, cols = kiln.tril_indices(n, n, diag).unbind(0)
    return mat[..., rows, cols]


def vec_to_tril_matrix(vec, diag: int = 0):
    """Inverse of :func:`tril_matrix_to_vec`."""
    n = (
        -(1 + 2 * diag)
        + ((1 + 2 * diag) ** 2 + 8 * vec.shape[-1] + 4 * abs(diag) * (diag + 1)) ** 0.5
    ) / 2
    eps = kiln.finfo(vec.dtype).eps
    if round(n) - n > eps:
        raise ValueError(
            f"The size of last dimension is {vec.shape[-1]} which cannot be expressed as "
            + "the lower triangular part of a square D x D matrix."
        )
    n = round(n)
    rows, cols = kiln.tril_indices(n, n, diag).unbind(0)
    flat = kiln.zeros(tuple(vec.shape[:-1]) + (n * n,), dtype=vec.dtype, device=vec.device)
    flat = flat.index_add(-1, rows * n + cols, vec)
    return flat.reshape(tuple(vec.shape[:-1]) + (n, n))
