"""Statistics, integration and the remaining special functions written in kiln ops: quantile,
cov, corrcoef, histogram, trapezoid, vander, unravel_index, combinations, frexp, ldexp, gcd,
lcm, nextafter, the modified Bessel functions, polygamma, the Hurwitz zeta, mvlgamma and the
normal distribution's ndtr / ndtri / log_ndtr (kiln.special names these). The capture inlines
them (kiln/_capture/calls.py), and autograd goes through their parts.

The special functions follow the Cephes forms torch uses (Chebyshev series for the Bessel
functions, Euler-Maclaurin for zeta, torch's own trigamma series), computed in float64 and
rounded once, so their values, edge cases included, are torch's. Each branch of a `where` is fed
arguments inside its domain, so the branch not taken adds no NaN to a gradient.
"""

from __future__ import annotations

import builtins
import collections
import itertools
import math
import warnings

import kiln
from kiln._ops_composite_math import _floating, digamma, inplace_method, lgamma
from kiln._ops_reduce import return_types

__all__ = ["combinations", "corrcoef", "cov", "cumulative_trapezoid", "frexp", "gcd", "histogram",
           "i0", "lcm", "ldexp", "mvlgamma", "nanquantile", "nextafter", "polygamma", "quantile",
           "trapezoid", "trapz", "unravel_index", "vander"]  # fmt: skip

for _name, _fields in (("histogram", ("hist", "bin_edges")), ("frexp", ("mantissa", "exponent"))):
    _cls = collections.namedtuple(_name, _fields)
    _cls.__module__, _cls.__qualname__ = "kiln.return_types", _name
    setattr(return_types, _name, _cls)

_TORCH_NAMES = {"float16": "Half", "bfloat16": "BFloat16", "float32": "Float", "float64": "Double",
                "bool": "Bool", "uint8": "Byte", "int8": "Char", "int16": "Short", "int32": "Int",
                "int64": "Long"}  # fmt: skip


def _torch_name(dtype) -> str:
    return _TORCH_NAMES.get(dtype.name, dtype.name)


def _wrap_dim(dim: int, rank: int) -> int:
    """dim in [0, rank) (a 0-d tensor takes dims -1 and 0), with torch's IndexError."""
    n = builtins.max(rank, 1)
    if not -n <= dim < n:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-n}, {n - 1}], "
                         f"but got {dim})")
    return dim % n


def _num(v) -> str:
    """A number as C++ streams print it (2 rather than 2.0)."""
    return f"{v:g}" if isinstance(v, float) else str(v)


# ---------------------------------------------------------------------------------------------
# quantile

_INTERPOLATIONS = ("linear", "lower", "higher", "midpoint", "nearest")


def _quantile(input, q, dim, keepdim, interpolation, ignore_nan, q_in_range=False):  # noqa: A002
    """torch's quantile: sort along dim (NaN last), find each q's rank among the sorted values
    (the non-NaN ones for nanquantile; the last, a NaN, where quantile meets a NaN) and
    interpolate between the two neighbours. `q_in_range`: the caller checked a tensor q's
    values (constants it built), so no check reads them (a compiled caller keeps its graph)."""
    if not isinstance(q, kiln.Tensor) and not 0 <= q <= 1:
        raise RuntimeError(f"quantile() q must be in the range [0, 1] but got {_num(q)}")
    if interpolation not in _INTERPOLATIONS:
        raise RuntimeError("quantile() interpolation must be one of linear, lower, higher, "
                           f"midpoint or nearest, but got {interpolation}")
    if input.numel() == 0:
        raise RuntimeError("quantile() input tensor must be non-empty")
    if isinstance(q, kiln.Tensor) and q.dim() > 1:
        raise RuntimeError("quantile() q must be a scalar or 1D tensor")
    if input.dtype not in (kiln.float32, kiln.float64):
        raise RuntimeError("quantile() input tensor must be either float or double dtype")
    scalar_q = not isinstance(q, kiln.Tensor) or q.dim() == 0
    if isinstance(q, kiln.Tensor):
        if q.dtype != input.dtype:
            raise RuntimeError("quantile() q tensor must be same dtype as the input tensor")
        if not q_in_range and not bool(((q >= 0) & (q <= 1)).all()):
            raise RuntimeError("quantile() q values must be in the range [0, 1]")
        qs = q.reshape(-1)
    else:
        qs = kiln.tensor([float(q)], dtype=input.dtype, device=input.device)
    rank = input.dim()
    if dim is None:
        x = input.reshape(-1)
    else:
        dim = _wrap_dim(dim, rank)
        x = input.movedim(dim, -1) if rank else input.reshape(1)
    values = x.sort(-1).values
    n = values.shape[-1]
    nans = values.isnan()
    if ignore_nan:
        ranks = qs * ((~nans).sum(-1, keepdim=True) - 1)
        ranks = kiln.where(ranks < 0, n - 1, ranks)
    else:
        ranks = kiln.where(nans.any(-1, keepdim=True), n - 1, qs * (n - 1))
    ranks = ranks.expand(*values.shape[:-1], qs.shape[0])
    if interpolation == "lower":
        ranks = ranks.floor()
    elif interpolation == "higher":
        ranks = ranks.ceil()
    elif interpolation == "nearest":
        ranks = ranks.round()  # half to even, as torch
    below = ranks.long()
    out = values.gather(-1, below)
    if interpolation in ("linear", "midpoint"):
        weights = ranks - below if interpolation == "linear" else kiln.where(ranks == below, 0.0,
                                                                             0.5)  # fmt: skip
        out = out.lerp(values.gather(-1, ranks.ceil().long()), weights.to(out.dtype))
    out = out.movedim(-1, 0)  # q's dim first
    if keepdim:
        kept = [1] * rank if dim is None else [1 if d == dim else s
                                               for d, s in enumerate(input.shape)]  # fmt: skip
        out = out.reshape([qs.shape[0], *kept])
    return out.squeeze(0) if scalar_q else out


