"""Pooling (F.max_poolNd, F.avg_poolNd, F.adaptive_avg_poolNd, F.adaptive_max_poolNd) against
torch: values and indices, padding, dilation, ceil_mode, count_include_pad, divisor_override."""

import pytest
import torch
import torch.nn.functional as F
from conftest import FLOAT_DTYPES, assert_close, make

import kiln
import kiln.nn.functional as KF

MAX_CASES = [
    {"kernel_size": 2},
    {"kernel_size": 3, "stride": 2, "padding": 1},
    {"kernel_size": (2, 3), "stride": (1, 2), "dilation": 2},
    {"kernel_size": 3, "stride": 2, "ceil_mode": True},
    {"kernel_size": (3, 2), "stride": 2, "padding": (1, 1), "ceil_mode": True},
    {"kernel_size": 2, "stride": None},
]


def assert_pair(k, t):
    assert_close(k[0], t[0])
    assert_close(k[1], t[1])


@pytest.mark.parametrize("dtype", FLOAT_DTYPES + ["int64", "int32", "int8", "uint8"])
@pytest.mark.parametrize("kw", MAX_CASES)
def test_max_pool2d(dtype, kw):
    tx, kx = make((2, 3, 7, 9), dtype)
    assert_pair(
        KF.max_pool2d(kx, **kw, return_indices=True), F.max_pool2d(tx, **kw, return_indices=True)
    )
    assert_close(kiln.max_pool2d(kx, **kw), torch.max_pool2d(tx, **kw))
    assert_pair(KF.max_pool2d_with_indices(kx[0], **kw), F.max_pool2d_with_indices(tx[0], **kw))


def test_max_pool_nan_and_inf_like_torch():
    nan, inf = float("nan"), float("inf")
    t = torch.tensor([[[[nan, 1.0, 2.0, -inf], [2.0, nan, -inf, -inf], [1.0, 2.0, 3.0, 4.0]]]])
    kt = kiln.from_numpy(t.numpy().copy())
    assert_pair(KF.max_pool2d(kt, 2, return_indices=True), F.max_pool2d(t, 2, return_indices=True))
    assert_pair(
        KF.adaptive_max_pool2d(kt, (1, 2), return_indices=True),
        F.adaptive_max_pool2d(t, (1, 2), return_indices=True),
    )


def test_max_pool2d_non_contiguous_and_empty_batch():
    tx, kx = make((3, 8, 6, 10), "float32")
    assert_pair(
        KF.max_pool2d(kx.transpose(2, 3)[:, ::2], 3, 2, 1, return_indices=True),
        F.max_pool2d(tx.transpose(2, 3)[:, ::2], 3, 2, 1, return_indices=True),
    )
    tx, kx = make((0, 2, 6, 6), "float32")
    assert_close(KF.max_pool2d(kx, 2), F.max_pool2d(tx, 2))


@pytest.mark.parametrize("dtype", ["float32", "float64", "bfloat16"])
@pytest.mark.parametrize(
    "kw",
    [
        {"kernel_size": 2},
        {"kernel_size": 3, "stride": 2, "padding": 1, "dilation": 2, "ceil_mode": True},
    ],
)
def test_max_pool1d_and_3d(dtype, kw):
    tx, kx = make((2, 3, 11), dtype)
    assert_pair(
        KF.max_pool1d(kx, **kw, return_indices=True), F.max_pool1d(tx, **kw, return_indices=True)
    )
    assert_close(kiln.max_pool1d(kx[0], **kw), torch.max_pool1d(tx[0], **kw))
    tx, kx = make((2, 2, 5, 6, 7), dtype)
    assert_pair(
        KF.max_pool3d(kx, **kw, return_indices=True), F.max_pool3d(tx, **kw, return_indices=True)
    )


def test_max_pool1d_integer_follows_torch():
    tx, kx = make((2, 3, 8), "int64")
    assert_pair(KF.max_pool1d(kx, 2, return_indices=True), F.max_pool1d(tx, 2, return_indices=True))
    with pytest.raises(NotImplementedError, match="'Long'"):
        KF.max_pool1d(kx, 2)


