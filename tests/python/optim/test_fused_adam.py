"""AdamW/Adam with foreach=True or fused=True run one C++ pass per parameter
(kiln._C._adam_step_) and follow torch's fused AdamW within an ulp-scale tolerance."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import kiln  # noqa: E402


@pytest.mark.parametrize("cls", ["AdamW", "Adam"])
@pytest.mark.parametrize(
    "options", [{}, {"amsgrad": True}, {"maximize": True, "weight_decay": 0.1}]
)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_fused_step_matches_torch_fused(monkeypatch, cls, options, dtype):
    calls = []
    real = kiln._C._adam_step_
    monkeypatch.setattr(kiln._C, "_adam_step_", lambda *a, **k: calls.append(1) or real(*a, **k))
    rng = np.random.default_rng(0)
    shapes = [(5, 3), (7,), (2, 2, 2)]
    init = [rng.standard_normal(s) for s in shapes]
    kp = [kiln.nn.Parameter(kiln.tensor(a, dtype=getattr(kiln, dtype))) for a in init]
    tp = [torch.nn.Parameter(torch.tensor(a, dtype=getattr(torch, dtype))) for a in init]
    kopt = getattr(kiln.optim, cls)(kp, lr=1e-2, fused=True, **options)
    topt = getattr(torch.optim, cls)(tp, lr=1e-2, fused=True, **options)
    for _ in range(10):
        grads = [rng.standard_normal(s) for s in shapes]
        for p, g in zip(kp, grads, strict=True):
            p.grad = kiln.tensor(g, dtype=p.dtype)
        for p, g in zip(tp, grads, strict=True):
            p.grad = torch.tensor(g, dtype=p.dtype)
        kopt.step()
        topt.step()
    assert len(calls) == 10 * len(shapes)
    tol = 1e-5 if dtype == "float32" else 1e-12
    for a, b in zip(kp, tp, strict=True):
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=tol, atol=tol)
    state = kopt.state[kp[0]]
    np.testing.assert_allclose(
        state["exp_avg"].numpy(), topt.state[tp[0]]["exp_avg"].numpy(), rtol=tol, atol=tol
    )


def test_fused_step_refuses_mismatched_state():
    p = kiln.nn.Parameter(kiln.ones(3))
    with pytest.raises(RuntimeError, match="exp_avg must be a contiguous CPU tensor"):
        kiln._C._adam_step_(
            p,
            kiln.ones(3),
            kiln.ones(4),
            kiln.ones(3),
            None,
            1.0,
            1e-3,
            0.9,
            0.999,
            1e-8,
            0.0,
            True,
            False,
            False,
        )