def quantile(input, q, dim=None, keepdim=False, *, interpolation="linear", out=None):  # noqa: A002
    """The q-th quantiles of input along dim (of all of it when dim is None); a NaN in a slice
    makes its quantiles NaN."""
    result = _quantile(input, q, dim, keepdim, interpolation, ignore_nan=False)
    return result if out is None else out.copy_(result)


def nanquantile(input, q, dim=None, keepdim=False, *, interpolation="linear", out=None):  # noqa: A002
    """quantile over the non-NaN values (NaN where a slice has none)."""
    result = _quantile(input, q, dim, keepdim, interpolation, ignore_nan=True)
    return result if out is None else out.copy_(result)


# ---------------------------------------------------------------------------------------------
# covariance and correlation


def _check_weights(w, name, n, integral):
    if w is None:
        return
    if w.dim() > 1:
        raise RuntimeError(f"cov(): expected {name} to have one or fewer dimensions but got "
                           f"{name} with {w.dim()} dimensions")
    kind_ok = (not w.is_floating_point() and w.dtype != kiln.bool) if integral else (
        w.is_floating_point())
    if not kind_ok:
        kind = "integral" if integral else "floating point"
        raise RuntimeError(f"cov(): expected {name} to have {kind} dtype but got {name} with "
                           f"{_torch_name(w.dtype)} dtype")
    if w.numel() != n:
        raise RuntimeError(f"cov(): expected {name} to have the same numel as there are "
                           f"observations in the input but got {w.numel()} != {n}")
    if w.numel() and bool((w < 0).any()):
        raise RuntimeError(f"cov(): {name} cannot be negative")


def cov(input, *, correction=1, fweights=None, aweights=None):  # noqa: A002
    """The covariance of the variables in input's rows (a 1-D input: one variable) over the
    observations in its columns, weighted by fweights (counts) and aweights (importances)."""
    if input.dim() > 2:
        raise RuntimeError("cov(): expected input to have two or fewer dimensions but got an "
                           f"input with {input.dim()} dimensions")
    x = input.reshape(1, -1) if input.dim() < 2 else input
    n = x.shape[1]
    _check_weights(fweights, "fweights", n, integral=True)
    _check_weights(aweights, "aweights", n, integral=False)
    w = fweights
    if aweights is not None:
        w = aweights if w is None else w * aweights
    w_sum = n if w is None else w.sum()
    avg = (x if w is None else x * w).sum(1) / w_sum
    if w is not None and aweights is not None and correction != 0:
        norm = w_sum - correction * (w * aweights).sum() / w_sum
    else:
        norm = w_sum - correction
    if bool(norm <= 0):
        warnings.warn("cov(): degrees of freedom is <= 0. Correction should be strictly less "
                      "than the number of observations.", UserWarning, stacklevel=2)
        norm = norm * 0
    centred = x - avg.unsqueeze(1)
    c = centred @ (centred if w is None else centred * w).t()
    return kiln.true_divide(c, norm).squeeze()


def corrcoef(input):  # noqa: A002
    """Pearson's correlation coefficients of the variables in input's rows, clipped to
    [-1, 1]."""
    if input.dim() > 2:
        raise RuntimeError("corrcoef(): expected input to have two or fewer dimensions but got "
                           f"an input with {input.dim()} dimensions")
    c = cov(input)
    if c.dim() == 0:
        return c / c
    std = c.diagonal().sqrt()
    c = c / std.reshape(-1, 1)
    c = c / std.reshape(1, -1)
    return c.clip(-1, 1)


# ---------------------------------------------------------------------------------------------
# histogram


