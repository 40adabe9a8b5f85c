"""scaled_dot_product_attention with attention dropout (nn.MultiheadAttention and
nn.TransformerEncoderLayer while training) or grouped-query heads (enable_gqa) compiles: the
probabilities are materialized and dropped by the dropout op, whose counter-based draws are the
ones eager's kernel makes, so the compiled outputs and gradients equal eager's from the same
seed, with no eager node."""

from __future__ import annotations

import pytest
from corpus_util import fresh_capture  # noqa: F401 - autouse: empty caches around every test
from test_compiled_training import grads_as_eager, trained_in_one_part

import kiln
import kiln.nn as nn
import kiln.nn.functional as F
from kiln._capture.backend_compiled import CpuBackend


@pytest.mark.parametrize("case", ["plain", "causal", "bool_mask", "float_mask", "cross",
                                  "scale"])
def test_attention_dropout_trains_compiled_as_eager(case):
    wq = (kiln.randn(8, 8) * 0.3).requires_grad_()
    s = 7 if case == "cross" else 5
    bias = (kiln.randn(5, s) * 0.5).requires_grad_()
    keep = kiln.rand(5, s) > 0.3
    keep[:, 0] = True  # every row attends somewhere

    def fn(x, kv):
        q = (x @ wq).view(2, 5, 2, 4).transpose(1, 2)
        k = v = kv.view(2, -1, 2, 4).transpose(1, 2)
        kwargs = {"dropout_p": 0.3}
        if case == "causal":
            kwargs["is_causal"] = True
        elif case == "bool_mask":
            kwargs["attn_mask"] = keep
        elif case in ("float_mask", "cross"):
            kwargs["attn_mask"] = bias
        elif case == "scale":
            kwargs["scale"] = 0.3
        y = F.scaled_dot_product_attention(q, k, v, **kwargs)
        return y.transpose(1, 2).reshape(2, 5, 8)

    backend = grads_as_eager(fn, lambda _: [kiln.randn(2, 5, 8).requires_grad_(),
                                            kiln.randn(2, s, 8).requires_grad_()],
                             [wq, bias] if case in ("float_mask", "cross") else [wq], steps=2)
    trained_in_one_part(backend)


def test_a_training_transformer_encoder_compiles_with_no_eager_node_and_trains_as_eager():
    """nn.TransformerEncoderLayer in train mode (dropout 0.1 in attention and after it): the
    compiled model's losses over 4 AdamW steps equal eager's from the same seeds."""

    def run(compiled: bool):
        kiln.manual_seed(0)
        enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(
            d_model=32, nhead=4, dim_feedforward=64, dropout=0.1, batch_first=True,
            norm_first=True), num_layers=2)
        model = nn.Sequential(enc, nn.Linear(32, 5))
        opt = kiln.optim.AdamW(model.parameters(), lr=1e-3)
        backend = CpuBackend(fallback=False)
        fn = kiln.compile(model, backend=backend) if compiled else model
        x, y = kiln.randn(4, 6, 32), kiln.randint(0, 5, (4, 6))
        losses = []
        for step in range(4):
            kiln.manual_seed(100 + step)
            loss = F.cross_entropy(fn(x).reshape(-1, 5), y.reshape(-1))
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        return losses, backend

    want, _ = run(False)
    got, backend = run(True)
    assert got == pytest.approx(want, rel=1e-5, abs=1e-6)
    assert all(r.eager_nodes == 0 and r.fallbacks == [] for r in backend.reports)
    assert sum(r.backward_parts for r in backend.reports) >= 1


def test_attention_dropout_under_bfloat16_autocast_equals_eager():
    """Under autocast the operands arrive in bfloat16; the probabilities are computed and dropped
    in float32 and the result cast back, as eager's kernel does."""
    q, k, v = (kiln.randn(2, 3, 6, 8) for _ in range(3))

    def fn(q, k, v):
        with kiln.autocast("cpu", dtype=kiln.bfloat16):
            return F.scaled_dot_product_attention(q, k, v, dropout_p=0.2, is_causal=True)

    results = []
    for f in (fn, kiln.compile(fn, backend=CpuBackend(fallback=False))):
        kiln.manual_seed(7)
        results.append(f(q, k, v))
    assert kiln.explain(fn)(q, k, v).graph_break_count == 0  # and no decline: fallback=False
    assert results[1].dtype == results[0].dtype == kiln.bfloat16
    assert kiln.allclose(results[1].float(), results[0].float(), rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("dropout_p", [0.0, 0.2])
@pytest.mark.parametrize("is_causal", [False, True])
def test_grouped_query_attention_trains_compiled(dropout_p, is_causal):
    """enable_gqa: 4 query heads over 2 key/value heads, each key head repeated for the query
    heads that read it, with and without dropout. Eager's kernel has no gradient for it, so the
    reference repeats the heads itself (same probabilities' shape, so the same dropout draws)."""

    def attention(x, kv, wq, gqa: bool):
        q = (x @ wq).view(2, 5, 4, 2).transpose(1, 2)
        k = kv.view(2, 5, 2, 2).transpose(1, 2)
        v = (kv * 2).view(2, 5, 2, 2).transpose(1, 2)
        if not gqa:
            k, v = k.repeat_interleave(2, dim=1), v.repeat_interleave(2, dim=1)
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, is_causal=is_causal,
                                           enable_gqa=gqa)
        return y.transpose(1, 2).reshape(2, 5, 8)

    backend = CpuBackend(fallback=False)
    compiled = kiln.compile(lambda x, kv, wq: attention(x, kv, wq, True), backend=backend)
    x, kv, w = kiln.randn(2, 5, 8), kiln.randn(2, 5, 4), kiln.randn(8, 8) * 0.3
    results = []
    for fn in (lambda *t: attention(*t, False), compiled):
        args = [t.clone().requires_grad_() for t in (x, kv, w)]
        kiln.manual_seed(3)
        out = fn(*args)
        (out * out).sum().backward()
        results.append([out.detach()] + [a.grad for a in args])
    for want, got in zip(*results, strict=True):
        assert kiln.allclose(got, want, rtol=1e-5, atol=1e-5), (got - want).abs().max().item()
    trained_in_one_part(backend)


def test_a_row_with_every_key_masked_attends_to_nothing_as_in_eager():
    q = kiln.randn(1, 2, 3, 4)
    keep = kiln.ones(3, 3, dtype=kiln.bool)
    keep[1] = False

    def fn(q):
        return F.scaled_dot_product_attention(q, q, q, attn_mask=keep, dropout_p=0.25)

    results = []
    for f in (fn, kiln.compile(fn, backend=CpuBackend(fallback=False))):
        kiln.manual_seed(5)
        results.append(f(q))
    assert kiln.explain(fn)(q).graph_break_count == 0
    assert (results[1][:, :, 1] == 0).all()
    assert kiln.allclose(results[1], results[0], rtol=1e-5, atol=1e-6)
