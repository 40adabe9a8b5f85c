"""Gradients of every differentiable op of the op table under kiln.compile, against eager
autograd: each sample op of test_op_table.py, compiled with inputs that require grad (float64,
so differences are the compiler's, not rounding's), alone, with broadcast and transposed
operands, and in random chains. Ops with a compiled derivative train in one compiled part with
no eager node; the others (named in EAGER_BACKWARD) run on the eager kernels with the reason,
with the same gradients either way."""

from __future__ import annotations

import numpy as np
import pytest
from corpus_util import fresh_capture  # noqa: F401 - autouse: empty caches around every test
from test_backend_compiled import rand
from test_op_table import BINARY, PRODUCTS, REDUCTIONS, SAMPLES

import kiln
import kiln.nn.functional as F
from kiln._capture.backend_compiled import CpuBackend

# Ops whose backward is not compiled yet (they train on the eager kernels).
EAGER_BACKWARD: set = set()
# Ops with no gradient at all (integer or bool results).
NO_GRAD = {
    "isnan", "isinf", "isfinite", "isposinf", "isneginf", "signbit", "logical_not",
    "bitwise_not", "eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or",
    "logical_xor", "bitwise_and", "bitwise_or", "bitwise_xor", "all", "any", "argmax",
    "argmin", "one_hot", "argsort", "floor_divide", "detach", "bitwise_left_shift",
    "bitwise_right_shift", "linalg_det_sign",
}  # fmt: skip
DIFFERENTIABLE = sorted(set(SAMPLES) - NO_GRAD)


def grads_match(fn, inputs, *, compiled_backward: bool):
    """fn(*inputs) and d(sum(out * weights))/d(inputs) compiled vs eager (float64)."""
    kiln.compiler.reset()
    backend = CpuBackend(fallback=not compiled_backward)
    compiled = kiln.compile(fn, backend=backend)
    results = []
    for f in (fn, compiled):
        args = [a.detach().clone().requires_grad_() for a in inputs]
        out = f(*args)
        weights = rand(*out.shape, dtype=out.dtype, seed=9) if out.dim() else kiln.tensor(1.5,
                                                                                        dtype=out.dtype)
        (out * weights).sum().backward()
        results.append((out.detach(), [a.grad for a in args]))
    (ref, ref_grads), (got, got_grads) = results
    assert kiln.allclose(got, ref, rtol=1e-9, atol=1e-9, equal_nan=True)
    for r, g in zip(ref_grads, got_grads, strict=True):
        if r is None:
            assert g is None
            continue
        assert g is not None and kiln.allclose(g, r, rtol=1e-8, atol=1e-9, equal_nan=True), (
            (g - r).abs().max().item())
    return backend.reports[0]


def _args(op, layout):
    binary = op in BINARY or op in PRODUCTS
    if op in PRODUCTS and layout != "plain":  # a transposed matrix, a strided vector
        return [rand(17, 3, dtype=kiln.float64).t() * 2, rand(34, dtype=kiln.float64)[::2]]
    if layout == "plain":
        return [rand(3, 17, dtype=kiln.float64) * 2] + (
            [rand(17, dtype=kiln.float64, seed=1) * 2] if binary else [])
    x = rand(17, 3, dtype=kiln.float64) * 2  # transposed, and a broadcast second operand
    return [x.t()] + ([rand(3, 1, dtype=kiln.float64, seed=2) * 2] if binary else [])


@pytest.mark.parametrize("layout", ["plain", "transposed_broadcast"])
@pytest.mark.parametrize("op", DIFFERENTIABLE)
def test_op_gradient(op, layout):
    compiled_backward = op not in EAGER_BACKWARD
    report = grads_match(SAMPLES[op], _args(op, layout), compiled_backward=compiled_backward)
    if compiled_backward:
        assert report.backward_parts == 1 and report.eager_nodes == 0, report.fallbacks
    else:
        assert report.backward_parts == 0
        assert any("derivative" in reason for _, _, reason in report.fallbacks), report.fallbacks