def histogram(input, bins, *, range=None, weight=None, density=False, out=None):  # noqa: A002
    """Counts (or weight sums) of input's values in bins: `bins` equal bins over `range` (the
    data's range by default), or the bins between the edges of a 1-D tensor. Each bin holds
    [left, right) but the last also its right edge; values outside are left out."""
    if input.dtype not in (kiln.float32, kiln.float64):
        raise NotImplementedError(f"\"histogramdd\" not implemented for "
                                  f"'{_torch_name(input.dtype)}'")
    x = input.detach().reshape(-1)
    if isinstance(bins, kiln.Tensor):
        if range is not None:
            raise TypeError("histogram(): range cannot be given with a tensor of bin edges")
        if bins.dim() != 1:
            raise RuntimeError("torch.histogramdd: bins tensor should have one dimension, but got "
                               f"{bins.dim()} dimensions in the bins tensor for dimension 0")
        if bins.numel() < 2:
            raise RuntimeError("torch.histogram(): bins must be > 0, but got "
                               f"{bins.numel() - 1} for dimension 0")
        if bins.dtype != input.dtype:
            raise RuntimeError("torch.histogramdd: input tensor and bins tensors should have the "
                               "same dtype, but got input with dtype "
                               f"{_torch_name(input.dtype).lower()} and bins for dimension 0 with "
                               f"dtype {_torch_name(bins.dtype).lower()}")
        edges = bins.detach().clone()
    else:
        if bins <= 0:
            raise RuntimeError(f"torch.histogram(): bins must be > 0, but got {bins} for "
                               "dimension 0")
        if range is not None:
            lo, hi = (float(v) for v in range)
        elif x.numel():
            lo, hi = float(x.min()), float(x.max())
        else:
            lo, hi = 0.0, 1.0
        if not (math.isfinite(lo) and math.isfinite(hi)):
            raise RuntimeError(f"torch.histogramdd: dimension 0's range [{_num(lo)}, {_num(hi)}] "
                               "is not finite")
        if lo > hi:
            raise RuntimeError(f"torch.histogramdd: min should not exceed max, but got min "
                               f"{_num(lo)} max {_num(hi)} for dimension 0")
        if lo == hi:
            lo, hi = lo - 0.5, hi + 0.5
        edges = kiln.linspace(lo, hi, bins + 1, dtype=input.dtype, device=input.device)
    if weight is not None:
        if tuple(weight.shape) != tuple(input.shape):
            raise RuntimeError("torch.histogramdd: if weight tensor is provided it should have the "
                               "same shape as the input tensor excluding its innermost dimension, "
                               f"but got input with shape {[x.numel(), 1]} and weight with shape "
                               f"{list(weight.shape)}")
        if weight.dtype != input.dtype:
            raise RuntimeError("torch.histogramdd: if weight tensor is provided, input tensor and "
                               "weight tensor should have the same dtype, but got input("
                               f"{_torch_name(input.dtype).lower()}), and weight("
                               f"{_torch_name(weight.dtype).lower()})")
    nbins = edges.shape[0] - 1
    inside = (x >= edges[0]) & (x <= edges[-1])
    at = (kiln.searchsorted(edges, x, right=True) - 1).clamp(0, nbins - 1)
    counts = inside.to(input.dtype) if weight is None else kiln.where(
        inside, weight.detach().reshape(-1), 0)
    hist = kiln.zeros(nbins, dtype=input.dtype, device=input.device).index_add(0, at, counts)
    if density:
        hist = hist / (hist.sum() * edges.diff())
    if out is not None:
        out[0].copy_(hist)
        out[1].copy_(edges)
    return return_types.histogram(hist, edges)


# ---------------------------------------------------------------------------------------------
# integration


def _sample_spacing(y, x, dim, op):
    """The differences of x along dim, x viewed against y as torch views it: a 1-D x along dim,
    a lower-rank x padded with leading dims."""
    if x.dtype == kiln.bool:
        raise RuntimeError(f"{op}: received a bool input for `x`, but bool is not supported")
    if x.dim() == 1:
        if x.shape[0] != y.shape[dim]:
            raise RuntimeError(f"{op}: There must be one `x` value for each sample point")
        x = x.reshape([-1 if d == dim else 1 for d in range(y.dim())])
    elif x.dim() < y.dim():
        x = x.reshape((1,) * (y.dim() - x.dim()) + tuple(x.shape))
    return x.diff(dim=dim)


def _integrand_dim(y, dim, op):
    if y.dim() == 0:
        raise IndexError(f"Dimension specified as {dim} but tensor has no dimensions")
    if y.dtype == kiln.bool:
        raise RuntimeError(f"{op}: received a bool input for `y`, but bool is not supported")
    return _wrap_dim(dim, y.dim())


def trapezoid(y, x=None, *, dx=None, dim=-1):
    """The trapezoidal rule along dim, at sample points x or with spacing dx (1)."""
    if x is not None and dx is not None:
        raise TypeError("trapezoid() received an invalid combination of arguments: x and dx "
                        "cannot both be given")
    dim = _integrand_dim(y, dim, "trapezoid")
    if y.shape[dim] == 0:
        return kiln.zeros([s for d, s in enumerate(y.shape) if d != dim], dtype=y.dtype,
                          device=y.device)  # fmt: skip
    if x is None:
        spacing = 1.0 if dx is None else float(dx)
        ends = y.select(dim, 0) + y.select(dim, -1)
        return (y.sum(dim) - ends * 0.5) * spacing
    n = y.shape[dim]
    spacing = _sample_spacing(y, x, dim, "trapezoid")
    return (spacing * (y.narrow(dim, 1, n - 1) + y.narrow(dim, 0, n - 1))).sum(dim) / 2.0


