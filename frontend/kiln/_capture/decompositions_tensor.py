"""Tensor functions whose eager forms are single C++ bindings, decomposed into graph ops for
compiled code (decompose.py explains the mechanism): dot products (dot, vdot, mv), tile,
view_as, fliplr / flipud, nansum / nanmean, isclose, count_nonzero, aminmax, std_mean /
var_mean, repeat_interleave by a constant count, split_with_sizes, scalar_tensor, eye, and
diagonal / diag of a matrix read (not written) as a value."""

from __future__ import annotations

import kiln
from kiln._capture.decompose import Decline, decomposition


def _no_out(out) -> None:
    if out is not None:
        raise Decline("out=")


def _s_dot(input, tensor, *, out=None): ...
def _s_vdot(input, other, *, out=None): ...
def _s_mv(input, vec, *, out=None): ...


def _product(b, name: str, a, v, rank: int, out):
    """a @ v for a vector `v` and `a` of `rank` (1: dot, 2: mv), both of one dtype."""
    _no_out(out)
    x, y = b.tensor(a), b.tensor(v)
    if b.rank(x) != rank or b.rank(y) != 1 or b.dtype(x) != b.dtype(y):
        raise Decline(f"{name} of operands of other ranks or dtypes (eager reports it)")
    return b.matmul(x, y)


@decomposition(_s_dot, "kiln.dot", "kiln.Tensor.dot")
def _dot(b, input, tensor, out):
    return _product(b, "dot", input, tensor, 1, out)


@decomposition(_s_vdot, "kiln.vdot", "kiln.Tensor.vdot")
def _vdot(b, input, other, out):  # real tensors: vdot is dot
    return _product(b, "vdot", input, other, 1, out)


@decomposition(_s_mv, "kiln.mv", "kiln.Tensor.mv")
def _mv(b, input, vec, out):
    return _product(b, "mv", input, vec, 2, out)


def _s_tile(input, dims, *, out=None): ...


@decomposition(_s_tile, "kiln.tile", "kiln.Tensor.tile")
def _tile(b, input, dims, out):
    """repeat, with `dims` padded with leading ones to the input's rank."""
    _no_out(out)
    x = b.tensor(input)
    reps = b.ints(dims)
    reps = [1] * (b.rank(x) - len(reps)) + reps
    return b.repeat(x, repeats=reps)


def _s_view_as(input, other): ...


@decomposition(_s_view_as, "kiln.Tensor.view_as")
def _view_as(b, input, other):
    return b.view(b.tensor(input), shape=b.sizes(b.tensor(other)))


def _s_flip_one(input, *, out=None): ...


@decomposition(_s_flip_one, "kiln.fliplr", "kiln.Tensor.fliplr")
def _fliplr(b, input, out):
    _no_out(out)
    x = b.tensor(input)
    if b.rank(x) < 2:
        raise Decline("fliplr of fewer than 2 dims (eager reports it)")
    return b.flip(x, dims=[1])


@decomposition(_s_flip_one, "kiln.flipud", "kiln.Tensor.flipud")
def _flipud(b, input, out):
    _no_out(out)
    x = b.tensor(input)
    if b.rank(x) < 1:
        raise Decline("flipud of a 0-d tensor (eager reports it)")
    return b.flip(x, dims=[0])


def _s_nan_reduce(input, dim=None, keepdim=False, *, dtype=None, out=None): ...


def _reduce_attrs(b, dim, keepdim, dtype) -> dict:
    attrs = {}
    if dim is not None and (dims := b.ints(dim)):
        attrs["dim"] = dims
    if keepdim:
        attrs["keepdim"] = True
    if dtype is not None:
        attrs["dtype"] = b.dtype_name(dtype)
    return attrs


def _without_nans(b, x):
    return b.where(b.isnan(x), 0.0, x)


