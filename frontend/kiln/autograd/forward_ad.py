"""kiln.autograd.forward_ad: forward-mode AD over dual tensors, as torch.autograd.forward_ad.

    with fwAD.dual_level():
        x = fwAD.make_dual(primal, tangent)
        y = f(x)
        value, jvp = fwAD.unpack_dual(y)

kiln derives each tangent from the reverse-mode rules, exactly: a vector-Jacobian product is
linear in its cotangent u, so differentiating vjp(u) once more with respect to u, along the
tangents, gives J t (the double-vjp identity). A dual is therefore a tensor that records the
reverse graph; ``unpack_dual`` runs the two products over it. This needs ops whose backward is
itself recorded: the elementwise, reduction, matmul, view, shape, softmax, normalization,
convolution, pooling, interpolation, gather and scatter rules are; an op whose backward still
runs an unrecorded kernel (a write through a view) raises rather than give a wrong tangent.
"""

from __future__ import annotations

from collections import namedtuple

import kiln

__all__ = [
    "UnpackedDualTensor",
    "dual_level",
    "enter_dual_level",
    "exit_dual_level",
    "make_dual",
    "unpack_dual",
]

UnpackedDualTensor = namedtuple("UnpackedDualTensor", ["primal", "tangent"])


class _Level:
    def __init__(self):
        self.duals = []  # (dual, tangent, primal)


_level = None


def enter_dual_level():
    """Opens the dual level (one at a time, as in torch) and returns its index."""
    global _level
    if _level is not None:
        raise RuntimeError("Nested forward mode AD is not supported at the moment")
    _level = _Level()
    return 0


def exit_dual_level(*, level=None):
    """Closes the dual level: the duals made in it lose their tangents."""
    global _level
    if _level is None:
        raise RuntimeError("Trying to exit a forward AD level that was not the last one created.")
    _level = None


class dual_level:
    """Context manager for a forward-AD level: ``with dual_level(): ...``."""

    def __enter__(self):
        return enter_dual_level()

    def __exit__(self, *exc):
        exit_dual_level()
        return False


def _require_level(what):
    if _level is None:
        raise RuntimeError(
            f"Trying to {what} for forward AD but no level exists, make sure to "
            "enter_dual_level() first."
        )
    return _level


def make_dual(tensor, tangent, *, level=None):
    """A tensor with ``tensor``'s value whose tangent (forward gradient) is ``tangent``."""
    lvl = _require_level("create a dual Tensor")
    if not isinstance(tensor, kiln.Tensor) or not isinstance(tangent, kiln.Tensor):
        raise TypeError("make_dual(): expected tensor and tangent to be kiln.Tensors")
    if not (tensor.is_floating_point() and tangent.is_floating_point()):
        raise ValueError(
            "Expected both tensor and its forward grad to be floating point or complex"
        )
    if tuple(tensor.shape) != tuple(tangent.shape):
        raise RuntimeError(
            "Trying to set a forward gradient that has a different size than that of the "
            f"original Tensor, this is not supported. Tensor is of size {list(tensor.shape)} "
            f"while the given forward gradient is of size {list(tangent.shape)}."
        )
    with kiln.enable_grad():
        # The dual records the reverse graph; it keeps the primal's own history when it has one.
        dual = tensor.view_as(tensor) if tensor.requires_grad else tensor.detach().requires_grad_()
    lvl.duals.append((dual, tangent.detach().to(tensor.dtype), tensor))
    return dual


def jvp_of(outputs, inputs, tangents):
    """J t for each output, J the Jacobian of ``outputs`` w.r.t. ``inputs`` (which require grad),
    or None for an output that does not depend on them. Derived by the double-vjp identity."""
    outs = [o for o in outputs if o.requires_grad]
    result = [None] * len(outputs)
    if not outs:
        return result
    with kiln.enable_grad():
        us = [kiln.zeros_like(o).requires_grad_() for o in outs]
        vjps = kiln.autograd.grad(outs, inputs, us, create_graph=True, allow_unused=True)
        pairs = [(v, t) for v, t in zip(vjps, tangents, strict=True) if v is not None]
        if any(not v.requires_grad for v, _ in pairs):
            raise NotImplementedError(
                "forward-mode AD: an op on the way uses a derivative that is not itself "
                "differentiable yet (its backward is not recorded), so the forward-mode product "
                "cannot be derived"
            )
        if not pairs:
            return result
        jvps = kiln.autograd.grad(
            [v for v, _ in pairs], us, [t for _, t in pairs], allow_unused=True
        )
    it = iter(jvps)
    for i, o in enumerate(outputs):
        if o.requires_grad:
            j = next(it)
            result[i] = None if j is None else j.detach()
    return result


def unpack_dual(tensor, *, level=None):
    """``(primal, tangent)`` of a tensor computed from duals; the tangent is None when the tensor
    does not depend on any dual of the open level (or no level is open)."""
    if _level is None or not isinstance(tensor, kiln.Tensor) or not tensor.requires_grad:
        return UnpackedDualTensor(tensor, None)
    for dual, tangent, primal in _level.duals:
        if dual is tensor:
            return UnpackedDualTensor(primal, tangent)
    if not _level.duals:
        return UnpackedDualTensor(tensor, None)
    duals = [d for d, _, _ in _level.duals]
    tangents = [t for _, t, _ in _level.duals]
    (tangent,) = jvp_of([tensor], duals, tangents)
    return UnpackedDualTensor(tensor, tangent)