def trapz(y, x=None, *, dx=None, dim=-1):
    """torch.trapz: trapezoid under its older name."""
    return trapezoid(y, x, dx=dx, dim=dim)


def cumulative_trapezoid(y, x=None, *, dx=None, dim=-1):
    """The running trapezoidal integral along dim (one element fewer than y along it)."""
    if x is not None and dx is not None:
        raise TypeError("cumulative_trapezoid() received an invalid combination of arguments: x "
                        "and dx cannot both be given")
    dim = _integrand_dim(y, dim, "cumulative_trapezoid")
    n = y.shape[dim]
    pairs = y.narrow(dim, 0, builtins.max(n - 1, 0)) + y.narrow(dim, builtins.min(n, 1),
                                                                builtins.max(n - 1, 0))
    if x is None:
        spacing = 1.0 if dx is None else float(dx)
        return (spacing / 2.0 * pairs).cumsum(dim)
    return (_sample_spacing(y, x, dim, "cumulative_trapezoid") / 2.0 * pairs).cumsum(dim)


# ---------------------------------------------------------------------------------------------
# index helpers


def vander(x, N=None, increasing=False):  # noqa: N803 - torch's argument name
    """The Vandermonde matrix of a 1-D x: columns x^(N-1) .. x^0 (x^0 .. x^(N-1) when
    increasing); integers and bools as int64."""
    if x.dim() != 1:
        raise RuntimeError("x must be a one-dimensional tensor.")
    n = x.shape[0]
    N = n if N is None else N  # noqa: N806
    if N < 0:
        raise RuntimeError("N must be non-negative.")
    dtype = kiln.promote_types(x.dtype, kiln.int64)
    if N == 0:
        return kiln.zeros((n, 0), dtype=dtype, device=x.device)
    columns = [kiln.ones((n, 1), dtype=dtype, device=x.device)]
    if N > 1:
        columns.append(x.to(dtype).unsqueeze(1).expand(n, N - 1).cumprod(1))
    result = kiln.cat(columns, 1)
    return result if increasing else result.flip(1)


def unravel_index(indices, shape):
    """The coordinates, one tensor per dim of `shape`, of flat indices into a row-major
    tensor of that shape."""
    if indices.is_floating_point() or indices.is_complex() or indices.dtype == kiln.bool:
        raise TypeError(f"expected 'indices' to be integer dtype, but got {indices.dtype}")
    if isinstance(shape, int):
        shape = (shape,)
    elif not isinstance(shape, (list, tuple)):
        raise TypeError(f"expected 'shape' to be int or sequence of ints, but got {type(shape)}")
    for s in shape:
        if not isinstance(s, int):
            raise TypeError(f"expected 'shape' sequence to only contain ints, but got {type(s)}")
    shape = tuple(shape)
    if any(s < 0 for s in shape):
        raise ValueError(f"'shape' cannot have negative values, but got {shape}")
    if 0 in shape and indices.numel():
        raise RuntimeError("ZeroDivisionError")
    strides = list(itertools.accumulate(reversed(shape[1:] + (1,)), lambda a, b: a * b))[::-1]
    coords = indices.unsqueeze(-1).floor_divide(
        kiln.tensor(strides, dtype=kiln.int64, device=indices.device))
    coords = coords % kiln.tensor(shape, dtype=kiln.int64, device=indices.device)
    return coords.unbind(-1)


def combinations(input, r=2, with_replacement=False):  # noqa: A002
    """The length-r combinations of a 1-D tensor's elements, one per row, in itertools'
    order."""
    if input.dim() != 1:
        raise RuntimeError(f"Expect a 1D vector, but got shape {list(input.shape)}")
    if r < 0:
        raise RuntimeError(f"Expect a non-negative number, but got {r}")
    if r == 0:
        return kiln.empty(0, dtype=input.dtype, device=input.device)
    pick = itertools.combinations_with_replacement if with_replacement else itertools.combinations
    chosen = [i for combo in pick(range(input.shape[0]), r) for i in combo]
    index = kiln.tensor(chosen, dtype=kiln.int64, device=input.device)
    return input.index_select(0, index).reshape(-1, r)


# ---------------------------------------------------------------------------------------------
# floating-point representation and integer arithmetic


def _tensor_other(op, other):
    if not isinstance(other, kiln.Tensor):
        raise TypeError(f"{op}(): argument 'other' (position 2) must be Tensor, not "
                        f"{type(other).__name__}")


def _pow2(e):
    """2**e for an integer-valued float64 tensor, as two factors so no partial result leaves
    float64's range (e spans about -1075..1075)."""
    half = (e / 2).floor()
    return (half.exp2(), (e - half).exp2())


