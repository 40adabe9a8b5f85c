"""Boolean-mask selections reduced at once (``loss[mask].mean()``, masked losses) compile into
the one program (masked_select.py), forward and backward, equal to eager kiln and torch; any
other use of the selection stays an eager node with its reason."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as TF
from corpus_util import fresh_capture  # noqa: F401 - autouse: empty caches around every test

import kiln
import kiln.nn.functional as F
from kiln._capture.backend_compiled import CpuBackend


def one_part(backend, backward=False):
    (report,) = backend.reports
    assert report.eager_nodes == 0 and report.fallbacks == [], report.fallbacks
    assert len(report.parts) == 1
    assert report.backward_parts == (1 if backward else 0)
    return report


def both(*arrays):
    return [kiln.from_numpy(a) for a in arrays], [torch.from_numpy(a) for a in arrays]


PATTERNS = {
    "sum": lambda x, y, m: x[m].sum(),
    "mean": lambda x, y, m: x[m].mean() * 3,
    "chain": lambda x, y, m: ((x[m] - y[m]) ** 2).mean() + (x[m] * y[m]).abs().sum(),
    "mse": lambda x, y, m: F.mse_loss(x[m], y[m]) if isinstance(x, kiln.Tensor)
    else TF.mse_loss(x[m], y[m]),
    "l1_sum": lambda x, y, m: F.l1_loss(x[m], y[m], reduction="sum") if isinstance(x, kiln.Tensor)
    else TF.l1_loss(x[m], y[m], reduction="sum"),
    "where": lambda x, y, m: (x[m] > 0).float().sum() + (x[m] > y[m]).sum(),
    "row_norms": lambda x, y, m: (x[m] ** 2).sum(-1).sqrt().mean() + x[m].amax(-1).sum(),
    "softmax": lambda x, y, m: (x[m].softmax(-1) * y[m]).sum() + x[m].log_softmax(dim=-1).mean(),
    "rows_sum": lambda x, y, m: x[m].sum(0) * 2,
    "rows_mean": lambda x, y, m: (x[m] * y[m]).mean(dim=0),
}


@pytest.mark.parametrize("pattern", sorted(PATTERNS))
@pytest.mark.parametrize("mask_dims", [1, 2, 3])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_reduced_selection_compiles(pattern, mask_dims, dtype):
    rng = np.random.default_rng(mask_dims)
    x = rng.normal(size=(4, 5, 3)).astype(dtype)
    y = rng.normal(size=(4, 5, 3)).astype(dtype)
    m = rng.normal(size=x.shape[:mask_dims]) > 0
    fn = PATTERNS[pattern]
    if pattern in ("row_norms", "softmax") and mask_dims == 3:
        pytest.skip("a selection of single elements has no row to reduce")
    (kx, ky, km), (tx, ty, tm) = both(x, y, m)
    backend = CpuBackend(fallback=False)
    got = kiln.compile(fn, backend=backend)(kx, ky, km)
    one_part(backend)
    want = fn(tx, ty, tm)
    assert got.dtype == fn(kx, ky, km).dtype
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-6)


def test_masked_loss_trains_without_nan_from_dropped_targets():
    # Targets missing where the mask is false (NaN there): the dropped positions must not turn
    # the gradient into NaN (0 * NaN) as a plain where(m, loss, 0) would.
    rng = np.random.default_rng(0)
    pred = rng.normal(size=(6, 8)).astype(np.float32)
    target = rng.normal(size=(6, 8)).astype(np.float32)
    target[rng.random(size=target.shape) < 0.3] = np.nan
    w = rng.normal(size=(8,)).astype(np.float32)

    def fn(p, t, w):
        m = ~t.isnan()
        return ((p[m] * w.expand_as(p)[m] - t[m]) ** 2).mean() + (p[m] * 0.5).log1p().abs().sum()

    (kp, kt, kw), (tp, tt, tw) = both(pred, target, w)
    results = []
    for f, p, t, w_ in ((fn, tp, tt, tw), (kiln.compile(fn, backend=CpuBackend(False)), kp, kt,
                                            kw)):
        p = p.clone().requires_grad_(True)
        w_ = w_.clone().requires_grad_(True)
        loss = f(p, t, w_)
        loss.backward()
        results.append((loss.detach().numpy(), p.grad.numpy(), w_.grad.numpy()))
    (want, wp, ww), (got, gp, gw) = results
    assert np.isfinite(gp).all() and np.isfinite(gw).all()
    np.testing.assert_allclose(got, want, rtol=1e-5)
    np.testing.assert_allclose(gp, wp, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(gw, ww, rtol=1e-5, atol=1e-6)


def test_broadcast_weight_gradient_over_selected_rows():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(3, 7, 4)).astype(np.float32)
    m = rng.normal(size=(3, 7)) > 0.3
    w = rng.normal(size=(4,)).astype(np.float32)

    def fn(x, w, m):
        return (x[m] * w).sigmoid().sum()

    backend = CpuBackend(fallback=False)
    (kx, kw, km), (tx, tw, tm) = both(x, w, m)
    kw.requires_grad_(True)
    tw.requires_grad_(True)
    got = kiln.compile(fn, backend=backend)(kx, kw, km)
    got.backward()
    want = fn(tx, tw, tm)
    want.backward()
    one_part(backend, backward=True)
    np.testing.assert_allclose(got.item(), want.item(), rtol=1e-5)
    np.testing.assert_allclose(kw.grad.numpy(), tw.grad.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("label_smoothing", [0.0, 0.1])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_masked_language_model_loss(label_smoothing, weighted, reduction):
    rng = np.random.default_rng(2)
    logits = rng.normal(size=(2, 9, 11)).astype(np.float32)
    labels = rng.integers(0, 11, size=(2, 9))
    labels[0, 3] = -100  # an ignored label among the selected ones
    m = rng.random(size=(2, 9)) < 0.4
    weight = rng.random(size=(11,)).astype(np.float32) + 0.5

    def fn(lg, lb, m, wt):
        loss = F.cross_entropy if isinstance(lg, kiln.Tensor) else TF.cross_entropy
        return loss(lg[m], lb[m], weight=wt if weighted else None, reduction=reduction,
                    label_smoothing=label_smoothing)

    (kl, kb, km, kw), (tl, tb, tm, tw) = both(logits, labels, m, weight)
    kl.requires_grad_(True)
    tl.requires_grad_(True)
    backend = CpuBackend(fallback=False)
    got = kiln.compile(fn, backend=backend)(kl, kb, km, kw)
    got.backward()
    want = fn(tl, tb, tm, tw)
    want.backward()
    one_part(backend, backward=True)
    np.testing.assert_allclose(got.item(), want.item(), rtol=1e-5)
    np.testing.assert_allclose(kl.grad.numpy(), tl.grad.numpy(), rtol=1e-5, atol=1e-7)


def test_nll_loss_of_selected_rows():
    rng = np.random.default_rng(3)
    logp = np.log(rng.dirichlet(np.ones(5), size=8)).astype(np.float32)
    labels = rng.integers(0, 5, size=8)
    m = rng.random(size=8) < 0.5

    def fn(lp, lb, m):
        return F.nll_loss(lp[m], lb[m])

    (kl, kb, km), (tl, tb, tm) = both(logp, labels, m)
    backend = CpuBackend(fallback=False)
    got = kiln.compile(fn, backend=backend)(kl, kb, km)
    one_part(backend)
    np.testing.assert_allclose(got.item(), TF.nll_loss(tl[tm], tb[tm]).item(), rtol=1e-6)


def test_empty_selection_as_eager():
    x = kiln.randn(4, 3)
    m = kiln.zeros(4, dtype=kiln.bool)
    labels = kiln.zeros(4, dtype=kiln.int64)

    def fn(x, m, lb):
        return x[m].sum(), x[m].mean(), F.cross_entropy(x[m], lb[m])

    got = kiln.compile(fn, backend=CpuBackend(fallback=False))(x, m, labels)
    want = fn(x, m, labels)
    assert got[0].item() == want[0].item() == 0.0
    assert np.isnan(got[1].item()) and np.isnan(want[1].item())
    assert np.isnan(got[2].item()) and np.isnan(want[2].item())


def test_integer_division_by_zero_where_the_mask_drops_it():
    a = kiln.tensor([7, 9, -5, 4])
    b = kiln.tensor([2, 0, 3, 0])

    def fn(a, b, m):
        return (a[m] // b[m]).sum() + (a[m] % b[m]).sum()

    m = b != 0
    got = kiln.compile(fn, backend=CpuBackend(fallback=False))(a, b, m)
    assert got.item() == fn(a, b, m).item()


def test_new_batch_sizes_keep_the_compiled_program():
    calls = []

    def fn(x, m):
        return x[m].mean()

    backend = CpuBackend(fallback=False)
    compiled = kiln.compile(fn, backend=backend)
    for n in (4, 6, 9, 13):
        x = kiln.randn(n, 5)
        m = x > 0
        calls.append(n)
        np.testing.assert_allclose(compiled(x, m).item(), fn(x, m).item(), rtol=1e-5)
    assert len(backend.reports) <= 2  # the first shape, then one dynamic capture
    for report in backend.reports:
        assert report.eager_nodes == 0 and len(report.parts) == 1


@pytest.mark.parametrize("use", ["returned", "scan", "in_place", "reshaped"])
def test_other_uses_keep_the_selection_eager(use):
    def fn(x, m):
        v = x[m]
        if use == "returned":
            return v * 2, v.sum()
        if use == "scan":
            return v.cumsum(0).sum()
        if use == "in_place":
            v += 1
            return v.sum()
        return v.reshape(-1, 1).sum()

    x = kiln.randn(5, 4)
    m = x[:, 0] > 0
    backend = CpuBackend(fallback=True)
    got = kiln.compile(fn, backend=backend)(x, m)
    want = fn(x, m)
    for g, w in zip(got if isinstance(got, tuple) else (got,),
                    want if isinstance(want, tuple) else (want,), strict=True):
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-6)
    (report,) = backend.reports
    reasons = [reason for _, _, reason in report.fallbacks]
    assert any("boolean-mask indexing" in r for r in reasons), reasons


def test_log_softmax_then_nll_of_selected_rows_trains():
    rng = np.random.default_rng(5)
    logits = rng.normal(size=(3, 4, 6)).astype(np.float32)
    labels = rng.integers(0, 6, size=(3, 4))
    m = rng.random(size=(3, 4)) < 0.6

    def fn(lg, lb, m):
        if isinstance(lg, kiln.Tensor):
            return F.nll_loss(F.log_softmax(lg[m], dim=1), lb[m])
        return TF.nll_loss(TF.log_softmax(lg[m], dim=1), lb[m])

    (kl, kb, km), (tl, tb, tm) = both(logits, labels, m)
    kl.requires_grad_(True)
    tl.requires_grad_(True)
    backend = CpuBackend(fallback=False)
    got = kiln.compile(fn, backend=backend)(kl, kb, km)
    got.backward()
    want = fn(tl, tb, tm)
    want.backward()
    one_part(backend, backward=True)
    np.testing.assert_allclose(got.item(), want.item(), rtol=1e-5)
    np.testing.assert_allclose(kl.grad.numpy(), tl.grad.numpy(), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("mask_dims", [1, 2])
def test_assigning_a_selection_of_the_same_mask(mask_dims):
    rng = np.random.default_rng(6)
    x = rng.normal(size=(4, 5, 3)).astype(np.float32)
    v = rng.normal(size=(4, 5, 3)).astype(np.float32)
    m = rng.normal(size=x.shape[:mask_dims]) > 0

    def fn(x, v, m):
        y = x * 2
        y[m] = v[m] + 1
        return y

    (kx, kv, km), (tx, tv, tm) = both(x, v, m)
    backend = CpuBackend(fallback=False)
    got = kiln.compile(fn, backend=backend)(kx, kv, km)
    one_part(backend)
    np.testing.assert_allclose(got.numpy(), fn(tx, tv, tm).numpy(), rtol=1e-6)


def test_masked_select_is_a_selection():
    x = kiln.randn(6, 4)
    m = x > 0.2

    def fn(x, m):
        return kiln.masked_select(x, m).sum() + x.masked_select(m).mean()

    backend = CpuBackend(fallback=False)
    got = kiln.compile(fn, backend=backend)(x, m)
    one_part(backend)
    np.testing.assert_allclose(got.item(), fn(x, m).item(), rtol=1e-6)


@pytest.mark.parametrize("op", ["max", "min", "amax", "amin", "amax_rows", "amin_rows"])
def test_extremes_of_a_selection(op):
    rng = np.random.default_rng(8)
    x = rng.normal(size=(5, 4, 3)).astype(np.float32)
    x[0] = 100.0  # a dropped row holds the largest values
    m = rng.normal(size=(5, 4)) > 0
    m[0] = False

    def fn(x, m):
        v = x[m] * 3 - 1
        return getattr(v, op[:4])(0) if op.endswith("_rows") else getattr(v, op)()

    (kx, km), (tx, tm) = both(x, m)
    backend = CpuBackend(fallback=True)
    got = kiln.compile(fn, backend=backend)(kx, km)
    np.testing.assert_allclose(got.numpy(), fn(tx, tm).numpy(), rtol=1e-6)
    (report,) = backend.reports
    # the only eager node: the check that something is kept (eager raises on an empty selection)
    assert report.eager_nodes == 1 and "assertion" in report.fallbacks[0][2]
    with pytest.raises((RuntimeError, AssertionError), match="numel\\(\\) == 0"):
        kiln.compile(fn, backend=backend)(kx, kiln.zeros(5, 4, dtype=kiln.bool))


@pytest.mark.parametrize("index", ["other_mask", "int_index", "slice"])
def test_assigning_through_another_index_is_left_alone(index):
    v = kiln.arange(4.0)
    m1 = kiln.tensor([True, True, False, False])
    m2 = kiln.tensor([False, False, True, True])
    idx = kiln.tensor([1, 0])

    def fn(v):
        x = kiln.zeros(4) if index != "slice" else kiln.zeros(2)
        if index == "other_mask":
            x[m2] = v[m1]
        elif index == "int_index":
            x[idx] = v[m1]
        else:
            x[:] = v[m1]
        return x

    assert kiln.compile(fn)(v).tolist() == fn(v).tolist()


@pytest.mark.parametrize("op", ["max", "min", "amax_rows"])
def test_extremes_of_a_selection_share_ties_as_eager(op):
    x = kiln.tensor([[5.0, 1.0], [5.0, 1.0], [0.0, 9.0], [5.0, -3.0]])
    m = kiln.tensor([True, True, False, False])

    def fn(x):
        v = x[m]
        return v.amax(0).sum() if op == "amax_rows" else getattr(v, op)()

    grads = []
    for f in (fn, kiln.compile(fn)):
        t = x.clone().requires_grad_(True)
        f(t).backward()
        grads.append(t.grad.tolist())
    assert grads[0] == grads[1]


def test_half_precision_mean_accumulates_in_float32():
    x = kiln.full((20000,), 10.0, dtype=kiln.float16)
    m = kiln.ones(20000, dtype=kiln.bool)
    got = kiln.compile(lambda x, m: x[m].mean())(x, m)
    assert got.dtype == kiln.float16 and got.item() == 10.0


def test_no_rows_runs_as_eager():
    x = kiln.zeros(0, 3)
    m = kiln.zeros(0, dtype=kiln.bool)
    assert kiln.compile(lambda x, m: x[m].sum())(x, m).item() == 0.0


def test_the_size_of_a_selection_is_read_per_call_not_baked():
    """A selection's size depends on the data: reading it (shape, len, numel, iteration) is a
    graph break, so calls with the same shapes but other data count again."""
    def count(x):
        y = x[x > 0]
        return kiln.tensor(y.shape[0]) + len(y) + (y * 2).numel()

    compiled = kiln.compile(count)
    for values in ([1.0, -2.0, 3.0, 4.0], [-1.0, -2.0, -3.0, -4.0], [-1.0, 5.0, -3.0, 2.0]):
        x = kiln.tensor(values)
        assert compiled(x).item() == count(x).item()
    assert kiln.explain(count)(kiln.tensor([1.0, -1.0])).graph_break_count >= 1


def test_a_greedy_suppression_loop_over_selections_matches_eager():
    """NMS as detection code writes it: `order = order[1:][iou <= t]` until nothing is left.
    Its trip count is the data's; it was once unrolled for the first call's data."""
    def nms(boxes, scores, threshold):
        order = scores.argsort(descending=True, stable=True)
        keep = []
        while order.numel() > 0:
            i = order[0]
            keep.append(i)
            rest = boxes[order[1:]]
            lo = kiln.maximum(boxes[i][:2], rest[:, :2])
            hi = kiln.minimum(boxes[i][2:], rest[:, 2:])
            inter = (hi - lo).clamp(min=0).prod(-1)
            area = (boxes[:, 2:] - boxes[:, :2]).prod(-1)
            iou = inter / (area[i] + area[order[1:]] - inter)
            order = order[1:][iou <= threshold]
        return kiln.stack(keep)

    compiled = kiln.compile(nms)
    g = np.random.default_rng(0)
    for _ in range(4):
        xy = g.uniform(0, 20, (12, 2))
        boxes = kiln.tensor(np.concatenate([xy, xy + g.uniform(2, 12, (12, 2))], 1))
        scores = kiln.tensor(g.uniform(size=12))
        assert compiled(boxes, scores, 0.3).tolist() == nms(boxes, scores, 0.3).tolist()


def test_a_value_that_only_reads_a_selection_keeps_its_size():
    def fn(x):
        scale = x[x > 0].mean()
        y = x * scale
        return y.reshape(y.shape[0] // 2, 2)

    x = kiln.tensor([1.0, -2.0, 3.0, 4.0])
    assert kiln.explain(fn)(x).graph_break_count == 0
    np.testing.assert_allclose(kiln.compile(fn)(x).numpy(), fn(x).numpy())
