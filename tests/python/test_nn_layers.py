"""kiln.nn layers vs torch.nn layers with the same state: Linear, Embedding, norms, dropout,
activations, reshapes. (Conv/pool, attention and losses have their own files.)"""

import numpy as np
import pytest
import torch
from conftest import FLOAT_DTYPES, assert_close, make, to_kiln
from models.helpers import check, noncontiguous, pair, run_both

import kiln
import kiln.nn as knn

# ---------------------------------------------------------------------------------------- Linear


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("bias", [True, False])
def test_linear(dtype, bias):
    tm, km = pair("Linear", 5, 3, bias=bias, dtype=dtype)
    for shape in [(4, 5), (2, 3, 5), (5,), (0, 5)]:
        t, k = make(shape, dtype)
        check(tm, km, (t,), (k,), dtype)
    t, k = make((5, 4), dtype)
    check(tm, km, (t.t(),), (k.t(),), dtype)  # non-contiguous input


def test_linear_shape_mismatch_raises():
    km = knn.Linear(5, 3)
    with pytest.raises(RuntimeError):
        km(kiln.zeros((2, 4)))


def test_linear_default_init_bounds():
    kiln.manual_seed(0)
    km = knn.Linear(16, 8)
    bound = 1 / 4  # 1/sqrt(fan_in): kaiming_uniform_(a=sqrt(5)) has the same bound
    w, b = km.weight.detach(), km.bias.detach()
    assert float(w.abs().max()) <= bound and float(b.abs().max()) <= bound
    assert float(w.abs().max()) > bound / 2  # really drawn, not left at zero
    assert km.weight.requires_grad and isinstance(km.weight, knn.Parameter)


def test_identity_and_bilinear():
    x = kiln.ones(3)
    assert knn.Identity(1, foo=2)(x) is x
    tm, km = pair("Bilinear", 3, 4, 2)
    t1, k1 = make((5, 3), "float32", seed=1)
    t2, k2 = make((5, 4), "float32", seed=2)
    check(tm, km, (t1, t2), (k1, k2))


# ------------------------------------------------------------------------------------- Embedding


@pytest.mark.parametrize("dtype", ["float32", "float64", "bfloat16"])
@pytest.mark.parametrize("padding_idx", [None, 0, -1])
def test_embedding(dtype, padding_idx):
    tm, km = pair("Embedding", 10, 4, padding_idx=padding_idx, dtype=dtype)
    idx = torch.randint(0, 10, (3, 5), generator=torch.Generator().manual_seed(0))
    check(tm, km, (idx,), (to_kiln(idx),), dtype, atol=0, rtol=0)
    check(tm, km, (idx.t(),), (to_kiln(idx).t(),), dtype, atol=0, rtol=0)
    check(tm, km, (idx[0, 0],), (to_kiln(idx[0, 0]),), dtype, atol=0, rtol=0)  # 0-d index


def test_embedding_padding_row_is_zero_and_from_pretrained():
    km = knn.Embedding(6, 3, padding_idx=-2)
    assert km.padding_idx == 4
    assert km.weight.detach().select(0, 4).tolist() == [0.0, 0.0, 0.0]
    table = kiln.from_numpy(torch.arange(12.0).reshape(4, 3).numpy())
    emb = knn.Embedding.from_pretrained(table)
    assert not emb.weight.requires_grad and emb.weight.data_ptr() == table.data_ptr()
    assert repr(emb) == repr(torch.nn.Embedding.from_pretrained(torch.zeros(4, 3)))
    assert emb(kiln.from_numpy(torch.tensor([3, 0]).numpy())).tolist() == [
        [9.0, 10.0, 11.0],
        [0.0, 1.0, 2.0],
    ]
    assert knn.Embedding.from_pretrained(table, freeze=False).weight.requires_grad


def test_embedding_errors():
    with pytest.raises(AssertionError, match="Padding_idx must be within num_embeddings"):
        knn.Embedding(5, 2, padding_idx=5)
    with pytest.raises(AssertionError, match="Padding_idx must be within num_embeddings"):
        knn.Embedding(5, 2, padding_idx=-6)
    with pytest.raises(AssertionError, match="expected to be 2-dimensional"):
        knn.Embedding.from_pretrained(kiln.zeros(3))
    with pytest.raises(AssertionError, match="Shape of weight does not match"):
        knn.Embedding(4, 2, _weight=kiln.zeros((3, 2)))


# ----------------------------------------------------------------------------------------- norms


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize(
    "shape,normalized,kwargs",
    [
        ((2, 3, 4), 4, {}),
        ((2, 3, 4), (3, 4), {"eps": 1e-3}),
        ((5, 4), [4], {"elementwise_affine": False}),
        ((2, 3, 4), 4, {"bias": False}),
    ],
)
def test_layer_norm(dtype, shape, normalized, kwargs):
    tm, km = pair("LayerNorm", normalized, dtype=dtype, **kwargs)
    t, k = make(shape, dtype)
    check(tm, km, (t,), (k,), dtype)
    t, k = noncontiguous(shape, dtype)
    check(tm, km, (t,), (k,), dtype)