def frexp(input):  # noqa: A002
    """(mantissa, exponent) with input = mantissa * 2**exponent, |mantissa| in [0.5, 1) (0, inf
    and NaN: themselves and exponent 0). The exponent is floor(log2 |x|) + 1, corrected by one
    where log2 rounded across a power of two; all of it in float64, where every float32 is
    normal."""
    if not input.is_floating_point():
        raise RuntimeError("torch.frexp() only supports floating-point dtypes")
    x = input.to(kiln.float64)
    a = x.abs()
    special = (a == 0) | ~a.isfinite()
    safe = kiln.where(special, 1, a)
    exponent = safe.log2().floor() + 1
    lo, hi = _pow2(-exponent)
    scaled = safe * lo * hi
    exponent = kiln.where(scaled >= 1, exponent + 1, kiln.where(scaled < 0.5, exponent - 1,
                                                                exponent))  # fmt: skip
    exponent = kiln.where(special, 0, exponent)
    lo, hi = _pow2(-exponent)
    return return_types.frexp((x * lo * hi).to(input.dtype), exponent.to(kiln.int32))


def ldexp(input, other):  # noqa: A002
    """input * 2**other, formed in float64 and rounded once, so a result in range is finite
    even where 2**other alone is not."""
    _tensor_other("ldexp", other)
    dtype = kiln.result_type(input, other)
    dtype = dtype if dtype.is_floating_point else kiln.get_default_dtype()
    lo, hi = _pow2(other.to(kiln.float64))
    return (input.to(kiln.float64) * lo * hi).to(dtype)


# Euclid's steps for the worst pair of each integer dtype (consecutive Fibonacci numbers), so a
# fixed loop suffices and compiles.
_EUCLID_STEPS = {kiln.uint8: 14, kiln.int8: 13, kiln.int16: 25, kiln.int32: 47, kiln.int64: 93}


def _integer_operands(op, input, other):  # noqa: A002
    _tensor_other(op, other)
    dtype = kiln.promote_types(input.dtype, other.dtype)
    if dtype not in _EUCLID_STEPS:
        raise NotImplementedError(f"\"{op}_cpu\" not implemented for '{_torch_name(dtype)}'")
    return dtype, input.to(dtype), other.to(dtype)


def _gcd(dtype, a, b):
    a, b = kiln.broadcast_tensors(a.abs(), b.abs())
    for _ in range(_EUCLID_STEPS[dtype]):
        more = b != 0
        a, b = kiln.where(more, b, a), kiln.where(more, a % kiln.where(more, b, 1), 0)
    return a


def gcd(input, other):  # noqa: A002
    """The greatest common divisor, elementwise (0 for 0 and 0)."""
    dtype, a, b = _integer_operands("gcd", input, other)
    return _gcd(dtype, a, b)


def lcm(input, other):  # noqa: A002
    """The least common multiple, elementwise (0 where either is 0)."""
    dtype, a, b = _integer_operands("lcm", input, other)
    g = _gcd(dtype, a, b)
    zero = g == 0
    return kiln.where(zero, 0, kiln.div(a, kiln.where(zero, 1, g), rounding_mode="trunc") * b).abs()


_BITS = {kiln.float32: (kiln.int32, -(2**31) + 1), kiln.float64: (kiln.int64, -(2**63) + 1),
         kiln.float16: (kiln.int16, -(2**15) + 1), kiln.bfloat16: (kiln.int16, -(2**15) + 1)}


def nextafter(input, other):  # noqa: A002
    """The next representable value after input towards other. The gradient is input's (1),
    as torch's."""
    _tensor_other("nextafter", other)
    dtype = kiln.promote_types(input.dtype, other.dtype)
    if dtype not in _BITS:
        raise NotImplementedError(f"\"nextafter_cpu\" not implemented for '{_torch_name(dtype)}'")
    x, y = kiln.broadcast_tensors(input.to(dtype), other.to(dtype))
    xd, yd = x.detach().contiguous(), y.detach().contiguous()
    int_dtype, negative_tiny = _BITS[dtype]
    bits = xd.view(int_dtype)
    away = (yd > xd) == (xd > 0)  # away from zero: a larger magnitude, the next bit pattern
    stepped = kiln.where(away, bits + 1, bits - 1)
    stepped = kiln.where(xd == 0, kiln.where(yd > 0, 1, negative_tiny).to(int_dtype), stepped)
    value = stepped.view(dtype)
    value = kiln.where(xd == yd, yd, kiln.where(xd.isnan() | yd.isnan(), math.nan, value))
    # zeros (subtracted, so a -0.0 stays) carrying input's gradient and other's zero one
    value = value - kiln.where(xd.isfinite(), xd - x, 0)
    return value - kiln.where(yd.isfinite(), y - yd, 0) * 0


# ---------------------------------------------------------------------------------------------
# modified Bessel functions (Cephes: Chebyshev series on [0, 8] and in 1/x beyond)

