"""AdamW/Adam with foreach=True or fused=True run one C++ call per parameter group
(kiln._C._adam_multi_step_) and follow torch's fused AdamW within an ulp-scale tolerance."""

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
    real = kiln._C._adam_multi_step_
    monkeypatch.setattr(
        kiln._C, "_adam_multi_step_", lambda *a, **k: calls.append(len(a[0])) or real(*a, **k)
    )
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
    assert calls == [len(shapes)] * 10  # one call per step for the whole group
    tol = 1e-5 if dtype == "float32" else 1e-12
    for a, b in zip(kp, tp, strict=True):
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=tol, atol=tol)
    state = kopt.state[kp[0]]
    np.testing.assert_allclose(
        state["exp_avg"].numpy(), topt.state[tp[0]]["exp_avg"].numpy(), rtol=tol, atol=tol
    )


def test_fused_step_refuses_mismatched_state():
    p = kiln.nn.Parameter(kiln.ones(3))
    step = kiln.zeros((), dtype=kiln.float32)
    args = (1e-3, 0.9, 0.999, 1e-8, 0.0, True, False, False)
    with pytest.raises(RuntimeError, match="exp_avg must be a contiguous CPU tensor"):
        kiln._C._adam_multi_step_([p], [kiln.ones(3)], [kiln.ones(4)], [kiln.ones(3)], None,
                                  [step], *args)  # fmt: skip
    with pytest.raises(RuntimeError, match="lists differ in length"):
        kiln._C._adam_multi_step_([p], [], [kiln.ones(3)], [kiln.ones(3)], None, [step], *args)


def test_ineligible_parameters_take_the_single_tensor_update():
    # A non-contiguous parameter cannot run in the C++ pass: it takes torch's single-tensor
    # formula, the others the fused one, in the same step.
    rng = np.random.default_rng(1)
    base = [rng.standard_normal((4, 3)), rng.standard_normal(5)]
    kp = [kiln.nn.Parameter(kiln.tensor(base[0]).t()), kiln.nn.Parameter(kiln.tensor(base[1]))]
    tp = [torch.nn.Parameter(torch.tensor(base[0]).t()), torch.nn.Parameter(torch.tensor(base[1]))]
    kopt = kiln.optim.AdamW(kp, lr=1e-2, foreach=True)
    topt = torch.optim.AdamW(tp, lr=1e-2, foreach=False)
    for _ in range(5):
        for k, t in zip(kp, tp, strict=True):
            g = rng.standard_normal(tuple(t.shape))
            k.grad = kiln.tensor(g)
            t.grad = torch.tensor(g)
        kopt.step()
        topt.step()
    for k, t in zip(kp, tp, strict=True):
        np.testing.assert_allclose(k.detach().numpy(), t.detach().numpy(), rtol=1e-12)
    assert kopt.state[kp[0]]["step"].item() == kopt.state[kp[1]]["step"].item() == 5


@pytest.mark.parametrize("foreach,expected_calls", [(None, 3), (True, 3), (False, 0)])
def test_default_runs_in_cpp_and_foreach_false_op_by_op(monkeypatch, foreach, expected_calls):
    calls = []
    real = kiln._C._adam_multi_step_
    monkeypatch.setattr(
        kiln._C, "_adam_multi_step_", lambda *a, **k: calls.append(1) or real(*a, **k)
    )
    p = kiln.nn.Parameter(kiln.ones(4))
    opt = kiln.optim.AdamW([p], lr=0.1, foreach=foreach)
    for _ in range(3):
        p.grad = kiln.ones(4)
        opt.step()
    assert len(calls) == expected_calls
    assert opt.state[p]["step"].item() == 3
