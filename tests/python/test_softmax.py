"""softmax / log_softmax (kiln.*, Tensor.*, kiln.nn.functional.*) and F.softmin against PyTorch:
dims, dtype=, layouts, large and infinite inputs, the legacy implicit dim, 0-d and zero-size."""

import pytest
import torch
import torch.nn.functional as TF
from conftest import DTYPES, FLOAT_DTYPES, assert_close, make, to_kiln
from test_reduce import NAN, check, layouts

import kiln
import kiln.nn.functional as KF

INF = float("inf")


def nnf(m):
    """The nn.functional module of torch or kiln."""
    return TF if m is torch else KF


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
def test_softmax(op, dtype, dim):
    for t, k in layouts((3, 4, 5), dtype):
        check(lambda m, x: getattr(m, op)(x, dim), t, k, upcast=True)
        check(lambda m, x: getattr(x, op)(dim), t, k, upcast=True)
        check(lambda m, x: getattr(nnf(m), op)(x, dim=dim), t, k, upcast=True)
        check(lambda m, x: getattr(m, op)(x, dim, dtype=m.float64), t, k)
        check(lambda m, x: getattr(nnf(m), op)(x, dim, dtype=m.float32), t, k)


@pytest.mark.parametrize("op", ["softmax", "log_softmax", "softmin"])
def test_functional_forms_and_legacy_implicit_dim(op):
    for shape in [(5,), (3, 4), (2, 3, 4), (2, 3, 4, 5)]:
        t, k = make(shape, "float32")
        with pytest.warns(UserWarning, match="Implicit dimension choice"):
            got = getattr(KF, op)(k)
        with pytest.warns(UserWarning):
            want = getattr(TF, op)(t)
        assert_close(got, want)
        check(lambda m, x: getattr(nnf(m), op)(x, 1 if len(shape) > 1 else 0), t, k)
        check(lambda m, x: getattr(nnf(m), op)(x, -1, 3, m.float64), t, k)


def test_softmax_is_stable_for_large_and_infinite_inputs():
    t = torch.tensor(
        [
            [1000.0, 1000.0, -1000.0, 0.0],
            [-INF, 0.0, 1.0, -INF],
            [-INF, -INF, -INF, -INF],
            [INF, 1.0, 2.0, 3.0],
            [NAN, 1.0, 2.0, 3.0],
            [-1e30, 1e30, 0.0, 5.0],
        ]
    )
    for op in ("softmax", "log_softmax"):
        for dim in (0, 1):
            check(lambda m, x: getattr(m, op)(x, dim), t, to_kiln(t))


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_softmax_long_rows_and_columns(dtype):
    for shape, dim in [((2, 50000), 1), ((3000, 7), 0), ((4, 600, 300), 1)]:
        t, k = make(shape, dtype)
        check(lambda m, x: m.softmax(x, dim), t, k, upcast=True)
        check(lambda m, x: m.log_softmax(x, dim), t, k, upcast=True)
    got = kiln.softmax(k, 1).sum(1)
    assert_close(got, torch.ones(got.shape, dtype=getattr(torch, dtype)), atol=1e-2, rtol=0)


@pytest.mark.parametrize("shape", [(), (0,), (0, 3), (3, 0), (1, 1)])
def test_softmax_edge_shapes(shape):
    t, k = make(shape, "float32")
    for dim in (0, -1):
        check(lambda m, x: m.softmax(x, dim), t, k)
        check(lambda m, x: m.log_softmax(x, dim), t, k)


def test_softmax_errors():
    ki = to_kiln(torch.arange(6).reshape(2, 3))
    with pytest.raises(NotImplementedError, match="int64"):
        kiln.softmax(ki, 1)
    with pytest.raises(NotImplementedError, match="int32"):
        KF.log_softmax(ki, 1, dtype=kiln.int32)
    want = torch.arange(6).reshape(2, 3).softmax(1, dtype=torch.float32)
    assert_close(ki.softmax(1, dtype=kiln.float32), want)
    _, k = make((2, 3), "float32")
    with pytest.raises(IndexError, match="out of range"):
        k.softmax(2)
    with pytest.raises(TypeError):
        kiln.softmax(k)  # dim is required outside nn.functional, as in torch
