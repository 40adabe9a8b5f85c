"""Sorting and selection against PyTorch: sort/argsort/msort, topk, kthvalue, median/nanmedian,
mode, unique/unique_consecutive. Values must match exactly; indices must match where torch is
deterministic (stable sort, mode) and otherwise point at the returned values."""

import numpy as np
import pytest
import torch
from conftest import DTYPES, assert_close, make, to_kiln, to_torch
from test_reduce import NAN, check, layouts

import kiln


def assert_indices_point_at_values(t, result, dim):
    """result = (values, indices) from kiln: t gathered at the indices gives the values."""
    values, indices = result
    idx = to_torch(indices)
    src = t.reshape(1) if t.dim() == 0 else t
    full = idx.reshape(1) if t.dim() == 0 else idx
    if full.dim() < src.dim():  # a reduced result without keepdim
        full = full.unsqueeze(dim)
    gathered = torch.gather(src, dim, full)
    assert_close(values, gathered.reshape(idx.shape))


def check_selection(fn, t, k, dim, sort_values=False):
    """Compares values with torch and checks indices point at them (torch's tie order differs).
    With sort_values, values are compared after sorting along dim (torch leaves them unsorted).
    torch runs on a contiguous copy: its median reads expanded (stride-0) inputs wrongly."""
    t = t.contiguous()
    expected = fn(torch, t)
    got = fn(kiln, k)
    assert type(got).__name__ == type(expected).__name__
    assert got.indices.dtype == kiln.int64
    if sort_values:
        assert_close(kiln.sort(got.values, dim).values, expected.values.sort(dim).values)
    else:
        assert_close(got.values, expected.values)
    assert_indices_point_at_values(t, got, dim)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize("descending", [False, True])
def test_sort(dtype, dim, descending):
    for t, k in layouts((4, 6, 5), dtype):
        # Stable sorts are deterministic: indices must match torch exactly.
        check(lambda m, x: m.sort(x, stable=True, dim=dim, descending=descending), t, k)
        check(lambda m, x: x.sort(stable=True, dim=dim, descending=descending), t, k)
        check(lambda m, x: m.argsort(x, stable=True, dim=dim, descending=descending), t, k)
        got = kiln.sort(k, dim, descending)
        want = torch.sort(t, dim, descending)
        assert_close(got.values, want.values)
        assert_indices_point_at_values(t, got, dim)
        perm = to_torch(got.indices).sort(dim).values
        assert torch.equal(perm, torch.arange(t.shape[dim]).view(
            [-1 if d == dim % 3 else 1 for d in range(3)]).expand_as(perm))
    check(lambda m, x: m.msort(x), t, k)


def test_sort_orders_nan_like_torch():
    t = torch.tensor([[3.0, NAN, -1.0, NAN, 2.0, float("inf"), -float("inf")]])
    for descending in (False, True):
        check(lambda m, x: m.sort(x, stable=True, descending=descending), t, to_kiln(t))
    check(lambda m, x: m.topk(x, 3), t, to_kiln(t))
    check(lambda m, x: m.topk(x, 3, largest=False), t, to_kiln(t))
    check(lambda m, x: m.kthvalue(x, 7), t, to_kiln(t))


@pytest.mark.parametrize("shape", [(), (0,), (3, 0), (0, 4), (1,)])
def test_sort_edge_shapes(shape):
    t, k = make(shape, "float32")
    check(lambda m, x: m.sort(x), t, k)
    check(lambda m, x: m.sort(x, 0, True), t, k)
    check(lambda m, x: m.argsort(x, 0), t, k)
    check(lambda m, x: m.topk(x, 0, 0), t, k)
    if t.numel():
        check(lambda m, x: m.topk(x, 1, 0), t, k)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("dim", [0, -1])
@pytest.mark.parametrize("largest", [True, False])
def test_topk(dtype, dim, largest):
    for t, k in layouts((6, 7), dtype):
        if dtype == "bool":
            check(lambda m, x: m.topk(x, 2, dim), t, k)  # torch rejects bool on CPU
            continue
        for n in (1, 3, t.shape[dim]):
            check_selection(lambda m, x: m.topk(x, n, dim, largest), t, k, dim)
            check_selection(lambda m, x: x.topk(n, dim=dim, largest=largest, sorted=False), t, k,
                            dim, sort_values=True)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("dim", [0, -1])
def test_kthvalue(dtype, dim):
    for t, k in layouts((5, 6), dtype):
        if dtype == "bool":
            check(lambda m, x: m.kthvalue(x, 1, dim), t, k)
            continue
        for n in (1, 3, t.shape[dim]):
            check_selection(lambda m, x: m.kthvalue(x, n, dim), t, k, dim)
        got = check(lambda m, x: x.kthvalue(2, dim, keepdim=True).values, t, k)
        assert got is not None


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", ["median", "nanmedian"])
def test_median(dtype, op):
    for t, k in layouts((5, 6), dtype):
        check(lambda m, x: getattr(m, op)(x), t, k)
        if dtype == "bool":
            check(lambda m, x: getattr(m, op)(x, 0), t, k)
            continue
        for dim in (0, -1):
            check_selection(lambda m, x: getattr(m, op)(x, dim), t, k, dim)
            check_selection(lambda m, x: getattr(x, op)(dim=dim, keepdim=True), t, k, dim)