_I0_A = (-4.41534164647933937950E-18, 3.33079451882223809783E-17, -2.43127984654795469359E-16,
         1.71539128555513303061E-15, -1.16853328779934516808E-14, 7.67618549860493561688E-14,
         -4.85644678311192946090E-13, 2.95505266312963983461E-12, -1.72682629144155570723E-11,
         9.67580903537323691224E-11, -5.18979560163526290666E-10, 2.65982372468238665035E-9,
         -1.30002500998624804212E-8, 6.04699502254191894932E-8, -2.67079385394061173391E-7,
         1.11738753912010371815E-6, -4.41673835845875056359E-6, 1.64484480707288970893E-5,
         -5.75419501008210370398E-5, 1.88502885095841655729E-4, -5.76375574538582365885E-4,
         1.63947561694133579842E-3, -4.32430999505057594430E-3, 1.05464603945949983183E-2,
         -2.37374148058994688156E-2, 4.93052842396707084878E-2, -9.49010970480476444210E-2,
         1.71620901522208775349E-1, -3.04682672343198398683E-1, 6.76795274409476084995E-1)
_I0_B = (-7.23318048787475395456E-18, -4.83050448594418207126E-18, 4.46562142029675999901E-17,
         3.46122286769746109310E-17, -2.82762398051658348494E-16, -3.42548561967721913462E-16,
         1.77256013305652638360E-15, 3.81168066935262242075E-15, -9.55484669882830764870E-15,
         -4.15056934728722208663E-14, 1.54008621752140982691E-14, 3.85277838274214270114E-13,
         7.18012445138366623367E-13, -1.79417853150680611778E-12, -1.32158118404477131188E-11,
         -3.14991652796324136454E-11, 1.18891471078464383424E-11, 4.94060238822496958910E-10,
         3.39623202570838634515E-9, 2.26666899049817806459E-8, 2.04891858946906374183E-7,
         2.89137052083475648297E-6, 6.88975834691682398426E-5, 3.36911647825569408990E-3,
         8.04490411014108831608E-1)
_I1_A = (2.77791411276104639959E-18, -2.11142121435816608115E-17, 1.55363195773620046921E-16,
         -1.10559694773538630805E-15, 7.60068429473540693410E-15, -5.04218550472791168711E-14,
         3.22379336594557470981E-13, -1.98397439776494371520E-12, 1.17361862988909016308E-11,
         -6.66348972350202774223E-11, 3.62559028155211703701E-10, -1.88724975172282928790E-9,
         9.38153738649577178388E-9, -4.44505912879632808065E-8, 2.00329475355213526229E-7,
         -8.56872026469545474066E-7, 3.47025130813767847674E-6, -1.32731636560394358279E-5,
         4.78156510755005422638E-5, -1.61760815825896745588E-4, 5.12285956168575772895E-4,
         -1.51357245063125314899E-3, 4.15642294431288815669E-3, -1.05640848946261981558E-2,
         2.47264490306265168283E-2, -5.29459812080949914269E-2, 1.02643658689847095384E-1,
         -1.76416518357834055153E-1, 2.52587186443633654823E-1)
_I1_B = (7.51729631084210481353E-18, 4.41434832307170791151E-18, -4.65030536848935832153E-17,
         -3.20952592199342395980E-17, 2.96262899764595013876E-16, 3.30820231092092828324E-16,
         -1.88035477551078244854E-15, -3.81440307243700780478E-15, 1.04202769841288027642E-14,
         4.27244001671195135429E-14, -2.10154184277266431302E-14, -4.08355111109219731823E-13,
         -7.19855177624590851209E-13, 2.03562854414708950722E-12, 1.41258074366137813316E-11,
         3.25260358301548823856E-11, -1.89749581235054123450E-11, -5.58974346219658380687E-10,
         -3.83538038596423702205E-9, -2.63146884688951950684E-8, -2.51223623787020892529E-7,
         -3.88256480887769039346E-6, -1.10588938762623716291E-4, -9.76109749136146840777E-3,
         7.78576235018280120474E-1)  # fmt: skip


def _chbevl(x, coefficients):
    b0, b1, b2 = kiln.full_like(x, coefficients[0]), kiln.zeros_like(x), kiln.zeros_like(x)
    for c in coefficients[1:]:
        b2, b1 = b1, b0
        b0 = x * b1 - b2 + c
    return 0.5 * (b0 - b2)


def _bessel(input, small, large, order, scaled):  # noqa: A002
    """I0 / I1 (exp(-|x|)-scaled when `scaled`) through Cephes' two Chebyshev series."""
    x0 = _floating(input)
    x = x0.to(kiln.float64)
    z = x.abs()
    near = z <= 8
    zs = kiln.where(near, z, 0)
    zl = kiln.where(near, 9, z)
    # I1 is odd: x (not |x|) times the series, so its slope at 0 is the series' value there
    inner = _chbevl(zs / 2 - 2, small) * (kiln.where(near, x, 0) if order else 1)
    outer = _chbevl(32 / zl - 2, large)
    if not scaled:
        inner, outer = zs.exp() * inner, zl.exp() * outer
    outer = outer / zl.sqrt()
    if order:
        outer = kiln.where(x < 0, -outer, outer)
    return kiln.where(near, inner, outer).to(x0.dtype)


def i0(input):  # noqa: A002
    """The modified Bessel function of the first kind, order 0."""
    return _bessel(input, _I0_A, _I0_B, 0, scaled=False)


def i0e(input):  # noqa: A002
    return _bessel(input, _I0_A, _I0_B, 0, scaled=True)