@decomposition(_s_nan_reduce, "kiln.nansum", "kiln.Tensor.nansum")
def _nansum(b, input, dim, keepdim, dtype, out):
    """The sum with NaNs counted as zero."""
    _no_out(out)
    x = b.tensor(input)
    if b.dtype(x) in ("f16", "bf16", "f32", "f64"):
        x = _without_nans(b, x)
    return b.sum(x, **_reduce_attrs(b, dim, keepdim, dtype))


@decomposition(_s_nan_reduce, "kiln.nanmean", "kiln.Tensor.nanmean")
def _nanmean(b, input, dim, keepdim, dtype, out):
    """The sum of the numbers over their count (NaN where there are none, as eager)."""
    _no_out(out)
    x = b.float_tensor(input)
    attrs = _reduce_attrs(b, dim, keepdim, dtype)
    total = b.sum(_without_nans(b, x), **attrs)
    attrs.pop("dtype", None)
    count = b.sum(b.logical_not(b.isnan(x)), **attrs)
    return b.div(total, count)


def _s_isclose(input, other, rtol=1e-05, atol=1e-08, equal_nan=False, *, out=None): ...


@decomposition(_s_isclose, "kiln.isclose", "kiln.Tensor.isclose")
def _isclose(b, input, other, rtol, atol, equal_nan, out):
    """x == y, or |x - y| finite and at most atol + rtol |y| (NaNs equal when asked)."""
    _no_out(out)
    x, y = b.float_tensor(input), b.float_tensor(other)
    if b.dtype(x) != b.dtype(y):
        raise Decline("isclose of different dtypes (eager reports it)")
    rtol, atol = float(b.number(rtol, "rtol")), float(b.number(atol, "atol"))
    close = b.eq(x, y)
    if equal_nan:
        close = b.logical_or(close, b.logical_and(b.isnan(x), b.isnan(y)))
    diff = b.abs(b.sub(x, y))
    allowed = b.add(b.mul(b.abs(y), rtol), atol)
    within = b.logical_and(b.isfinite(diff), b.le(diff, allowed))
    return b.logical_or(close, within)


def _s_count_nonzero(input, dim=None, *, out=None): ...


@decomposition(_s_count_nonzero, "kiln.count_nonzero", "kiln.Tensor.count_nonzero")
def _count_nonzero(b, input, dim, out):
    _no_out(out)
    nonzero = b.ne(b.tensor(input), 0)
    attrs = {"dtype": "i64"}
    if dim is not None and (dims := b.ints(dim)):
        attrs["dim"] = dims
    return b.sum(nonzero, **attrs)


def _s_aminmax(input, *, dim=None, keepdim=False): ...


@decomposition(_s_aminmax, "kiln.aminmax", "kiln.Tensor.aminmax")
def _aminmax(b, input, dim, keepdim):
    x = b.tensor(input)
    attrs = {"keepdim": True} if keepdim else {}
    if dim is not None:
        attrs["dim"] = [b.int_(dim)]
    return b.amin(x, **attrs), b.amax(x, **attrs)


def _s_moments(input, dim=None, unbiased=None, keepdim=False, *, correction=None): ...


def _moments(spread: str):
    def moments(b, input, dim, unbiased, keepdim, correction):
        """(std or var, mean) over `dim`, with var's correction rules."""
        x = b.float_tensor(input)
        if type(dim) is bool:  # std_mean(x, False): the legacy `unbiased` position
            dim, unbiased = None, dim
        if correction is None:
            correction = 0 if unbiased is False else 1
        attrs = {}
        if dim is not None and (dims := b.ints(dim)):
            attrs["dim"] = dims
        if keepdim:
            attrs["keepdim"] = True
        extra = {} if correction == 1 else {"correction": b.number(correction, "correction")}
        return getattr(b, spread)(x, **attrs, **extra), b.mean(x, **attrs)

    moments.__name__ = f"{spread}_mean"
    return moments


decomposition(_s_moments, "kiln.std_mean")(_moments("std"))
decomposition(_s_moments, "kiln.var_mean")(_moments("var"))


