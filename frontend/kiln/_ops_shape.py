"""_ops_shape: shape ops whose Python part is argument handling (see kiln/_ops.py).

The kernels are C++ (kiln._C: cat, stack, split, ...); these compose them the way torch does,
and the capture inlines them (kiln/_capture/calls.py), so they compile as the ops they use.
"""

from kiln import _C
from kiln._tensor import Size

__all__ = [
    "atleast_1d",
    "atleast_2d",
    "atleast_3d",
    "block_diag",
    "broadcast_shapes",
    "cartesian_prod",
    "column_stack",
    "diagflat",
    "dsplit",
    "dstack",
    "hsplit",
    "hstack",
    "row_stack",
    "vsplit",
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


row_stack = vstack


def column_stack(tensors):
    """torch.column_stack: 0-d and 1-D tensors as columns, then cat along dim 1."""
    return hstack([t.reshape(-1, 1) if t.dim() <= 1 else t for t in tensors])


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


def _split_along(name: str, dim: int, min_dims: int):
    def split(input, indices_or_sections):  # noqa: A002 - torch's argument names
        if input.dim() < min_dims:
            raise RuntimeError(f"torch.{name} requires a tensor with at least {min_dims} "
                               f"dimension, but got a tensor with {input.dim()} dimensions!")
        d = 0 if name == "hsplit" and input.dim() == 1 else dim
        if isinstance(indices_or_sections, int) and input.shape[d] % indices_or_sections:
            raise RuntimeError(
                f"torch.{name} attempted to split along dimension {d}, but the size of the "
                f"dimension {input.shape[d]} is not divisible by the split_size "
                f"{indices_or_sections}!")
        return input.tensor_split(indices_or_sections, d)

    split.__name__ = split.__qualname__ = name
    split.__doc__ = f"torch.{name}: tensor_split along dim {dim} (sections must divide it)."
    return split


hsplit = _split_along("hsplit", 1, 1)
vsplit = _split_along("vsplit", 0, 2)
dsplit = _split_along("dsplit", 2, 3)


def diagflat(input, offset=0):  # noqa: A002
    """A square matrix with the flattened input on its `offset` diagonal."""
    return _C.diag(input.reshape(-1), offset)


def block_diag(*tensors):
    """The tensors (0-d, 1-D or 2-D) as the blocks of a block-diagonal matrix, in the promoted
    dtype."""
    blocks = [t.reshape(1, -1) if t.dim() <= 1 else t for t in tensors]
    for i, t in enumerate(tensors):
        if t.dim() > 2:
            raise RuntimeError(f"torch.block_diag: Input tensors must have 2 or fewer dimensions. "
                               f"Input {i} has {t.dim()} dimensions")
    dtype = blocks[0].dtype if blocks else _C.get_default_dtype()
    for b in blocks[1:]:
        dtype = _C.promote_types(dtype, b.dtype)
    rows = [b.shape[0] for b in blocks]
    cols = [b.shape[1] for b in blocks]
    out = _C.zeros(sum(rows), sum(cols), dtype=dtype)
    r = c = 0
    for b, h, w in zip(blocks, rows, cols, strict=True):
        out[r:r + h, c:c + w] = b.to(dtype)
        r, c = r + h, c + w
    return out


def cartesian_prod(*tensors):
    """Every combination of the 1-D tensors' elements, one per row (the tensor itself for one)."""
    if len(tensors) == 1:
        return tensors[0]
    grids = _C.meshgrid(*tensors, indexing="ij")
    return _C.stack([g.reshape(-1) for g in grids], 1)
