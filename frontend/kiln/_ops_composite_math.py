"""Elementwise math written in kiln ops: xlogy, sinc, deg2rad/rad2deg, logit, logaddexp2,
heaviside, copysign and the special functions erfinv, lgamma and digamma. The capture inlines
them (kiln/_capture/calls.py), so they fuse into the kernels around them, and autograd goes
through their parts.

The special functions compute in float64 and round once to the result dtype: Giles' erfinv
approximation refined by two Newton steps on erf, Lanczos' lgamma (g = 7, 9 terms) and the
asymptotic digamma series after shifting the argument by 10, with the reflection formulas below
1/2. Each branch of a `where` is fed arguments inside its domain, so the branch not taken
contributes no NaN to a gradient.
"""

from __future__ import annotations

import math

import kiln

__all__ = ["copysign", "deg2rad", "digamma", "erfinv", "heaviside", "lgamma", "logaddexp2",
           "logit", "rad2deg", "sinc", "xlogy"]  # fmt: skip

_LANCZOS = (0.99999999999980993, 676.5203681218851, -1259.1392167224028, 771.32342877765313,
            -176.61502916214059, 12.507343278686905, -0.13857109526572012,
            9.9843695780195716e-6, 1.5056327351493116e-7)  # fmt: skip
# The asymptotic series of digamma: log z - 1/(2z) - sum B_2k / (2k z^2k).
_DIGAMMA_SERIES = (1 / 12, -1 / 120, 1 / 252, -1 / 240, 1 / 132, -691 / 32760, 1 / 12)
_ERFINV_SMALL = (2.81022636e-08, 3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087,
                 -0.00125372503, -0.00417768164, 0.246640727, 1.50140941)  # fmt: skip
_ERFINV_LARGE = (-0.000200214257, 0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773,
                 -0.0076224613, 0.00943887047, 1.00167406, 2.83297682)  # fmt: skip


def _floating(x):
    """A tensor of a floating dtype: integers and bools in the default dtype, as torch's unary
    float functions promote them."""
    if not isinstance(x, kiln.Tensor):
        x = kiln.tensor(x)
    return x if x.is_floating_point() else x.to(kiln.get_default_dtype())


def _horner(coefficients, w):
    p = w * 0 + coefficients[0]
    for c in coefficients[1:]:
        p = p * w + c
    return p


def xlogy(input, other):  # noqa: A002 - torch's argument names
    """input * log(other), 0 where input is 0 and other is not NaN."""
    dtype = kiln.result_type(input, other)
    dtype = dtype if dtype.is_floating_point else kiln.get_default_dtype()
    x = (input if isinstance(input, kiln.Tensor) else kiln.tensor(input)).to(dtype)
    y = (other if isinstance(other, kiln.Tensor) else kiln.tensor(other)).to(dtype)
    # Where x is 0, x * log(y) is already 0 for a finite positive y (and keeps torch's gradient
    # log(y) for x there); the other non-NaN y would make it NaN and are masked.
    masked = (x == 0) & ~y.isnan() & ~((y > 0) & y.isfinite())
    return kiln.where(masked, 0, x * kiln.where(masked, 1, y).log())


def sinc(input):  # noqa: A002
    """sin(pi x) / (pi x), 1 at 0."""
    x = _floating(input)
    at_zero = x == 0
    px = kiln.where(at_zero, 1, x) * math.pi
    return kiln.where(at_zero, 1, px.sin() / px).to(x.dtype)


def deg2rad(input):  # noqa: A002
    return _floating(input) * (math.pi / 180)


def rad2deg(input):  # noqa: A002
    return _floating(input) * (180 / math.pi)


def logit(input, eps=None):  # noqa: A002
    """log(p / (1 - p)), p clamped to [eps, 1 - eps] when eps is given."""
    p = _floating(input)
    if eps is not None:
        p = p.clamp(eps, 1 - eps)
    return (p / (1 - p)).log()


def logaddexp2(input, other):  # noqa: A002
    """log2(2^input + 2^other) without overflow, the infinity itself where both are it."""
    m = kiln.maximum(input, other)
    same_inf = input.isinf() & (input == other)
    d = -(input - other).abs()
    return kiln.where(same_inf, input, m + d.exp2().log1p() * (1 / math.log(2)))


def heaviside(input, values):  # noqa: A002
    """0 below zero, 1 above, `values` at zero (the operands must share a dtype)."""
    if isinstance(values, kiln.Tensor) and values.dtype != input.dtype:
        raise RuntimeError("heaviside is not yet implemented for tensors with different dtypes.")
    return kiln.where(input == 0, values, (input > 0).to(input.dtype))


