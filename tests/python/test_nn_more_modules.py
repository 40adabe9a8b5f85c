"""kiln.nn's folds, shrinks, 3-d and LP pools, local response norm, SyncBatchNorm, lazy layers,
the multi-class margin losses, triplet loss with a distance function, Gumbel-softmax,
EmbeddingBag, affine_grid and grid_sample against torch's: outputs, input and parameter
gradients, reprs, error paths, and kiln.compile with no eager fallback."""

import copy
import math
import re
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import kiln
import kiln.nn.functional as KF
from kiln._capture.backend_compiled import CpuBackend

RNG = np.random.default_rng(0)
DTYPES = ["float32", "float64"]
TOL = {"float32": (2e-5, 2e-5), "float64": (1e-10, 1e-10)}


def arr(*shape, dtype="float64", scale=1.0):
    return np.asarray(RNG.standard_normal(shape) * scale).astype(dtype)


def both(a, grad=False):
    """The same values as a kiln and a torch tensor (leaves requiring grad when asked)."""
    k, t = kiln.from_numpy(np.array(a, copy=True)), torch.from_numpy(np.array(a, copy=True))
    if grad:
        k.requires_grad_(), t.requires_grad_()
    return k, t


def close(k, t, dtype="float64", scale=1.0):
    rtol, atol = TOL[dtype]
    np.testing.assert_allclose(
        k.detach().numpy(), t.detach().numpy(), rtol=rtol * scale, atol=atol * scale
    )


def run_both(kfn, tfn, arrays, grads=(0,), dtype="float64", scale=1.0):
    """kfn/tfn on the same inputs; outputs and the gradients of a random weighting compared."""
    pairs = [both(a, i in grads) for i, a in enumerate(arrays)]
    ko, to = kfn(*[p[0] for p in pairs]), tfn(*[p[1] for p in pairs])
    assert tuple(ko.shape) == tuple(to.shape)
    close(ko, to, dtype, scale)
    if grads and to.requires_grad:
        w = arr(*to.shape, dtype=dtype)
        (ko * kiln.from_numpy(w)).sum().backward()
        (to * torch.from_numpy(w)).sum().backward()
        for i in grads:
            close(pairs[i][0].grad, pairs[i][1].grad, dtype, 10 * scale)
    return ko, to


def assert_compiles(fn, *args, atol=1e-5):
    """fn under kiln.compile with a backend that raises on any eager fallback; same result."""
    kiln.compiler.reset()
    backend = CpuBackend(fallback=False)
    out = kiln.compile(fn, backend=backend)(*args)
    want = fn(*args)
    outs, wants = (out, want) if isinstance(out, tuple) else ((out,), (want,))
    for o, w in zip(outs, wants, strict=True):
        np.testing.assert_allclose(o.detach().numpy(), w.detach().numpy(), rtol=1e-5, atol=atol)
    assert backend.reports and all(r.eager_nodes == 0 for r in backend.reports)
    return out


def same_error(build, exc):
    """build(lib, F) with torch and with kiln raises the same exception type and message
    (torch's names read as kiln's)."""
    with pytest.raises(exc) as theirs:
        build(torch, TF)
    with pytest.raises(exc) as ours:
        build(kiln, KF)
    assert type(ours.value) is type(theirs.value)
    pattern = r"torch\.(Size|float\w*|int\w*|\w+Tensor)"
    assert str(ours.value) == re.sub(pattern, r"kiln.\1", str(theirs.value))


# --- Thin module wrappers ------------------------------------------------------------------------

MODULES = [
    ("Unfold", (2,), {}, (2, 3, 5, 4)),
    ("Unfold", ((2, 3),), {"dilation": 1, "padding": 1, "stride": (2, 1)}, (3, 5, 4)),
    ("Fold", ((4, 5), 2), {}, (2, 12, 12)),
    ("Fold", ((5, 4), (2, 3)), {"padding": 1, "stride": 2}, (18, 6)),
    ("Hardshrink", (), {}, (2, 3, 4)),
    ("Hardshrink", (0.8,), {}, (7,)),
    ("Softshrink", (), {}, (2, 3, 4)),
    ("Softshrink", (1.2,), {}, (7,)),
    ("Softmax2d", (), {}, (2, 3, 4, 5)),
    ("Softmax2d", (), {}, (3, 4, 5)),
    ("MaxPool3d", (2,), {}, (2, 3, 4, 5, 6)),
    ("MaxPool3d", ((2, 3, 2),), {"stride": 1, "padding": 1, "ceil_mode": True}, (3, 4, 5, 6)),
    ("AvgPool3d", (2,), {}, (2, 3, 4, 5, 6)),
    ("AvgPool3d", ((3, 2, 2),), {"stride": 2, "padding": 1}, (3, 5, 4, 6)),
    ("AdaptiveAvgPool3d", ((2, 3, 2),), {}, (2, 3, 4, 5, 6)),
    ("AdaptiveAvgPool3d", (2,), {}, (3, 5, 4, 6)),
    ("AdaptiveMaxPool3d", ((2, 3, 2),), {}, (2, 3, 4, 5, 6)),
    ("AdaptiveMaxPool3d", (2,), {}, (3, 5, 4, 6)),
    ("LocalResponseNorm", (3,), {}, (2, 5, 7)),
    ("LocalResponseNorm", (4,), {"alpha": 0.01, "beta": 0.6, "k": 2.0}, (2, 6, 3, 4)),
    ("LocalResponseNorm", (2,), {}, (2, 4, 3, 2, 3)),
    ("LPPool1d", (2, 3), {}, (2, 3, 8)),
    ("LPPool1d", (1.5, 3, 2, True), {}, (3, 8)),
    ("LPPool2d", (2, 2), {}, (2, 3, 6, 5)),
    ("LPPool2d", (3, (2, 3), (1, 2), True), {}, (3, 5, 8)),
    ("LPPool2d", (float("inf"), 2), {}, (2, 3, 6, 5)),
    ("LPPool3d", (2, 2), {}, (2, 3, 4, 6, 5)),
    ("LPPool3d", (2, (2, 3, 2), (1, 2, 2), True), {}, (3, 5, 6, 5)),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "name,args,kw,shape", MODULES, ids=[f"{m[0]}-{i}" for i, m in enumerate(MODULES)]
)
def test_module_matches_torch(name, args, kw, shape, dtype):
    ours, theirs = getattr(kiln.nn, name)(*args, **kw), getattr(torch.nn, name)(*args, **kw)
    assert repr(ours) == repr(theirs)
    x = arr(*shape, dtype=dtype)
    if name.startswith("LPPool") and args[0] != 2:
        x = np.abs(x) + 0.1  # non-integer powers of negatives are NaN in both
    run_both(ours, theirs, [x], dtype=dtype)


