"""NumPy's ufuncs over kiln ops: NumPy's result dtype, kiln's kernel.

Each ufunc computes in one dtype and casts once: in its result dtype (arithmetic, math), or in
the operands' common dtype (comparisons, whose result is bool). `out=` and `where=` follow
NumPy: the result is written into `out` (cast like NumPy's `same_kind`), positions where
`where` is false keep `out`'s values.
"""

from __future__ import annotations

import numpy as np

import kiln
from kiln._numpy import _dtypes as _dt


def spec(x):
    """What decides an operand's part in promotion: an array's dtype, a scalar's type."""
    if isinstance(x, kiln.Tensor):
        return x.dtype
    return type(x)


def as_operand(x, dtype):
    """`x` ready for a kiln op computing in `dtype`: arrays cast, scalars as Python numbers."""
    if isinstance(x, kiln.Tensor):
        if x.dtype != dtype:
            return x.to(dtype)
        return x
    if isinstance(x, (list, tuple)):
        return _dt.constant_array(x, dtype)
    if _dt.is_float(dtype):
        return float(x)
    if dtype == kiln.bool:
        return bool(x)
    check_fits(x, dtype)
    return int(x)


def check_fits(x, dtype) -> None:
    """NumPy 2 (NEP 50): a Python int combined with an integer array must fit its dtype."""
    if type(x) is int and not _dt.is_float(dtype) and dtype != kiln.bool:
        info = kiln.iinfo(dtype)
        if not info.min <= x <= info.max:
            raise OverflowError(f"Python integer {x} out of bounds for {_dt.to_numpy(dtype)}")


def as_tensor(x, dtype):
    if isinstance(x, (kiln.Tensor, list, tuple)):
        return as_operand(x, dtype)
    return kiln.full((), as_operand(x, dtype), dtype=dtype)


def finish(result, out, where, dtype):
    """Casts to the result dtype, applies `where=` and writes `out=`."""
    if result.dtype != dtype:
        result = result.to(dtype)
    if isinstance(out, tuple):
        if len(out) != 1:
            raise ValueError("out must be a tuple of one array for this ufunc")
        out = out[0]
    if where is not True:
        base = out if out is not None else kiln.zeros_like(result)
        result = kiln.where(as_tensor(where, kiln.bool), result, base)
    if out is None:
        return result
    if not _dt.can_cast(result.dtype, out.dtype, "same_kind"):
        raise TypeError(f"Cannot cast ufunc output from {_dt.to_numpy(result.dtype)} to "
                        f"{_dt.to_numpy(out.dtype)} with casting rule 'same_kind'")
    out.copy_(result)
    return out


def _ufunc(ufunc, kfn, compute):
    """NumPy's `ufunc` over kiln's `kfn`: computed in the result dtype (`compute == "out"`) or
    in the operands' common dtype (comparisons), cast once; `out` may come by position."""

    def impl(*args, out=None, where=True, dtype=None, casting="same_kind", order="K",
             subok=True):
        if len(args) == ufunc.nin + 1:
            out = args[-1]
            args = args[:-1]
        specs = tuple([spec(x) for x in args])
        rdt = _dt.ufunc_result(ufunc, specs, dtype)
        cdt = rdt if compute == "out" else _dt.common(specs)
        operands = [as_tensor(args[0], cdt)] + [as_operand(x, cdt) for x in args[1:]]
        return finish(kfn(*operands), out, where, rdt)

    impl.__name__ = ufunc.__name__
    return impl


def _square(x):
    return x * x


def _cbrt(x):
    return kiln.sign(x) * kiln.pow(kiln.abs(x), 1.0 / 3.0)


def _sign(x):
    """NumPy's sign keeps NaN (torch's gives 0)."""
    if not x.dtype.is_floating_point:
        return kiln.sign(x)
    return kiln.where(kiln.isnan(x), x, kiln.sign(x))


def _positive(x):
    return x.clone()


def _logaddexp2(a, b):
    m = kiln.maximum(a, b)
    return m + kiln.log2(kiln.exp2(a - m) + kiln.exp2(b - m))


def _copysign(a, b):
    return kiln.abs(a) * kiln.where(kiln.signbit(b), -1.0, 1.0).to(a.dtype)


def _heaviside(a, b):
    # NumPy's: a NaN stays NaN (torch.heaviside gives 0 there)
    return kiln.where(a < 0, kiln.zeros_like(a),
                      kiln.where(a > 0, kiln.ones_like(a), kiln.where(a == 0, b, a)))


