"""kiln.export of modules that slice a registered buffer (a GPT-style causal mask kept as a
4-d view, `self.mask[:, :, :t, :t]`): the weight is stored contiguous and every slice of it
writes a well-formed type, for a static and a dynamic sequence length; also a buffer that is a
non-contiguous view."""

import math

import pytest

import kiln
import kiln.nn as nn
import kiln.nn.functional as F

N, C = 8, 16


class CausalScores(nn.Module):
    """Attention probabilities under a causal mask read from a buffer, as nanoGPT writes it."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(C, C)
        self.register_buffer("mask", kiln.tril(kiln.ones(N, N)).view(1, 1, N, N))

    def forward(self, x):
        t = x.size(1)
        q = self.proj(x).unsqueeze(1)
        att = (q @ x.unsqueeze(1).transpose(-2, -1)) * (1.0 / math.sqrt(C))
        # masked_fill has no graph op yet (lowerings.py); where is the same fill.
        att = kiln.where(self.mask[:, :, :t, :t] == 0, float("-inf"), att)
        return F.softmax(att, dim=-1)


class CausalScoresMaskedFill(CausalScores):
    """The same with masked_fill, as nanoGPT writes it (kiln.compile runs it)."""

    def forward(self, x):
        t = x.size(1)
        q = self.proj(x).unsqueeze(1)
        att = (q @ x.unsqueeze(1).transpose(-2, -1)) * (1.0 / math.sqrt(C))
        att = att.masked_fill(self.mask[:, :, :t, :t] == 0, float("-inf"))
        return F.softmax(att, dim=-1)


class TransposedBuffer(nn.Module):
    """A buffer that is a non-contiguous view (a transpose), sliced and added."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("table", kiln.arange(N * C, dtype=kiln.float32).view(C, N).t())

    def forward(self, x):
        return x + self.table[: x.size(0), 1:]


def build(cls):
    kiln.manual_seed(0)
    return cls().eval()


def close(got, want):
    assert got.dtype == want.dtype and tuple(got.shape) == tuple(want.shape)
    assert bool(kiln.allclose(got, want, atol=1e-6, rtol=1e-5))


@pytest.mark.parametrize("t", [5, N])
def test_sliced_mask_buffer_static(t):
    model = build(CausalScores)
    x = kiln.randn(2, t, C)
    program = kiln.export(model, (x,))
    assert set(program.weights) == {"proj.weight", "proj.bias", "mask"}
    assert program.weights["mask"].is_contiguous()
    assert 'weight() {name = "mask"} : f32[1, 1, 8, 8]' in program.graph_text
    close(program.module()(x), model(x))


def test_sliced_mask_buffer_dynamic_sequence():
    model = build(CausalScores)
    seq = kiln.Dim("seq", min=2, max=N)
    program = kiln.export(model, (kiln.randn(2, 5, C),), dynamic_shapes={"x": {1: seq}})
    assert "%x: f32[2, seq, 16]" in program.graph_text
    run = program.module()
    for t in (2, 3, 7, N):
        x = kiln.randn(2, t, C)
        close(run(x), model(x))


def test_non_contiguous_buffer_view():
    model = build(TransposedBuffer)
    assert not model.table.is_contiguous()
    x = kiln.randn(5, C - 1)
    program = kiln.export(model, (x,))
    assert program.weights["table"].is_contiguous()
    close(program.module()(x), model(x))


def test_sliced_mask_buffer_under_compile_with_a_dynamic_sequence():
    model = build(CausalScoresMaskedFill)
    explainer = kiln.explain(kiln.compile(model, dynamic=True))
    for t in (3, 6, N):
        x = kiln.randn(2, t, C)
        out = explainer(x)
        assert (out.graph_count, out.graph_break_count) == (1, 0)
        assert out.recompiles == []
        close(out.result, model(x))
