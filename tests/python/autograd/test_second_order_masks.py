"""Second derivatives through piecewise-linear ops: torch's backward of relu, leaky_relu,
hardtanh, relu6, threshold, the shrinks and abs reads the input through its mask with a zero
derivative, so a parameter reached only through such a mask gets a zero gradient, not None
(an optimizer then still decays its moments, as in torch)."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import kiln  # noqa: E402

OPS = {
    "relu": lambda m, h: m.nn.functional.relu(h),
    "leaky_relu": lambda m, h: m.nn.functional.leaky_relu(h, 0.1),
    "hardtanh": lambda m, h: m.nn.functional.hardtanh(h),
    "relu6": lambda m, h: m.nn.functional.relu6(h),
    "threshold": lambda m, h: m.nn.functional.threshold(h, 0.1, 2.0),
    "hardshrink": lambda m, h: m.nn.functional.hardshrink(h),
    "softshrink": lambda m, h: m.nn.functional.softshrink(h),
    "rrelu_eval": lambda m, h: m.nn.functional.rrelu(h, training=False),
    "abs": lambda m, h: h.abs(),
    "clamp": lambda m, h: h.clamp(-0.5, 0.5),  # torch: a constant gradient (no dependence)
    "elu": lambda m, h: m.nn.functional.elu(h),  # smooth: a nonzero second derivative
}


def _second_order(m, op):
    rng = np.random.default_rng(3)
    x = m.tensor(rng.standard_normal(16), requires_grad=True)
    b = m.tensor(rng.standard_normal(16), requires_grad=True)
    (g,) = m.autograd.grad(OPS[op](m, x * 2 + b).sum(), x, create_graph=True)
    if not g.requires_grad:
        return "constant"
    (gb,) = m.autograd.grad((g * g).sum(), b, allow_unused=True)
    if gb is None:
        return None
    return gb.detach().numpy(force=True) if m is torch else gb.detach().numpy()


@pytest.mark.parametrize("op", sorted(OPS))
def test_second_derivative_reaches_the_input_as_torch(op):
    ours, theirs = _second_order(kiln, op), _second_order(torch, op)
    if isinstance(theirs, str) or theirs is None:
        assert ours is theirs or ours == theirs
    else:
        assert isinstance(ours, np.ndarray)
        np.testing.assert_allclose(ours, theirs, rtol=1e-12, atol=1e-12)


def test_gradient_penalty_gives_the_bias_a_zero_gradient():
    """WGAN-GP's penalty on a leaky-relu critic: the first bias is reached only through the
    mask; torch gives it a zero gradient, and so must kiln."""
    grads = []
    for m in (kiln, torch):
        m.manual_seed(0)
        rng = np.random.default_rng(0)
        lin1, lin2 = m.nn.Linear(4, 8), m.nn.Linear(8, 1)
        with m.no_grad():
            for lin in (lin1, lin2):
                lin.weight.copy_(m.tensor(rng.standard_normal(tuple(lin.weight.shape))))
                lin.bias.copy_(m.tensor(rng.standard_normal(tuple(lin.bias.shape))))
        x = m.tensor(rng.standard_normal((5, 4)).astype(np.float32), requires_grad=True)
        out = lin2(m.nn.functional.leaky_relu(lin1(x), 0.2))
        (gx,) = m.autograd.grad(out.sum(), x, create_graph=True)
        ((gx.norm(2, dim=1) - 1) ** 2).mean().backward()
        grads.append([p.grad for p in (lin1.weight, lin1.bias, lin2.weight, lin2.bias)])
    for ours, theirs in zip(*grads, strict=True):
        assert (ours is None) == (theirs is None)
        if theirs is not None:
            np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-5, atol=1e-6)
