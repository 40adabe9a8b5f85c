"""Activation functions: kiln.<name> and kiln.nn.functional.<name> against torch's."""

import pytest
import torch
import torch.nn.functional as TF
from conftest import DTYPES, FLOAT_DTYPES, assert_close, make, to_kiln

import kiln
import kiln.nn.functional as F


def mirror(kfn, tfn, kargs, targs):
    """kfn(*kargs) must match tfn(*targs), or raise the same exception type torch raises."""
    try:
        expected = tfn(*targs)
    except Exception as e:
        with pytest.raises(type(e)):
            kfn(*kargs)
        return None
    got = kfn(*kargs)
    assert_close(got, expected)
    return got


def specials(dtype):
    vals = [float("nan"), float("inf"), -float("inf"), 0.0, -0.0, 0.5, -0.5, 3.0, -3.0, 2.9,
            -2.9, 6.5, 25.0, -25.0, 100.0, -100.0]
    t = torch.tensor(vals, dtype=getattr(torch, dtype))
    return t, to_kiln(t)


# name -> list of keyword-argument sets to try (each a dict).
ACTIVATIONS = {
    "relu": [{}],
    "relu6": [{}],
    "gelu": [{}, {"approximate": "tanh"}],
    "silu": [{}],
    "softplus": [{}, {"beta": 2.0, "threshold": 5.0}, {"beta": 0.5}],
    "leaky_relu": [{}, {"negative_slope": 0.2}],
    "elu": [{}, {"alpha": 0.5}],
    "selu": [{}],
    "celu": [{}, {"alpha": 2.0}],
    "hardtanh": [{}, {"min_val": -2.0, "max_val": 0.5}, {"min_val": 0, "max_val": 3}],
    "hardsigmoid": [{}],
    "hardswish": [{}],
    "mish": [{}],
    "logsigmoid": [{}],
    "softsign": [{}],
    "tanhshrink": [{}],
    "threshold": [{"threshold": 0.5, "value": -7.0}, {"threshold": 1, "value": 2}],
    "hardshrink": [{}, {"lambd": 1.0}],
    "softshrink": [{}, {"lambd": 1.0}],
    "sigmoid": [{}],
    "tanh": [{}],
}
CASES = [(name, i) for name, kws in ACTIVATIONS.items() for i in range(len(kws))]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", CASES, ids=[f"{n}-{i}" for n, i in CASES])
def test_functional_matches_torch(case, dtype):
    name, i = case
    kw = ACTIVATIONS[name][i]
    tt, kt = make((3, 7), dtype)
    kfn = lambda a: getattr(F, name)(a, **kw)
    tfn = lambda a: getattr(TF, name)(a, **kw)
    mirror(kfn, tfn, (kt,), (tt,))
    mirror(kfn, tfn, (kt.t(),), (tt.t(),))
    if dtype in FLOAT_DTYPES:
        ts, ks = specials(dtype)
        if name == "gelu" and not kw:
            # torch's vectorized float32 erf gives gelu(inf) = nan; kiln returns the limit, inf.
            ts = ts[~ts.isinf()]
            ks = to_kiln(ts)
        mirror(kfn, tfn, (ks,), (ts,))


@pytest.mark.parametrize("name", [n for n in ACTIVATIONS if n not in ("sigmoid", "tanh")])
def test_functional_zero_size_and_0d(name):
    kw = ACTIVATIONS[name][0]
    kfn = lambda a: getattr(F, name)(a, **kw)
    tfn = lambda a: getattr(TF, name)(a, **kw)
    for shape in [(0, 4), (), (2, 0, 3)]:
        tt, kt = make(shape, "float32")
        mirror(kfn, tfn, (kt,), (tt,))
    tl, kl = make((300, 257), "bfloat16")
    mirror(kfn, tfn, (kl,), (tl,))


INPLACE = ["relu", "relu6", "silu", "selu", "hardsigmoid", "hardswish", "mish", "elu", "celu",
           "leaky_relu", "hardtanh", "threshold"]


@pytest.mark.parametrize("dtype", ["float32", "float16", "int32"])
@pytest.mark.parametrize("name", INPLACE)
def test_inplace_flag_writes_the_input(name, dtype):
    kw = dict(ACTIVATIONS[name][0])
    tt, kt = make((4, 5), dtype)
    try:
        expected = getattr(TF, name)(tt.clone(), inplace=True, **kw)
    except Exception as e:
        with pytest.raises(type(e)):
            getattr(F, name)(kt, inplace=True, **kw)
        return
    view = kt.t()  # in-place through a non-contiguous view must write the base
    out = getattr(F, name)(view, inplace=True, **kw)
    assert out is view
    assert_close(kt, expected)
    tt2, kt2 = make((4, 5), dtype)
    assert_close(getattr(F, name)(kt2, inplace=False, **kw), expected)
    assert_close(kt2, tt2)  # untouched