def copysign(input, other):  # noqa: A002
    """|input| with the sign of other (the sign bit: -0.0 counts as negative)."""
    x = _floating(input)
    if not isinstance(other, kiln.Tensor):
        dtype = x.dtype
        return (x.abs() if math.copysign(1.0, other) > 0 else -x.abs()).to(dtype)
    dtype = kiln.promote_types(x.dtype, _floating(other).dtype)
    x = x.to(dtype)
    return kiln.where(other.signbit(), -x.abs(), x.abs())


def erfinv(input):  # noqa: A002
    """The inverse of erf: +-inf at +-1, NaN outside [-1, 1]."""
    x0 = _floating(input)
    x = x0.to(kiln.float64)
    inside = x.abs() < 1
    xs = kiln.where(inside, x, 0)
    w = -((1 - xs) * (1 + xs)).log()
    small = w < 5
    p_small = _horner(_ERFINV_SMALL, kiln.where(small, w, 0) - 2.5)
    p_large = _horner(_ERFINV_LARGE, kiln.where(small, 5, w).sqrt() - 3)
    y = kiln.where(small, p_small, p_large) * xs
    for _ in range(2):  # Newton on erf(y) = x: the float32 approximation to float64
        y = y - (y.erf() - xs) / ((2 / math.sqrt(math.pi)) * (-y * y).exp())
    edge = kiln.where(x > 0, math.inf, -math.inf)
    out = kiln.where(inside, y, kiln.where(x.abs() == 1, edge, math.nan))
    return out.to(x0.dtype)


def _lgamma_positive(z):
    """lgamma for z >= 1/2 (Lanczos)."""
    z = z - 1
    a = z * 0 + _LANCZOS[0]
    for i, c in enumerate(_LANCZOS[1:], start=1):
        a = a + c / (z + i)
    t = z + 7.5
    return 0.5 * math.log(2 * math.pi) + (z + 0.5) * t.log() - t + a.log()


def lgamma(input):  # noqa: A002
    """log |Gamma(x)|: inf at the poles (0 and the negative integers) and at +-inf."""
    x0 = _floating(input)
    x = x0.to(kiln.float64)
    reflect = x < 0.5
    positive = _lgamma_positive(kiln.where(reflect, 1 - x, x).clamp(max=1e300))
    xr = kiln.where(reflect, x, 0.25)
    reflected = math.log(math.pi) - (xr * math.pi).sin().abs().log() - positive
    out = kiln.where(reflect, reflected, positive)
    pole = (x <= 0) & (x == x.floor())
    out = kiln.where(pole | x.isinf(), math.inf, out)
    exact = (x == 1) | (x == 2)  # exact zeros, as torch's, keeping the gradient (digamma)
    out = out - kiln.where(exact, out.detach(), 0)
    return out.to(x0.dtype)


def _digamma_positive(z):
    """digamma for z > 0: the series at z + 10, less the ten terms of the recurrence."""
    shifted = z + 10
    inv2 = 1 / (shifted * shifted)
    series = _horner(_DIGAMMA_SERIES[::-1], inv2) * inv2
    out = shifted.log() - 0.5 / shifted - series
    for k in range(10):
        out = out - 1 / (z + k)
    return out


def digamma(input):  # noqa: A002
    """The derivative of lgamma: -inf at +0 (inf at -0), NaN at the negative integers."""
    x0 = _floating(input)
    x = x0.to(kiln.float64)
    reflect = x < 0.5
    positive = _digamma_positive(kiln.where(reflect, 1 - x, x))
    xr = kiln.where(reflect, x, 0.25)
    out = kiln.where(reflect, positive - math.pi / (xr * math.pi).tan(), positive)
    out = kiln.where(x == 0, kiln.where(x.signbit(), math.inf, -math.inf), out)
    out = kiln.where((x < 0) & (x == x.floor()), math.nan, out)
    return out.to(x0.dtype)


def inplace_method(fn):
    """`Tensor.f_` of an op f written in kiln ops: f's result copied into the tensor (copy_
    records the write for autograd and the capture functionalizes it)."""

    def method(self, *args, **kwargs):
        return self.copy_(fn(self, *args, **kwargs))

    method.__name__ = fn.__name__ + "_"
    return method


def _install_methods():
    for name in __all__:
        fn = globals()[name]
        setattr(kiln.Tensor, name, fn)
        setattr(kiln.Tensor, name + "_", inplace_method(fn))


_install_methods()
