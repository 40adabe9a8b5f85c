"""Reductions against PyTorch: sum/nansum/mean/nanmean/prod, amax/amin, max/min, argmax/argmin,
aminmax, all/any, count_nonzero. Every dtype, dims (int, tuple, list, negative, empty), keepdim,
non-contiguous layouts, 0-d and zero-size inputs, the engine's parallel paths, and errors.

The helpers here (layouts, check, compare) are shared by the other test_reduce*/test_sort*/
test_softmax* files.
"""

import numpy as np
import pytest
import torch
from conftest import DTYPES, FLOAT_DTYPES, assert_close, make, to_kiln

import kiln

NAN = float("nan")


def layouts(shape, dtype, seed=0):
    """(torch, kiln) pairs with the same values of `shape`: contiguous, transposed, strided
    (every other element of a wider tensor) and expanded (a stride-0 dim)."""
    n = len(shape)
    out = [make(shape, dtype, seed)]
    if n >= 2:
        perm = tuple(range(n - 1, -1, -1))
        t, k = make(tuple(reversed(shape)), dtype, seed + 1)
        out.append((t.permute(perm), k.permute(perm)))
        t, k = make((1, *shape[1:]), dtype, seed + 3)
        out.append((t.expand(*shape), k.expand(*shape)))
    if n >= 1:
        t, k = make((*shape[:-1], 2 * shape[-1]), dtype, seed + 2)
        out.append((t[..., ::2], k._slice(n - 1, 0, None, 2)))
    return out


def compare(got, expected, **tol):
    """Asserts a kiln result equals torch's: tensors, (named) tuples of them, or Python values."""
    if isinstance(expected, torch.Tensor):
        assert_close(got, expected, **tol)
    elif isinstance(expected, tuple):
        assert isinstance(got, tuple) and len(got) == len(expected)
        fields = getattr(type(expected), "__match_args__", None)
        if fields:  # a torch.return_types structseq: same name and field names
            assert type(got).__name__ == type(expected).__name__
            assert tuple(got._fields) == tuple(fields)
        for g, e in zip(got, expected, strict=True):
            compare(g, e, **tol)
    else:
        assert got == expected


def _cast_floats(r, dtype):
    if isinstance(r, torch.Tensor):
        return r.to(dtype) if r.dtype.is_floating_point else r
    if isinstance(r, tuple):
        return type(r)(_cast_floats(x, dtype) for x in r)
    return r


def check(fn, t, k, upcast=False, **tol):
    """Runs fn(torch, t) and fn(kiln, k): equal results, or the same exception type.
    With `upcast`, torch computes float16/bfloat16 inputs in float32 and rounds the result once,
    as kiln does (torch's own reduced-precision accumulation is less accurate).
    Returns (kiln result, torch result), or None when torch raised."""
    try:
        if upcast and t.dtype in (torch.float16, torch.bfloat16):
            expected = _cast_floats(fn(torch, t.float()), t.dtype)
        else:
            expected = fn(torch, t)
    except Exception as e:  # noqa: BLE001 - any torch error must be matched by kiln
        with pytest.raises(type(e)):
            fn(kiln, k)
        return None
    got = fn(kiln, k)
    compare(got, expected, **tol)
    return got, expected


def with_nans(shape, dtype="float32", seed=0, every=5):
    """A float tensor pair where every `every`-th element is NaN."""
    t, _ = make(shape, dtype, seed)
    t = t.clone()
    t.view(-1)[::every] = NAN
    return t, to_kiln(t)


DIMS = [None, 0, -1, (0, 2), [1, -1], ()]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", ["sum", "nansum", "mean", "nanmean"])
@pytest.mark.parametrize("dim", DIMS)
def test_sum_like(op, dtype, dim):
    for t, k in layouts((3, 4, 5), dtype):
        if dim is None:
            check(lambda m, x: getattr(m, op)(x), t, k, upcast=True)
            check(lambda m, x: getattr(x, op)(), t, k, upcast=True)
        else:
            check(lambda m, x: getattr(m, op)(x, dim), t, k, upcast=True)
            check(lambda m, x: getattr(x, op)(dim=dim, keepdim=True), t, k, upcast=True)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("dim", [None, 0, 1, -1])