def _s_repeat_interleave(input, repeats=None, dim=None, *, output_size=None, out=None): ...


@decomposition(_s_repeat_interleave, "kiln.repeat_interleave", "kiln.Tensor.repeat_interleave")
def _repeat_interleave(b, input, repeats, dim, output_size, out):
    """Each element `repeats` times along `dim` (flattened when None): a new dim after `dim`,
    expanded and merged into it. Repeats given as a tensor stay eager (the size depends on
    their values)."""
    _no_out(out)
    if type(repeats) is not int:
        raise Decline("repeat_interleave by a tensor of counts")
    x = b.tensor(input)
    if dim is None:
        x = b.reshape(x, shape=[_numel(b, x)])
        dim = 0
    d = b.dim(b.int_(dim), b.rank(x))
    sizes = b.sizes(x)
    wide = b.expand(b.unsqueeze(x, dim=d + 1),
                    size=sizes[:d + 1] + [str(repeats)] + sizes[d + 1:])  # fmt: skip
    merged = _mul_sym(sizes[d], repeats)
    return b.reshape(wide, shape=sizes[:d] + [merged] + sizes[d + 1:])


def _numel(b, x) -> str:
    sizes = b.sizes(x)
    if not all(s.isdigit() for s in sizes):
        raise Decline("flattening a tensor of symbolic sizes")
    n = 1
    for s in sizes:
        n *= int(s)
    return str(n)


def _mul_sym(size: str, k: int) -> str:
    return str(int(size) * k) if size.isdigit() else f"{size} * {k}"


def _s_split_with_sizes(input, split_sizes, dim=0): ...


@decomposition(_s_split_with_sizes, "kiln.split_with_sizes", "kiln.Tensor.split_with_sizes")
def _split_with_sizes(b, input, split_sizes, dim):
    x = b.tensor(input)
    d = b.dim(b.int_(dim), b.rank(x))
    parts, start = [], 0
    for n in b.ints(split_sizes):
        parts.append(b.slice(x, dim=d, start=start, end=start + n))
        start += n
    if str(start) != b.sizes(x)[d]:
        raise Decline("split sizes that do not add up to the dim (eager reports it)")
    return tuple(parts)


def _s_scalar_tensor(s, *, dtype=None, layout=None, device=None, pin_memory=None): ...


@decomposition(_s_scalar_tensor, "kiln.scalar_tensor")
def _scalar_tensor(b, s, dtype, layout, device, pin_memory):
    if device is not None and kiln.device(device).type != "cpu":
        raise Decline("a device")
    value = b.number(s, "the value")
    dt = dtype or kiln.get_default_dtype()
    return b.full(dtype=b.dtype_name(dt), size=[], value=value)


def _s_eye(n, m=None, *, dtype=None, layout=None, device=None, pin_memory=None,
           requires_grad=False): ...  # fmt: skip


@decomposition(_s_eye, "kiln.eye")
def _eye(b, n, m, dtype, layout, device, pin_memory, requires_grad):
    """Row index == column index, as the dtype; the sizes may be symbolic (eye(x.shape[0]))."""
    if device is not None and kiln.device(device).type != "cpu":
        raise Decline("a device")
    if requires_grad:
        raise Decline("eye that requires grad")
    (rows,) = b.syms(n)
    (cols,) = (rows,) if m is None else b.syms(m)
    r = b.unsqueeze(b.arange(end=rows, dtype="i64"), dim=1)
    c = b.arange(end=cols, dtype="i64")
    return b.cast(b.eq(r, c), dtype or kiln.get_default_dtype())


def _s_triangle(input, diagonal=0, *, out=None): ...


