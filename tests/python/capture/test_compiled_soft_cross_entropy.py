"""cross_entropy with probability targets (mixup, CutMix, soft labels) trains compiled: its
derivative is a compiled rule, so the model's backward around it compiles too. Gradients are
compared with torch's for weights, label smoothing, every reduction and (N, C, d) logits."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from corpus_util import fresh_capture  # noqa: F401 - autouse: empty caches around every test

import kiln
from kiln._capture.backend_compiled import CpuBackend


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
@pytest.mark.parametrize("weighted", [False, True], ids=["plain", "weighted"])
@pytest.mark.parametrize("shape", [(6, 5), (3, 5, 4)], ids=["rows", "spatial"])
def test_probability_targets_train_compiled(reduction, smoothing, weighted, shape):
    g = np.random.default_rng(0)
    x_np = g.standard_normal(shape).astype(np.float32)
    p_np = g.random(shape).astype(np.float32)
    p_np /= p_np.sum(1, keepdims=True)
    w_np = g.random(shape[1]).astype(np.float32) + 0.5
    grads = {}
    for lib in (torch, kiln):
        x = lib.tensor(x_np, requires_grad=True)
        weight = lib.tensor(w_np) if weighted else None

        def loss(x, p, lib=lib, weight=weight):
            out = lib.nn.functional.cross_entropy(x * 2, p, weight=weight, reduction=reduction,
                                                  label_smoothing=smoothing)
            return out.sum() if reduction == "none" else out

        backend = CpuBackend(fallback=False)
        fn = kiln.compile(loss, backend=backend) if lib is kiln else loss
        fn(x, lib.tensor(p_np)).backward()
        grads[lib.__name__] = x.grad.numpy()
        if lib is kiln:
            assert [f for r in backend.reports for f in r.fallbacks] == []
    np.testing.assert_allclose(grads["kiln"], grads["torch"], rtol=1e-5, atol=1e-6)


def test_a_target_that_requires_grad_trains_eagerly_and_correctly():
    x_np = np.random.default_rng(1).standard_normal((4, 3)).astype(np.float32)
    grads = {}
    for lib in (torch, kiln):
        x = lib.tensor(x_np, requires_grad=True)
        t = lib.tensor(x_np[::-1].copy(), requires_grad=True)

        def loss(x, t, lib=lib):
            return lib.nn.functional.cross_entropy(x, t.softmax(-1))

        (kiln.compile(loss) if lib is kiln else loss)(x, t).backward()
        grads[lib.__name__] = (x.grad.numpy(), t.grad.numpy())
    for got, want in zip(grads["kiln"], grads["torch"], strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
