"""kiln.nn loss modules vs torch.nn's on the same inputs."""

import pytest
import torch
from conftest import assert_close, make, to_kiln

import kiln.nn as knn

REDUCTIONS = ["mean", "sum", "none"]


def both(name, *args, **kwargs):
    """The loss module in torch and kiln; tensor kwargs (weights) are converted for kiln."""
    k_kwargs = {k: to_kiln(v) if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}
    tm, km = getattr(torch.nn, name)(*args, **kwargs), getattr(knn, name)(*args, **k_kwargs)
    assert repr(km) == repr(tm)
    return tm, km


def compare(tm, km, t_inputs, atol=1e-5, rtol=1e-5):
    expected = tm(*t_inputs)
    got = km(*[to_kiln(t) for t in t_inputs])
    assert_close(got, expected, atol=atol, rtol=rtol)


def class_targets(n, c, seed=0, ignore=None):
    t = torch.randint(0, c, (n,), generator=torch.Generator().manual_seed(seed))
    if ignore is not None:
        t[::3] = ignore
    return t


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("name", ["MSELoss", "L1Loss", "SmoothL1Loss", "HuberLoss"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_regression_losses(name, reduction, dtype):
    tm, km = both(name, reduction=reduction)
    a, _ = make((4, 5), dtype, seed=1)
    b, _ = make((4, 5), dtype, seed=2)
    compare(tm, km, (a, b))
    compare(tm, km, (a.t(), b.t()))


def test_regression_loss_options():
    a, _ = make((3, 4), "float32", seed=1)
    b, _ = make((3, 4), "float32", seed=2)
    compare(*both("SmoothL1Loss", beta=0.5), (a, b))
    compare(*both("HuberLoss", delta=2.0), (a, b))


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"ignore_index": 1},
        {"label_smoothing": 0.1},
        {"weight": torch.tensor([1.0, 2.0, 0.5, 1.5])},
    ],
    ids=["plain", "ignore", "smoothing", "weight"],
)
def test_cross_entropy(kwargs, reduction):
    tm, km = both("CrossEntropyLoss", reduction=reduction, **kwargs)
    logits, _ = make((6, 4), "float32")
    compare(tm, km, (logits, class_targets(6, 4)))
    spatial, _ = make((2, 4, 3, 3), "float32")
    target = torch.randint(0, 4, (2, 3, 3), generator=torch.Generator().manual_seed(3))
    compare(tm, km, (spatial, target))


def test_cross_entropy_probability_targets():
    tm, km = both("CrossEntropyLoss")
    logits, _ = make((5, 3), "float32")
    probs = torch.softmax(make((5, 3), "float32", seed=4)[0], dim=1)
    compare(tm, km, (logits, probs))


def test_cross_entropy_weight_is_a_buffer():
    _, km = both("CrossEntropyLoss", weight=torch.ones(3))
    assert [n for n, _ in km.named_buffers()] == ["weight"]
    assert list(km.state_dict()) == ["weight"]


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_nll_loss(reduction):
    tm, km = both("NLLLoss", reduction=reduction, ignore_index=2)
    logp = torch.log_softmax(make((6, 4), "float32")[0], dim=1)
    compare(tm, km, (logp, class_targets(6, 4, ignore=2)))


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("pos_weight", [None, torch.tensor([1.0, 2.0, 0.5])])
def test_bce_with_logits(reduction, pos_weight):
    tm, km = both("BCEWithLogitsLoss", reduction=reduction, pos_weight=pos_weight)
    logits, _ = make((4, 3), "float32")
    target = (make((4, 3), "float32", seed=5)[0] > 0).float()
    compare(tm, km, (logits, target))


def test_bce_and_kl_div():
    probs = torch.sigmoid(make((4, 3), "float32")[0])
    target = (make((4, 3), "float32", seed=5)[0] > 0).float()
    compare(*both("BCELoss"), (probs, target))
    logp = torch.log_softmax(make((4, 3), "float32")[0], dim=1)
    q = torch.softmax(make((4, 3), "float32", seed=6)[0], dim=1)
    compare(*both("KLDivLoss", reduction="batchmean"), (logp, q))
    compare(*both("KLDivLoss", reduction="sum", log_target=True), (logp, q.log()))


def test_legacy_reduction_flags_warn_and_map():
    with pytest.warns(UserWarning, match="reduction='sum'"):
        m = knn.MSELoss(size_average=False)
    assert m.reduction == "sum"
    with pytest.warns(UserWarning):
        assert knn.L1Loss(reduce=False).reduction == "none"


def test_loss_shape_mismatch_raises():
    tm, km = both("CrossEntropyLoss")
    logits, _ = make((6, 4), "float32")
    with pytest.raises((RuntimeError, ValueError, IndexError)):
        km(to_kiln(logits), to_kiln(class_targets(5, 4)))