def _deg2rad(x):
    return x * (np.pi / 180.0)


def _rad2deg(x):
    return x * (180.0 / np.pi)


UNARY = {
    np.negative: (kiln.neg, "out"),
    np.positive: (_positive, "out"),
    np.absolute: (kiln.abs, "out"),
    np.fabs: (kiln.abs, "out"),
    np.sqrt: (kiln.sqrt, "out"),
    np.square: (_square, "out"),
    np.cbrt: (_cbrt, "out"),
    np.reciprocal: (kiln.reciprocal, "out"),
    np.exp: (kiln.exp, "out"),
    np.exp2: (kiln.exp2, "out"),
    np.expm1: (kiln.expm1, "out"),
    np.log: (kiln.log, "out"),
    np.log2: (kiln.log2, "out"),
    np.log10: (kiln.log10, "out"),
    np.log1p: (kiln.log1p, "out"),
    np.sin: (kiln.sin, "out"),
    np.cos: (kiln.cos, "out"),
    np.tan: (kiln.tan, "out"),
    np.arcsin: (kiln.asin, "out"),
    np.arccos: (kiln.acos, "out"),
    np.arctan: (kiln.atan, "out"),
    np.sinh: (kiln.sinh, "out"),
    np.cosh: (kiln.cosh, "out"),
    np.tanh: (kiln.tanh, "out"),
    np.arcsinh: (kiln.asinh, "out"),
    np.arccosh: (kiln.acosh, "out"),
    np.arctanh: (kiln.atanh, "out"),
    np.floor: (kiln.floor, "out"),
    np.ceil: (kiln.ceil, "out"),
    np.trunc: (kiln.trunc, "out"),
    np.rint: (kiln.round, "out"),
    np.sign: (_sign, "out"),
    np.deg2rad: (_deg2rad, "out"),
    np.rad2deg: (_rad2deg, "out"),
    np.degrees: (_rad2deg, "out"),
    np.radians: (_deg2rad, "out"),
    np.isnan: (kiln.isnan, "common"),
    np.isinf: (kiln.isinf, "common"),
    np.isfinite: (kiln.isfinite, "common"),
    np.signbit: (kiln.signbit, "common"),
    np.logical_not: (kiln.logical_not, "common"),
    np.invert: (kiln.bitwise_not, "out"),
}

BINARY = {
    np.add: (kiln.add, "out"),
    np.subtract: (kiln.sub, "out"),
    np.multiply: (kiln.mul, "out"),
    np.true_divide: (kiln.true_divide, "out"),
    np.floor_divide: (kiln.floor_divide, "out"),
    np.remainder: (kiln.remainder, "out"),
    np.fmod: (kiln.fmod, "out"),
    np.power: (kiln.pow, "out"),
    np.maximum: (kiln.maximum, "out"),
    np.minimum: (kiln.minimum, "out"),
    np.fmax: (kiln.fmax, "out"),
    np.fmin: (kiln.fmin, "out"),
    np.arctan2: (kiln.atan2, "out"),
    np.hypot: (kiln.hypot, "out"),
    np.logaddexp: (kiln.logaddexp, "out"),
    np.logaddexp2: (_logaddexp2, "out"),
    np.copysign: (_copysign, "out"),
    np.heaviside: (_heaviside, "out"),
    np.equal: (kiln.eq, "common"),
    np.not_equal: (kiln.ne, "common"),
    np.less: (kiln.lt, "common"),
    np.less_equal: (kiln.le, "common"),
    np.greater: (kiln.gt, "common"),
    np.greater_equal: (kiln.ge, "common"),
    np.logical_and: (kiln.logical_and, "common"),
    np.logical_or: (kiln.logical_or, "common"),
    np.logical_xor: (kiln.logical_xor, "common"),
    np.bitwise_and: (kiln.bitwise_and, "out"),
    np.bitwise_or: (kiln.bitwise_or, "out"),
    np.bitwise_xor: (kiln.bitwise_xor, "out"),
    np.left_shift: (kiln.bitwise_left_shift, "out"),
    np.right_shift: (kiln.bitwise_right_shift, "out"),
}


FUNCTIONS = {u: _ufunc(u, fn, kind) for table in (UNARY, BINARY)
             for u, (fn, kind) in table.items()}