@pytest.mark.parametrize("name", ["relu_", "elu_", "selu_", "celu_", "leaky_relu_", "hardtanh_",
                                  "threshold_"])
def test_trailing_underscore_forms(name):
    base = name[:-1]
    kw = ACTIVATIONS[base][0]
    tt, kt = make((3, 4), "float64")
    r = getattr(F, name)(kt, **kw)
    assert r is kt
    assert_close(kt, getattr(TF, name)(tt, **kw))


def test_tensor_methods():
    tt, kt = make((3, 4), "float32")
    assert_close(kt.relu(), tt.relu())
    assert_close(kt.sigmoid(), tt.sigmoid())
    assert_close(kt.tanh(), tt.tanh())
    assert_close(kt.hardshrink(0.7), tt.hardshrink(0.7))
    k, t = kt.clone(), tt.clone()
    assert k.relu_() is k
    t.relu_()
    assert_close(k, t)
    assert_close(kiln.relu_(kt.clone()), torch.relu_(tt.clone()))


def test_activation_argument_errors():
    _, kt = make((3,), "float32")
    with pytest.raises(RuntimeError, match="approximate argument must be either 'none' or 'tanh'"):
        F.gelu(kt, approximate="fast")
    with pytest.raises(ValueError, match="min_val .* cannot be greater than max_val"):
        F.hardtanh(kt, 2.0, 1.0)
    with pytest.raises(RuntimeError, match="alpha cannot be 0 for CELU"):
        F.celu(kt, alpha=0.0)
    with pytest.raises(RuntimeError, match="softshrink: lambda must be greater or equal to 0"):
        F.softshrink(kt, -1.0)
    with pytest.raises(RuntimeError, match="relu: boolean inputs are not supported"):
        F.relu(make((2,), "bool")[1])
    with pytest.raises(NotImplementedError, match="gelu: not implemented for dtype int64"):
        F.gelu(make((2,), "int64")[1])
    with pytest.raises(RuntimeError, match="unsigned type .* negative limits"):
        F.hardtanh(make((2,), "uint8")[1])
    with pytest.raises(RuntimeError, match="cannot be converted to type uint8"):
        F.threshold(make((2,), "uint8")[1], 1, 300)
    with pytest.raises(TypeError):
        F.relu([1.0, 2.0])


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("wshape", [(1,), (4,)])
def test_prelu(dtype, wshape):
    tt, kt = make((2, 4, 3), dtype)
    tw, kw = make(wshape, dtype, seed=3, low=0, high=0.5)
    mirror(F.prelu, TF.prelu, (kt, kw), (tt, tw))
    t1, k1 = make((5,), dtype)
    tw1, kw1 = make((1,), dtype, seed=4)
    mirror(F.prelu, TF.prelu, (k1, kw1), (t1, tw1))


def test_prelu_errors():
    _, kt = make((2, 4), "float32")
    _, kw = make((3,), "float32")
    with pytest.raises(RuntimeError, match="parameter numbers = 3 and channel size = 4"):
        F.prelu(kt, kw)
    with pytest.raises(RuntimeError, match="type promoting not supported"):
        F.prelu(kt, make((1,), "float64")[1])


@pytest.mark.parametrize("dim", [-1, 0, 1])
@pytest.mark.parametrize("dtype", DTYPES)
def test_glu(dtype, dim):
    tt, kt = make((4, 6, 2), dtype)
    mirror(lambda a: F.glu(a, dim), lambda a: TF.glu(a, dim), (kt,), (tt,))


def test_glu_errors():
    _, kt = make((3, 5), "float32")
    with pytest.raises(RuntimeError, match="halving dimension must be even"):
        F.glu(kt)
    with pytest.raises(RuntimeError, match="scalars"):
        F.glu(make((), "float32")[1])


def test_rrelu_eval_is_torchs_and_training_draws_slopes_in_range():
    tt, kt = make((6, 5), "float32")
    assert_close(F.rrelu(kt), TF.rrelu(tt))
    assert_close(kiln.nn.RReLU(0.1, 0.3).eval()(kt), torch.nn.RReLU(0.1, 0.3).eval()(tt))
    kiln.manual_seed(0)
    y = F.rrelu(kt, 0.1, 0.3, training=True)
    x = kt.numpy()
    ratio = y.numpy()[x < 0] / x[x < 0]
    assert ((ratio >= 0.1 - 1e-6) & (ratio <= 0.3 + 1e-6)).all() and len(set(ratio.tolist())) > 1
    assert (y.numpy()[x >= 0] == x[x >= 0]).all()
    k = kt.clone()
    assert F.rrelu_(k, training=True) is k
    assert repr(kiln.nn.RReLU(0.1, 0.3)) == "RReLU(lower=0.1, upper=0.3)"
