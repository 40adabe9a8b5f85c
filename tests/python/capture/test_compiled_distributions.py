"""kiln.distributions inside compiled code: constructing a distribution and calling its
log_prob / entropy / rsample compile into one part (the classes are captured as plain objects,
their lazy properties inlined), with eager's values; the argument checks are assertion nodes
that run after the part, and a failing one raises."""

from __future__ import annotations

import numpy as np
import pytest
from corpus_util import fresh_capture  # noqa: F401 - autouse: empty caches around every test

import kiln
from kiln._capture.backend_compiled import CpuBackend

D = kiln.distributions


def policy_loss(logits, actions, adv, mu, log_std):
    m = D.Categorical(logits=logits)
    n = D.Normal(mu, log_std.exp())
    b = D.Bernoulli(logits=logits[:, 0])
    return (-(m.log_prob(actions) * adv).mean() - 0.01 * m.entropy().mean()
            + n.log_prob(mu * 0.5).sum() + n.entropy().sum() + b.log_prob(adv.gt(0).float()).sum())


def args():
    g = np.random.default_rng(0)
    return (kiln.tensor(g.standard_normal((6, 4)), dtype=kiln.float32),
            kiln.tensor(g.integers(0, 4, 6)), kiln.tensor(g.standard_normal(6), dtype=kiln.float32),
            kiln.tensor(g.standard_normal(3), dtype=kiln.float32),
            kiln.tensor(g.standard_normal(3) * 0.1, dtype=kiln.float32))


def test_a_policy_gradient_loss_compiles_in_one_part():
    backend = CpuBackend()
    compiled = kiln.compile(policy_loss, backend=backend)
    a = args()
    np.testing.assert_allclose(compiled(*a).item(), policy_loss(*a).item(), rtol=1e-5)
    (report,) = backend.reports
    assert len(report.parts) == 1
    assert {t for _, t, _ in report.fallbacks} == {"kiln._assert"}  # the argument checks
    assert kiln.explain(policy_loss)(*a).graph_break_count == 0


def test_it_trains_compiled():
    a = [t.clone() for t in args()]
    grads = []
    for fn in (policy_loss, kiln.compile(policy_loss)):
        logits, mu = a[0].clone().requires_grad_(), a[3].clone().requires_grad_()
        fn(logits, a[1], a[2], mu, a[4]).backward()
        grads.append((logits.grad, mu.grad))
    for g, w in zip(grads[1], grads[0], strict=True):
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-5, atol=1e-7)


def test_rsample_draws_eagers_numbers():
    def draw(mu, std):
        return D.Normal(mu, std).rsample((4,)) * 2

    mu, std = kiln.zeros(3), kiln.ones(3)
    compiled = kiln.compile(draw)
    kiln.manual_seed(5)
    want = draw(mu, std)
    kiln.manual_seed(5)
    np.testing.assert_allclose(compiled(mu, std).numpy(), want.numpy(), rtol=1e-6)


def test_invalid_arguments_raise():
    def scale(std):
        return D.Normal(kiln.zeros(2), std).entropy().sum()

    compiled = kiln.compile(scale)
    with pytest.raises(ValueError, match="Expected parameter scale"):
        compiled(kiln.tensor([-1.0, 1.0]))  # the capture runs the check: eager's error
    assert compiled(kiln.tensor([2.0, 1.0])).item() == pytest.approx(
        scale(kiln.tensor([2.0, 1.0])).item())
    with pytest.raises((ValueError, AssertionError), match="Expected parameter scale"):
        compiled(kiln.tensor([1.0, -1.0]))  # the compiled entry's assertion node


def test_kl_divergence_and_sample_shapes_compile_without_breaks():
    """kl_divergence's registry keyed by type pairs is looked up at capture; `shape.numel()`
    (sample shapes) is a product of sizes."""
    from kiln.distributions import Categorical, Normal, kl_divergence

    def policy_terms(logits, old_logits, mu, sigma):
        p, q = Categorical(logits=logits), Categorical(logits=old_logits)
        prior = Normal(kiln.zeros_like(mu), kiln.ones_like(sigma))
        return (kl_divergence(p, q).mean() + kl_divergence(Normal(mu, sigma), prior).sum()
                + logits.shape.numel())

    gen = np.random.default_rng(0)
    args = [kiln.tensor(gen.standard_normal((4, 5)).astype(np.float32)) for _ in range(3)]
    args.append(args[2].exp())
    explained = kiln.explain(policy_terms)(*args)
    assert explained.graph_break_count == 0
    # compiled but for the distributions' argument checks (assertion nodes, as eager raises)
    assert {target for _, target, _ in explained.fallbacks[0]} == {"kiln._assert"}
    np.testing.assert_allclose(explained.result.item(), policy_terms(*args).item(), rtol=1e-5)