@pytest.mark.parametrize("dtype", ["float32", "float64", "bfloat16"])
@pytest.mark.parametrize("eps", [None, 1e-6])
@pytest.mark.parametrize("affine", [True, False])
def test_rms_norm(dtype, eps, affine):
    tm, km = pair("RMSNorm", (3, 4), eps=eps, elementwise_affine=affine, dtype=dtype)
    t, k = make((2, 3, 4), dtype)
    check(tm, km, (t,), (k,), dtype)


@pytest.mark.parametrize("kwargs", [{}, {"affine": False}, {"eps": 1e-2}])
@pytest.mark.parametrize("shape", [(2, 6, 4, 4), (3, 6), (2, 6, 5)])
def test_group_norm(kwargs, shape):
    tm, km = pair("GroupNorm", 3, 6, **kwargs)
    t, k = make(shape, "float32")
    check(tm, km, (t,), (k,))


def test_group_norm_errors():
    with pytest.raises(
        ValueError, match=r"num_channels \(5\) must be divisible by num_groups \(2\)"
    ):
        knn.GroupNorm(2, 5)


BN_CASES = [("BatchNorm1d", (4, 3)), ("BatchNorm1d", (4, 3, 5)), ("BatchNorm2d", (4, 3, 5, 5))]
BN_KWARGS = [
    {},
    {"momentum": None},
    {"affine": False},
    {"track_running_stats": False},
    {"eps": 0.1},
]


@pytest.mark.parametrize("cls,shape", BN_CASES)
@pytest.mark.parametrize("kwargs", BN_KWARGS)
def test_batch_norm_train_then_eval(cls, shape, kwargs):
    tm, km = pair(cls, 3, **kwargs)
    for step in range(3):
        t, k = make(shape, "float32", seed=step)
        check(tm, km, (t,), (k,))
        for (kname, kb), (tname, tb) in zip(km.named_buffers(), tm.named_buffers(), strict=True):
            assert kname == tname
            assert_close(kb, tb, atol=1e-5, rtol=1e-5)
    tm.eval()
    km.eval()
    t, k = make(shape, "float32", seed=7)
    check(tm, km, (t,), (k,))
    if km.num_batches_tracked is not None:
        assert int(km.num_batches_tracked) == 3


def test_batch_norm_non_contiguous_and_float64():
    tm, km = pair("BatchNorm2d", 3, dtype="float64")
    t, k = make((4, 5, 5, 3), "float64")
    check(tm, km, (t.permute(0, 3, 1, 2),), (k.permute(0, 3, 1, 2),), "float64")


def test_batch_norm_input_dim_errors():
    with pytest.raises(ValueError, match=r"expected 4D input \(got 3D input\)"):
        knn.BatchNorm2d(3)(kiln.zeros((2, 3, 4)))
    with pytest.raises(ValueError, match=r"expected 2D or 3D input \(got 4D input\)"):
        knn.BatchNorm1d(3)(kiln.zeros((2, 3, 4, 4)))


# --------------------------------------------------------------------------------------- dropout


def test_dropout_eval_is_identity_and_train_extremes():
    t, k = make((4, 5), "float32")
    m = knn.Dropout(0.5).eval()
    assert_close(m(k), t)
    assert_close(knn.Dropout(0.0)(k), t)
    assert_close(knn.Dropout(1.0)(k), torch.zeros(4, 5))


def test_dropout_train_scales_kept_values():
    kiln.manual_seed(0)
    out = knn.Dropout(0.5)(kiln.ones(4000)).numpy()
    assert set(out.tolist()) <= {0.0, 2.0}
    assert 0.4 < (out == 0).mean() < 0.6


def test_dropout2d_zeroes_whole_channels():
    kiln.manual_seed(0)
    out = torch.from_numpy(knn.Dropout2d(0.5)(kiln.ones((8, 16, 3, 3))).numpy())
    per_channel = out.flatten(2)
    assert ((per_channel == 0).all(-1) | (per_channel == 2).all(-1)).all()


def test_dropout_repr_and_errors():
    assert repr(knn.Dropout(0.3, inplace=True)) == repr(torch.nn.Dropout(0.3, inplace=True))
    with pytest.raises(
        ValueError, match="dropout probability has to be between 0 and 1, but got 1.5"
    ):
        knn.Dropout(1.5)


# ----------------------------------------------------------------------------------- activations

