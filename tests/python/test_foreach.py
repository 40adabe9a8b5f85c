"""torch's _foreach_* functions against torch's own, eagerly and inside compiled code (an EMA
update with _foreach_lerp_ compiles with no graph break or eager node)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import kiln

SHAPES = [(3, 4), (5,), (2, 2, 3)]


def lists(seed, n=1):
    rng = np.random.default_rng(seed)
    arrays = [[rng.uniform(0.2, 2.0, s).astype(np.float32) for s in SHAPES] for _ in range(n)]
    return ([[kiln.tensor(a) for a in group] for group in arrays],
            [[torch.tensor(a) for a in group] for group in arrays])


def same(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-6, atol=1e-7)


UNARY = ["abs", "exp", "sqrt", "neg", "reciprocal", "sigmoid", "log1p", "sign", "tanh",
         "floor", "trunc", "lgamma"]  # fmt: skip


@pytest.mark.parametrize("op", UNARY)
def test_unary(op):
    (k,), (t,) = lists(0)
    same(getattr(kiln, f"_foreach_{op}")(k), getattr(torch, f"_foreach_{op}")(t))
    getattr(kiln, f"_foreach_{op}_")(k)
    getattr(torch, f"_foreach_{op}_")(t)
    same(k, t)


@pytest.mark.parametrize("op", ["add", "sub", "mul", "div", "maximum", "minimum", "clamp_min",
                                "clamp_max", "pow"])
@pytest.mark.parametrize("other", ["scalar", "scalars", "tensors"])
def test_binary(op, other):
    (k, k2), (t, t2) = lists(1, 2)
    if other == "scalar":
        ko = to = 1.5
    elif other == "scalars":
        ko = to = [0.5, 2.0, 1.25]
    else:
        ko, to = k2, t2
    same(getattr(kiln, f"_foreach_{op}")(k, ko), getattr(torch, f"_foreach_{op}")(t, to))
    getattr(kiln, f"_foreach_{op}_")(k, ko)
    getattr(torch, f"_foreach_{op}_")(t, to)
    same(k, t)


def test_add_alpha_and_pointwise():
    (k, a, b), (t, ta, tb) = lists(2, 3)
    kiln._foreach_add_(k, a, alpha=-0.3)
    torch._foreach_add_(t, ta, alpha=-0.3)
    kiln._foreach_addcmul_(k, a, b, 0.5)
    torch._foreach_addcmul_(t, ta, tb, 0.5)
    kiln._foreach_addcdiv_(k, a, b, [0.1, 0.2, 0.3])
    torch._foreach_addcdiv_(t, ta, tb, [0.1, 0.2, 0.3])
    kiln._foreach_lerp_(k, a, 0.25)
    torch._foreach_lerp_(t, ta, 0.25)
    same(k, t)
    same(kiln._foreach_norm(k), torch._foreach_norm(t))
    kiln._foreach_copy_(k, b)
    same(k, b)
    kiln._foreach_zero_(k)
    assert all((x == 0).all() for x in k)


def test_errors_name_the_function():
    (k, a), _ = lists(3, 2)
    with pytest.raises(RuntimeError, match="_foreach_mul_.*same number of tensors"):
        kiln._foreach_mul_(k, a[:2])
    with pytest.raises(TypeError, match="_foreach_add.*list of Tensors"):
        kiln._foreach_add(k[0], 1.0)


def test_ema_update_compiles():
    from kiln._capture.backend_compiled import CpuBackend

    model, ema = kiln.nn.Linear(4, 3), kiln.nn.Linear(4, 3)
    ema.load_state_dict(model.state_dict())
    with kiln.no_grad():
        for p in model.parameters():
            p.mul_(2)
    ref = [p.detach().clone() for p in ema.parameters()]

    def update(decay):
        with kiln.no_grad():
            kiln._foreach_lerp_(list(ema.parameters()), list(model.parameters()), 1 - decay)

    backend = CpuBackend(fallback=False)
    kiln.compile(update, backend=backend)(0.9)
    for r, p, e in zip(ref, model.parameters(), ema.parameters(), strict=True):
        np.testing.assert_allclose(e.detach().numpy(), r.lerp(p.detach(), 0.1).numpy(),
                                   rtol=1e-6)
    assert [r.eager_nodes for r in backend.reports] == [0]
    assert kiln.explain(update)(0.9).graph_break_count == 0