COMPILED_MODULES = [
    ("Unfold", (2,), (2, 3, 5, 4)),
    ("Fold", ((4, 5), 2), (2, 12, 12)),
    ("Hardshrink", (), (2, 3, 4)),
    ("Softshrink", (), (2, 3, 4)),
    ("Softmax2d", (), (2, 3, 4, 5)),
    ("LocalResponseNorm", (3,), (2, 5, 3, 4)),
    ("LPPool1d", (2, 3, 2, True), (2, 3, 8)),
    ("LPPool2d", (2, 2, 2, True), (2, 3, 5, 5)),
    ("LPPool3d", (2, 2), (2, 3, 4, 6, 5)),
    ("LPPool3d", (float("inf"), 2), (3, 4, 6, 5)),
]


@pytest.mark.parametrize(
    "name,args,shape", COMPILED_MODULES, ids=[f"{m[0]}-{i}" for i, m in enumerate(COMPILED_MODULES)]
)
def test_module_compiles_without_fallback(name, args, shape):
    module = getattr(kiln.nn, name)(*args)
    assert_compiles(lambda x: module(x), kiln.randn(*shape))


def test_local_response_norm_empty():
    assert KF.local_response_norm(kiln.randn(0, 3, 4), 2).shape == (0, 3, 4)


# --- Losses --------------------------------------------------------------------------------------


def _targets(n, classes):
    return RNG.integers(0, classes, (n,))