def _triangle(b, op, input, diagonal, out):
    """tril / triu. A constant diagonal is the table op; a run-time one (a causal mask over a
    growing cache: `triu(diagonal=past + 1)`) keeps the elements where `col - row` is at least
    (triu) or at most (tril) the diagonal."""
    _no_out(out)
    x = b.tensor(input)
    if b.rank(x) < 2:
        raise Decline(f"{op} of fewer than 2 dims (eager reports it)")
    if type(diagonal) is int:
        return getattr(b, op)(x, **({"diagonal": diagonal} if diagonal else {}))
    rows, cols = b.sizes(x)[-2:]
    r = b.unsqueeze(b.arange(end=rows), dim=1)
    c = b.unsqueeze(b.arange(end=cols), dim=0)
    offset = b.sub(c, r)
    keep = b.ge(offset, diagonal) if op == "triu" else b.le(offset, diagonal)
    zero = {"b8": False}.get(b.dtype(x), 0.0 if b.dtype(x) in ("f16", "bf16", "f32", "f64") else 0)
    return b.where(keep, x, zero)


@decomposition(_s_triangle, "kiln.triu", "kiln.Tensor.triu")
def _triu(b, input, diagonal, out):
    return _triangle(b, "triu", input, diagonal, out)


@decomposition(_s_triangle, "kiln.tril", "kiln.Tensor.tril")
def _tril(b, input, diagonal, out):
    return _triangle(b, "tril", input, diagonal, out)


def _s_diagonal(input, offset=0, dim1=0, dim2=1): ...


@decomposition(_s_diagonal, "kiln.diagonal", "kiln.Tensor.diagonal")
def _diagonal(b, input, offset, dim1, dim2):
    """The elements where col - row == offset of dims dim1, dim2 (moved last), as a masked sum
    along the columns cut to the diagonal's length. Eager's diagonal is a view: a program that
    writes into it keeps the eager call."""
    if b.result_written():
        raise Decline("a diagonal written in place (it is a view of its input)")
    return _diagonal_values(b, b.tensor(input), offset, dim1, dim2)


def _diagonal_values(b, x, offset, dim1, dim2):
    rank = b.rank(x)
    d1, d2 = b.dim(dim1, rank), b.dim(dim2, rank)
    offset = b.number(offset, "offset")
    if d1 == d2 or rank < 2:
        raise Decline("diagonal of one dim (eager reports it)")
    order = [d for d in range(rank) if d not in (d1, d2)] + [d1, d2]
    y = x if order == list(range(rank)) else b.permute(x, dims=order)
    rows, cols = b.sizes(y)[-2:]
    start = max(-offset, 0)
    if rows.isdigit() and cols.isdigit():
        length = max(0, min(int(rows) - start, int(cols) - max(offset, 0)))
    elif rows == cols and offset == 0:
        length = None  # a square matrix of symbolic size: every row's element
    else:
        raise Decline("the diagonal of a matrix of symbolic sizes off its main diagonal")
    r = b.unsqueeze(b.arange(end=rows, dtype="i64"), dim=1)
    c = b.arange(end=cols, dtype="i64")
    on = b.eq(b.sub(c, r), offset)
    zero = {"b8": False}.get(b.dtype(y), 0.0 if b.dtype(y) in ("f16", "bf16", "f32", "f64") else 0)
    values = b.sum(b.where(on, y, zero), dim=[rank - 1])
    if b.dtype(values) != b.dtype(y):  # sum widens integers and bools
        values = b.cast(values, b.dtype(y))
    if length is None or (start == 0 and str(length) == rows):
        return values
    return b.slice(values, dim=rank - 2, start=start, end=start + length)


def _s_diag(input, diagonal=0, *, out=None): ...


@decomposition(_s_diag, "kiln.diag", "kiln.Tensor.diag")
def _diag(b, input, diagonal, out):
    """diag of a matrix: its diagonal (a copy). diag of a vector keeps the eager call."""
    _no_out(out)
    if b.rank(b.tensor(input)) != 2:
        raise Decline("diag of a vector (the matrix built from it)")
    return _diagonal_values(b, b.tensor(input), diagonal, 0, 1)
