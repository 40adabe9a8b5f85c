"""torch functions and Tensor methods that third-party code calls and kiln lacked: quantile,
cov, histogram, trapezoid and the other statistics helpers, frexp / gcd / nextafter and the
special functions (kiln.special), and the matrix functions (det, inverse, cholesky, lu, qr, svd,
matrix_exp, ...). Each is checked against torch over float32 and float64, batched where torch
batches, on edge values, with gradients against torch.autograd's, and on its error paths."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import kiln
from kiln._capture.backend_compiled import CpuBackend

DTYPES = [(kiln.float64, torch.float64), (kiln.float32, torch.float32)]
DTYPE_IDS = ["float64", "float32"]
RTOL = {kiln.float64: 1e-10, kiln.float32: 2e-5}

pytestmark = pytest.mark.filterwarnings("ignore:.*deprecated:UserWarning")  # torch.qr, lu, ...


def _k(a, dtype=None):
    t = kiln.from_numpy(np.ascontiguousarray(a).reshape(np.shape(a)))  # 0-d stays 0-d
    return t if dtype is None else t.to(dtype)


def _t(a, dtype=None):
    t = torch.from_numpy(np.ascontiguousarray(a).reshape(np.shape(a)))
    return t if dtype is None else t.to(dtype)


def _np(x):
    x = x.detach()
    if isinstance(x, torch.Tensor):
        return x.double().numpy() if x.is_floating_point() else x.numpy()
    return x.to(kiln.float64).numpy() if x.is_floating_point() else x.numpy()


def _same(ours, theirs, rtol=0.0, atol=0.0):
    assert ours.dtype.name == str(theirs.dtype).split(".")[-1], (ours.dtype, theirs.dtype)
    assert tuple(ours.shape) == tuple(theirs.shape), (ours.shape, theirs.shape)
    np.testing.assert_allclose(_np(ours), _np(theirs), rtol=rtol, atol=atol, equal_nan=True)


def _both(name, *args, rtol=0.0, atol=0.0, module=None, **kw):
    """kiln.<name> and torch.<name> on the same NumPy arguments give the same result."""
    ours = getattr(module or kiln, name)(*[_k(a) if isinstance(a, np.ndarray) else a
                                           for a in args], **kw)  # fmt: skip
    theirs = getattr(getattr(torch, module.__name__.split(".")[-1]) if module else torch, name)(
        *[_t(a) if isinstance(a, np.ndarray) else a for a in args], **kw)
    _same(ours, theirs, rtol, atol)


def _grads_match(kfn, tfn, *arrays, rtol=1e-7, atol=1e-9, seed=0):
    """kfn's gradients (kiln autograd) of a random weighting of its output equal tfn's."""
    ks = [_k(a).requires_grad_() for a in arrays]
    ts = [_t(a).requires_grad_() for a in arrays]
    ours, theirs = kfn(*ks), tfn(*ts)
    w = np.random.default_rng(seed).standard_normal(tuple(theirs.shape))
    kg = kiln.autograd.grad((ours * _k(w)).sum(), ks)
    tg = torch.autograd.grad((theirs * _t(w)).sum(), ts)
    for a, b in zip(kg, tg, strict=True):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=rtol, atol=atol)


def _raises_like(ours, theirs, message=True):
    """Both calls raise the same builtin exception type (and message)."""
    with pytest.raises(Exception) as t:
        theirs()
    with pytest.raises(Exception) as k:
        ours()
    base = next(c for c in type(t.value).__mro__ if c.__module__ == "builtins")
    assert isinstance(k.value, base), (type(k.value), type(t.value))
    if message:
        assert str(k.value) == str(t.value)


def _both_raise(name, *args, **kw):
    """kiln.<name> and torch.<name> raise alike on the same NumPy arguments."""
    def call(lib, to):
        return getattr(lib, name)(*[to(a) if isinstance(a, np.ndarray) else a for a in args],
                                  **{k: to(v) if isinstance(v, np.ndarray) else v
                                     for k, v in kw.items()})  # fmt: skip

    _raises_like(lambda: call(kiln, _k), lambda: call(torch, _t))


def _compiled_alone(fn, *args):
    """fn compiled strictly (a decline raises), asserting one compiled part."""
    kiln.compiler.reset()
    backend = CpuBackend(fallback=False)
    out = kiln.compile(fn, backend=backend)(*args)
    assert [len(r.parts) for r in backend.reports] == [1]
    assert all(r.eager_nodes == 0 for r in backend.reports)
    return out


RNG = np.random.default_rng(7)
X = RNG.standard_normal((4, 9))
X[1, 3] = X[1, 5]  # ties


# ---------------------------------------------------------------------------------------------
# statistics


@pytest.mark.parametrize("dtypes", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("interpolation", ["linear", "lower", "higher", "midpoint", "nearest"])
@pytest.mark.parametrize("dim,keepdim", [(None, False), (None, True), (0, False), (-1, True)])
def test_quantile_and_nanquantile(dtypes, interpolation, dim, keepdim):
    kd, td = dtypes
    xn = X.copy()
    xn[0, 2] = np.nan
    xn[2] = np.nan
    for q in (0.3, np.array([0.0, 0.25, 0.5, 0.9, 1.0]), np.array(0.7)):
        kq = q if isinstance(q, float) else _k(q, kd)
        tq = q if isinstance(q, float) else _t(q, td)
        for data in (X, xn):
            for ours, theirs in ((kiln.quantile, torch.quantile),
                                 (kiln.nanquantile, torch.nanquantile)):  # fmt: skip
                _same(ours(_k(data, kd), kq, dim, keepdim, interpolation=interpolation),
                      theirs(_t(data, td), tq, dim, keepdim, interpolation=interpolation),
                      rtol=RTOL[kd], atol=RTOL[kd])  # fmt: skip
    nearest = np.array([0.05, 0.15, 0.45, 0.5, 0.55, 1 / 6, 5 / 6])  # halves round to even
    _both("quantile", np.arange(10.0), nearest, interpolation="nearest")
    _same(_k(X, kd).quantile(0.5, 1), _t(X, td).quantile(0.5, 1), rtol=RTOL[kd])
    _both("quantile", np.array(3.0), 0.2, 0, True)


def test_quantile_gradients_and_errors():
    q = np.array([0.1, 0.5, 0.77])
    for interpolation in ("linear", "midpoint", "nearest"):
        _grads_match(lambda a: kiln.quantile(a, _k(q), 1, interpolation=interpolation),
                     lambda a: torch.quantile(a, _t(q), 1, interpolation=interpolation), X)
    for data, q in ((X.astype(np.int64), 0.5), (X, 1.5), (X, np.array([0.5], np.float32)),
                    (X, np.array([[0.5]])), (X, np.array([1.5])), (np.zeros(0), 0.5)):
        _both_raise("quantile", data, q)
    _both_raise("nanquantile", X, 0.5, interpolation="foo")
    _both_raise("quantile", X, 0.5, dim=5)


@pytest.mark.parametrize("dtypes", DTYPES, ids=DTYPE_IDS)
def test_cov_and_corrcoef(dtypes):
    kd, td = dtypes
    fw = RNG.integers(0, 4, 9)
    aw = RNG.random(9)
    for kw in ({}, {"correction": 0}, {"correction": 3}, {"fweights": fw}, {"aweights": aw},
               {"fweights": fw, "aweights": aw, "correction": 2}):
        kk = {k: (_k(v, kd) if k == "aweights" else _k(v)) if isinstance(v, np.ndarray) else v
              for k, v in kw.items()}  # fmt: skip
        tk = {k: (_t(v, td) if k == "aweights" else _t(v)) if isinstance(v, np.ndarray) else v
              for k, v in kw.items()}  # fmt: skip
        _same(kiln.cov(_k(X, kd), **kk), torch.cov(_t(X, td), **tk), rtol=RTOL[kd],
              atol=RTOL[kd])  # fmt: skip
    for data in (X[0], X[:1], X.astype(np.int64), np.array([[1.0, 1, 1], [1, 2, 3]])):
        _same(kiln.cov(_k(data)), torch.cov(_t(data)), rtol=1e-12)
        _same(kiln.corrcoef(_k(data)), torch.corrcoef(_t(data)), rtol=1e-12)
    _same(_k(X, kd).corrcoef(), _t(X, td).corrcoef(), rtol=RTOL[kd], atol=RTOL[kd])
    with pytest.warns(UserWarning, match="degrees of freedom is <= 0"):
        _same(kiln.cov(_k(X), correction=9), torch.cov(_t(X), correction=9))


def test_cov_gradients_and_errors():
    aw = np.linspace(0.1, 1, 9)
    _grads_match(lambda a: kiln.cov(a, aweights=_k(aw)), lambda a: torch.cov(a, aweights=_t(aw)),
                 X)
    mask = 1 - np.eye(4)  # the clipped diagonal is 1 up to rounding: compare the rest
    _grads_match(lambda a: kiln.corrcoef(a) * _k(mask), lambda a: torch.corrcoef(a) * _t(mask), X)
    bad = [{"fweights": np.ones(9)}, {"fweights": np.ones((2, 9), np.int64)},
           {"fweights": np.ones(3, np.int64)}, {"fweights": -np.ones(9, np.int64)},
           {"aweights": np.ones(9, np.int64)}, {"aweights": -np.ones(9)},
           {"aweights": np.ones((2, 9))}, {"aweights": np.ones(5)}]  # fmt: skip
    for kw in bad:
        _both_raise("cov", X, **kw)
    _both_raise("cov", np.ones((2, 3, 4)))
    _both_raise("corrcoef", np.ones((2, 3, 4)))


@pytest.mark.parametrize("dtypes", DTYPES, ids=DTYPE_IDS)
def test_histogram(dtypes):
    kd, td = dtypes
    data = RNG.standard_normal((5, 40))
    weight = RNG.random((5, 40))
    edges = np.array([-2.0, -0.5, 0.0, 0.3, 1.0, 2.5])
    cases = [((7,), {}), ((5,), {"range": (-1.0, 1)}), ((6,), {"weight": weight}),
             ((4,), {"density": True}), ((edges,), {}), ((edges,), {"density": True}),
             ((edges,), {"weight": weight, "density": True})]  # fmt: skip
    for (bins,), kw in cases:
        kb, tb = (bins, bins) if isinstance(bins, int) else (_k(bins, kd), _t(bins, td))
        kk = {k: _k(v, kd) if isinstance(v, np.ndarray) else v for k, v in kw.items()}
        tk = {k: _t(v, td) if isinstance(v, np.ndarray) else v for k, v in kw.items()}
        ours = kiln.histogram(_k(data, kd), kb, **kk)
        theirs = torch.histogram(_t(data, td), tb, **tk)
        _same(ours.hist, theirs.hist, rtol=RTOL[kd], atol=RTOL[kd])
        _same(ours.bin_edges, theirs.bin_edges)
        hist, bin_edges = ours
        assert hist is ours.hist and bin_edges is ours.bin_edges
    nan = np.array([0.0, 1, 2, np.nan])
    for values, kw in ((np.ones(3), {}), (np.zeros(0), {}), (nan, {"range": (0, 2)})):
        ours = kiln.histogram(_k(values, kd), 3, **kw)
        theirs = torch.histogram(_t(values, td), 3, **kw)
        _same(ours.hist, theirs.hist)
        _same(ours.bin_edges, theirs.bin_edges)
    _same(_k(data, kd).histogram(4).hist, _t(data, td).histogram(4).hist)


def test_histogram_errors():
    _both_raise("histogram", np.array([1, 2]), 3)
    for bins in (0, -1):
        _both_raise("histogram", X, bins)
    _both_raise("histogram", X, 3, range=(2.0, 1.0))
    _both_raise("histogram", X, 3, range=(1.0, math.inf))
    _both_raise("histogram", np.array([0.0, math.nan]), 2)
    for edges in (np.array([[0.0, 1.0]]), np.array([0.0]), np.array([0.0, 1.0], np.float32)):
        _both_raise("histogram", X, edges)
    _both_raise("histogram", X, 3, weight=np.ones(3))
    _both_raise("histogram", X, 3, weight=np.ones((4, 9), np.float32))


@pytest.mark.parametrize("dtypes", DTYPES, ids=DTYPE_IDS)
def test_trapezoid_family(dtypes):
    kd, td = dtypes
    y = RNG.standard_normal((3, 4, 5))
    xs = np.sort(RNG.standard_normal(5))
    calls = [((), {}), ((), {"dx": 0.3}), ((), {"dim": 1}), ((xs,), {}),
             ((np.sort(RNG.standard_normal(4)),), {"dim": 1}), ((y + 1,), {}),
             ((RNG.standard_normal((4, 5)),), {"dim": 1})]  # fmt: skip
    for args, kw in calls:
        for name in ("trapezoid", "trapz", "cumulative_trapezoid"):
            if name == "trapz" and "dx" in kw:
                continue
            ours = getattr(kiln, name)(_k(y, kd), *[_k(a, kd) for a in args], **kw)
            theirs = getattr(torch, name)(_t(y, td), *[_t(a, td) for a in args], **kw)
            _same(ours, theirs, rtol=RTOL[kd], atol=RTOL[kd])
    ints = np.array([1, 2, 4])
    for name in ("trapezoid", "cumulative_trapezoid"):
        for kw in ({}, {"dx": 2}):
            _both(name, ints, **kw)
        _both(name, np.ones((3, 0)))
    _both("trapz", y, dx=0.5, rtol=1e-12)


def test_trapezoid_gradients_and_errors():
    y, xs = RNG.standard_normal((3, 6)), np.sort(RNG.standard_normal(6))
    _grads_match(kiln.trapezoid, torch.trapezoid, y, xs)
    _grads_match(lambda a: kiln.trapezoid(a, dx=0.7, dim=0),
                 lambda a: torch.trapezoid(a, dx=0.7, dim=0), y)
    _grads_match(kiln.cumulative_trapezoid, torch.cumulative_trapezoid, y, y * 2)
    for name in ("trapezoid", "cumulative_trapezoid"):
        _both_raise(name, np.array([True, False]))
        _both_raise(name, np.ones(3), np.ones(2))
        with pytest.raises(TypeError):  # torch's argument parser refuses the pair too
            getattr(kiln, name)(_k(np.ones(3)), _k(np.ones(3)), dx=2)
    _both_raise("trapezoid", np.array(1.0))


def test_vander_unravel_index_combinations():
    for values in (np.array([1, 2, 3]), np.array([1, 2, 3], np.int32), np.array([True, False]),
                   np.array([0.5, -2.0, 0.0, 3.0]), np.zeros(0)):
        for kw in ({}, {"N": 0}, {"N": 1}, {"N": 5, "increasing": True}, {"increasing": True}):
            _same(kiln.vander(_k(values), **kw), torch.vander(_t(values), **kw), rtol=1e-15)
    x = _k(np.array([0.5, 0.0, -2.0])).requires_grad_()
    kiln.vander(x, 4).sum().backward()  # torch's vander has no working backward: by hand
    np.testing.assert_allclose(x.grad.numpy(), [1 + 2 * 0.5 + 3 * 0.25, 1, 1 - 4 + 12])
    _both_raise("vander", np.ones((2, 2)))
    _both_raise("vander", np.ones(2), N=-1)
    for indices, shape in ((np.array(4), (3, 2)), (np.array([[1234], [5678]]), (10, 10, 10, 10)),
                           (np.array([0, 5, 3], np.int32), [6]), (np.array([7, 2]), 9)):
        ours = kiln.unravel_index(_k(indices), shape)
        theirs = torch.unravel_index(_t(indices), shape)
        assert isinstance(ours, tuple) and len(ours) == len(theirs)
        for o, t in zip(ours, theirs, strict=True):
            _same(o, t)
    with pytest.raises(TypeError, match="expected 'indices' to be integer dtype"):
        kiln.unravel_index(_k(np.array([1.0])), (2,))
    _both_raise("unravel_index", np.array([1]), (2, -3))
    v = np.array([1.5, -2.0, 3.0, 4.0])
    for r in (0, 1, 2, 3, 5):
        for wr in (False, True):
            _same(kiln.combinations(_k(v), r, wr), torch.combinations(_t(v), r, wr))
    _grads_match(lambda a: kiln.combinations(a, 3, True), lambda a: torch.combinations(a, 3, True),
                 v)
    _both_raise("combinations", np.ones((2, 2)))
    _both_raise("combinations", np.ones(2), -1)


# ---------------------------------------------------------------------------------------------
# floating-point representation, integer arithmetic

FLOAT_EDGES = np.array([0.0, -0.0, 1.0, -3.0, 0.5, 0.9999999999999999, 3.0000000000000004,
                        1e-40, 1e-310, 5e-324, 2.0**-1022, 1.7e308, math.inf, -math.inf,
                        math.nan, 123.456, -7e-5])  # fmt: skip


@pytest.mark.parametrize("dtypes", DTYPES, ids=DTYPE_IDS)
def test_frexp_ldexp_nextafter(dtypes):
    kd, td = dtypes
    mantissa, exponent = kiln.frexp(_k(FLOAT_EDGES, kd))
    theirs = torch.frexp(_t(FLOAT_EDGES, td))
    _same(mantissa, theirs.mantissa)
    _same(exponent, theirs.exponent)
    _same(_k(FLOAT_EDGES, kd).frexp()[0], theirs[0])
    _same(kiln.ldexp(mantissa, exponent), torch.ldexp(theirs.mantissa, theirs.exponent))
    e = np.array([1, -3, 10, 0])
    _same(kiln.ldexp(_k(e, kd), _k(e)), torch.ldexp(_t(e, td), _t(e)))
    _same(kiln.ldexp(_k(e, kd), _k(e * 1.0)), torch.ldexp(_t(e, td), _t(e * 1.0)))
    _both("ldexp", e, e.astype(np.int16))
    _same(kiln.ldexp(_k(e), _k(e)), torch.ldexp(_t(e), _t(e)))
    toward = np.array([1.0, 0.0, -0.0, math.inf, 2.0, -5.0, 1.0, 0.0, -1.0, 3.0, 0.0, 1e300,
                       -math.inf, math.nan, 0.0, 0.0, -1e-30])  # fmt: skip
    x = FLOAT_EDGES
    _same(kiln.nextafter(_k(x, kd), _k(toward, kd)), torch.nextafter(_t(x, td), _t(toward, td)))
    _same(_k(x, kd).nextafter(_k(toward, kd)), torch.nextafter(_t(x, td), _t(toward, td)))


def test_frexp_ldexp_nextafter_gradients_and_errors():
    x = RNG.standard_normal(12) * 100
    _grads_match(lambda a: kiln.frexp(a)[0], lambda a: torch.frexp(a)[0], x)
    _grads_match(kiln.ldexp, torch.ldexp, x, x / 50)
    _grads_match(kiln.nextafter, torch.nextafter, x, x[::-1])
    _both_raise("frexp", np.array([1, 2]))
    _both_raise("nextafter", np.array([1, 2]), np.array([2, 1]))
    for name in ("ldexp", "nextafter", "gcd"):
        with pytest.raises(TypeError, match=f"{name}\\(\\): argument 'other'"):
            getattr(kiln, name)(_k(np.array([1, 2])), 2)


def test_gcd_lcm():
    a = np.array([0, -4, 6, 0, 17, -12, 2**40 * 3, 1071, 832040])
    b = np.array([0, 6, -4, 5, 0, -18, 2**41 * 9, 462, 514229])
    for name in ("gcd", "lcm"):
        ours, theirs = getattr(kiln, name), getattr(torch, name)
        _same(ours(_k(a), _k(b)), theirs(_t(a), _t(b)))
        _same(ours(_k(a[:6]), _k(b[:6], kiln.int32)), theirs(_t(a[:6]), _t(b[:6]).int()))
        _same(ours(_k(np.array([[4], [6]], np.uint8)), _k(np.array([6, 9, 0], np.int8))),
              theirs(torch.tensor([[4], [6]], dtype=torch.uint8),
                     torch.tensor([6, 9, 0], dtype=torch.int8)))  # fmt: skip
        for bad in (np.array([1.0]), np.array([True])):
            _raises_like(lambda o=ours, v=bad: o(_k(v), _k(v)),
                         lambda t=theirs, v=bad: t(_t(v), _t(v)))
    y = _k(np.array([12, 18]))
    assert y.gcd_(_k(np.array([8, 27]))) is y
    _same(y, torch.tensor([4, 9]))
    _same(_k(np.array([4, 6])).lcm(_k(np.array([6, 4]))), torch.tensor([12, 12]))


# ---------------------------------------------------------------------------------------------
# special functions

BESSEL_X = np.concatenate([np.linspace(-30, 30, 121), [0.0, -0.0, 7.99, 8.0, 8.01, 50.0, 700.0,
                                                       800.0, math.inf, -math.inf, math.nan]])


@pytest.mark.parametrize("dtypes", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("name", ["i0", "i0e", "i1", "i1e"])
def test_modified_bessel(dtypes, name):
    kd, td = dtypes
    x = BESSEL_X if kd == kiln.float64 else BESSEL_X[np.abs(BESSEL_X) < 80]
    _same(getattr(kiln.special, name)(_k(x, kd)), getattr(torch.special, name)(_t(x, td)),
          rtol=1e-13 if kd == kiln.float64 else 1e-5)  # fmt: skip
    _grads_match(getattr(kiln.special, name), getattr(torch.special, name),
                 np.concatenate([np.linspace(-20, 20, 41), [0.3, 7.99, 8.01]]), rtol=1e-8)
    _same(getattr(kiln.special, name)(_k(np.array([1, 2]))),
          getattr(torch.special, name)(torch.tensor([1, 2])), rtol=1e-6)


def test_i0_top_level_and_methods():
    _same(kiln.i0(_k(BESSEL_X)), torch.i0(_t(BESSEL_X)), rtol=1e-13)
    x = _k(np.array([0.5, -1.0]))
    assert x.i0_() is x
    _same(x, torch.tensor([0.5, -1.0], dtype=torch.float64).i0(), rtol=1e-14)


POLYGAMMA_X = np.array([0.0, -0.0, -1.0, -1.5, -0.3, 1e-5, 0.2, 1.0, 3.0, 17.5, 1e6, math.inf,
                        -math.inf, math.nan, -100.5, -10.7])  # fmt: skip


@pytest.mark.parametrize("dtypes", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("n", [0, 1, 2, 3, 6])
def test_polygamma(dtypes, n):
    kd, td = dtypes
    x = POLYGAMMA_X if kd == kiln.float64 else POLYGAMMA_X[np.abs(POLYGAMMA_X) < 50]
    ours, theirs = kiln.polygamma(n, _k(x, kd)), torch.polygamma(n, _t(x, td))
    _same(ours, theirs, rtol=1e-9 if kd == kiln.float64 else 1e-5)
    _same(_k(x, kd).polygamma(n), theirs, rtol=1e-9 if kd == kiln.float64 else 1e-5)
    _both("polygamma", n, np.array([1, 2]), rtol=1e-6, module=kiln.special)
    grid = np.concatenate([np.linspace(0.05, 30, 40), [-1.5, -0.3, -10.7]])
    _grads_match(lambda a: kiln.polygamma(n, a), lambda a: torch.polygamma(n, a), grid, rtol=1e-6)


def test_polygamma_mvlgamma_zeta():
    _both_raise("polygamma", -1, np.ones(2))
    with pytest.raises(TypeError, match="must be int"):
        kiln.polygamma(1.5, _k(np.ones(2)))
    y = _k(np.array([0.5, 2.0]))
    assert y.polygamma_(1) is y
    _same(y, torch.tensor([0.5, 2.0], dtype=torch.float64).polygamma(1), rtol=1e-12)
    x = np.linspace(1.1, 9, 12)
    for p in (1, 2, 3, 5):
        _same(kiln.mvlgamma(_k(x), p), torch.mvlgamma(_t(x), p), rtol=1e-11)
        _same(kiln.special.multigammaln(_k(x, kiln.float32), p),
              torch.special.multigammaln(_t(x, torch.float32), p), rtol=1e-5)  # fmt: skip
    _both("mvlgamma", np.array([1, 2]), 2, rtol=1e-6)
    _grads_match(lambda a: kiln.mvlgamma(a, 3), lambda a: torch.mvlgamma(a, 3), x)
    _both_raise("mvlgamma", x, 0)
    s, q = np.array([2.0, 3.0, 1.0, 0.5, 4.5]), np.array([1.0, 2.0, 3.0, 1.0, -2.0])
    for args in ((s, q), (2.0, q), (s, 1)):
        _both("zeta", *args, rtol=1e-12, module=kiln.special)


@pytest.mark.parametrize("dtypes", DTYPES, ids=DTYPE_IDS)
def test_normal_distribution_functions(dtypes):
    kd, td = dtypes
    rtol = 1e-12 if kd == kiln.float64 else 2e-6
    x = np.concatenate([np.linspace(-45, 12, 115), [-1e5, -1.0, 0.0, math.inf, -math.inf,
                                                    math.nan]])  # fmt: skip
    _same(kiln.special.log_ndtr(_k(x, kd)), torch.special.log_ndtr(_t(x, td)),
          rtol=1e-12 if kd == kiln.float64 else 2e-5)  # torch's float32 erfc in the upper tail
    _same(kiln.special.ndtr(_k(x, kd)), torch.special.ndtr(_t(x, td)), rtol=rtol,
          atol=1e-16 if kd == kiln.float64 else 2e-7)  # torch's 1 + erf cancels in the tail
    p = np.concatenate([np.linspace(0, 1, 201), [1e-300, 1e-100, 1e-20, 1 - 1e-12, -0.5, 1.5,
                                                 math.nan]])  # fmt: skip
    if kd == kiln.float32:
        p = p[(p == 0) | (p > 1e-30)]
    _same(kiln.special.ndtri(_k(p, kd)), torch.special.ndtri(_t(p, td)), rtol=rtol,
          atol=1e-14 if kd == kiln.float64 else 1e-6)  # fmt: skip
    _grads_match(kiln.special.ndtr, torch.special.ndtr, np.linspace(-30, 10, 41))
    _grads_match(kiln.special.log_ndtr, torch.special.log_ndtr, np.linspace(-60, 10, 71))
    _grads_match(kiln.special.ndtri, torch.special.ndtri,
                 np.concatenate([np.linspace(0.01, 0.99, 33), [0.5, 1e-10, 1e-200]]), rtol=1e-6)


def test_special_namespace():
    x = np.array([-1.0, 0.0, 0.5, 2.0, math.inf, math.nan])
    for name in ("entr", "erf", "erfc", "erfinv", "expit", "exp2", "expm1", "log1p", "gammaln",
                 "digamma", "psi", "sinc", "logit"):
        values = x / 3 if name == "erfinv" else x
        _same(getattr(kiln.special, name)(_k(values)), getattr(torch.special, name)(_t(values)),
              rtol=1e-12, atol=1e-15)  # fmt: skip
    m = RNG.standard_normal((3, 4))
    for name, args, kw in (("entr", (np.array([1, 2]),), {}), ("logit", (x,), {"eps": 1e-3}),
                           ("round", (np.array([1.2345, 2.5]),), {"decimals": 2}),
                           ("logsumexp", (m, 1), {}), ("softmax", (m, 0), {})):  # fmt: skip
        _both(name, *args, rtol=1e-6, module=kiln.special, **kw)
    _same(kiln.special.log_softmax(_k(m, kiln.float32), 1, dtype=kiln.float64),
          torch.special.log_softmax(_t(m, torch.float32), 1, dtype=torch.float64), rtol=1e-6)
    a = np.array([0.0, 1.0, 0.0, 0.0, 2.0, 0.0])
    b = np.array([-1.0, -1.0, math.nan, -math.inf, 0.5, 0.3])
    for name in ("xlogy", "xlog1py"):
        _both(name, a, b, rtol=1e-14, module=kiln.special)
        _both(name, 2, np.array([1, 2]), rtol=1e-6, module=kiln.special)
    _grads_match(kiln.special.xlog1py, torch.special.xlog1py, np.array([0.0, 1.0, 2.0]),
                 np.array([0.5, 2.0, -0.5]))
    _grads_match(kiln.special.entr, torch.special.entr, np.linspace(0.1, 3, 7))
    _grads_match(lambda q: kiln.special.zeta(3.0, q), lambda q: torch.special.zeta(3.0, q),
                 np.linspace(0.5, 10, 7))


# ---------------------------------------------------------------------------------------------
# matrix functions


def _matrices(shape, dtype=np.float64, shift=0.0):
    a = RNG.standard_normal(shape)
    return (a + shift * np.eye(shape[-1]) if shift else a).astype(dtype)


@pytest.mark.parametrize("dtypes", DTYPES, ids=DTYPE_IDS)
def test_determinants_and_inverse(dtypes):
    kd, td = dtypes
    rtol = 1e-10 if kd == kiln.float64 else 1e-4
    for shape in ((4, 4), (2, 3, 5, 5), (1, 1), (0, 0), (3, 0, 0)):
        a = _matrices(shape)
        for name in ("det", "logdet", "inverse"):
            _same(getattr(kiln, name)(_k(a, kd)), getattr(torch, name)(_t(a, td)), rtol=rtol,
                  atol=rtol)  # fmt: skip
        ours, theirs = kiln.slogdet(_k(a, kd)), torch.slogdet(_t(a, td))
        _same(ours.sign, theirs.sign)
        _same(ours.logabsdet, theirs.logabsdet, rtol=rtol, atol=rtol)
    a = _matrices((4, 4))
    _same(_k(a, kd).det(), _t(a, td).det(), rtol=rtol)
    _same(_k(a, kd).inverse(), _t(a, td).inverse(), rtol=rtol, atol=rtol)
    singular = np.array([[[1.0, 2], [2, 4]], [[0, 0], [0, 0]], [[-1, 0], [0, 1]]])
    for name in ("det", "logdet"):
        _same(getattr(kiln, name)(_k(singular, kd)), getattr(torch, name)(_t(singular, td)))
    _same(kiln.slogdet(_k(singular, kd)).sign, torch.slogdet(_t(singular, td)).sign)


def test_determinant_gradients_and_errors():
    a = _matrices((2, 4, 4), shift=1.0)
    for name in ("det", "logdet", "inverse"):
        data = a @ a.transpose(0, 2, 1) + np.eye(4) if name == "logdet" else a
        _grads_match(getattr(kiln, name), getattr(torch, name), data)
    _grads_match(lambda x: kiln.slogdet(x)[1], lambda x: torch.slogdet(x)[1], a)
    for name in ("det", "slogdet", "logdet", "inverse", "matrix_exp", "matrix_power"):
        ours, theirs = getattr(kiln, name), getattr(torch, name)
        extra = (2,) if name == "matrix_power" else ()
        _raises_like(lambda o=ours, e=extra: o(_k(np.ones((2, 3))), *e),
                     lambda t=theirs, e=extra: t(torch.ones(2, 3), *e))
        _raises_like(lambda o=ours, e=extra: o(_k(np.ones(3)), *e),
                     lambda t=theirs, e=extra: t(torch.ones(3), *e))
        if name != "matrix_power":
            _raises_like(lambda o=ours: o(_k(np.ones((3, 3), np.int64))),
                         lambda t=theirs: t(torch.ones(3, 3, dtype=torch.long)))
    for data in (np.ones((3, 3)), np.stack([np.eye(3), np.ones((3, 3))])):
        _raises_like(lambda d=data: kiln.inverse(_k(d)), lambda d=data: torch.inverse(_t(d)))
    with pytest.raises(RuntimeError) as info:
        kiln.inverse(_k(np.ones((3, 3))))
    assert type(info.value).__name__ == "LinAlgError"


@pytest.mark.parametrize("dtypes", DTYPES, ids=DTYPE_IDS)
def test_matrix_power_and_exp(dtypes):
    kd, td = dtypes
    rtol = 1e-9 if kd == kiln.float64 else 2e-4
    a = _matrices((2, 4, 4), shift=2.0)
    for n in (-3, -1, 0, 1, 2, 5, 8):
        _same(kiln.matrix_power(_k(a, kd), n), torch.matrix_power(_t(a, td), n), rtol=rtol,
              atol=rtol)  # fmt: skip
    ints = np.arange(9).reshape(3, 3) - 4
    for n in (0, 1, 3):
        _same(kiln.matrix_power(_k(ints), n), torch.matrix_power(_t(ints), n))
    _both_raise("matrix_power", ints, -1)
    nilpotent = np.triu(RNG.standard_normal((5, 5)), 1)
    for m in (a, a * 0.01, a * 6, nilpotent, np.diag([1.0, -2.0, 0.5]), np.zeros((1, 1)),
              np.zeros((0, 0)), np.array([[0.0, math.pi], [-math.pi, 0.0]])):
        theirs = torch.matrix_exp(_t(m, td))
        scale = max(1.0, float(theirs.abs().max())) if theirs.numel() else 1.0
        _same(kiln.matrix_exp(_k(m, kd)), theirs, rtol=rtol, atol=rtol * scale)
    _same(_k(a, kd).matrix_exp(), torch.matrix_exp(_t(a, td)), rtol=rtol, atol=rtol)
    _same(_k(a, kd).matrix_power(3), _t(a, td).matrix_power(3), rtol=rtol, atol=rtol)


def test_matrix_power_and_exp_gradients():
    a = _matrices((2, 4, 4), shift=1.0)
    for n in (-2, 3):
        _grads_match(lambda x, n=n: kiln.matrix_power(x, n),
                     lambda x, n=n: torch.matrix_power(x, n), a)  # fmt: skip
    _grads_match(kiln.matrix_exp, torch.matrix_exp, a * 0.3)
    _grads_match(kiln.matrix_exp, torch.matrix_exp, a * 3, rtol=1e-6)


def _spd(batch, n, dtype=np.float64):
    a = RNG.standard_normal((*batch, n, n))
    return (a @ np.swapaxes(a, -1, -2) + n * np.eye(n)).astype(dtype)


@pytest.mark.parametrize("dtypes", DTYPES, ids=DTYPE_IDS)
def test_cholesky_family(dtypes):
    kd, td = dtypes
    rtol = 1e-10 if kd == kiln.float64 else 1e-4
    s = _spd((2,), 5)
    b = RNG.standard_normal((3, 2, 5, 3))
    for upper in (False, True):
        ours, theirs = kiln.cholesky(_k(s, kd), upper), torch.cholesky(_t(s, td), upper)
        _same(ours, theirs, rtol=rtol, atol=rtol)
        _same(_k(s, kd).cholesky(upper=upper), theirs, rtol=rtol, atol=rtol)
        _same(kiln.cholesky_solve(_k(b, kd), ours, upper),
              torch.cholesky_solve(_t(b, td), theirs, upper), rtol=rtol, atol=rtol)
        _same(kiln.cholesky_inverse(ours, upper), torch.cholesky_inverse(theirs, upper),
              rtol=rtol, atol=rtol)
        _same(_k(b, kd).cholesky_solve(ours, upper), _t(b, td).cholesky_solve(theirs, upper),
              rtol=rtol, atol=rtol)
    lopsided = np.tril(s) + np.triu(RNG.standard_normal((5, 5)), 1)  # only a triangle is read
    _same(kiln.cholesky(_k(lopsided, kd)), torch.cholesky(_t(lopsided, td)), rtol=rtol, atol=rtol)
    _same(kiln.cholesky(_k(np.zeros((0, 0)), kd)), torch.cholesky(torch.zeros(0, 0, dtype=td)))


def test_cholesky_gradients_and_errors():
    s = _spd((2,), 4)
    factor = np.linalg.cholesky(s)
    garbage = factor + np.triu(RNG.standard_normal((4, 4)), 1)  # torch's gradient is dense
    b = RNG.standard_normal((2, 4, 3))
    for upper in (False, True):
        f = np.swapaxes(garbage, -1, -2) if upper else garbage
        _grads_match(lambda x, u=upper: kiln.cholesky(x, u), lambda x, u=upper: torch.cholesky(
            x, u), s)
        _grads_match(lambda x, y, u=upper: kiln.cholesky_solve(x, y, u),
                     lambda x, y, u=upper: torch.cholesky_solve(x, y, u), b, f)
        _grads_match(lambda y, u=upper: kiln.cholesky_inverse(y, u),
                     lambda y, u=upper: torch.cholesky_inverse(y, u), f)
    # the deprecated torch.cholesky words its error as linalg.cholesky's without the prefix
    for data in (np.array([[1.0, 2.0], [2.0, 1.0]]), np.stack([np.eye(2), [[1.0, 2], [2, 1]]])):
        _raises_like(lambda d=data: kiln.cholesky(_k(d)), lambda d=data: torch.cholesky(_t(d)),
                     message=False)
        with pytest.raises(kiln.linalg.LinAlgError, match="leading minor of order 2 is not"):
            kiln.cholesky(_k(data))
    _both_raise("cholesky", np.ones((2, 3)))
    _both_raise("cholesky", np.ones((2, 2), np.int64))
    eye = np.eye(3)
    for bb, ll in ((np.ones((3, 2)), np.ones((2, 2))), (np.ones((3, 2)), np.ones((2, 3))),
                   (np.ones(3), eye), (np.ones((3, 2), np.float32), eye)):
        _raises_like(lambda x=bb, y=ll: kiln.cholesky_solve(_k(x), _k(y)),
                     lambda x=bb, y=ll: torch.cholesky_solve(_t(x), _t(y)))
    for data in (np.ones((2, 3)), np.ones(3), np.ones((3, 3), np.int64)):
        _raises_like(lambda d=data: kiln.cholesky_inverse(_k(d)),
                     lambda d=data: torch.cholesky_inverse(_t(d)))


@pytest.mark.parametrize("dtypes", DTYPES, ids=DTYPE_IDS)
def test_triangular_solve_and_lu(dtypes):
    kd, td = dtypes
    rtol = 1e-10 if kd == kiln.float64 else 1e-4
    a = _matrices((2, 4, 4), shift=3.0)
    b = RNG.standard_normal((3, 1, 4, 2))
    for upper in (True, False):
        for transpose in (True, False):
            for unit in (True, False):
                ours = kiln.triangular_solve(_k(b, kd), _k(a, kd), upper, transpose, unit)
                theirs = torch.triangular_solve(_t(b, td), _t(a, td), upper, transpose, unit)
                _same(ours.solution, theirs.solution, rtol=rtol, atol=rtol)
                _same(ours.cloned_coefficient, theirs.cloned_coefficient)
    _same(_k(b, kd).triangular_solve(_k(a, kd), upper=False)[0],
          _t(b, td).triangular_solve(_t(a, td), upper=False)[0], rtol=rtol, atol=rtol)
    for m in (_matrices((2, 4, 4)), _matrices((5, 3)), _matrices((3, 5)), np.zeros((3, 3)),
              np.array([[0.0, 1.0], [1.0, 0.0]])):
        packed, pivots = kiln.lu(_k(m, kd))
        tpacked, tpivots = torch.lu(_t(m, td))
        _same(packed, tpacked, rtol=rtol, atol=rtol)
        _same(pivots, tpivots)
        for ours, theirs in zip(kiln.lu_unpack(packed, pivots), torch.lu_unpack(tpacked, tpivots),
                                strict=True):  # fmt: skip
            _same(ours, theirs, rtol=rtol, atol=rtol)
    info = kiln.lu(_k(np.stack([np.eye(3), np.zeros((3, 3))]), kd), get_infos=True)
    _same(info.info, torch.lu(torch.stack([torch.eye(3), torch.zeros(3, 3)]).to(td),
                              get_infos=True)[2])  # fmt: skip
    packed, pivots = _k(a, kd).lu()
    _same(kiln.lu_solve(_k(b, kd), packed, pivots), torch.lu_solve(_t(b, td), *torch.lu(
        _t(a, td))), rtol=rtol, atol=rtol)


def test_triangular_solve_and_lu_gradients_and_errors():
    a = _matrices((2, 4, 4), shift=3.0)
    b = RNG.standard_normal((2, 4, 3))
    for upper in (True, False):
        for transpose in (True, False):
            for unit in (True, False):
                _grads_match(lambda x, y, f=(upper, transpose, unit): kiln.triangular_solve(
                    x, y, *f)[0], lambda x, y, f=(upper, transpose, unit): torch.triangular_solve(
                    x, y, *f)[0], b, a)  # fmt: skip
    _grads_match(lambda x: kiln.lu(x)[0], lambda x: torch.lu(x)[0], a)
    packed, pivots = torch.lu(_t(a))
    _grads_match(lambda x, y: kiln.lu_solve(x, y, _k(pivots.numpy())),
                 lambda x, y: torch.lu_solve(x, y, pivots), b, packed.numpy())
    eye = np.eye(3)
    for bb, aa in ((np.ones((3, 2)), np.ones((2, 2))), (np.ones(3), eye),
                   (np.ones((3, 2)), np.ones(3)), (np.ones((3, 2)), np.ones((3, 3), np.float32)),
                   (np.ones((3, 2), np.int64), np.ones((3, 3), np.int64))):  # fmt: skip
        _raises_like(lambda x=bb, y=aa: kiln.triangular_solve(_k(x), _k(y)),
                     lambda x=bb, y=aa: torch.triangular_solve(_t(x), _t(y)))
    _both_raise("lu", np.ones(3))
    _both_raise("lu", eye, pivot=False)
    lu_args = torch.lu(_t(eye))
    for bb in (np.ones(3), np.ones((2, 2))):
        _raises_like(lambda x=bb: kiln.lu_solve(_k(x), *[_k(v.numpy()) for v in lu_args]),
                     lambda x=bb: torch.lu_solve(_t(x), *lu_args))


@pytest.mark.parametrize("dtypes", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("shape", [(5, 3), (3, 5), (2, 4, 4), (3, 1), (0, 2)])
def test_qr_svd_pinverse(dtypes, shape):
    kd, td = dtypes
    rtol = 1e-10 if kd == kiln.float64 else 2e-4
    a = _matrices(shape)
    for some in (True, False):
        q, r = kiln.qr(_k(a, kd), some)
        tq, tr = torch.qr(_t(a, td), some)
        _same(q, tq, rtol=rtol, atol=rtol)  # LAPACK's reflectors: the same signs
        _same(r, tr, rtol=rtol, atol=rtol)
        u, s, v = kiln.svd(_k(a, kd), some)
        tu, ts, tv = torch.svd(_t(a, td), some)
        _same(s, ts, rtol=rtol, atol=rtol)
        assert tuple(u.shape) == tuple(tu.shape) and tuple(v.shape) == tuple(tv.shape)
        k = s.shape[-1]
        un, vn = _np(u), _np(v)  # vectors are unique up to sign: check what defines them
        rebuilt = (un[..., :k] * _np(s)[..., None, :]) @ np.swapaxes(vn[..., :k], -1, -2)
        np.testing.assert_allclose(rebuilt, a, atol=10 * rtol)
        for m in (un, vn):
            np.testing.assert_allclose(np.swapaxes(m, -1, -2) @ m, np.broadcast_to(
                np.eye(m.shape[-1]), m.shape[:-2] + (m.shape[-1],) * 2), atol=10 * rtol)
    u, s, v = kiln.svd(_k(a, kd), compute_uv=False)
    tu, ts, tv = torch.svd(_t(a, td), compute_uv=False)
    _same(u, tu)
    _same(v, tv)
    _same(s, ts, rtol=rtol, atol=rtol)
    _same(kiln.pinverse(_k(a, kd)), torch.pinverse(_t(a, td)), rtol=rtol * 10, atol=rtol * 10)
    _same(_k(a, kd).svd()[1], _t(a, td).svd()[1], rtol=rtol, atol=rtol)
    _same(_k(a, kd).qr()[1], _t(a, td).qr()[1], rtol=rtol, atol=rtol)
    _same(_k(a, kd).pinverse(), _t(a, td).pinverse(), rtol=rtol * 10, atol=rtol * 10)


def test_svd_rank_deficient_and_gradients():
    low_rank = RNG.standard_normal((6, 2)) @ RNG.standard_normal((2, 4))
    for some in (True, False):
        u, s, v = kiln.svd(_k(low_rank), some)
        _same(s, torch.svd(_t(low_rank), some)[1], atol=1e-12)
        for m in (_np(u), _np(v)):  # a complete orthonormal basis despite the zero values
            np.testing.assert_allclose(m.T @ m, np.eye(m.shape[1]), atol=1e-12)
    _same(kiln.pinverse(_k(low_rank)), torch.pinverse(_t(low_rank)), atol=1e-10)
    a = _matrices((2, 5, 3))
    for m in (a, np.swapaxes(a, -1, -2)):
        _grads_match(lambda x: kiln.svd(x)[1], lambda x: torch.svd(x)[1], m)
        _grads_match(lambda x: (lambda u, s, v: u @ v.mT)(*kiln.svd(x)),
                     lambda x: (lambda u, s, v: u @ v.mT)(*torch.svd(x)), m)  # sign-free
        _grads_match(lambda x: kiln.qr(x)[0], lambda x: torch.qr(x)[0], m)
        _grads_match(lambda x: kiln.qr(x)[1], lambda x: torch.qr(x)[1], m)
        _grads_match(kiln.pinverse, torch.pinverse, m)
    for name in ("svd", "qr"):
        _raises_like(lambda n=name: getattr(kiln, n)(_k(np.ones(3))),
                     lambda n=name: getattr(torch, n)(torch.ones(3)))
        _raises_like(lambda n=name: getattr(kiln, n)(_k(np.ones((3, 2), np.int64))),
                     lambda n=name: getattr(torch, n)(torch.ones(3, 2, dtype=torch.long)))
    for data in (np.ones(3), np.ones((2, 3), np.int64)):
        _raises_like(lambda d=data: kiln.pinverse(_k(d)), lambda d=data: torch.pinverse(_t(d)))
    _both_raise("lstsq", np.ones((3, 2)), np.ones((3, 3)))


@pytest.mark.parametrize("dtypes", DTYPES, ids=DTYPE_IDS)
def test_addbmm_addr_chain_matmul(dtypes):
    kd, td = dtypes
    rtol = 1e-12 if kd == kiln.float64 else 1e-5
    inp, b1, b2 = RNG.standard_normal((4, 3)), RNG.standard_normal((2, 4, 5)), RNG.standard_normal(
        (2, 5, 3))  # fmt: skip
    for kw in ({}, {"beta": 0.5, "alpha": 2}, {"beta": 0}):
        _same(kiln.addbmm(_k(inp, kd), _k(b1, kd), _k(b2, kd), **kw),
              torch.addbmm(_t(inp, td), _t(b1, td), _t(b2, td), **kw), rtol=rtol, atol=rtol)
        _same(kiln.addbmm(_k(inp[:1], kd), _k(b1, kd), _k(b2, kd), **kw),
              torch.addbmm(_t(inp[:1], td), _t(b1, td), _t(b2, td), **kw), rtol=rtol, atol=rtol)
        _same(kiln.addr(_k(inp, kd), _k(b1[0, :, 0], kd), _k(b2[0, 0], kd), **kw),
              torch.addr(_t(inp, td), _t(b1[0, :, 0], td), _t(b2[0, 0], td), **kw), rtol=rtol)
    nan = np.full((4, 3), math.nan)
    _same(kiln.addbmm(_k(nan, kd), _k(b1, kd), _k(b2, kd), beta=0),
          torch.addbmm(_t(nan, td), _t(b1, td), _t(b2, td), beta=0), rtol=rtol, atol=rtol)
    ones = [np.ones(s, np.int64) for s in ((2, 2), (3, 2, 4), (3, 4, 2))]
    _both("addbmm", *ones, alpha=2.5, beta=3)
    for vec_dtype in (np.int64, np.float64, np.bool_):
        _both("addr", np.ones((2, 3), vec_dtype), np.ones(2, vec_dtype), np.ones(3, vec_dtype))
    _both("addr", np.ones((2, 3), np.int64), np.ones(2), np.ones(3, np.int64))
    ms = [RNG.standard_normal(s) for s in ((3, 4), (4, 6), (6, 2), (2, 5))]
    _same(kiln.chain_matmul(*[_k(m, kd) for m in ms]), torch.chain_matmul(*[_t(m, td) for m in ms]),
          rtol=rtol * 10, atol=rtol * 10)  # fmt: skip
    _same(kiln.chain_matmul(_k(ms[0], kd)), torch.chain_matmul(_t(ms[0], td)))
    x = _k(inp, kd).clone()  # not numpy's memory, which torch reads below
    assert x.addbmm_(_k(b1, kd), _k(b2, kd)) is x
    _same(x, torch.addbmm(_t(inp, td), _t(b1, td), _t(b2, td)), rtol=rtol, atol=rtol)
    y = _k(inp, kd).clone()
    assert y.addr_(_k(b1[0, :, 0], kd), _k(b2[0, 0], kd), alpha=3) is y
    _same(y, torch.addr(_t(inp, td), _t(b1[0, :, 0], td), _t(b2[0, 0], td), alpha=3), rtol=rtol)


def test_product_gradients_and_errors():
    inp, b1, b2 = (RNG.standard_normal(s) for s in ((4, 3), (2, 4, 5), (2, 5, 3)))
    _grads_match(lambda i, a, b: kiln.addbmm(i, a, b, beta=0.5, alpha=2),
                 lambda i, a, b: torch.addbmm(i, a, b, beta=0.5, alpha=2), inp, b1, b2)
    _grads_match(lambda i, a, b: kiln.addr(i, a, b, beta=0.5, alpha=2),
                 lambda i, a, b: torch.addr(i, a, b, beta=0.5, alpha=2), inp, b1[0, :, 0],
                 b2[0, 0])  # fmt: skip
    _grads_match(lambda a, b, c: kiln.chain_matmul(a, b, c),
                 lambda a, b, c: torch.chain_matmul(a, b, c), b1[0], b2[0], inp.T)
    f32 = np.float32
    for shapes in (((2, 2), (2, 4), (3, 4, 2)), ((2, 2), (3, 2, 4), (3, 5, 2)),
                   ((2, 2), (3, 2, 4), (2, 4, 2)), ((3, 2), (3, 2, 4), (3, 4, 2))):
        args = [np.ones(s) for s in shapes]
        _both_raise("addbmm", *args)
    args = [np.ones((2, 2), f32), np.ones((3, 2, 4)), np.ones((3, 4, 2))]
    _both_raise("addbmm", *args)
    for shapes in (((2, 3), (2, 1), (3,)), ((2, 3), (2,), (3, 1)), ((2, 3), (2,), (4,))):
        args = [np.ones(s) for s in shapes]
        _both_raise("addr", *args)
    ints = [np.ones(s, np.int64) for s in ((2, 3), (2,), (3,))]
    _both_raise("addr", *ints, beta=0.5)
    _raises_like(kiln.chain_matmul, torch.chain_matmul)
    _both_raise("chain_matmul", np.ones((2, 3)), np.ones(3))
    _both_raise("chain_matmul", np.ones((2, 3)), np.ones((4, 2)))


# ---------------------------------------------------------------------------------------------
# compiled


def test_sync_free_ops_compile_into_one_part():
    x = _k(_matrices((4, 4), shift=3.0))
    m = _k(np.abs(RNG.standard_normal((4, 4))) + 0.5)
    cases = [
        (lambda a: kiln.trapezoid(a) + kiln.cumulative_trapezoid(a, dim=0).sum(0), m),
        (lambda a: kiln.special.i0e(a) + kiln.special.i1(a) + kiln.i0(a), x),
        (lambda a: kiln.special.ndtri(kiln.special.ndtr(a)) + kiln.special.log_ndtr(a), x),
        (lambda a: kiln.polygamma(1, a) + kiln.mvlgamma(a, 2), m + 1),
        (lambda a: kiln.ldexp(*kiln.frexp(a)), x),
        (lambda a: kiln.det(a) + kiln.slogdet(a)[1], x),
        (lambda a: kiln.qr(a)[0] @ kiln.qr(a)[1], x),
        (lambda a: kiln.triangular_solve(a, a)[0], x),
        (lambda a: kiln.lu_solve(a, *kiln.lu(a)), x),
        (lambda a: kiln.matrix_power(a, 3) + kiln.addr(a, a[0], a[1]), x),
        (lambda a: kiln.vander(a[0]) + kiln.addbmm(a, a.unsqueeze(0), a.unsqueeze(0)), x),
    ]
    for fn, arg in cases:
        np.testing.assert_allclose(_np(_compiled_alone(fn, arg)), _np(fn(arg)), rtol=1e-9,
                                   atol=1e-12)  # fmt: skip
