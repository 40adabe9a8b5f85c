"""Convolutions (F.conv1d/2d/3d, F.conv_transpose1d/2d/3d, F.unfold, F.fold) against torch."""

import pytest
import torch
import torch.nn.functional as F
from conftest import FLOAT_DTYPES, assert_close, make

import kiln
import kiln.nn.functional as KF

INT_CONV_DTYPES = ["int64", "int32", "int16", "int8", "uint8"]


def small(shape, dtype, seed=0):
    return make(shape, dtype, seed=seed, low=-2.0, high=2.0)


CONV2D_CASES = [
    # (input shape, weight shape, kwargs)
    ((2, 4, 7, 9), (6, 4, 3, 3), {}),
    ((2, 4, 7, 9), (6, 4, 3, 2), {"stride": 2}),
    ((1, 4, 8, 5), (3, 4, 1, 1), {}),  # pointwise: no im2col
    ((2, 4, 7, 9), (6, 4, 3, 3), {"padding": 1, "dilation": 2}),
    ((2, 4, 7, 9), (6, 2, 3, 3), {"groups": 2}),
    ((2, 6, 5, 6), (6, 1, 3, 3), {"groups": 6, "padding": 1}),  # depthwise
    ((2, 4, 7, 9), (6, 4, 2, 3), {"padding": "same"}),
    ((2, 4, 7, 9), (6, 4, 2, 4), {"padding": "same", "dilation": (2, 1)}),  # asymmetric 'same'
    ((2, 4, 7, 9), (6, 4, 3, 3), {"padding": "valid"}),
    ((2, 4, 11, 9), (6, 2, 3, 2), {"stride": (3, 1), "padding": (2, 0), "groups": 2}),
    ((4, 7, 9), (6, 4, 3, 3), {"padding": 1}),  # unbatched
    ((0, 4, 7, 9), (6, 4, 3, 3), {}),  # empty batch
]


@pytest.mark.filterwarnings("ignore:Using padding='same'")
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("xs,ws,kw", CONV2D_CASES)
def test_conv2d(dtype, xs, ws, kw):
    tx, kx = small(xs, dtype)
    tw, kw_ = small(ws, dtype, seed=1)
    tb, kb = small((ws[0],), dtype, seed=2)
    assert_close(KF.conv2d(kx, kw_, kb, **kw), F.conv2d(tx, tw, tb, **kw))
    assert_close(kiln.conv2d(kx, kw_, **kw), torch.conv2d(tx, tw, **kw))


@pytest.mark.parametrize("dtype", INT_CONV_DTYPES)
@pytest.mark.parametrize("case", [0, 1, 2, 4, 6, 9])
def test_conv2d_integer(dtype, case):
    xs, ws, kw = CONV2D_CASES[case]
    tx, kx = small(xs, dtype)
    tw, kw_ = small(ws, dtype, seed=1)
    tb, kb = small((ws[0],), dtype, seed=2)
    assert_close(KF.conv2d(kx, kw_, kb, **kw), F.conv2d(tx, tw, tb, **kw))


def test_conv2d_without_input_channels_is_the_bias():
    # torch returns a [N, 0, ...] tensor here; kiln returns the mathematically defined result,
    # an empty sum plus the bias, which torch gives for an explicit zero-filled input.
    tw, kw = small((3, 0, 3, 3), "float32")
    tb, kb = small((3,), "float32", seed=1)
    _, kx = small((2, 0, 5, 5), "float32")
    expected = F.conv2d(torch.zeros(2, 1, 5, 5), torch.zeros(3, 1, 3, 3), tb)
    assert_close(KF.conv2d(kx, kw, kb), expected)


def test_conv2d_integer_dilation_follows_torch():
    tx, kx = small((1, 2, 6, 6), "int64")
    tw, kw = small((2, 2, 3, 3), "int64", seed=1)
    assert_close(KF.conv2d(kx, kw, dilation=2), F.conv2d(tx, tw, dilation=2))
    _, kx32 = small((1, 2, 6, 6), "int32")
    _, kw32 = small((2, 2, 3, 3), "int32", seed=1)
    with pytest.raises(NotImplementedError, match="not implemented for 'Int'"):
        KF.conv2d(kx32, kw32, dilation=2)


def test_conv2d_non_contiguous():
    tx, kx = small((3, 9, 4, 10), "float32")
    tw, kw = small((5, 8, 3, 4), "float32", seed=1)
    # channels-last-like input view, and a transposed weight view
    tx2, kx2 = tx.permute(0, 2, 3, 1)[..., ::2], kx.permute(0, 2, 3, 1)[..., ::2]
    tx2, kx2 = tx2.permute(0, 3, 1, 2), kx2.permute(0, 3, 1, 2)
    tw2, kw2 = tw.transpose(2, 3), kw.transpose(2, 3)
    assert_close(
        KF.conv2d(kx2[:, :4], kw2[:, :4], stride=2), F.conv2d(tx2[:, :4], tw2[:, :4], stride=2)
    )