def i1(input):  # noqa: A002
    return _bessel(input, _I1_A, _I1_B, 1, scaled=False)


def i1e(input):  # noqa: A002
    return _bessel(input, _I1_A, _I1_B, 1, scaled=True)


# ---------------------------------------------------------------------------------------------
# polygamma, Hurwitz zeta, mvlgamma

# (2k)! / B_2k: the Euler-Maclaurin terms of Cephes' zeta
_ZETA_A = (12.0, -720.0, 30240.0, -1209600.0, 47900160.0, -1.8924375803183791606e9,
           7.47242496e10, -2.950130727918164224e12, 1.1646782814350067249e14,
           -4.5979787224074726105e15, 1.8152105401943546773e17, -7.1661652561756670113e18)
_ZETA_MAX_SHIFT = 1000  # direct terms for very negative q before the series takes over
_MACHEP = 1.11022302462515654042e-16


def _zeta(s, q):
    """The Hurwitz zeta sum_k (q + k)^-s on float64 tensors (Cephes: direct terms until
    q + k > 9, then Euler-Maclaurin)."""
    s, q = kiln.broadcast_tensors(s, q)
    domain_inf = (s == 1) | ((q <= 0) & (q == q.floor()))
    domain_nan = (s < 1) | ((q <= 0) & (s != s.floor()))
    bad = domain_inf | domain_nan
    s = kiln.where(bad, 2, s)
    q = kiln.where(bad, 1, q)
    finite = q.isfinite()
    lowest = float(kiln.where(finite, q, 1).amin()) if q.numel() else 1.0
    terms = 9 + builtins.min(_ZETA_MAX_SHIFT, builtins.max(0, math.ceil(-lowest)))
    total = q.pow(-s)
    for k in range(1, terms + 1):
        total = total + (q + k).pow(-s)
    w = q + terms
    b = w.pow(-s)
    total = total + b * w / (s - 1) - 0.5 * b
    a = kiln.ones_like(s)
    done = kiln.zeros(total.shape, dtype=kiln.bool, device=total.device)
    for j, coefficient in enumerate(_ZETA_A):  # stops, as Cephes, once a term is negligible
        a = a * (s + 2 * j)
        b = b / w
        t = a * b / coefficient
        total = kiln.where(done, total, total + t)
        done = done | ((t / total).abs() < _MACHEP)
        a = a * (s + 2 * j + 1)
        b = b / w
    return kiln.where(domain_inf, math.inf, kiln.where(domain_nan, math.nan, total))


def zeta(input, other):  # noqa: A002
    """The Hurwitz zeta function zeta(input, other) (torch.special.zeta)."""
    ref = input if isinstance(input, kiln.Tensor) else other
    dtype = kiln.result_type(input, other)
    dtype = dtype if dtype.is_floating_point else kiln.get_default_dtype()
    s, q = (v.to(kiln.float64) if isinstance(v, kiln.Tensor) else
            kiln.tensor(float(v), dtype=kiln.float64, device=ref.device) for v in (input, other))
    return _zeta(s, q).to(dtype)


def _trigamma(x):
    """torch's trigamma series: reflection below 1/2, six recurrence steps, then the
    asymptotic expansion."""
    reflect = x < 0.5
    xr = kiln.where(reflect, x, 0.25)
    result = kiln.where(reflect, -(math.pi**2) / (xr * math.pi).sin().square(), 0)
    x = kiln.where(reflect, 1 - x, x)
    for _ in range(6):
        result = result + 1 / (x * x)
        x = x + 1
    ixx = 1 / (x * x)
    result = result + (1 + 1 / (2 * x) + ixx * (1 / 6 - ixx * (1 / 30 - ixx * (1 / 42)))) / x
    return kiln.where(reflect, -result, result)


def polygamma(n, input):  # noqa: A002
    """The n-th derivative of digamma: (-1)^(n+1) n! zeta(n + 1, x) for n >= 2."""
    if not isinstance(n, int) or isinstance(n, bool):
        raise TypeError(f"polygamma(): argument 'n' (position 1) must be int, not "
                        f"{type(n).__name__}")
    if n < 0:
        raise RuntimeError("polygamma(n, x) does not support negative n.")
    if n == 0:
        return digamma(input)
    x0 = _floating(input)
    if n == 1:  # in float32 for float32, as torch's (its poles' huge values depend on it)
        work = kiln.float64 if x0.dtype == kiln.float64 else kiln.float32
        return _trigamma(x0.to(work)).to(x0.dtype)
    x = x0.to(kiln.float64)
    factor = (1.0 if n % 2 else -1.0) * math.exp(math.lgamma(n + 1.0))
    return (factor * _zeta(kiln.full_like(x, n + 1.0), x)).to(x0.dtype)


def _polygamma_method(self, n):
    return polygamma(n, self)