def _multilabel_targets(n, classes):
    t = np.full((n, classes), -1)
    for row in t:
        k = RNG.integers(0, classes + 1)
        row[:k] = RNG.choice(classes, k, replace=False)
        if k < classes:
            row[k + 1 :] = RNG.integers(-1, classes, classes - k - 1)  # ignored after the -1
    return t


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("p,margin,weighted", [(1, 1.0, False), (2, 0.5, True)])
def test_multi_margin_loss(dtype, reduction, p, margin, weighted):
    w = np.abs(arr(5, dtype=dtype)) + 0.1 if weighted else None
    kw = {"p": p, "margin": margin, "reduction": reduction}
    for x, t in (
        (arr(6, 5, dtype=dtype), _targets(6, 5)),
        (arr(5, dtype=dtype), np.array(3)),
        (arr(5, dtype=dtype), np.array([2])),
        (arr(dtype=dtype), np.array(0)),
    ):
        weights = both(w) if weighted and x.ndim else (None, None)
        ours = kiln.nn.MultiMarginLoss(weight=weights[0], **kw)
        theirs = torch.nn.MultiMarginLoss(weight=weights[1], **kw)
        run_both(ours, theirs, [x, t], dtype=dtype)
    assert repr(ours) == repr(theirs)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_multilabel_margin_loss(dtype, reduction):
    ours = kiln.nn.MultiLabelMarginLoss(reduction=reduction)
    theirs = torch.nn.MultiLabelMarginLoss(reduction=reduction)
    targets = _multilabel_targets(6, 5)
    targets[0] = [1, 1, -1, 3, 0]  # a repeated target counts twice; entries after -1 ignored
    run_both(ours, theirs, [arr(6, 5, dtype=dtype), targets], dtype=dtype)
    run_both(ours, theirs, [arr(5, dtype=dtype), targets[1]], dtype=dtype)
    run_both(ours, theirs, [arr(dtype=dtype), np.array(0)], dtype=dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_multilabel_soft_margin_loss(dtype, reduction):
    w = both(np.abs(arr(5, dtype=dtype)))
    target = (RNG.random((4, 5)) > 0.5).astype(dtype)
    for weight in ((None, None), w):
        ours = kiln.nn.MultiLabelSoftMarginLoss(weight=weight[0], reduction=reduction)
        theirs = torch.nn.MultiLabelSoftMarginLoss(weight=weight[1], reduction=reduction)
        run_both(ours, theirs, [arr(4, 5, dtype=dtype), target], dtype=dtype)
        run_both(ours, theirs, [arr(5, dtype=dtype), target[0]], dtype=dtype)
    assert repr(ours) == repr(theirs)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_triplet_margin_with_distance_loss(dtype, reduction):
    def k_cos(a, b):
        return 1 - KF.cosine_similarity(a, b, dim=-1)

    def t_cos(a, b):
        return 1 - TF.cosine_similarity(a, b, dim=-1)

    for kd, td, swap in ((None, None, False), (None, None, True), (k_cos, t_cos, True)):
        kw = {"margin": 0.7, "swap": swap, "reduction": reduction}
        ours = kiln.nn.TripletMarginWithDistanceLoss(distance_function=kd, **kw)
        theirs = torch.nn.TripletMarginWithDistanceLoss(distance_function=td, **kw)
        for shape in ((5, 4), (4,)):
            arrays = [arr(*shape, dtype=dtype) for _ in range(3)]
            run_both(ours, theirs, arrays, grads=(0, 1, 2), dtype=dtype)
    assert repr(kiln.nn.TripletMarginWithDistanceLoss()) == repr(
        torch.nn.TripletMarginWithDistanceLoss()
    )


def test_loss_legacy_reduction_flags():
    with pytest.warns(UserWarning, match="size_average and reduce"):
        out = KF.multi_margin_loss(kiln.randn(2, 5), kiln.tensor([1, 2]), size_average=False)
    assert out.shape == ()


def test_losses_compile_without_fallback():
    x, t, w = kiln.randn(4, 5), kiln.tensor([0, 4, 2, 1]), kiln.rand(5)
    assert_compiles(lambda x, t, w: KF.multi_margin_loss(x, t, 2, 0.5, w), x, t, w)
    loss = kiln.nn.MultiMarginLoss(reduction="none")
    assert_compiles(lambda x, t: loss(x, t), x, t)
    targets = kiln.from_numpy(_multilabel_targets(4, 5))
    mlm = kiln.nn.MultiLabelMarginLoss(reduction="sum")
    assert_compiles(lambda x, t: mlm(x, t), x, targets)
    mlsm = kiln.nn.MultiLabelSoftMarginLoss(weight=w)
    assert_compiles(lambda x, t: mlsm(x, t), x, (kiln.randn(4, 5) > 0).float())
    triplet = kiln.nn.TripletMarginWithDistanceLoss(swap=True)
    assert_compiles(lambda a, p, n: triplet(a, p, n), x, kiln.randn(4, 5), kiln.randn(4, 5))


# --- SyncBatchNorm -------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(4, 3), (4, 3, 5), (2, 3, 4, 5)])
def test_sync_batch_norm_single_process(dtype, shape):
    ours, theirs = kiln.nn.SyncBatchNorm(3), torch.nn.SyncBatchNorm(3)
    assert repr(ours) == repr(theirs)
    tdt, kdt = getattr(torch, dtype), getattr(kiln, dtype)
    ours, theirs = ours.to(kdt), theirs.to(tdt)
    w, b = arr(3, dtype=dtype), arr(3, dtype=dtype)
    with torch.no_grad():
        theirs.weight.copy_(torch.from_numpy(w)), theirs.bias.copy_(torch.from_numpy(b))
    with kiln.no_grad():
        ours.weight.copy_(kiln.from_numpy(w)), ours.bias.copy_(kiln.from_numpy(b))
    for _ in range(2):
        run_both(ours, theirs, [arr(*shape, dtype=dtype)], dtype=dtype)
    close(ours.weight.grad, theirs.weight.grad, dtype, 10)
    close(ours.bias.grad, theirs.bias.grad, dtype, 10)
    close(ours.running_mean, theirs.running_mean, dtype)
    close(ours.running_var, theirs.running_var, dtype)
    assert int(ours.num_batches_tracked) == int(theirs.num_batches_tracked) == 2
    ours.eval(), theirs.eval()
    run_both(ours, theirs, [arr(*shape, dtype=dtype)], dtype=dtype)


def test_sync_batch_norm_convert_and_errors():
    model = kiln.nn.Sequential(
        kiln.nn.Conv2d(2, 3, 1),
        kiln.nn.BatchNorm2d(3),
        kiln.nn.Sequential(kiln.nn.BatchNorm1d(3, affine=False)),
    )
    model[1].eval()
    bn, inner = model[1], model[2][0]
    converted = kiln.nn.SyncBatchNorm.convert_sync_batchnorm(model, process_group="group")
    assert type(converted[0]) is kiln.nn.Conv2d
    assert (
        type(converted[1]) is kiln.nn.SyncBatchNorm
        and type(converted[2][0]) is kiln.nn.SyncBatchNorm
    )
    assert converted[1].weight is bn.weight and converted[1].running_mean is bn.running_mean
    assert converted[1].training is False and converted[1].process_group == "group"
    assert converted[2][0].weight is None and converted[2][0].running_var is inner.running_var
    one = kiln.nn.SyncBatchNorm.convert_sync_batchnorm(kiln.nn.BatchNorm1d(4, momentum=None))
    assert type(one) is kiln.nn.SyncBatchNorm and one.momentum is None
    bn = kiln.nn.SyncBatchNorm(3)
    assert_compiles(lambda x: bn(x), kiln.randn(4, 3, 5))


# --- Lazy layers ---------------------------------------------------------------------------------

LAZY = [
    ("LazyLinear", "Linear", (4,), {}, (3, 5)),
    ("LazyLinear", "Linear", (4,), {"bias": False}, (2, 3, 5)),
    ("LazyConv1d", "Conv1d", (4, 3), {"padding": 1}, (2, 6, 7)),
    ("LazyConv1d", "Conv1d", (4, 3), {"groups": 2}, (6, 7)),
    ("LazyConv2d", "Conv2d", (4, (3, 2)), {"stride": 2, "bias": False}, (2, 3, 6, 5)),
    ("LazyConv2d", "Conv2d", (4, 3), {"padding": "same", "padding_mode": "reflect"}, (3, 6, 5)),
    ("LazyConv3d", "Conv3d", (2, 2), {}, (2, 3, 4, 5, 4)),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "lazy,eager,args,kw,shape", LAZY, ids=[f"{m[0]}-{i}" for i, m in enumerate(LAZY)]
)
def test_lazy_layers(lazy, eager, args, kw, shape, dtype):
    kdt, tdt = getattr(kiln, dtype), getattr(torch, dtype)
    ours = getattr(kiln.nn, lazy)(*args, **kw, dtype=kdt)
    theirs = getattr(torch.nn, lazy)(*args, **kw, dtype=tdt)
    assert repr(ours) == repr(theirs)
    assert ours.has_uninitialized_params()
    assert isinstance(ours.weight, kiln.nn.UninitializedParameter)
    assert repr(ours.weight) == "<UninitializedParameter>"
    with pytest.raises(RuntimeError, match="Can't access the shape"):
        ours.weight.shape  # noqa: B018
    weight = ours.weight
    x = arr(*shape, dtype=dtype)
    theirs(torch.from_numpy(x))
    ours(kiln.from_numpy(x))
    assert type(ours) is getattr(kiln.nn, eager) and type(theirs) is getattr(torch.nn, eager)
    assert repr(ours) == repr(theirs)
    assert ours.weight is weight and type(weight) is kiln.nn.Parameter
    assert ours.weight.dtype == kdt and tuple(ours.weight.shape) == tuple(theirs.weight.shape)
    assert not ours._forward_pre_hooks and not ours._load_state_dict_pre_hooks
    # Initialized as the eager layer is: uniform within +-1/sqrt(fan_in).
    fan_in = math.prod(ours.weight.shape[1:])
    assert float(ours.weight.abs().max()) <= 1 / math.sqrt(fan_in) + 1e-7
    with torch.no_grad():
        for name, p in theirs.named_parameters():
            p.copy_(torch.from_numpy(getattr(ours, name).detach().numpy()))
    run_both(ours, theirs, [x], dtype=dtype)
    for name, p in theirs.named_parameters():
        close(getattr(ours, name).grad, p.grad, dtype, 10)


def test_lazy_state_dict_conversion_and_errors():
    lazy = kiln.nn.LazyLinear(3)
    assert isinstance(lazy.state_dict()["weight"], kiln.nn.UninitializedParameter)
    source = kiln.nn.Linear(5, 3)
    lazy.load_state_dict(source.state_dict())
    assert tuple(lazy.weight.shape) == (3, 5) and kiln.equal(lazy.weight, source.weight)
    out = lazy(kiln.randn(2, 5))
    assert type(lazy) is kiln.nn.Linear and lazy.in_features == 5 and out.shape == (2, 3)
    other = kiln.nn.LazyLinear(3)
    with pytest.raises(AssertionError, match="in_features inferred from input: 4"):
        lazy2 = kiln.nn.LazyLinear(3)
        lazy2.load_state_dict(source.state_dict())
        lazy2(kiln.randn(2, 4))
    # Conversions before the first forward change the dtype it materializes with; the
    # placeholder stays (an optimizer made now keeps working).
    other.double()
    assert isinstance(other.weight, kiln.nn.UninitializedParameter)
    opt = kiln.optim.SGD(other.parameters(), lr=0.1)
    other(kiln.randn(2, 4, dtype=kiln.float64)).sum().backward()
    before = other.weight.detach().clone()
    opt.step()
    assert other.weight.dtype == kiln.float64 and not kiln.equal(before, other.weight)
    clone = copy.deepcopy(kiln.nn.LazyConv2d(2, 3))
    assert isinstance(clone.weight, kiln.nn.UninitializedParameter)


# --- Gumbel-softmax ------------------------------------------------------------------------------


def test_gumbel_softmax_distribution():
    kiln.manual_seed(0)
    n, a = 40000, 0.8
    # Two classes: logit(y_0) - (a - b) = g_0 - g_1, the difference of two Gumbel(0, 1), which
    # is Logistic(0, 1).
    logits = kiln.tensor([[a, 0.0]], dtype=kiln.float64).expand(n, 2)
    y = KF.gumbel_softmax(logits, tau=1.0)
    assert bool(((y.sum(-1) - 1).abs() < 1e-12).all())
    noise = np.sort((y[:, 0] / y[:, 1]).log().numpy() - a)
    logistic_cdf = 1 / (1 + np.exp(-noise))
    ks = np.max(np.abs(logistic_cdf - np.arange(1, n + 1) / n))
    assert ks < 1.63 / math.sqrt(n)  # the 1% critical value of Kolmogorov-Smirnov
    # tau scales the noise: with tau = 2, logit(y_0) = (a + L) / 2.
    y2 = KF.gumbel_softmax(logits, tau=2.0)
    assert abs(float((2 * (y2[:, 0] / y2[:, 1]).log()).mean()) - a) < 0.05
    # Hard samples: the argmax of logits + g is drawn with probability softmax(logits).
    probs = np.array([0.5, 0.3, 0.15, 0.05])
    hard = KF.gumbel_softmax(kiln.from_numpy(np.log(probs)).expand(n, 4), hard=True, dim=-1)
    freq = hard.numpy().mean(0)
    assert np.all(np.abs(freq - probs) < 4 * np.sqrt(probs * (1 - probs) / n))
    np.testing.assert_allclose(hard.numpy().sum(-1), 1.0, atol=1e-6)
    assert set(np.round(hard.numpy(), 6).ravel()) <= {0.0, 1.0}


@pytest.mark.parametrize("dtype", DTYPES)
def test_gumbel_softmax_straight_through_gradient(dtype):
    logits = arr(3, 5, 4, dtype=dtype)
    w = kiln.from_numpy(arr(3, 5, 4, dtype=dtype))
    grads, outs = [], []
    for hard in (False, True):
        x = kiln.from_numpy(logits.copy()).requires_grad_()
        kiln.manual_seed(7)
        out = KF.gumbel_softmax(x, tau=0.5, hard=hard, dim=1)
        (out * w).sum().backward()
        grads.append(x.grad.numpy())
        outs.append(out.detach())
    soft, hard_out = outs
    expected = kiln.zeros_like(soft).scatter(1, soft.argmax(1, keepdim=True), 1.0)
    np.testing.assert_allclose(hard_out.numpy(), expected.numpy(), atol=1e-6)
    np.testing.assert_allclose(grads[1], grads[0], rtol=1e-6, atol=1e-9)
    # The soft sample's gradient is the softmax's: check it against torch's for the same noise.
    t = torch.from_numpy(logits.copy()).requires_grad_()
    tsoft = torch.from_numpy(soft.numpy())
    g = torch.log(tsoft) - torch.log(tsoft).mean(1, keepdim=True)  # (logits + noise) / tau, shifted
    noise = (g * 0.5 - t).detach()
    torch.softmax((t + noise) / 0.5, 1).mul(torch.from_numpy(w.numpy())).sum().backward()
    np.testing.assert_allclose(grads[0], t.grad.numpy(), rtol=1e-4, atol=1e-6)
    with pytest.warns(UserWarning, match="`eps` parameter is deprecated"):
        KF.gumbel_softmax(kiln.randn(2, 3), eps=1e-5)


def test_gumbel_softmax_compiles_without_fallback():
    def fn(x):
        return KF.gumbel_softmax(x, tau=0.5, hard=True), KF.gumbel_softmax(x)

    kiln.compiler.reset()
    backend = CpuBackend(fallback=False)
    hard, soft = kiln.compile(fn, backend=backend)(kiln.randn(6, 5))
    assert all(r.eager_nodes == 0 for r in backend.reports)
    np.testing.assert_allclose(hard.sum(-1).numpy(), 1.0, atol=1e-6)
    assert bool((hard.amax(-1) == 1).all()) and bool(((soft.sum(-1) - 1).abs() < 1e-5).all())


# --- EmbeddingBag --------------------------------------------------------------------------------

INPUT_1D = np.array([1, 2, 4, 5, 4, 3, 2, 9, 0, 2])
BAGS = [
    (INPUT_1D, np.array([0, 3, 3, 7]), {}),
    (INPUT_1D, np.array([0, 2, 5, 10]), {"include_last_offset": True}),
    (INPUT_1D, np.array([0, 4, 8]), {"padding_idx": 2}),
    (INPUT_1D, np.array([0, 1, 1, 6, 10]), {"padding_idx": -8, "include_last_offset": True}),
    (INPUT_1D.reshape(2, 5), None, {}),
    (INPUT_1D.reshape(5, 2), None, {"padding_idx": 2}),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
@pytest.mark.parametrize("index,offsets,kw", BAGS, ids=[str(i) for i in range(len(BAGS))])
def test_embedding_bag(index, offsets, kw, mode, dtype):
    table = arr(10, 3, dtype=dtype)
    if offsets is None:
        run_both(
            lambda w, i: KF.embedding_bag(i, w, mode=mode, **kw),
            lambda w, i: TF.embedding_bag(i, w, mode=mode, **kw),
            [table, index],
            dtype=dtype,
        )
    else:
        run_both(
            lambda w, i, o: KF.embedding_bag(i, w, o, mode=mode, **kw),
            lambda w, i, o: TF.embedding_bag(i, w, o, mode=mode, **kw),
            [table, index, offsets],
            dtype=dtype,
        )
    kw = dict(kw, mode=mode)
    ours = kiln.nn.EmbeddingBag.from_pretrained(kiln.from_numpy(table), freeze=False, **kw)
    theirs = torch.nn.EmbeddingBag.from_pretrained(torch.from_numpy(table), freeze=False, **kw)
    assert repr(ours) == repr(theirs)
    extra = [] if offsets is None else [offsets]
    ko = ours(kiln.from_numpy(index), *[kiln.from_numpy(o) for o in extra])
    to = theirs(torch.from_numpy(index), *[torch.from_numpy(o) for o in extra])
    close(ko, to, dtype)
    ko.sum().backward(), to.sum().backward()
    close(ours.weight.grad, theirs.weight.grad, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_embedding_bag_per_sample_weights_and_norms(dtype):
    table, psw = arr(10, 3, dtype=dtype), arr(10, dtype=dtype)
    for index, offsets in ((INPUT_1D, [np.array([0, 4, 4])]), (INPUT_1D.reshape(2, 5), [])):
        weights = psw.reshape(index.shape)
        run_both(
            lambda w, i, p, *o: KF.embedding_bag(
                i, w, *o, mode="sum", per_sample_weights=p, padding_idx=4
            ),
            lambda w, i, p, *o: TF.embedding_bag(
                i, w, *o, mode="sum", per_sample_weights=p, padding_idx=4
            ),
            [table, index, weights, *offsets],
            grads=(0, 2),
            dtype=dtype,
        )
    # max_norm renormalizes the rows a call reads, in place.
    kw_, tw = both(table * 3)
    ko = KF.embedding_bag(kiln.from_numpy(INPUT_1D), kw_, kiln.tensor([0, 5]), max_norm=1.5)
    to = TF.embedding_bag(torch.from_numpy(INPUT_1D), tw, torch.tensor([0, 5]), max_norm=1.5)
    close(ko, to, dtype, 10)
    close(kw_, tw, dtype, 10)
    # scale_grad_by_freq: each row's gradient divided by its index's count in the input (the
    # documented rule; torch's bag kernel does not follow it, so the reference is embedding's).
    kt, tt = both(table, grad=True)
    offs = [0, 3, 7]
    KF.embedding_bag(
        kiln.from_numpy(INPUT_1D), kt, kiln.tensor(offs), mode="mean", scale_grad_by_freq=True
    ).sum().backward()
    rows = TF.embedding(torch.from_numpy(INPUT_1D), tt, scale_grad_by_freq=True)
    bounds = [*offs, len(INPUT_1D)]
    torch.stack(
        [rows[a:b].mean(0) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
    ).sum().backward()
    close(kt.grad, tt.grad, dtype, 10)


def test_embedding_bag_module_and_errors():
    bag, ref = kiln.nn.EmbeddingBag(10, 3, padding_idx=-2, mode="sum", max_norm=2.0), None
    ref = torch.nn.EmbeddingBag(10, 3, padding_idx=-2, mode="sum", max_norm=2.0)
    assert repr(bag) == repr(ref) and bag.padding_idx == 8
    assert float(bag.weight[8].abs().sum()) == 0 and bag.weight.requires_grad
    frozen = kiln.nn.EmbeddingBag.from_pretrained(kiln.randn(4, 2))
    assert not frozen.weight.requires_grad and frozen.mode == "mean"
    with pytest.raises(AssertionError, match="padding_idx must be within num_embeddings"):
        kiln.nn.EmbeddingBag(10, 3, padding_idx=10)
    with pytest.raises(AssertionError, match="Shape of weight does not match"):
        kiln.nn.EmbeddingBag(10, 3, _weight=kiln.randn(3, 3))
    w = kiln.randn(10, 3)
    with pytest.raises(ValueError, match="if input is 2D, then offsets has to be None"):
        KF.embedding_bag(kiln.tensor([[1, 2, 4]]), w, kiln.tensor([0]))
    assert KF.embedding_bag(kiln.tensor([1, 2]), w, kiln.tensor([], dtype=kiln.int64)).shape == (
        0,
        3,
    )
    assert KF.embedding_bag(
        kiln.tensor([1]), w, kiln.tensor([0]), include_last_offset=True
    ).shape == (
        0,
        3,
    )


def test_embedding_bag_compiles_without_fallback():
    w = kiln.randn(10, 3)
    i1, offs = kiln.from_numpy(INPUT_1D), kiln.tensor([0, 3, 3, 7])
    i2 = kiln.from_numpy(INPUT_1D.reshape(2, 5))
    psw = kiln.randn(10)
    for mode in ("sum", "mean"):
        bag = kiln.nn.EmbeddingBag.from_pretrained(w, mode=mode, padding_idx=2)
        assert_compiles(lambda i, o, bag=bag: bag(i, o), i1, offs)
        assert_compiles(lambda i, bag=bag: bag(i), i2)
    assert_compiles(lambda i: KF.embedding_bag(i, w, mode="max", padding_idx=4), i2)
    assert_compiles(lambda i: KF.embedding_bag(i, w, mode="mean", scale_grad_by_freq=True), i2)
    assert_compiles(
        lambda i, o, p: KF.embedding_bag(
            i, w, o, mode="sum", per_sample_weights=p, include_last_offset=True
        ),
        i1,
        offs,
        psw,
    )


# --- affine_grid and grid_sample -----------------------------------------------------------------


@pytest.mark.filterwarnings("ignore:Since version 1.3.0, affine_grid behavior")
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("align_corners", [False, True])
def test_affine_grid(dtype, align_corners):
    for theta, size in (
        (arr(2, 2, 3, dtype=dtype), [2, 3, 5, 4]),
        (arr(1, 2, 3, dtype=dtype), torch.Size([1, 1, 1, 6])),
        (arr(2, 3, 4, dtype=dtype), [2, 3, 3, 5, 4]),
    ):
        run_both(
            lambda t, size=size: KF.affine_grid(t, list(size), align_corners),
            lambda t, size=size: TF.affine_grid(t, size, align_corners),
            [theta],
            dtype=dtype,
        )


MODES = (
    [("bilinear", p) for p in ("zeros", "border", "reflection")]
    + [("nearest", p) for p in ("zeros", "border", "reflection")]
    + [("bicubic", p) for p in ("zeros", "border", "reflection")]
)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize("mode,padding_mode", MODES)
def test_grid_sample(mode, padding_mode, align_corners, dtype):
    def k_fn(x, g):
        return KF.grid_sample(x, g, mode, padding_mode, align_corners)

    def t_fn(x, g):
        return TF.grid_sample(x, g, mode, padding_mode, align_corners)

    # Points inside, on the border and well outside the input (reflection folds them back).
    grid = arr(2, 4, 7, 2, dtype=dtype, scale=1.3)
    run_both(
        k_fn,
        t_fn,
        [arr(2, 3, 5, 6, dtype=dtype), grid],
        grads=(0, 1),
        dtype=dtype,
        scale=10 if mode == "bicubic" else 1,
    )
    if mode != "bicubic":
        grid3 = arr(2, 3, 4, 2, 3, dtype=dtype, scale=1.3)
        run_both(k_fn, t_fn, [arr(2, 2, 4, 5, 3, dtype=dtype), grid3], grads=(0, 1), dtype=dtype)


@pytest.mark.parametrize("align_corners", [False, True])
def test_spatial_transformer_gradient(align_corners):
    """affine_grid into grid_sample, differentiated w.r.t. theta and the image, including the
    identity transform whose points fall exactly on pixel centres and borders."""
    for theta in (np.array([[[1.0, 0, 0], [0, 1, 0]]] * 2), arr(2, 2, 3, scale=0.5)):
        for padding in ("zeros", "border", "reflection"):
            run_both(
                lambda x, t, p=padding: KF.grid_sample(
                    x, KF.affine_grid(t, [2, 3, 4, 5], align_corners), "bilinear", p, align_corners
                ),
                lambda x, t, p=padding: TF.grid_sample(
                    x, TF.affine_grid(t, [2, 3, 4, 5], align_corners), "bilinear", p, align_corners
                ),
                [arr(2, 3, 4, 5), theta],
                grads=(0, 1),
            )


def test_grid_sample_warnings():
    x, g = kiln.randn(2, 3, 4, 5), kiln.randn(2, 2, 2, 2)
    th = kiln.randn(2, 2, 3)
    with pytest.raises(RuntimeError):
        KF.affine_grid(th, [3, 1, 4, 5], False)
    with pytest.warns(UserWarning, match="Default grid_sample and affine_grid behavior"):
        KF.grid_sample(x, g)
    with pytest.warns(UserWarning, match="Default grid_sample and affine_grid behavior"):
        KF.affine_grid(th, [2, 1, 4, 5])
    with pytest.warns(UserWarning, match="unit-size grids"):
        KF.affine_grid(th, [2, 1, 1, 5], align_corners=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        KF.grid_sample(x, g, align_corners=True)


@pytest.mark.parametrize("mode,padding_mode", MODES)
def test_grid_sample_compiles_without_fallback(mode, padding_mode):
    def fn(x, theta):
        grid = KF.affine_grid(theta, [2, 3, 6, 5], align_corners=False)
        return KF.grid_sample(x, grid, mode, padding_mode, align_corners=False)

    assert_compiles(fn, kiln.randn(2, 3, 5, 4), kiln.randn(2, 2, 3))
    if mode != "bicubic":
        assert_compiles(
            lambda x, g: KF.grid_sample(x, g, mode, padding_mode, True),
            kiln.randn(1, 2, 3, 4, 5),
            kiln.randn(1, 2, 3, 4, 3) * 1.2,
        )


def test_grid_sample_training_compiles():
    """The spatial-transformer step compiles forward and backward with no fallback."""
    x = kiln.randn(2, 3, 5, 6).requires_grad_()
    theta = kiln.randn(2, 2, 3).requires_grad_()

    def step(x, theta):
        grid = KF.affine_grid(theta, x.shape, align_corners=False)
        return KF.grid_sample(x, grid, "bilinear", "border", align_corners=False).square().sum()

    kiln.compiler.reset()
    backend = CpuBackend(fallback=False)
    kiln.compile(step, backend=backend)(x, theta).backward()
    assert all(r.eager_nodes == 0 for r in backend.reports)
    gx, gt = x.grad.clone(), theta.grad.clone()
    x.grad, theta.grad = None, None
    step(x, theta).backward()
    np.testing.assert_allclose(gx.numpy(), x.grad.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(gt.numpy(), theta.grad.numpy(), rtol=1e-4, atol=1e-5)


# --- Error paths ---------------------------------------------------------------------------------

_UNSET = object()


def _bag(m, F, index=_UNSET, weight=_UNSET, offsets=_UNSET, **kw):
    index = m.tensor([1, 2, 4]) if index is _UNSET else index
    weight = m.randn(10, 3) if weight is _UNSET else weight
    offsets = m.tensor([0, 2]) if offsets is _UNSET else offsets
    return F.embedding_bag(index, weight, offsets, **kw)


def _mm(m, F, target=_UNSET, x=_UNSET, **kw):
    x = m.randn(2, 5) if x is _UNSET else x
    return F.multi_margin_loss(x, m.tensor([1, 2]) if target is _UNSET else target, **kw)


def _mlm(m, F, target):
    return F.multilabel_margin_loss(m.randn(2, 5), target)


def _gs(m, F, x=(2, 3, 4, 5), grid=(2, 2, 2, 2), **kw):
    x = m.randn(*x) if isinstance(x, tuple) else x
    grid = m.randn(*grid) if isinstance(grid, tuple) else grid
    return F.grid_sample(x, grid, align_corners=False, **kw)


ERRORS = [
    (lambda m, F: m.nn.Softmax2d()(m.randn(2, 3)), ValueError),
    (lambda m, F: F.local_response_norm(m.randn(2, 3), 2), ValueError),
    (lambda m, F: F.lp_pool1d(m.randn(2, 3, 4, 5), 2, 2), RuntimeError),
    (lambda m, F: F.lp_pool2d(m.randn(3, 4, 5, 6, 7), 2, 2), RuntimeError),
    (lambda m, F: F.lp_pool3d(m.randn(2, 3, 4), 2, 2), RuntimeError),
    (lambda m, F: _mm(m, F, p=3), ValueError),
    (lambda m, F: _mm(m, F, reduction="bad"), ValueError),
    (lambda m, F: _mm(m, F, weight=m.ones(1, 5)), ValueError),
    (lambda m, F: _mm(m, F, weight=m.ones(3)), RuntimeError),
    (lambda m, F: _mm(m, F, weight=m.ones(5).double()), RuntimeError),
    (lambda m, F: _mm(m, F, m.tensor([1, 2, 0])), RuntimeError),
    (lambda m, F: _mm(m, F, m.tensor([[1], [2]])), RuntimeError),
    (lambda m, F: _mm(m, F, m.tensor([1, 7])), RuntimeError),
    (lambda m, F: _mm(m, F, m.tensor([1, -1])), RuntimeError),
    (lambda m, F: _mm(m, F, m.tensor([1, 2], dtype=m.int32)), RuntimeError),
    (lambda m, F: _mm(m, F, x=m.randn(2, 3, 4)), RuntimeError),
    (lambda m, F: m.nn.MultiMarginLoss(p=0), ValueError),
    (lambda m, F: m.nn.MultiMarginLoss(weight=m.ones(2, 2)), ValueError),
    (lambda m, F: _mlm(m, F, m.tensor([[1, 0, -1, 0, 0], [2, 9, 0, 0, 0]])), RuntimeError),
    (lambda m, F: _mlm(m, F, m.tensor([[1, 0, -1, 0, 0], [-2, 0, 0, 0, 0]])), RuntimeError),
    (lambda m, F: _mlm(m, F, m.tensor([1, 2])), RuntimeError),
    (lambda m, F: _mlm(m, F, m.zeros(2, 5)), RuntimeError),
    (lambda m, F: F.multilabel_soft_margin_loss(m.randn(2), m.ones(2), reduction="x"), ValueError),
    (lambda m, F: F.triplet_margin_with_distance_loss(*[m.randn(3, 4)] * 3, margin=0), ValueError),
    (
        lambda m, F: F.triplet_margin_with_distance_loss(*[m.randn(3, 4)] * 2, m.ones(4)),
        RuntimeError,
    ),
    (lambda m, F: m.nn.TripletMarginWithDistanceLoss(margin=-1), ValueError),
    (lambda m, F: m.nn.SyncBatchNorm(3)(m.randn(3)), ValueError),
    (lambda m, F: m.nn.SyncBatchNorm(0)(m.randn(2, 0)), ValueError),
    (lambda m, F: m.nn.LazyConv2d(2, 3)(m.randn(3, 4)), RuntimeError),
    (lambda m, F: m.nn.LazyConv1d(2, 3, groups=2)(m.randn(3, 5)), ValueError),
    (lambda m, F: _bag(m, F, m.tensor([1.0, 2.0])), RuntimeError),
    (lambda m, F: _bag(m, F, offsets=None), ValueError),
    (lambda m, F: _bag(m, F, offsets=m.tensor([[0, 2]])), ValueError),
    (lambda m, F: _bag(m, F, m.tensor([[[1, 2]]]), offsets=None), ValueError),
    (lambda m, F: _bag(m, F, weight=m.randn(30)), ValueError),
    (lambda m, F: _bag(m, F, mode="prod"), ValueError),
    (lambda m, F: _bag(m, F, mode="max", scale_grad_by_freq=True), ValueError),
    (lambda m, F: _bag(m, F, mode="max", sparse=True), ValueError),
    (lambda m, F: _bag(m, F, padding_idx=10), RuntimeError),
    (lambda m, F: _bag(m, F, m.tensor([1, 12])), RuntimeError),
    (lambda m, F: _bag(m, F, offsets=m.tensor([1, 2])), RuntimeError),
    (lambda m, F: _bag(m, F, offsets=m.tensor([0, 4])), RuntimeError),
    (lambda m, F: _bag(m, F, per_sample_weights=m.ones(3)), NotImplementedError),
    (lambda m, F: _bag(m, F, mode="max", per_sample_weights=m.ones(3)), NotImplementedError),
    (lambda m, F: _bag(m, F, mode="sum", per_sample_weights=m.ones(4)), ValueError),
    (lambda m, F: _bag(m, F, mode="sum", per_sample_weights=m.ones(3).double()), RuntimeError),
    (lambda m, F: m.nn.EmbeddingBag(10, 3, padding_idx=10), AssertionError),
    (lambda m, F: m.nn.EmbeddingBag(10, 3, _weight=m.randn(3, 3)), AssertionError),
    (lambda m, F: _gs(m, F, mode="area"), ValueError),
    (lambda m, F: _gs(m, F, padding_mode="circular"), ValueError),
    (lambda m, F: _gs(m, F, grid=(3, 2, 2, 2)), RuntimeError),
    (lambda m, F: _gs(m, F, grid=(2, 2, 2, 3)), RuntimeError),
    (lambda m, F: _gs(m, F, grid=(2, 2, 2)), RuntimeError),
    (lambda m, F: _gs(m, F, grid=m.randn(2, 2, 2, 2).double()), RuntimeError),
    (lambda m, F: _gs(m, F, x=(2, 3, 0, 5)), RuntimeError),
    (lambda m, F: _gs(m, F, (2, 3, 2, 4, 5), (2, 2, 2, 2, 3), mode="bicubic"), RuntimeError),
    (lambda m, F: _gs(m, F, (2, 3, 4), (2, 2, 1)), RuntimeError),
    (
        lambda m, F: _gs(m, F, m.randn(2, 3, 4, 5).int(), m.zeros(2, 2, 2, 2).int()),
        NotImplementedError,
    ),
    (lambda m, F: F.affine_grid(m.randn(2, 2, 3), [2, 1, 4], False), NotImplementedError),
    (lambda m, F: F.affine_grid(m.randn(2, 2, 3), [2, 1, 0, 5], False), ValueError),
    (lambda m, F: F.affine_grid(m.randn(2, 2, 3), [2, 1, 2, 3, 4], False), ValueError),
    (lambda m, F: F.affine_grid(m.ones(2, 2, 3).long(), [2, 1, 4, 5], False), ValueError),
]


@pytest.mark.parametrize("build,exc", ERRORS, ids=[str(i) for i in range(len(ERRORS))])
def test_errors_match_torch(build, exc):
    same_error(build, exc)