def test_prod(dtype, dim):
    for t, k in layouts((3, 4), dtype):
        if dim is None:
            check(lambda m, x: m.prod(x), t, k)
        else:
            for keepdim in (False, True):
                check(lambda m, x: x.prod(dim, keepdim=keepdim), t, k)
    # Values near 1 so float products stay finite and meaningful over many elements.
    t, k = make((5, 40), "float32", low=0.5, high=1.5)
    check(lambda m, x: m.prod(x, 1), t, k)


@pytest.mark.parametrize("src", ["int32", "float32", "bool", "float16"])
@pytest.mark.parametrize("dtype", ["float64", "int32", "float16", "int64"])
def test_sum_dtype_argument_casts_first(src, dtype):
    t, k = make((4, 6), src)
    for op in ("sum", "nansum", "prod", "cumsum"):
        if op == "cumsum":
            fn = lambda m, x: m.cumsum(x, 1, dtype=getattr(m, dtype))
        else:
            fn = lambda m, x: getattr(m, op)(x, dtype=getattr(m, dtype))
        check(fn, t, k)
    check(lambda m, x: m.sum(x, (0, 1), True, dtype=getattr(m, dtype)), t, k)
    check(lambda m, x: m.mean(x, 0, dtype=getattr(m, dtype)), t, k)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("dim", [None, 0, -1, (0, 2), ()])
def test_amax_amin(dtype, dim):
    for t, k in layouts((3, 4, 5), dtype):
        for op in ("amax", "amin"):
            if dim is None:
                check(lambda m, x: getattr(m, op)(x), t, k)
            else:
                check(lambda m, x: getattr(x, op)(dim, keepdim=True), t, k)
                check(lambda m, x: getattr(m, op)(x, dim=dim), t, k)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_max_min_with_dim_returns_values_and_first_indices(dtype, dim):
    # int/bool data has many ties: indices must be those of the first extreme, like torch.
    for t, k in layouts((4, 5, 6), dtype):
        for op in ("max", "min"):
            check(lambda m, x: getattr(x, op)(dim=dim, keepdim=True), t, k)
            got, expected = check(lambda m, x: getattr(m, op)(x, dim), t, k)
            values, indices = got
            assert_close(got.values, expected.values)
            assert_close(indices, expected.indices)
            assert_close(values, expected[0])


@pytest.mark.parametrize("dtype", DTYPES)
def test_max_min_without_dim(dtype):
    for t, k in layouts((3, 4, 5), dtype):
        check(lambda m, x: m.max(x), t, k)
        check(lambda m, x: x.min(), t, k)


@pytest.mark.skipif(not hasattr(kiln._C, "maximum"), reason="kiln._C.maximum not built")
def test_binary_max_min_delegate_to_maximum_minimum():
    t1, k1 = make((3, 4), "float32", seed=1)
    t2, k2 = make((4,), "float32", seed=2)
    check(lambda m, x: m.max(x, t2 if m is torch else k2), t1, k1)
    check(lambda m, x: x.min(t2 if m is torch else k2), t1, k1)
    check(lambda m, x: m.max(x, other=t2 if m is torch else k2), t1, k1)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("dim", [None, 0, -1])
def test_argmax_argmin(dtype, dim):
    for t, k in layouts((4, 5, 6), dtype):
        for op in ("argmax", "argmin"):
            check(lambda m, x: getattr(m, op)(x, dim), t, k)
            check(lambda m, x: getattr(x, op)(dim=dim, keepdim=True), t, k)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("dim", [None, 0, -1])
def test_aminmax(dtype, dim):
    for t, k in layouts((4, 5), dtype):
        check(lambda m, x: m.aminmax(x, dim=dim), t, k)
        check(lambda m, x: x.aminmax(dim=dim, keepdim=True), t, k)