def test_median_nan_handling():
    t = torch.tensor([[1.0, NAN, 3.0, NAN], [4.0, 2.0, 0.5, 1.0], [NAN, 5.0, NAN, 1.0]])
    for op in ("median", "nanmedian"):
        check(lambda m, x: getattr(m, op)(x, 1), t, to_kiln(t))
        check(lambda m, x: getattr(m, op)(x), t, to_kiln(t))
        check(lambda m, x: getattr(m, op)(x[1:2]), t, to_kiln(t))
    # An all-NaN line: the value is NaN; torch's index there is an implementation detail.
    allnan = torch.full((2, 3), NAN)
    for op in ("median", "nanmedian"):
        check_selection(lambda m, x: getattr(m, op)(x, 1), allnan, to_kiln(allnan), 1)
    empty = torch.zeros(0)
    check(lambda m, x: m.median(x), empty, to_kiln(empty))
    with pytest.raises(RuntimeError, match="empty"):
        kiln.median(to_kiln(torch.zeros(0, dtype=torch.int64)))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("dim", [0, -1])
def test_mode(dtype, dim):
    # Lines of <= 16 elements: torch's std::sort is then an insertion sort, so its index (the
    # last occurrence of the mode) is deterministic and kiln matches it exactly.
    for t, k in layouts((5, 8), dtype):
        check(lambda m, x: m.mode(x, dim), t, k)
        check(lambda m, x: x.mode(dim, keepdim=True), t, k)
    # Longer lines: torch's tie order is unspecified; the value must match, the index be valid.
    t, k = make((3, 40), dtype)
    check_selection(lambda m, x: m.mode(x, 1), t, k, 1)


def test_mode_with_nan_returns_a_valid_index():
    # torch sorts NaN with a plain `<` (no valid order), so its mode of NaN data is arbitrary;
    # kiln orders NaN last and counts each NaN on its own.
    t = torch.tensor([[1.0, NAN, 2.0, 1.0], [NAN, 3.0, 2.0, 3.0]])
    got = kiln.mode(to_kiln(t))
    assert got.values.tolist() == [1.0, 3.0]
    assert_indices_point_at_values(t, got, 1)


def test_selection_errors_and_zero_size():
    _, k = make((2, 3), "float32")
    with pytest.raises(RuntimeError, match="k out of range"):
        k.topk(4)
    with pytest.raises(RuntimeError, match="k out of range"):
        k.topk(-1)
    with pytest.raises(RuntimeError, match="out of range"):
        k.kthvalue(0)
    with pytest.raises(IndexError, match="out of range"):
        k.sort(2)
    with pytest.raises(RuntimeError, match="bool"):
        to_kiln(torch.ones(3, dtype=torch.bool)).topk(1)
    for shape, dim in [((2, 0), 1), ((0, 2), 1), ((0, 0), 1)]:
        z = torch.zeros(shape)
        for op in ("median", "mode", "nanmedian"):
            check(lambda m, x: getattr(m, op)(x, dim), z, to_kiln(z))
        check(lambda m, x: m.kthvalue(x, 1, dim), z, to_kiln(z))


@pytest.mark.parametrize("dtype", ["float32", "int64", "bool", "float16", "uint8"])
def test_unique(dtype):
    t, k = make((4, 6), dtype)
    t = t // 2 if dtype in ("int64", "uint8") else t  # repeats
    k = to_kiln(t)
    for flags in [(False, False), (True, False), (False, True), (True, True)]:
        inv, cnt = flags
        check(lambda m, x: m.unique(x, return_inverse=inv, return_counts=cnt), t, k)
        check(lambda m, x: x.unique(sorted=True, return_inverse=inv, return_counts=cnt), t, k)
        check(lambda m, x: m.unique_consecutive(x, return_inverse=inv, return_counts=cnt), t, k)
    rows = torch.tensor([[1, 2], [1, 2], [0, 5], [1, 2], [0, 4]]).to(getattr(torch, dtype))
    kr = to_kiln(rows)
    for dim in (0, 1, -1):
        check(lambda m, x: m.unique(x, dim=dim, return_inverse=True, return_counts=True), rows, kr)
        check(lambda m, x: m.unique_consecutive(x, True, True, dim), rows, kr)


def test_unique_nan_and_edge_shapes():
    t = torch.tensor([NAN, 1.0, NAN, 1.0, -0.0, 0.0])
    check(lambda m, x: m.unique(x, return_counts=True), t, to_kiln(t))
    for shape in [(), (0,), (2, 0)]:
        z, kz = make(shape, "float32")
        check(lambda m, x: m.unique(x, return_inverse=True, return_counts=True), z, kz)
    # torch's sorted=False order is unspecified on CPU; kiln returns the sorted values.
    t, k = make((20,), "int64")
    got = kiln.unique(k, sorted=False)
    assert_close(got, torch.unique(t))


@pytest.mark.parametrize("descending", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_float_sort_keys_keep_torchs_order_of_nan_signed_zero_and_ties(descending, dtype):
    # floats sort by integer keys (runtime/ops/sort.cc): NaN above every number, -0.0 equal to
    # 0.0, equal values in their original order
    g = np.random.default_rng(0)
    x = g.standard_normal((6, 300)).astype(dtype)
    x[0, ::7] = np.nan
    x[1, ::3], x[1, 1::3] = 0.0, -0.0
    x[2] = np.round(x[2])
    x[3, ::5] = np.inf
    x[3, 1::5] = -np.inf
    want = torch.sort(torch.from_numpy(x), dim=1, descending=descending, stable=True)
    got = kiln.sort(kiln.from_numpy(x), dim=1, descending=descending, stable=True)
    np.testing.assert_array_equal(got.indices.numpy(), want.indices.numpy())
    np.testing.assert_array_equal(got.values.numpy(), want.values.numpy())
    # along a strided dim too
    want0 = torch.sort(torch.from_numpy(x.T.copy()), dim=0, descending=descending, stable=True)
    got0 = kiln.sort(kiln.from_numpy(x.T.copy()), dim=0, descending=descending, stable=True)
    np.testing.assert_array_equal(got0.indices.numpy(), want0.indices.numpy())
