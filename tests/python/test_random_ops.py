"""normal, bernoulli, multinomial and the dropout family (kiln.* and kiln.nn.functional)."""

import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as TF
from conftest import FLOAT_DTYPES, assert_close, make

import kiln
import kiln.nn.functional as F

N = 200_000


def as_np(t):
    return (t.float() if t.dtype == kiln.bfloat16 else t).numpy().astype(np.float64)


def gen(seed=0):
    return kiln.Generator().manual_seed(seed)


# ---- normal -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "mean, std",
    [
        (("float32", (N,)), 2.0),
        (1.5, ("float64", (N,))),
        (("float16", (N, 1)), ("float32", (1,))),
        (("bfloat16", (N,)), ("bfloat16", ())),
        (("float32", ()), ("float64", ())),
    ],
)
def test_normal_tensor_forms(mean, std):
    def build(spec, lib):
        if not isinstance(spec, tuple):
            return spec
        dtype, shape = spec
        return lib.full(shape, 0.5, dtype=getattr(lib, dtype))

    km, ks = build(mean, kiln), build(std, kiln)
    tm, ts = build(mean, torch), build(std, torch)
    k = kiln.normal(km, ks, generator=gen(1))
    t = torch.normal(tm, ts)
    assert k.dtype.name == str(t.dtype)[6:] and tuple(k.shape) == tuple(t.shape)
    x = as_np(k).ravel()
    m = mean if not isinstance(mean, tuple) else 0.5
    s = std if not isinstance(std, tuple) else 0.5
    if x.size > 1000:
        assert abs(x.mean() - m) < 0.02 and abs(x.std() - s) < 0.02


def test_normal_broadcasts_per_element_parameters():
    mean = kiln.tensor([[-10.0], [0.0], [10.0]])
    std = kiln.tensor([0.1, 1.0, 5.0, 0.0])
    k = kiln.normal(
        mean.expand(3, 4).contiguous().unsqueeze(0).expand(2000, 3, 4), std, generator=gen(2)
    )
    x = as_np(k)
    assert k.shape == (2000, 3, 4)
    np.testing.assert_allclose(
        x.mean(axis=0), np.broadcast_to([[-10], [0], [10]], (3, 4)), atol=0.3
    )
    np.testing.assert_allclose(
        x.std(axis=0), np.broadcast_to([0.1, 1.0, 5.0, 0.0], (3, 4)), rtol=0.1, atol=1e-6
    )


def test_normal_float_form_and_errors():
    k = kiln.normal(2.0, 3.0, (N,), generator=gen(3))
    assert k.dtype == kiln.float32
    assert abs(as_np(k).mean() - 2) < 0.05 and abs(as_np(k).std() - 3) < 0.05
    assert kiln.normal(2, 3, (2,), dtype=kiln.float64).dtype == kiln.float64
    assert kiln.normal(kiln.zeros(3)).shape == (3,)
    with pytest.raises(RuntimeError, match="std >= 0.0"):
        kiln.normal(kiln.zeros(2), -1.0)
    with pytest.raises(RuntimeError, match="std >= 0.0"):
        kiln.normal(kiln.zeros(2), kiln.tensor([1.0, -1.0]))
    with pytest.raises(RuntimeError, match="std >= 0.0"):
        kiln.normal(0.0, -1.0, (2,))
    with pytest.raises(NotImplementedError, match="int64"):
        kiln.normal(kiln.tensor([1, 2]), 1)
    with pytest.raises(RuntimeError, match="cannot be broadcast"):
        kiln.normal(kiln.zeros(3), kiln.ones(2))
    with pytest.raises(TypeError, match="size"):
        kiln.normal(0.0, 1.0)
    with pytest.raises(TypeError, match="size"):
        kiln.normal(kiln.zeros(2), 1.0, (3,))


