"""Scans against PyTorch: cumsum, cumprod (dtype=), cummax/cummin (values and indices, ties and
NaN), logcumsumexp; every dtype, dims, layouts, 0-d and zero-size inputs, errors."""

import pytest
import torch
from conftest import DTYPES, make, to_kiln
from test_reduce import NAN, check, layouts

import kiln

INF = float("inf")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_cumsum_cumprod(dtype, dim):
    for t, k in layouts((3, 4, 5), dtype):
        check(lambda m, x: m.cumsum(x, dim), t, k, upcast=True)
        check(lambda m, x: x.cumsum(dim=dim), t, k, upcast=True)
    # Products of values near 1 stay finite along the dim.
    t, k = make((3, 4, 5), dtype, low=0.5, high=1.5) if dtype != "bool" else make((3, 4, 5), dtype)
    check(lambda m, x: m.cumprod(x, dim), t, k, upcast=True)
    check(lambda m, x: x.cumprod(dim, dtype=m.float64), t, k)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("dim", [0, -1])
def test_cummax_cummin_indices_follow_torch(dtype, dim):
    # Integer and bool data is full of ties: torch's rule picks the latest equal element.
    for t, k in layouts((5, 6), dtype):
        for op in ("cummax", "cummin"):
            got = check(lambda m, x: getattr(m, op)(x, dim), t, k)
            assert got[0].values.dtype == k.dtype and got[0].indices.dtype == kiln.int64
            check(lambda m, x: getattr(x, op)(dim=dim), t, k)


def test_cummax_cummin_nan_sticks():
    t = torch.tensor([[1.0, 3.0, 3.0, NAN, 2.0, NAN, 5.0], [NAN, 0.0, -1.0, 4.0, 4.0, 9.0, -2.0]])
    for op in ("cummax", "cummin"):
        check(lambda m, x: getattr(m, op)(x, 1), t, to_kiln(t))
        check(lambda m, x: getattr(m, op)(x, 0), t, to_kiln(t))


@pytest.mark.parametrize("dtype", DTYPES)
def test_logcumsumexp(dtype):
    for t, k in layouts((4, 5), dtype):
        check(lambda m, x: m.logcumsumexp(x, 1), t, k, upcast=True)
        check(lambda m, x: x.logcumsumexp(0), t, k, upcast=True)
    special = torch.tensor([[-INF, -INF, 0.0, INF, 1.0], [1000.0, 1000.0, -1000.0, NAN, 0.0]])
    check(lambda m, x: m.logcumsumexp(x, 1), special, to_kiln(special))


def test_float32_cumsum_accumulates_in_double():
    g = torch.Generator().manual_seed(0)
    t = torch.rand(3, 100_000, generator=g) + 100.0
    want = t.double().cumsum(1).float()
    got = kiln.cumsum(to_kiln(t), 1)
    torch.testing.assert_close(torch.from_numpy(got.numpy()), want, rtol=1e-6, atol=0)


@pytest.mark.parametrize("shape", [(), (0,), (0, 3), (3, 0), (2, 1, 3)])
def test_scan_edge_shapes(shape):
    t, k = make(shape, "float32")
    for dim in (0, -1):
        for op in ("cumsum", "cumprod", "cummax", "cummin", "logcumsumexp"):
            check(lambda m, x: getattr(m, op)(x, dim), t, k)


def test_scan_parallel_paths():
    for shape, dim in [((2000, 40), 0), ((40, 2000), 1), ((7, 300, 9), 1)]:
        t, k = make(shape, "float64")
        check(lambda m, x: m.cumsum(x, dim), t, k)
        check(lambda m, x: m.cummax(x, dim), t, k)


def test_scan_errors():
    _, k = make((2, 3), "float32")
    with pytest.raises(IndexError, match="out of range"):
        k.cumsum(2)
    with pytest.raises(TypeError):
        kiln.cumsum(k)  # dim is required, as in torch
    with pytest.raises(NotImplementedError, match="int64"):
        kiln.logcumsumexp(to_kiln(torch.arange(3)), 0)