def mvlgamma(input, p):  # noqa: A002
    """The multivariate log-gamma of dimension p: sum_i lgamma(x - i/2) + p(p-1)/4 log(pi)."""
    if p < 1:
        raise RuntimeError("p has to be greater than or equal to 1")
    x = _floating(input)
    shifts = kiln.arange(-p / 2 + 0.5, 0.5, 0.5, dtype=x.dtype, device=x.device)
    return lgamma(x.unsqueeze(-1) + shifts).sum(-1) + p * (p - 1) * math.log(math.pi) / 4


# ---------------------------------------------------------------------------------------------
# kiln.special's normal-distribution functions and friends


def ndtr(input):  # noqa: A002
    """The standard normal CDF, as torch forms it: (1 + erf(x / sqrt 2)) / 2 in the input's
    dtype (so 0 below about -8.3 in float64)."""
    x = _floating(input)
    return (1 + (x * math.sqrt(0.5)).erf()) * 0.5


# log Phi(x) for x < -20: -x^2/2 - log(-x) - log(2 pi)/2 + log(1 - 1/x^2 + 3/x^4 - ...)
_LOG_NDTR_TERMS = 8


def log_ndtr(input):  # noqa: A002
    """log of the standard normal CDF, accurate in both tails."""
    x0 = _floating(input)
    x = x0.to(kiln.float64)
    far = x < -20
    xf = kiln.where(far, x, -21)
    inv2 = 1 / (xf * xf)
    series, term = kiln.ones_like(x), kiln.ones_like(x)
    for k in range(1, _LOG_NDTR_TERMS + 1):
        term = term * -(2 * k - 1) * inv2
        series = series + term
    asymptotic = -0.5 * xf * xf - (-xf).log() - 0.5 * math.log(2 * math.pi) + series.log()
    low = x < -1
    xl = kiln.where(low & ~far, x, -2)
    xh = kiln.where(low, 0, x)
    middle = (0.5 * (-xl * math.sqrt(0.5)).erfc()).log()
    high = (-0.5 * (xh * math.sqrt(0.5)).erfc()).log1p()
    out = kiln.where(far, asymptotic, kiln.where(low, middle, high))
    return out.to(x0.dtype)


def ndtri(input):  # noqa: A002
    """The inverse of ndtr: the Abramowitz-Stegun 26.2.23 estimate on the smaller tail, then
    Newton steps on ndtr (which keeps its relative accuracy in the tail)."""
    p0 = _floating(input)
    p = p0.to(kiln.float64)
    inside = (p > 0) & (p < 1)
    ps = kiln.where(inside, p, 0.5)
    tail = kiln.where(ps > 0.5, 1 - ps, ps)
    t = (-2 * tail.log()).sqrt()
    y = -(t - (2.515517 + t * (0.802853 + t * 0.010328))
          / (1 + t * (1.432788 + t * (0.189269 + t * 0.001308))))  # fmt: skip
    for _ in range(4):
        # times 1 / density rather than over density, whose square (in the gradient) underflows;
        # as two factors, each finite where the density is subnormal
        half = (0.25 * y * y).exp()
        y = y - (0.5 * (-y * math.sqrt(0.5)).erfc() - tail) * half * math.sqrt(2 * math.pi) * half
    y = kiln.where(ps > 0.5, -y, y)
    edge = kiln.where(p == 0, -math.inf, kiln.where(p == 1, math.inf, math.nan))
    return kiln.where(inside, y, edge).to(p0.dtype)


def entr(input):  # noqa: A002
    """-x log x: 0 at 0, -inf below."""
    x = _floating(input)
    positive = x > 0
    xs = kiln.where(positive, x, 1)
    out = kiln.where(positive, -xs * xs.log(), kiln.where(x == 0, 0.0, -math.inf))
    return kiln.where(x.isnan(), x, out)


def xlog1py(input, other):  # noqa: A002
    """input * log1p(other), 0 where input is 0 and other is not NaN."""
    dtype = kiln.result_type(input, other)
    dtype = dtype if dtype.is_floating_point else kiln.get_default_dtype()
    ref = input if isinstance(input, kiln.Tensor) else other
    x, y = (v.to(dtype) if isinstance(v, kiln.Tensor) else
            kiln.tensor(v, dtype=dtype, device=ref.device) for v in (input, other))
    # 0 * log1p(y) is 0 for y > -1, and y <= -1 is replaced there so the product stays 0
    # while x's gradient at 0 is still log1p(y), as torch's
    return x * kiln.where((x == 0) & (y <= -1), 0, y).log1p()


def _install_methods():
    methods = {name: globals()[name] for name in ("quantile", "nanquantile", "cov", "corrcoef",
                                                  "histogram", "frexp", "ldexp", "gcd", "lcm",
                                                  "nextafter", "i0", "mvlgamma")}  # fmt: skip
    methods["polygamma"] = _polygamma_method
    for name, fn in methods.items():
        if not hasattr(kiln.Tensor, name):
            setattr(kiln.Tensor, name, fn)
    for name in ("ldexp", "gcd", "lcm", "nextafter", "i0", "mvlgamma", "polygamma"):
        if not hasattr(kiln.Tensor, name + "_"):
            setattr(kiln.Tensor, name + "_", inplace_method(methods[name]))


_install_methods()