# ---- bernoulli ----------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_bernoulli_from_probabilities(dtype):
    probs = kiln.tensor([0.0, 0.2, 0.9, 1.0], dtype=getattr(kiln, dtype)).expand(N // 4, 4)
    k = kiln.bernoulli(probs, generator=gen(4))
    t = torch.bernoulli(torch.full((2, 4), 0.5, dtype=getattr(torch, dtype)))
    assert k.dtype.name == str(t.dtype)[6:] and k.shape == (N // 4, 4)
    x = as_np(k)
    assert set(np.unique(x).tolist()) <= {0.0, 1.0}
    np.testing.assert_allclose(x.mean(axis=0), [0.0, 0.2, 0.9, 1.0], atol=0.01)
    m = probs.bernoulli(generator=gen(4))
    assert m.tolist() == k.tolist()


def test_bernoulli_scalar_p_and_inplace():
    x = kiln.bernoulli(kiln.zeros(N, dtype=kiln.float64), 0.3, generator=gen(5))
    assert x.dtype == kiln.float64 and abs(as_np(x).mean() - 0.3) < 0.01
    for dtype in ("int64", "bool", "uint8", "float16"):
        t = kiln.empty(N, dtype=getattr(kiln, dtype))
        assert t.bernoulli_(0.7, generator=gen(6)) is t
        assert abs(as_np(t).mean() - 0.7) < 0.01
    t = kiln.empty(4, 3).t()
    t.bernoulli_(kiln.tensor([0.0, 1.0, 0.0, 1.0]))
    assert t.tolist() == [[0.0, 1.0, 0.0, 1.0]] * 3
    assert kiln.zeros(5).bernoulli_().shape == (5,)


def test_bernoulli_errors():
    with pytest.raises(RuntimeError, match="p to be in \\[0, 1\\], but got p=1.5"):
        kiln.zeros(3).bernoulli_(1.5)
    with pytest.raises(RuntimeError, match="p to be in \\[0, 1\\]"):
        kiln.bernoulli(kiln.zeros(3), -0.5)
    with pytest.raises(RuntimeError, match="probabilities to be in \\[0, 1\\]"):
        kiln.bernoulli(kiln.tensor([0.5, 2.0]))
    with pytest.raises(RuntimeError, match="probabilities to be in \\[0, 1\\]"):
        kiln.bernoulli(kiln.tensor([float("nan")]))
    with pytest.raises(NotImplementedError, match="int64"):
        kiln.bernoulli(kiln.tensor([1, 0]))
    with pytest.raises(RuntimeError, match="cannot be broadcast"):
        kiln.zeros(3).bernoulli_(kiln.full((2,), 0.5))


# ---- multinomial --------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("replacement", [True, False])
def test_multinomial_frequencies(dtype, replacement):
    w = [1.0, 0.0, 3.0, 4.0]
    probs = kiln.tensor(w, dtype=getattr(kiln, dtype))
    if replacement:
        k = kiln.multinomial(probs, 40_000, replacement=True, generator=gen(7))
        counts = np.bincount(k.numpy(), minlength=4) / 40_000
        np.testing.assert_allclose(counts, np.array(w) / 8, atol=0.01)
    else:
        rows = probs.unsqueeze(0).expand(20_000, 4)
        k = kiln.multinomial(rows, 1, generator=gen(7))
        counts = np.bincount(k.numpy().ravel(), minlength=4) / 20_000
        np.testing.assert_allclose(counts, np.array(w) / 8, atol=0.015)
        both = kiln.multinomial(rows, 3, generator=gen(8)).numpy()
        assert np.all(np.sort(both, axis=1) == [0, 2, 3])  # the zero-weight category never appears
    t = torch.multinomial(torch.tensor(w, dtype=getattr(torch, dtype)), 3, replacement)
    assert k.dtype == kiln.int64 and t.dtype == torch.int64


def test_multinomial_without_replacement_second_draw_is_renormalized():
    rows = kiln.tensor([0.5, 0.25, 0.25]).expand(30_000, 3)
    k = kiln.multinomial(rows, 2, generator=gen(9)).numpy()
    first0 = k[:, 0] == 0
    # P(second = 1 | first = 0) = 0.25 / 0.5
    assert abs(np.mean(k[first0, 1] == 1) - 0.5) < 0.02
    assert np.all(k[:, 0] != k[:, 1])


def test_multinomial_shapes_and_method():
    t, k = make((3, 5), "float32", low=0.1, high=1.0)
    assert k.multinomial(2).shape == tuple(torch.multinomial(t, 2).shape)
    assert kiln.multinomial(kiln.ones(0, 3), 2, True).shape == (0, 2)
    assert kiln.multinomial(k.t().contiguous().t(), 5).shape == (3, 5)
    perm = kiln.multinomial(kiln.ones(6), 6, generator=gen(1)).tolist()
    assert sorted(perm) == list(range(6))


@pytest.mark.parametrize(
    "probs, n, repl, match",
    [
        ([[[1.0]]], 1, False, "1 or 2 dim"),
        ([1.0, 2.0], 0, True, "n_sample <= 0"),
        ([1.0, 1.0, 1.0], 4, False, "n_sample > prob_dist.size\\(-1\\)"),
        ([1.0, 0.0, 0.0], 2, False, "not enough non-negative category"),
        ([[1.0, 1.0], [1.0, 0.0]], 2, False, "not enough non-negative category"),
        ([1.0, -1.0, 0.0], 1, True, "`inf`, `nan` or element < 0"),
        ([1.0, float("inf")], 1, True, "`inf`, `nan` or element < 0"),
        ([float("nan"), 1.0], 1, True, "`inf`, `nan` or element < 0"),
        ([0.0, 0.0], 1, True, "sum of probabilities <= 0"),
        ([], 1, True, "no categories"),
    ],
)
def test_multinomial_errors(probs, n, repl, match):
    with pytest.raises(RuntimeError, match=match):
        kiln.multinomial(kiln.tensor(probs), n, repl)


def test_multinomial_integer_input_is_rejected():
    with pytest.raises(RuntimeError, match="floating-point dtypes"):
        kiln.multinomial(kiln.tensor([1, 2]), 1)


# ---- dropout ------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("p", [0.2, 0.5, 0.9])
def test_dropout_mask_rate_and_scale(dtype, p):
    x = kiln.full((N,), 2.0, dtype=getattr(kiln, dtype))
    y = F.dropout(x, p)
    ref = TF.dropout(torch.full((4,), 2.0, dtype=getattr(torch, dtype)), p)
    assert y.dtype.name == str(ref.dtype)[6:] and y.shape == x.shape
    v = as_np(y)
    kept = v != 0
    assert abs(kept.mean() - (1 - p)) < 0.01
    np.testing.assert_allclose(v[kept], 2.0 / (1 - p), rtol=1e-2)
    assert abs(v.mean() - 2.0) < 0.1  # unbiased in expectation
    assert x.tolist()[:3] == [2.0, 2.0, 2.0]  # not in place


def test_dropout_edge_cases():
    x = kiln.ones(100)
    assert F.dropout(x, 0.5, training=False) is x
    assert F.dropout(x, 0.0) is x
    assert kiln.dropout(x, 0.5, False) is x
    assert kiln.dropout(x, 0.5, train=False) is x
    assert as_np(F.dropout(x, 1.0)).sum() == 0
    nan = kiln.tensor([float("nan"), 1.0])
    assert_close(F.dropout(nan, 1.0), TF.dropout(torch.tensor([float("nan"), 1.0]), 1.0))
    y = kiln.ones(4, 5).t()
    out = F.dropout(y, 0.5, inplace=True)
    assert out is y and set(np.unique(as_np(y)).tolist()) <= {0.0, 2.0}
    e = kiln.ones(0, 3)
    assert F.dropout(e, 0.5).shape == (0, 3)
    s = F.dropout(kiln.tensor(3.0), 0.5)
    assert s.shape == () and s.item() in (0.0, 6.0)


def test_dropout_is_reproducible():
    kiln.manual_seed(3)
    a = F.dropout(kiln.ones(1000), 0.5).tolist()
    kiln.manual_seed(3)
    assert F.dropout(kiln.ones(1000), 0.5).tolist() == a
    assert (
        kiln.dropout(kiln.ones(1000), 0.5, generator=gen(1)).tolist()
        == kiln.dropout(kiln.ones(1000), 0.5, generator=gen(1)).tolist()
    )


def test_dropout_errors():
    with pytest.raises(ValueError, match="between 0 and 1, but got 1.5"):
        F.dropout(kiln.ones(3), 1.5)
    with pytest.raises(ValueError, match="between 0 and 1"):
        F.dropout(kiln.ones(3), -0.1, training=False)
    with pytest.raises(RuntimeError, match="between 0 and 1, but got 1.5"):
        kiln.dropout(kiln.ones(3), 1.5, True)
    with pytest.raises(RuntimeError, match="floating point"):
        F.dropout(kiln.ones(3, dtype=kiln.int64), 0.5)


@pytest.mark.parametrize(
    "fn, shape, batched",
    [
        ("dropout1d", (4, 30, 5), True),
        ("dropout1d", (30, 5), False),
        ("dropout2d", (4, 30, 3, 3), True),
        ("dropout2d", (30, 8, 2), True),
        ("dropout3d", (2, 30, 2, 2, 2), True),
        ("dropout3d", (30, 2, 2, 2), False),
    ],
)
def test_channel_dropout_zeroes_whole_channels(fn, shape, batched):
    x = kiln.ones(*shape)
    if fn == "dropout2d" and len(shape) == 3:
        with pytest.warns(UserWarning, match="3D input"):
            y = F.dropout2d(x, 0.5)
    else:
        y = getattr(F, fn)(x, 0.5)
    assert y.shape == shape
    v = as_np(y)
    chans = v.reshape((shape[0] * shape[1], -1) if batched else (shape[0], -1))
    assert np.all((chans == 0).all(axis=1) | (chans == 2).all(axis=1))
    assert 0.2 < (chans[:, 0] == 0).mean() < 0.8
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # dropout2d's 3-D warning is checked above
        assert getattr(F, fn)(x, 0.5, training=False) is x


def test_channel_dropout_inplace_and_errors():
    x = kiln.ones(2, 30, 4)
    assert F.dropout1d(x, 0.5, inplace=True) is x
    assert set(np.unique(as_np(x)).tolist()) <= {0.0, 2.0}
    u = kiln.ones(30, 4)
    assert F.dropout1d(u, 0.5, inplace=True) is u
    assert set(np.unique(as_np(u)).tolist()) <= {0.0, 2.0}
    with pytest.raises(RuntimeError, match="Expected 2D or 3D input"):
        F.dropout1d(kiln.ones(2, 3, 4, 5), 0.5)
    with pytest.raises(ValueError, match="between 0 and 1"):
        F.dropout2d(kiln.ones(2, 3, 4, 5), 2.0)
    with pytest.warns(UserWarning, match="5-D input"):
        F.dropout2d(kiln.ones(2, 3, 1, 1, 1), 0.5)
    with pytest.raises(RuntimeError, match="at least 2 dimensions"):
        kiln.feature_dropout(kiln.ones(3), 0.5, True)


@pytest.mark.parametrize("fn", ["alpha_dropout", "feature_alpha_dropout"])
def test_alpha_dropout_keeps_mean_and_variance(fn):
    kiln.manual_seed(10)
    x = kiln.randn(400, 500, dtype=kiln.float64)
    y = getattr(F, fn)(x, 0.3, training=True)
    v = as_np(y)
    assert abs(v.mean()) < 0.05 and abs(v.std() - 1) < 0.05
    assert getattr(F, fn)(x, 0.3) is x  # training defaults to False
    ones = kiln.ones(1000, 10)
    vals = np.unique(np.round(as_np(getattr(F, fn)(ones, 0.5, True)), 6))
    ref = np.unique(np.round(getattr(TF, fn)(torch.ones(1000, 10), 0.5, True).numpy(), 6))
    np.testing.assert_allclose(vals, ref, rtol=1e-5)
    assert as_np(getattr(F, fn)(ones, 1.0, True)).sum() == 0