ACTIVATIONS = [
    ("ReLU", {}),
    ("GELU", {}),
    ("GELU", {"approximate": "tanh"}),
    ("SiLU", {}),
    ("Tanh", {}),
    ("Sigmoid", {}),
    ("Softmax", {"dim": -1}),
    ("Softmax", {"dim": 0}),
    ("LogSoftmax", {"dim": 1}),
    ("Softmin", {"dim": 1}),
    ("LeakyReLU", {}),
    ("LeakyReLU", {"negative_slope": 0.2}),
    ("ELU", {"alpha": 0.5}),
    ("CELU", {"alpha": 2.0}),
    ("SELU", {}),
    ("Hardtanh", {"min_val": -0.5, "max_val": 2.0}),
    ("ReLU6", {}),
    ("Hardswish", {}),
    ("Hardsigmoid", {}),
    ("Mish", {}),
    ("Softplus", {"beta": 2.0, "threshold": 5.0}),
    ("Softsign", {}),
    ("Tanhshrink", {}),
    ("LogSigmoid", {}),
    ("GLU", {}),
    ("Threshold", {"threshold": 0.1, "value": 20.0}),
    ("PReLU", {}),
]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name,kwargs", ACTIVATIONS, ids=lambda v: str(v))
def test_activation(name, kwargs, dtype):
    tm, km = pair(name, dtype=dtype, **kwargs)
    t, k = make((4, 3, 6), dtype)
    check(tm, km, (t,), (k,), dtype)
    check(tm, km, (t.transpose(0, 2),), (k.transpose(0, 2),), dtype)
    t0, k0 = make((0, 4), dtype)
    check(tm, km, (t0,), (k0,), dtype)


@pytest.mark.parametrize("name", ["ReLU", "SiLU", "Mish", "LeakyReLU", "ELU", "Hardtanh", "ReLU6"])
def test_inplace_activation_writes_input(name):
    tm, km = pair(name, inplace=True)
    t, k = make((3, 4), "float32")
    out, expected = run_both(tm, km, (t,), (k,))
    assert_close(out, expected)
    assert_close(k, t)  # both inputs were overwritten the same way


def test_activation_reprs_and_errors():
    for name, kwargs in ACTIVATIONS + [("ReLU", {"inplace": True}), ("ELU", {"inplace": True})]:
        assert repr(getattr(knn, name)(**kwargs)) == repr(getattr(torch.nn, name)(**kwargs))
    with pytest.raises(
        AssertionError, match=r"max_val \(1.0\) must be greater than min_val \(2.0\)"
    ):
        knn.Hardtanh(2.0, 1.0)


def test_softmax_without_dim_warns_and_uses_legacy_dim():
    tm, km = pair("Softmax")
    t, k = make((3, 4), "float32")
    with pytest.warns(UserWarning, match="Implicit dimension choice for softmax"):
        out = km(k)
    with pytest.warns(UserWarning):
        expected = tm(t)
    assert_close(out, expected)


# -------------------------------------------------------------------------------------- reshapes


@pytest.mark.parametrize(
    "name,args,shape",
    [
        ("Flatten", (), (2, 3, 4, 5)),
        ("Flatten", (0, 2), (2, 3, 4, 5)),
        ("Flatten", (-3, -2), (2, 3, 4, 5)),
        ("Unflatten", (1, (3, 4)), (2, 12, 5)),
        ("Unflatten", (-1, (2, -1)), (2, 3, 6)),
    ],
)
def test_flatten_unflatten(name, args, shape):
    tm, km = pair(name, *args)
    t, k = make(shape, "float32")
    check(tm, km, (t,), (k,))


def test_unflatten_rejects_non_int_sizes():
    with pytest.raises(TypeError, match="unflattened_size must be tuple of ints"):
        knn.Unflatten(1, (2.0, 3))
    with pytest.raises(TypeError, match="unflattened_size must be a tuple of ints"):
        knn.Unflatten(1, 6)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"scale_factor": 2},
        {"size": (5, 7)},
        {"size": (5, 7), "mode": "bilinear"},
        {"scale_factor": 1.5, "mode": "bilinear", "align_corners": True},
    ],
)
def test_upsample(kwargs):
    tm, km = pair("Upsample", **kwargs)
    t, k = make((1, 2, 3, 4), "float32")
    check(tm, km, (t,), (k,))


@pytest.mark.parametrize("norm_type", [2.0, 1.0])
def test_embedding_max_norm_renormalizes_the_rows_read_as_torch(norm_type):
    g = np.random.default_rng(0)
    w = (g.standard_normal((10, 4)) * 3).astype(np.float32)
    idx = np.array([[1, 3, 3], [7, 1, 0]])
    kw, tw = kiln.tensor(w.copy()), torch.tensor(w.copy())
    ours = kiln.nn.functional.embedding(kiln.tensor(idx), kw, max_norm=2.0, norm_type=norm_type)
    theirs = torch.nn.functional.embedding(torch.tensor(idx), tw, max_norm=2.0,
                                           norm_type=norm_type)
    np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(kw.numpy(), tw.numpy(), rtol=1e-6, atol=1e-6)  # weight renormed
    assert np.array_equal(kw.numpy()[[2, 4, 5, 6, 8, 9]], w[[2, 4, 5, 6, 8, 9]])  # rows not read
    layer = kiln.nn.Embedding(10, 4, max_norm=1.0, norm_type=norm_type)
    out = layer(kiln.tensor(idx))
    assert (out.detach().norm(norm_type, dim=-1).numpy() <= 1.0 + 1e-5).all()