AVG_CASES = [
    {"kernel_size": 2},
    {"kernel_size": 3, "stride": 2, "padding": 1},
    {"kernel_size": 3, "stride": 2, "padding": 1, "count_include_pad": False},
    {"kernel_size": (3, 2), "stride": 2, "padding": (1, 1), "ceil_mode": True},
    {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True, "count_include_pad": False},
    {"kernel_size": 2, "divisor_override": 3},
    {"kernel_size": (2, 3), "stride": (1, 2), "padding": (1, 0), "divisor_override": 5},
]


@pytest.mark.parametrize("dtype", FLOAT_DTYPES + ["int64"])
@pytest.mark.parametrize("kw", AVG_CASES)
def test_avg_pool2d(dtype, kw):
    tx, kx = make((2, 3, 7, 9), dtype)
    assert_close(KF.avg_pool2d(kx, **kw), F.avg_pool2d(tx, **kw))
    assert_close(KF.avg_pool2d(kx[1], **kw), F.avg_pool2d(tx[1], **kw))


@pytest.mark.parametrize("dtype", ["float32", "float64", "int64"])
def test_avg_pool1d_and_3d(dtype):
    tx, kx = make((2, 3, 11), dtype)
    for kw in [
        {"kernel_size": 3},
        {"kernel_size": 4, "stride": 3, "padding": 2, "ceil_mode": True},
    ]:
        assert_close(KF.avg_pool1d(kx, **kw), F.avg_pool1d(tx, **kw))
        assert_close(
            kiln.avg_pool1d(kx, **kw, count_include_pad=False),
            torch.avg_pool1d(tx, **kw, count_include_pad=False),
        )
    tx, kx = make((2, 2, 5, 6, 7), dtype)
    assert_close(KF.avg_pool3d(kx, 3, 2, 1), F.avg_pool3d(tx, 3, 2, 1))
    assert_close(KF.avg_pool3d(kx, 2, divisor_override=3), F.avg_pool3d(tx, 2, divisor_override=3))


def test_avg_pool2d_non_contiguous():
    tx, kx = make((3, 8, 6, 10), "float64")
    assert_close(
        KF.avg_pool2d(kx.permute(1, 0, 3, 2)[::3], 3, 2, 1),
        F.avg_pool2d(tx.permute(1, 0, 3, 2)[::3], 3, 2, 1),
    )


ADAPTIVE_SIZES = [1, 3, (4, None), (None, 2), (5, 2), (7, 9), (10, 13), (0, 2)]


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("size", ADAPTIVE_SIZES)
def test_adaptive_pool2d(dtype, size):
    tx, kx = make((2, 3, 7, 9), dtype)
    assert_close(KF.adaptive_avg_pool2d(kx, size), F.adaptive_avg_pool2d(tx, size))
    assert_pair(
        KF.adaptive_max_pool2d(kx, size, return_indices=True),
        F.adaptive_max_pool2d(tx, size, return_indices=True),
    )
    assert_close(KF.adaptive_max_pool2d(kx[0], size), F.adaptive_max_pool2d(tx[0], size))


def test_adaptive_pool_1d_3d_and_non_contiguous():
    tx, kx = make((2, 3, 11), "float32")
    assert_close(KF.adaptive_avg_pool1d(kx, 4), F.adaptive_avg_pool1d(tx, 4))
    assert_close(kiln.adaptive_avg_pool1d(kx[0], (5,)), torch.adaptive_avg_pool1d(tx[0], (5,)))
    assert_pair(KF.adaptive_max_pool1d(kx, 4, True), F.adaptive_max_pool1d(tx, 4, True))
    tx, kx = make((2, 2, 5, 6, 7), "float64")
    assert_close(KF.adaptive_avg_pool3d(kx, (2, None, 4)), F.adaptive_avg_pool3d(tx, (2, None, 4)))
    assert_pair(KF.adaptive_max_pool3d(kx, 3, True), F.adaptive_max_pool3d(tx, 3, True))
    tx, kx = make((4, 3, 9, 8), "float32")
    assert_close(
        KF.adaptive_avg_pool2d(kx.transpose(0, 3)[::2], (3, 2)),
        F.adaptive_avg_pool2d(tx.transpose(0, 3)[::2], (3, 2)),
    )