def test_extremes_propagate_nan_and_index_the_first_nan():
    t, k = with_nans((6, 7), every=9)
    for op in ("max", "min"):
        check(lambda m, x: getattr(x, op)(1), t, k)
        check(lambda m, x: getattr(x, op)(0), t, k)
        check(lambda m, x: getattr(x, op)(), t, k)
    for op in ("amax", "amin", "argmax", "argmin", "aminmax"):
        check(lambda m, x: getattr(m, op)(x), t, k)
    for op in ("amax", "amin", "argmax", "argmin"):
        check(lambda m, x: getattr(m, op)(x, 1), t, k)
    check(lambda m, x: m.aminmax(x, dim=0), t, k)
    check(lambda m, x: m.nansum(x, 1), t, k)
    check(lambda m, x: m.nanmean(x, 0), t, k)
    check(lambda m, x: m.sum(x, 1), t, k)
    allnan = torch.full((2, 3), NAN)
    check(lambda m, x: m.nanmean(x, 1), allnan, to_kiln(allnan))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("dim", [None, 0, -1, (0, 1)])
def test_all_any_count_nonzero(dtype, dim):
    sparse, _ = make((4, 5, 3), dtype)
    sparse.view(-1)[::3] = 0  # ensure both outcomes appear
    ones = torch.ones(4, 5, 3, dtype=getattr(torch, dtype))
    cases = [(sparse, to_kiln(sparse)), (ones, to_kiln(ones)), *layouts((4, 5, 3), dtype)]
    for t, k in cases:
        for op in ("all", "any"):
            if dim is None:
                check(lambda m, x: getattr(m, op)(x), t, k)
            else:
                check(lambda m, x: getattr(x, op)(dim, keepdim=True), t, k)
        check(lambda m, x: m.count_nonzero(x, dim), t, k)


def test_zero_dim_inputs():
    for dtype in ("float32", "int64", "bool"):
        t, k = make((), dtype)
        for fn in [
            lambda m, x: m.sum(x),
            lambda m, x: m.sum(x, 0),
            lambda m, x: m.sum(x, -1, keepdim=True),
            lambda m, x: m.prod(x, 0),
            lambda m, x: m.amax(x, 0),
            lambda m, x: m.max(x, 0),
            lambda m, x: m.argmax(x),
            lambda m, x: m.argmin(x, 0, keepdim=True),
            lambda m, x: m.all(x, 0),
            lambda m, x: m.count_nonzero(x),
            lambda m, x: m.mean(x, (0,)),
            lambda m, x: m.aminmax(x),
        ]:
            check(fn, t, k)


@pytest.mark.parametrize("shape", [(0,), (0, 3), (3, 0), (2, 0, 4)])
def test_zero_size_inputs_give_identity_or_torchs_error(shape):
    for dtype in ("float32", "int32", "bool"):
        t, k = make(shape, dtype)
        for dim in (None, 0, -1):
            for op in ("sum", "nansum", "mean", "prod", "amax", "amin", "all", "any"):
                if dim is None:
                    check(lambda m, x: getattr(m, op)(x), t, k)
                else:
                    check(lambda m, x: getattr(m, op)(x, dim), t, k)
            for op in ("max", "min", "argmax", "argmin", "count_nonzero"):
                args = () if dim is None else (dim,)
                check(lambda m, x: getattr(m, op)(x, *args), t, k)


def test_sum_of_a_million_floats_is_accurate():
    g = torch.Generator().manual_seed(0)
    t = torch.rand(1_000_000, generator=g) + 1e3  # a large mean makes naive float sums drift
    k = to_kiln(t)
    exact = t.double().sum()
    assert abs(kiln.sum(k).item() - exact.item()) <= 1e-6 * exact.item()
    assert abs(k.mean().item() - t.double().mean().item()) <= 1e-6 * 1e3
    assert abs(k.var().item() - t.double().var().item()) <= 1e-4 * t.double().var().item()
    assert abs(k.norm().item() - t.double().norm().item()) <= 1e-6 * t.double().norm().item()


