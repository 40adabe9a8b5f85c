"""kiln.amp.GradScaler against torch's (enabled and disabled), autocast regions that change
nothing, and the kiln.backends switches (tests/python/test_autocast.py tests autocast)."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import kiln  # noqa: E402


def _train(m, steps, poison_step, enabled):
    m.manual_seed(0)
    model = m.nn.Linear(4, 1)
    with m.no_grad():
        model.weight.copy_(m.tensor([[0.1, -0.2, 0.3, 0.4]]))
        model.bias.zero_()
    opt = m.optim.SGD(model.parameters(), lr=0.1)
    scaler = m.amp.GradScaler("cpu", init_scale=1024.0, growth_interval=2, enabled=enabled)
    x = m.tensor(np.arange(8, dtype=np.float32).reshape(2, 4) / 8)
    scales = []
    for step in range(steps):
        opt.zero_grad()
        loss = model(x).pow(2).mean()
        if step == poison_step:
            loss = loss * float("inf")
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        scaler.step(opt)
        scaler.update()
        scales.append(scaler.get_scale())
    return model.weight.detach().numpy().copy(), scales


@pytest.mark.parametrize("enabled", [True, False])
def test_grad_scaler_matches_torch(enabled):
    ours = _train(kiln, 6, poison_step=3, enabled=enabled)
    theirs = _train(torch, 6, poison_step=3, enabled=enabled)
    assert ours[1] == theirs[1]  # growth, the backoff after the inf step, growth again
    np.testing.assert_allclose(ours[0], theirs[0], rtol=1e-6)


def test_grad_scaler_state_dict_round_trips():
    s = kiln.amp.GradScaler(init_scale=8.0)
    s.update(4.0)
    t = kiln.amp.GradScaler()
    t.load_state_dict(s.state_dict())
    assert t.get_scale() == 4.0
    with pytest.raises(RuntimeError, match="state dict is empty"):
        t.load_state_dict(kiln.amp.GradScaler(enabled=False).state_dict())


def test_autocast_disabled_or_float32_changes_nothing():
    with kiln.amp.autocast("cpu", enabled=False):
        assert (kiln.ones(2, 2) @ kiln.ones(2, 2)).dtype == kiln.float32
    with pytest.warns(UserWarning, match="Disabling autocast"), kiln.amp.autocast(
            "cpu", dtype=kiln.float32):
        assert (kiln.ones(2, 2) @ kiln.ones(2, 2)).dtype == kiln.float32


def test_backends_switches_are_settable():
    kiln.backends.cuda.matmul.allow_tf32 = True
    kiln.backends.cudnn.allow_tf32 = True
    assert kiln.backends.cpu.get_cpu_capability() in ("AVX512", "AVX2", "DEFAULT")
