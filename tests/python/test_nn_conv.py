"""kiln.nn Conv1d/Conv2d and pooling modules vs torch.nn with the same weights."""

import pytest
import torch
from conftest import assert_close, make
from models.helpers import check, noncontiguous, pair, run_both

import kiln
import kiln.nn as knn

CONVS = [
    ("Conv1d", (2, 4, 3), {}, (2, 2, 9)),
    ("Conv1d", (2, 4, 3), {"stride": 2, "padding": 1, "dilation": 2}, (2, 2, 11)),
    ("Conv1d", (4, 4, 3), {"groups": 2, "padding": "same", "bias": False}, (2, 4, 8)),
    ("Conv1d", (2, 3, 4), {"padding": "same", "padding_mode": "circular"}, (2, 2, 7)),
    ("Conv1d", (2, 3, 3), {}, (2, 9)),  # unbatched
    ("Conv2d", (3, 4, 3), {}, (2, 3, 7, 7)),
    ("Conv2d", (3, 4, (3, 2)), {"stride": (2, 1), "padding": (1, 0)}, (2, 3, 8, 6)),
    ("Conv2d", (4, 6, 3), {"groups": 2, "dilation": 2, "padding": "same"}, (1, 4, 7, 7)),
    ("Conv2d", (3, 4, 4), {"padding": "same"}, (2, 3, 6, 6)),  # even kernel: asymmetric pad
    ("Conv2d", (3, 4, 3), {"padding": "valid"}, (2, 3, 5, 5)),
    ("Conv2d", (3, 4, 3), {"padding": 1, "padding_mode": "reflect"}, (2, 3, 5, 5)),
    ("Conv2d", (3, 4, 3), {"padding": 2, "padding_mode": "replicate"}, (2, 3, 5, 5)),
    ("Conv2d", (3, 4, 3), {"padding": (1, 2), "padding_mode": "circular"}, (2, 3, 5, 5)),
    ("Conv2d", (3, 4, 3), {"bias": False}, (3, 7, 7)),  # unbatched
]


@pytest.mark.filterwarnings("ignore:Using padding='same' with even kernel")  # torch's own note
@pytest.mark.parametrize("name,args,kwargs,shape", CONVS, ids=lambda v: str(v))
def test_conv(name, args, kwargs, shape):
    tm, km = pair(name, *args, **kwargs)
    t, k = make(shape, "float32")
    check(tm, km, (t,), (k,))
    t, k = noncontiguous(shape, "float32")
    check(tm, km, (t,), (k,))


def test_conv2d_float64_and_zero_batch():
    tm, km = pair("Conv2d", 2, 3, 3, padding=1, dtype="float64")
    t, k = make((2, 2, 5, 5), "float64")
    check(tm, km, (t,), (k,), "float64")
    t, k = make((0, 2, 5, 5), "float64")
    check(tm, km, (t,), (k,), "float64")


def test_conv_weight_shapes_and_init_bounds():
    kiln.manual_seed(0)
    m = knn.Conv2d(4, 6, (3, 2), groups=2)
    assert tuple(m.weight.shape) == (6, 2, 3, 2) and tuple(m.bias.shape) == (6,)
    bound = 1 / (2 * 3 * 2) ** 0.5
    assert float(m.weight.detach().abs().max()) <= bound
    assert float(m.bias.detach().abs().max()) <= bound


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"groups": 0}, "groups must be a positive integer"),
        ({"groups": 3}, "in_channels must be divisible by groups"),
        ({"padding": "full"}, "Invalid padding string 'full'"),
        ({"padding": "same", "stride": 2}, "padding='same' is not supported for strided"),
        ({"padding_mode": "mirror"}, "padding_mode must be one of"),
    ],
)
def test_conv_argument_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        knn.Conv2d(4, 6, 3, **kwargs)
    with pytest.raises(ValueError, match=message):
        torch.nn.Conv2d(4, 6, 3, **kwargs)


def test_conv_channel_mismatch_raises():
    m = knn.Conv2d(3, 4, 3)
    with pytest.raises(RuntimeError):
        m(kiln.zeros((1, 2, 5, 5)))


POOLS = [
    ("MaxPool2d", (2,), {}, (2, 3, 6, 6)),
    ("MaxPool2d", (3,), {"stride": 2, "padding": 1, "ceil_mode": True}, (2, 3, 7, 7)),
    ("MaxPool2d", ((2, 3),), {"dilation": 2}, (1, 2, 8, 9)),
    ("MaxPool2d", (2,), {}, (3, 6, 6)),
    ("AvgPool2d", (2,), {}, (2, 3, 6, 6)),
    ("AvgPool2d", (3,), {"stride": 2, "padding": 1, "count_include_pad": False}, (2, 3, 7, 7)),
    ("AvgPool2d", (3,), {"stride": 1, "ceil_mode": True, "divisor_override": 2}, (1, 2, 5, 5)),
    ("AdaptiveAvgPool2d", ((2, 3),), {}, (2, 3, 7, 8)),
    ("AdaptiveAvgPool2d", (1,), {}, (2, 3, 5, 5)),
    ("AdaptiveAvgPool2d", ((None, 2),), {}, (2, 3, 5, 6)),
    ("AdaptiveMaxPool2d", ((2, 2),), {}, (2, 3, 5, 5)),
    ("MaxPool1d", (2,), {}, (2, 3, 8)),
    ("AvgPool1d", (3,), {"stride": 1}, (2, 3, 8)),
    ("AdaptiveAvgPool1d", (3,), {}, (2, 3, 8)),
]


@pytest.mark.parametrize("name,args,kwargs,shape", POOLS, ids=lambda v: str(v))
def test_pool(name, args, kwargs, shape):
    tm, km = pair(name, *args, **kwargs)
    t, k = make(shape, "float32")
    check(tm, km, (t,), (k,))
    t, k = noncontiguous(shape, "float32")
    check(tm, km, (t,), (k,))


def test_max_pool_return_indices():
    tm, km = pair("MaxPool2d", 2, return_indices=True)
    t, k = make((2, 3, 6, 6), "float32")
    (kout, kidx), (tout, tidx) = run_both(tm, km, (t,), (k,))
    assert_close(kout, tout)
    assert_close(kidx, tidx)
