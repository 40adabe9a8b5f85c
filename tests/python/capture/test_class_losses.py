"""nll_loss and cross_entropy compiled: class-index targets (ignore_index, weights, label
smoothing, batched, unbatched and spatial inputs) and class-probability targets, every
reduction, against eager kiln and PyTorch; no node runs eagerly, and a target out of range
raises eager's error."""

from __future__ import annotations

import numpy as np
import pytest
from corpus_util import fresh_capture  # noqa: F401 - autouse: empty caches around every test
from test_backend_compiled import run_compiled

import kiln
import kiln.nn.functional as F
from kiln._capture.backend_compiled import CpuBackend

REDUCTIONS = ["mean", "sum", "none"]
G = np.random.default_rng(0)


def _logits(*shape, dtype=np.float32):
    return G.standard_normal(shape).astype(dtype) * 3


def _check(fn, *arrays, dynamic=None, calls=None, tol=(2e-5, 2e-5)):
    """Compiled fn equals eager kiln (run_compiled, strict) and PyTorch on `arrays`."""
    torch = pytest.importorskip("torch")
    args = [kiln.from_numpy(a) for a in arrays]
    backend = run_compiled(lambda *a: fn(kiln, F, *a), *args, dynamic=dynamic, tol=tol,
                           calls=calls)
    assert all(r.eager_nodes == 0 and r.eager_calls == 0 for r in backend.reports)
    kiln.compiler.reset()
    with kiln.no_grad():
        ours = kiln.compile(lambda *a: fn(kiln, F, *a), backend=CpuBackend(fallback=False))(*args)
    theirs = fn(torch, torch.nn.functional, *(torch.from_numpy(a) for a in arrays))
    np.testing.assert_allclose(ours.double().numpy(), theirs.double().numpy(), rtol=tol[0] * 5,
                               atol=tol[1] * 5)
    return backend


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_cross_entropy_with_class_indices(reduction):
    x, t = _logits(7, 11), G.integers(0, 11, 7)
    t[2] = -100  # the default ignore_index
    w = G.uniform(0.5, 2.0, 11).astype(np.float32)
    _check(lambda m, F, x, t: F.cross_entropy(x, t, reduction=reduction), x, t)
    _check(lambda m, F, x, t, w: F.cross_entropy(x, t, w, reduction=reduction), x, t, w)
    _check(lambda m, F, x, t, w: F.cross_entropy(x, t, w, reduction=reduction,
                                                 label_smoothing=0.15), x, t, w)
    t[3] = 4
    _check(lambda m, F, x, t: F.cross_entropy(x, t, ignore_index=4, reduction=reduction,
                                              label_smoothing=0.3), x, np.where(t < 0, 0, t))


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_nll_loss(reduction):
    x, t = _logits(5, 6), G.integers(0, 6, 5)
    w = G.uniform(0.5, 2.0, 6).astype(np.float32)
    _check(lambda m, F, x, t: F.nll_loss(F.log_softmax(x, -1), t, reduction=reduction), x, t)
    _check(lambda m, F, x, t, w: F.nll_loss(x, t, w, ignore_index=2,
                                            reduction=reduction), x, t, w)


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_cross_entropy_with_class_probabilities(reduction):
    x = _logits(4, 9)
    p = G.dirichlet(np.ones(9), 4).astype(np.float32)
    w = G.uniform(0.5, 2.0, 9).astype(np.float32)
    _check(lambda m, F, x, p: F.cross_entropy(x, p, reduction=reduction), x, p)
    _check(lambda m, F, x, p, w: F.cross_entropy(x, p, w, reduction=reduction,
                                                 label_smoothing=0.2), x, p, w)


def test_spatial_unbatched_and_double_inputs():
    _check(lambda m, F, x, t: F.cross_entropy(x, t), _logits(2, 5, 3, 4),
           G.integers(0, 5, (2, 3, 4)))
    _check(lambda m, F, x, t: F.cross_entropy(x, t, reduction="none"), _logits(2, 5, 3),
           G.integers(0, 5, (2, 3)))
    _check(lambda m, F, x, t: F.cross_entropy(x, t), _logits(8), np.array(3))
    _check(lambda m, F, x, t: F.cross_entropy(x, t, label_smoothing=0.1), _logits(6, 4,
                                                                                   dtype=np.float64),
           G.integers(0, 4, 6), tol=(1e-10, 1e-10))


def test_gpt_loss_with_symbolic_sizes():
    """nanoGPT's loss: logits flattened, -1 ignored, fused with the view; one compile serves
    every batch size."""
    def loss(m, F, logits, targets):
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1),
                               ignore_index=-1)

    t = G.integers(-1, 50, (3, 8))
    calls = [(kiln.from_numpy(_logits(5, 8, 50)), kiln.from_numpy(G.integers(-1, 50, (5, 8))))]
    backend = run_compiled(lambda *a: loss(kiln, F, *a), kiln.from_numpy(_logits(3, 8, 50)),
                           kiln.from_numpy(t), dynamic=True, calls=calls)
    (report,) = backend.reports
    assert report.eager_nodes == 0 and report.eager_calls == 0 and len(report.infos) == 1
    _check(loss, _logits(3, 8, 50), t)


def test_all_targets_ignored_is_nan_like_eager():
    x, t = kiln.from_numpy(_logits(3, 4)), kiln.tensor([-100, -100, -100])
    run_compiled(lambda x, t: F.cross_entropy(x, t), x, t)  # 0 / 0, as eager and torch
    with kiln.no_grad():
        assert np.isnan(F.cross_entropy(x, t).item())


def test_target_out_of_range_raises_eagers_error():
    f = kiln.compile(lambda x, t: F.cross_entropy(x * 2, t), backend=CpuBackend(fallback=False))
    x = kiln.from_numpy(_logits(3, 4))
    with kiln.no_grad():
        f(x, kiln.tensor([0, 1, 3]))
        for bad in ([0, 4, 1], [-1, 0, 0]):
            with pytest.raises(IndexError, match="cross_entropy: target -?[0-9]+ is out of bounds"):
                f(x, kiln.tensor(bad))


def test_rule_errors_name_the_problem():
    """Calls the table's rule rejects stay eager and raise eager's error."""
    x = kiln.from_numpy(_logits(3, 4))
    f = kiln.compile(lambda x, t: F.cross_entropy(x, t))
    with kiln.no_grad(), pytest.raises(RuntimeError, match="expected target dtype"):
        f(x, kiln.tensor([0.5, 1.0, 2.0]))
    with kiln.no_grad(), pytest.raises(RuntimeError, match="weight tensor should be defined"):
        kiln.compile(lambda x, t, w: F.cross_entropy(x, t, w))(x, kiln.tensor([0, 1, 2]),
                                                                kiln.ones(3))