@pytest.mark.parametrize(
    "shape,dim",
    [
        ((3, 70000), 1),  # few outputs, long rows: chunked row mode in parallel
        ((70000, 3), 0),  # few columns, many rows: chunked column mode
        ((600, 300), 0),  # many columns: several column blocks
        ((40, 50, 60), (0, 2)),  # rows with an outer reduced dim
        ((200000,), None),
    ],
)
def test_large_inputs_match_float64_reference(shape, dim):
    t, k = make(shape, "float32")
    kd = k.permute(*range(len(shape) - 1, -1, -1)).contiguous().permute(
        *range(len(shape) - 1, -1, -1)
    )  # same values, column-major memory: exercises the other engine mode
    for kk in (k, kd):
        ref = t.double()
        args = () if dim is None else (dim,)
        assert_close(kk.sum(*args), ref.sum(*args).float(), atol=1e-3, rtol=1e-6)
        assert_close(kk.mean(*args), ref.mean(*args).float(), atol=1e-6, rtol=1e-6)
        assert_close(kk.amax(*args), ref.amax(*args).float())
        assert_close(kk.var(*args), ref.var(*args).float(), atol=1e-5, rtol=1e-5)
        if dim is None or isinstance(dim, int):
            assert_close(kk.argmin(*args), ref.argmin(*args))
            assert_close(kk.max(*args)[0] if args else kk.max(), ref.amax(*args).float())


def test_named_tuple_results():
    t, k = make((3, 4), "float32")
    r = k.max(dim=1)
    assert isinstance(r, tuple) and isinstance(r, kiln.return_types.max)
    values, indices = r
    assert values.dtype == kiln.float32 and indices.dtype == kiln.int64
    assert kiln.return_types.aminmax._fields == ("min", "max")
    from kiln.return_types import sort  # noqa: F401 - importable like torch.return_types


def test_errors_name_the_op_and_the_rule():
    t, k = make((2, 3), "float32")
    ki = to_kiln(torch.arange(6).reshape(2, 3))
    with pytest.raises(IndexError, match="out of range"):
        k.sum(2)
    with pytest.raises(IndexError, match="out of range"):
        kiln.mean(k, (0, -3))
    with pytest.raises(RuntimeError, match="appears multiple times"):
        k.sum((0, -2))
    with pytest.raises(RuntimeError, match="floating point"):
        ki.mean()
    with pytest.raises(RuntimeError, match="floating point"):
        k.mean(dtype=kiln.int64)
    with pytest.raises(RuntimeError, match="nanmean"):
        ki.nanmean()
    with pytest.raises(RuntimeError, match="Expected reduction dim to be specified"):
        kiln.amax(to_kiln(torch.zeros(0, 3)))
    with pytest.raises(IndexError, match="dim 0 to have non-zero size"):
        to_kiln(torch.zeros(0, 3)).max(0)
    with pytest.raises(RuntimeError, match="bool"):
        to_kiln(torch.ones(3, dtype=torch.bool)).argmax()
    with pytest.raises(RuntimeError, match="aminmax"):
        kiln.aminmax(to_kiln(torch.zeros(0)))
    with pytest.raises(TypeError):
        k.prod((0, 1))
    with pytest.raises(TypeError):
        k.sum("0")


def test_inputs_are_not_modified():
    t, k = make((3, 4), "float32")
    before = k.numpy().copy()
    for fn in (kiln.sum, kiln.var, kiln.amax, kiln.argmax, kiln.logsumexp, kiln.sort):
        fn(k, 1)
    np.testing.assert_array_equal(k.numpy(), before)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_reduced_float_results_keep_their_dtype(dtype):
    t, k = make((5, 7), dtype)
    for op in ("sum", "mean", "amax", "nansum", "prod"):
        check(lambda m, x: getattr(x, op)(1), t, k)


def test_max_rejects_a_non_int_dim_and_a_number_other():
    _, k = make((2, 3), "float32")
    with pytest.raises(TypeError, match="max\\(\\) received an invalid combination of arguments"):
        k.max(1.5)
    with pytest.raises(TypeError):
        kiln.min(k, 2.0)
