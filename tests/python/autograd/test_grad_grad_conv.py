"""Double backward and forward-mode AD through convolutions, pooling, interpolation and the
scatters: gradgradcheck in float64, a gradient penalty (WGAN-GP style) and a CNN's jvp against
torch."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import kiln  # noqa: E402
import kiln.nn.functional as KF  # noqa: E402

G = np.random.default_rng(9)


def _leaf(*shape):
    return kiln.tensor(G.standard_normal(shape), requires_grad=True)


@pytest.mark.parametrize(
    "fn,shapes",
    [
        (lambda x, w: KF.conv1d(x, w, stride=2, padding=1), [(2, 2, 7), (3, 2, 3)]),
        (lambda x, w: KF.conv2d(x, w, padding=1, groups=2), [(1, 4, 5, 4), (2, 2, 3, 2)]),
        (lambda x, w: KF.conv3d(x, w, dilation=(1, 2, 1)), [(1, 2, 4, 5, 3), (2, 2, 2, 2, 2)]),
        (lambda x, w: KF.conv_transpose2d(x, w, stride=2), [(1, 2, 3, 3), (2, 3, 2, 2)]),
        (lambda x: KF.max_pool2d(x, 2, stride=1), [(1, 2, 4, 5)]),
        (lambda x: KF.avg_pool2d(x, 3, stride=2, padding=1), [(2, 2, 5, 6)]),
        (lambda x: KF.avg_pool3d(x, 2, count_include_pad=False, padding=1), [(1, 2, 3, 4, 3)]),
        (lambda x: KF.adaptive_avg_pool2d(x, (2, 3)), [(1, 2, 5, 7)]),
        (lambda x: KF.interpolate(x, scale_factor=2), [(1, 2, 3, 2)]),
        (lambda x: KF.interpolate(x, (4, 5), mode="bilinear"), [(1, 1, 3, 3)]),
        (lambda x, s: kiln.scatter(x, 1, kiln.tensor([[0], [2]]), s), [(2, 3), (2, 1)]),
        (lambda x, v: kiln.index_put(x, (kiln.tensor([1]),), v), [(3, 2), (2,)]),
        # The eager backward is one fused kernel; under create_graph the rule runs instead.
        (lambda x, w, b: KF.layer_norm(x, (4,), w, b), [(3, 4), (4,), (4,)]),
    ],
    ids=["conv1d", "conv2d", "conv3d", "conv_transpose2d", "max_pool2d", "avg_pool2d",
         "avg_pool3d", "adaptive_avg_pool2d", "nearest", "bilinear", "scatter", "index_put",
         "layer_norm"],
)  # fmt: skip
def test_gradgradcheck(fn, shapes):
    inputs = tuple(_leaf(*s) for s in shapes)
    # tanh makes the function non-linear in each input, so the second derivative is not zero.
    assert kiln.autograd.gradgradcheck(lambda *a: fn(*a).tanh(), inputs)


def _critic(lib, params):
    w1, b1, w2 = params
    f = lib.nn.functional

    def critic(x):
        h = f.leaky_relu(f.conv2d(x, w1, b1, stride=2, padding=1), 0.2)
        return f.avg_pool2d(h, 2).flatten(1) @ w2

    return critic


def test_gradient_penalty_matches_torch():
    shapes = [(4, 3, 3, 3), (4,), (16, 1)]
    values = [G.standard_normal(s) * 0.3 for s in shapes]
    x = G.standard_normal((2, 3, 8, 8))
    grads = []
    for lib in (kiln, torch):
        params = [lib.tensor(v, requires_grad=True) for v in values]
        xi = lib.tensor(x, requires_grad=True)
        out = _critic(lib, params)(xi)
        (gx,) = lib.autograd.grad(out.sum(), xi, create_graph=True)
        penalty = ((gx.flatten(1).norm(2, dim=1) - 1) ** 2).mean()
        penalty.backward()
        # The penalty does not depend on b1 (leaky_relu is piecewise linear): torch keeps a zero
        # gradient there, kiln none.
        grads.append([np.zeros(p.shape) if p.grad is None else p.grad.numpy() for p in params])
    for a, b in zip(*grads, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12)


def test_cnn_jvp_matches_torch():
    shapes = [(4, 3, 3, 3), (4,), (16, 1)]
    values = [G.standard_normal(s) * 0.3 for s in shapes]
    x, t = G.standard_normal((2, 3, 8, 8)), G.standard_normal((2, 3, 8, 8))
    results = []
    for lib, jvp in ((kiln, kiln.func.jvp), (torch, torch.func.jvp)):
        critic = _critic(lib, [lib.tensor(v) for v in values])
        results.append(jvp(critic, (lib.tensor(x),), (lib.tensor(t),)))
    (kv, kt), (tv, tt) = results
    np.testing.assert_allclose(kv.numpy(), tv.numpy(), rtol=1e-10)
    np.testing.assert_allclose(kt.numpy(), tt.numpy(), rtol=1e-9, atol=1e-12)