def test_the_lists_name_sample_ops():
    assert EAGER_BACKWARD <= set(SAMPLES) and NO_GRAD <= set(SAMPLES)


@pytest.mark.parametrize("p", [2, 1, 3, 1.5, 0, float("inf"), float("-inf")])
def test_norm_orders_gradient(p):
    report = grads_match(lambda x: x.norm(p=p, dim=-1, keepdim=p == 3),
                         [rand(4, 9, dtype=kiln.float64) * 2], compiled_backward=True)
    assert report.backward_parts == 1 and report.eager_nodes == 0, report.fallbacks


@pytest.mark.parametrize("seed", range(6))
def test_random_chains_train_in_one_part(seed):
    g = np.random.default_rng(seed)
    names = [n for n in DIFFERENTIABLE if n not in EAGER_BACKWARD and n not in REDUCTIONS]
    chain = [str(c) for c in g.choice(names, size=6)]

    def fn(x, y):
        for name in chain:
            x = BINARY[name](x, y) if name in BINARY else SAMPLES[name](x)
            x = x.clamp(-50, 50)
        return x.sum(-1)

    report = grads_match(fn, [rand(6, 13, dtype=kiln.float64, seed=seed),
                              rand(13, dtype=kiln.float64, seed=seed + 1)],
                         compiled_backward=True)
    assert report.backward_parts == 1 and report.eager_nodes == 0, chain


def test_detach_stops_the_gradient_in_the_compiled_backward():
    """`x * x.detach()` differentiates as x (the detached factor is a constant), compiled whole."""

    def fn(x, w):
        return (x * x.detach() + (w * x).detach() * w).tanh()

    report = grads_match(fn, [rand(4, 5, dtype=kiln.float64), rand(5, seed=1, dtype=kiln.float64)],
                         compiled_backward=True)
    assert report.eager_nodes == 0 and report.backward_parts == 1


@pytest.mark.parametrize("name", ["selu", "elu_scaled_input", "celu", "clamp_min_only",
                                  "clamp_max_only"])
def test_scaled_elus_and_one_sided_clamps_train_compiled(name):
    """selu is elu with a scale (the table's attributes), whose derivative the compiled backward
    takes from the one elu rule; a one-sided clamp passes g on its open side."""
    fn = {"selu": lambda t: F.selu(t), "elu_scaled_input": lambda t: F.elu(t * 1.5, alpha=0.3),
          "celu": lambda t: F.celu(t, alpha=0.7), "clamp_min_only": lambda t: t.clamp(min=-0.2),
          "clamp_max_only": lambda t: t.clamp(max=0.4)}[name]  # fmt: skip
    report = grads_match(fn, [rand(5, 7, dtype=kiln.float64) * 2], compiled_backward=True)
    assert report.backward_parts == 1 and report.eager_nodes == 0, report.fallbacks


def test_a_cat_of_more_than_64_pieces_trains_compiled():
    """Which inputs need a gradient is a bit per input past the 64th too: each of 70 pieces gets
    its slice of the gradient, compiled and eager."""
    pieces = [rand(2, 3, dtype=kiln.float64, seed=s) for s in range(70)]

    def fn(*xs):
        return kiln.cat([x * (i + 1) for i, x in enumerate(xs)], 1).tanh()

    report = grads_match(fn, pieces, compiled_backward=True)
    assert report.backward_parts == 1 and report.eager_nodes == 0, report.fallbacks


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("ignore", [False, True])
def test_nll_loss_with_class_weights_trains_compiled(reduction, ignore):
    """Class weights scale each row's gradient by its target's weight; the mean divides by the
    kept rows' weights (an ignored row has none)."""
    weight = rand(5, dtype=kiln.float64, seed=4).abs() + 0.5
    target = kiln.tensor([0, 3, 4, 1, 3, 2, 0])
    if ignore:
        target[2] = -100

    def fn(x):
        return F.nll_loss(F.log_softmax(x * 2, -1), target, weight=weight, reduction=reduction)

    report = grads_match(fn, [rand(7, 5, dtype=kiln.float64)], compiled_backward=True)
    assert report.eager_nodes == 0 and report.backward_parts == 1