def k(shape, dtype="float32"):
    return make(shape, dtype)[1]


@pytest.mark.parametrize(
    "fn,exc,match",
    [
        (lambda: KF.max_pool2d(k((2, 2)), 2), RuntimeError, "Expected 3D or 4D"),
        (
            lambda: KF.max_pool2d(k((1, 0, 5, 5)), 2),
            RuntimeError,
            "non-zero size for non-batch dimensions",
        ),
        (
            lambda: KF.max_pool2d(k((1, 1, 4, 4)), 2, padding=2),
            RuntimeError,
            "pad should be at most half of effective kernel size",
        ),
        (
            lambda: KF.max_pool2d(k((1, 1, 4, 4)), 2, padding=-1),
            RuntimeError,
            "pad must be non-negative",
        ),
        (
            lambda: KF.max_pool2d(k((1, 1, 1, 1)), 2),
            RuntimeError,
            r"Given input size: \(1x1x1\). Calculated output size: \(1x0x0\)",
        ),
        (
            lambda: KF.max_pool2d(k((1, 1, 4, 4)), 0),
            RuntimeError,
            "kernel size should be greater than zero",
        ),
        (
            lambda: KF.max_pool2d(k((1, 1, 4, 4)), 2, 0),
            RuntimeError,
            "stride should be greater than zero",
        ),
        (
            lambda: KF.max_pool2d(k((1, 1, 4, 4)), 2, dilation=0),
            RuntimeError,
            "dilation should be greater than zero",
        ),
        (
            lambda: KF.max_pool2d(k((1, 1, 4, 4)), (2, 2, 2)),
            RuntimeError,
            "kernel_size must either be a single int, or a tuple of 2 ints",
        ),
        (lambda: KF.max_pool2d(k((1, 1, 4, 4), "bool"), 2), NotImplementedError, "'Bool'"),
        (
            lambda: KF.max_pool2d(k((1, 1, 9, 9)), 2, padding=2, dilation=3),
            RuntimeError,
            "pad should be smaller than or equal to half of kernel size",
        ),
        (
            lambda: KF.avg_pool3d(k((1, 1, 2, 5, 5)), 3, padding=1),
            RuntimeError,
            r"input image \(T: 2 H: 5 W: 5\) smaller than kernel size",
        ),
        (
            lambda: KF.avg_pool2d(k((1, 1, 4, 4)), 2, divisor_override=0),
            RuntimeError,
            "divisor must be not zero",
        ),
        (lambda: KF.avg_pool2d(k((1, 1, 4, 4), "int32"), 2), NotImplementedError, "'Int'"),
        (
            lambda: KF.avg_pool2d(k((1, 1, 4, 4)), 2, padding=2),
            RuntimeError,
            "pad should be at most half",
        ),
        (
            lambda: KF.adaptive_avg_pool2d(k((4, 4)), 2),
            RuntimeError,
            r"Expected 3D or 4D tensor, but got \[4, 4\]",
        ),
        (
            lambda: KF.adaptive_avg_pool2d(k((1, 1, 0, 4)), 2),
            RuntimeError,
            "dimension 2 being empty",
        ),
        (
            lambda: KF.adaptive_avg_pool2d(k((1, 1, 4, 4)), (2, 2, 2)),
            RuntimeError,
            "output_size must be 2",
        ),
        (
            lambda: KF.adaptive_avg_pool2d(k((1, 1, 4, 4)), -1),
            RuntimeError,
            "greater than or equal to 0",
        ),
        (
            lambda: KF.adaptive_avg_pool2d(k((1, 1, 4, 4), "int64"), 2),
            NotImplementedError,
            "'Long'",
        ),
        (
            lambda: KF.adaptive_max_pool2d(k((1, 1, 4, 4), "int64"), 2),
            NotImplementedError,
            "'Long'",
        ),
    ],
)
def test_pool_errors(fn, exc, match):
    with pytest.raises(exc, match=match):
        fn()
