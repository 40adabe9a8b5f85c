"""_ops_shape: shape ops whose Python part is argument handling (see kiln/_ops.py).

The kernels are C++ (kiln._C: cat, stack, split, ...); these compose them the way torch does.
"""

from kiln import _C
from kiln._tensor import Size

__all__ = [
    "atleast_1d",
    "atleast_2d",
    "atleast_3d",
    "broadcast_shapes",
    "dstack",
    "hstack",
    "vstack",
]


def _atleast(tensors, fn):
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        return tuple(fn(t) for t in tensors[0])
    if len(tensors) == 1:
        return fn(tensors[0])
    return tuple(fn(t) for t in tensors)


def _as_1d(t):
    return t.reshape(1) if t.dim() == 0 else t


def _as_2d(t):
    if t.dim() >= 2:
        return t
    return t.reshape(1, -1) if t.dim() == 1 else t.reshape(1, 1)


def _as_3d(t):
    if t.dim() >= 3:
        return t
    if t.dim() == 2:
        return t.unsqueeze(-1)
    return t.reshape(1, -1, 1) if t.dim() == 1 else t.reshape(1, 1, 1)


def atleast_1d(*tensors):
    """torch.atleast_1d: 0-d tensors become shape [1]; others are returned as they are."""
    return _atleast(tensors, _as_1d)


def atleast_2d(*tensors):
    """torch.atleast_2d: views with at least 2 dims (a vector [n] becomes [1, n])."""
    return _atleast(tensors, _as_2d)


def atleast_3d(*tensors):
    """torch.atleast_3d: views with at least 3 dims ([n] -> [1, n, 1], [m, n] -> [m, n, 1])."""
    return _atleast(tensors, _as_3d)


def hstack(tensors):
    """torch.hstack: cat along dim 1, or dim 0 when the inputs are vectors."""
    ts = [_as_1d(t) for t in tensors]
    if not ts:
        raise RuntimeError("hstack expects a non-empty TensorList")
    return _C.cat(ts, 0 if ts[0].dim() == 1 else 1)


def vstack(tensors):
    """torch.vstack (row_stack): cat along dim 0 after atleast_2d."""
    return _C.cat([_as_2d(t) for t in tensors], 0)


def dstack(tensors):
    """torch.dstack: cat along dim 2 after atleast_3d."""
    return _C.cat([_as_3d(t) for t in tensors], 2)


def broadcast_shapes(*shapes):
    """torch.broadcast_shapes: the broadcast of shapes (ints or sequences), as a kiln.Size."""
    out = []
    for shape in shapes:
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        if len(shape) > len(out):
            out = [1] * (len(shape) - len(out)) + out
        for i, s in enumerate(shape):
            j = len(out) - len(shape) + i
            if s < 0:
                raise RuntimeError(f"broadcast_shapes: negative size {s} in shape {list(shape)}")
            if out[j] == 1:
                out[j] = s
            elif s != 1 and s != out[j]:
                raise RuntimeError(
                    f"broadcast_shapes: shape mismatch: objects cannot be broadcast to a single "
                    f"shape (size {s} vs {out[j]} at dim {j - len(out)})"
                )
    return Size(out)