def test_conv2d_large_uses_chunks_and_threads():
    # Big enough to split the column buffer into chunks and run images in parallel.
    tx, kx = small((4, 16, 40, 40), "float32")
    tw, kw = small((8, 16, 3, 3), "float32", seed=1)
    assert_close(KF.conv2d(kx, kw, padding=1), F.conv2d(tx, tw, padding=1), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("dtype", ["float32", "float64", "bfloat16", "int64"])
@pytest.mark.parametrize(
    "kw",
    [{}, {"stride": 2}, {"padding": 2, "dilation": 3}, {"padding": "same"}, {"groups": 2}],
)
def test_conv1d(dtype, kw):
    if dtype == "int64" and "dilation" in kw:
        kw = {"padding": 2}
    tx, kx = small((2, 4, 11), dtype)
    tw, kw_ = small((6, 4 // kw.get("groups", 1), 3), dtype, seed=1)
    tb, kb = small((6,), dtype, seed=2)
    assert_close(KF.conv1d(kx, kw_, kb, **kw), F.conv1d(tx, tw, tb, **kw))
    assert_close(kiln.conv1d(kx[0], kw_, **kw), torch.conv1d(tx[0], tw, **kw))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize(
    "kw", [{}, {"stride": (1, 2, 1), "padding": 1}, {"groups": 2, "dilation": 2}]
)
def test_conv3d(dtype, kw):
    tx, kx = small((2, 4, 5, 6, 7), dtype)
    tw, kw_ = small((4, 4 // kw.get("groups", 1), 2, 3, 2), dtype, seed=1)
    tb, kb = small((4,), dtype, seed=2)
    assert_close(KF.conv3d(kx, kw_, kb, **kw), F.conv3d(tx, tw, tb, **kw))


TRANSPOSE_CASES = [
    {},
    {"stride": 2},
    {"stride": 2, "output_padding": 1},
    {"stride": (3, 2), "padding": (2, 1), "output_padding": (1, 0)},
    {"padding": 1, "dilation": 2},
    {"groups": 2},
    {"stride": 2, "dilation": 3, "output_padding": 2},
]


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "int64"])
@pytest.mark.parametrize("kw", TRANSPOSE_CASES)
def test_conv_transpose2d(dtype, kw):
    tx, kx = small((2, 4, 5, 6), dtype)
    tw, kw_ = small((4, 3, 3, 2), dtype, seed=1)
    tb, kb = small((3 * kw.get("groups", 1),), dtype, seed=2)
    # torch sums overlapping float16 windows in float16; kiln sums them in float32.
    tol = 1e-2 if dtype == "float16" else None
    assert_close(
        KF.conv_transpose2d(kx, kw_, kb, **kw),
        F.conv_transpose2d(tx, tw, tb, **kw),
        atol=tol,
        rtol=tol,
    )


def test_conv_transpose_1d_3d_and_unbatched():
    tx, kx = small((2, 4, 7), "float32")
    tw, kw = small((4, 2, 3), "float32", seed=1)
    assert_close(KF.conv_transpose1d(kx, kw, stride=2), F.conv_transpose1d(tx, tw, stride=2))
    assert_close(KF.conv_transpose1d(kx[0], kw), F.conv_transpose1d(tx[0], tw))
    tx, kx = small((1, 2, 3, 4, 3), "float64")
    tw, kw = small((2, 3, 2, 2, 3), "float64", seed=1)
    assert_close(
        KF.conv_transpose3d(kx, kw, stride=(2, 1, 2), padding=1),
        F.conv_transpose3d(tx, tw, stride=(2, 1, 2), padding=1),
    )


@pytest.mark.parametrize("dtype", ["float32", "float64", "bfloat16", "bool"])
@pytest.mark.parametrize(
    "kw",
    [
        {"kernel_size": 2},
        {"kernel_size": (2, 3), "stride": 2, "padding": 1},
        {"kernel_size": 3, "dilation": (1, 2), "padding": (1, 0), "stride": (1, 2)},
    ],
)
def test_unfold_fold(dtype, kw):
    tx, kx = make((2, 3, 7, 8), dtype)
    tu = F.unfold(tx, **kw)
    ku = KF.unfold(kx, **kw)
    assert_close(ku, tu)
    assert_close(KF.unfold(kx[0], **kw), F.unfold(tx[0], **kw))
    if dtype != "bool":
        assert_close(KF.fold(ku, (7, 8), **kw), F.fold(tu, (7, 8), **kw))
        assert_close(KF.fold(ku[0], (7, 8), **kw), F.fold(tu[0], (7, 8), **kw))


def k(shape, dtype="float32"):
    return make(shape, dtype)[1]


@pytest.mark.parametrize(
    "fn,exc,match",
    [
        (
            lambda: KF.conv2d(k((2, 2)), k((3, 2, 3, 3))),
            RuntimeError,
            r"Expected 3D \(unbatched\) or 4D \(batched\) input to conv2d, but got input of size: "
            r"\[2, 2\]",
        ),
        (
            lambda: KF.conv1d(k((1, 2, 5, 5)), k((3, 2, 3))),
            RuntimeError,
            "2D .unbatched. or 3D .batched. input to conv1d",
        ),
        (
            lambda: KF.conv2d(k((1, 4, 5, 5)), k((3, 2, 3, 3))),
            RuntimeError,
            r"weight of size \[3, 2, 3, 3\], expected input\[1, 4, 5, 5\] to have 2 channels",
        ),
        (
            lambda: KF.conv2d(k((1, 4, 5, 5)), k((3, 2, 3, 3)), groups=2),
            RuntimeError,
            "divisible by 2 at dimension 0",
        ),
        (
            lambda: KF.conv2d(k((1, 2, 5, 5)), k((0, 2, 3, 3))),
            RuntimeError,
            "at least 1 at dimension 0",
        ),
        (
            lambda: KF.conv2d(k((1, 2, 2, 2)), k((3, 2, 3, 3))),
            RuntimeError,
            r"padded input size per channel: \(2 x 2\). Kernel size: \(3 x 3\)",
        ),
        (
            lambda: KF.conv2d(k((1, 2, 5, 5)), k((3, 2, 3))),
            RuntimeError,
            "expected weight to be 4-D",
        ),
        (
            lambda: KF.conv2d(k((1, 2, 5, 5)), k((3, 2, 3, 3)), k((4,))),
            RuntimeError,
            "expected bias to be 1-dimensional with 3 elements",
        ),
        (
            lambda: KF.conv2d(k((1, 2, 5, 5)), k((3, 2, 3, 3), "float64")),
            RuntimeError,
            "same dtype",
        ),
        (
            lambda: KF.conv2d(k((1, 2, 5, 5)), k((3, 2, 3, 3)), k((3,), "float64")),
            RuntimeError,
            "bias type",
        ),
        (
            lambda: KF.conv2d(k((1, 2, 5, 5), "bool"), k((3, 2, 3, 3), "bool")),
            NotImplementedError,
            "'Bool'",
        ),
        (
            lambda: KF.conv2d(k((1, 2, 5, 5)), k((3, 2, 3, 3)), stride=2, padding="same"),
            RuntimeError,
            "not supported for strided",
        ),
        (
            lambda: KF.conv2d(k((1, 2, 5, 5)), k((3, 2, 3, 3)), padding="foo"),
            ValueError,
            "Invalid padding string: 'foo'",
        ),
        (
            lambda: KF.conv2d(k((1, 2, 5, 5)), k((3, 2, 3, 3)), padding=-1),
            RuntimeError,
            "negative padding",
        ),
        (
            lambda: KF.conv2d(k((1, 2, 5, 5)), k((3, 2, 3, 3)), stride=0),
            RuntimeError,
            "non-positive stride",
        ),
        (
            lambda: KF.conv2d(k((1, 2, 5, 5)), k((3, 2, 3, 3)), stride=(1, 1, 1)),
            RuntimeError,
            "list of 2 values",
        ),
        (
            lambda: KF.conv2d(k((1, 2, 5, 5)), k((3, 2, 3, 3)), groups=0),
            RuntimeError,
            "non-positive groups",
        ),
        (
            lambda: KF.conv_transpose2d(k((1, 4, 5, 5)), k((3, 2, 3, 3))),
            RuntimeError,
            "to have 3 channels, but got 4",
        ),
        (
            lambda: KF.conv_transpose2d(k((1, 4, 5, 5)), k((4, 2, 3, 3)), output_padding=1),
            RuntimeError,
            "output padding must be smaller",
        ),
        (
            lambda: KF.conv_transpose2d(k((1, 4, 5, 5), "int32"), k((4, 2, 3, 3), "int32")),
            NotImplementedError,
            "'Int'",
        ),
        (lambda: KF.unfold(k((3, 4)), 2), NotImplementedError, "Only 3D or 4D input"),
        (lambda: KF.unfold(k((1, 1, 2, 2)), 3), RuntimeError, "must be at least one"),
        (lambda: KF.unfold(k((1, 1, 4, 4), "int64"), 2), NotImplementedError, "'Long'"),
        (
            lambda: KF.fold(k((1, 5, 4)), (4, 4), 2, stride=2),
            RuntimeError,
            "divisible by the product of kernel_size",
        ),
        (
            lambda: KF.fold(k((1, 4, 5)), (4, 4), 2, stride=2),
            RuntimeError,
            "number of sliding blocks 2 \\* 2 = 4",
        ),
    ],
)
def test_conv_errors(fn, exc, match):
    with pytest.raises(exc, match=match):
        fn()
