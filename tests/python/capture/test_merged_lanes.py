"""Loops merged into a short vector lane ([Note: merged lane loops] in
passes/schedule/schedule.h): a pointwise node whose innermost dims are few elements (a conv
weight's 3x3, a 7x7 feature map) walks them as one loop when every access is contiguous across
them; broadcasts, slices, transposes and index values that break the pairing keep the loops
apart. Each case is compiled with no eager node and equals eager exactly (pointwise, casts)
or to rounding (reductions)."""

from __future__ import annotations

import textwrap

import numpy as np
import pytest
from corpus_util import fresh_capture  # noqa: F401 - autouse: empty caches around every test

import kiln
from kiln._capture.backend_compiled import CpuBackend

C = kiln._C._compiler
P = kiln._C._ir.parse


def rand(*shape, seed=0):
    g = np.random.default_rng(seed + sum(shape))
    return kiln.from_numpy(g.uniform(-2, 2, shape).astype(np.float32))


def compiled_equals_eager(fn, *args, exact=True):
    kiln.compiler.reset()
    backend = CpuBackend(fallback=False)  # a node the compiler declines raises
    with kiln.no_grad():
        out, ref = kiln.compile(fn, backend=backend)(*args), fn(*args)
    assert out.dtype == ref.dtype and tuple(out.shape) == tuple(ref.shape)
    a, b = out.float().contiguous().numpy(), ref.float().contiguous().numpy()
    if exact:
        np.testing.assert_array_equal(a, b)
    else:
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def loop_text(kir: str) -> str:
    return C.compile_graph(P(textwrap.dedent(kir)), {"filename": "t.kir"}).loop_text


def test_weight_cast_walks_its_trailing_dims_as_one_lane():
    text = loop_text("""\
        graph @f(%w: f32[256, 64, 3, 3]) {
          %0 = cast(%w) {dtype = bf16} : bf16[256, 64, 3, 3]
          return %0
        }
        """)
    assert "order [i0, i1, i2, i3] vector i1..i3" in text and "parallel i0 " in text
    w = rand(256, 64, 3, 3)
    compiled_equals_eager(lambda w: w.to(kiln.bfloat16), w)


def test_per_channel_bias_merges_the_plane_only():
    text = loop_text("""\
        graph @f(%x: f32[8, 64, 7, 7], %b: f32[64, 1, 1]) {
          %0 = add(%x, %b) : f32[8, 64, 7, 7]
          return %0
        }
        """)
    assert "vector i2..i3" in text and "parallel i0*i1 " in text


def test_trailing_loops_of_extent_one_hand_the_lane_to_the_channels():
    text = loop_text("""\
        graph @f(%w: f32[512, 96, 1, 1]) {
          %0 = cast(%w) {dtype = bf16} : bf16[512, 96, 1, 1]
          return %0
        }
        """)
    assert "vector i1..i3" in text


def test_pairing_breakers_keep_loops_apart():
    text = loop_text("""\
        graph @f(%x: f32[64, 3, 3], %b: f32[3]) {
          %0 = add(%x, %b) : f32[64, 3, 3]
          return %0
        }
        """)
    assert "order [i0, i1, i2] vector i2 {" in text


base = rand(128, 16, 5, 5, seed=3)

CASES = {
    "contiguous": (lambda x: (x * 2 + 1).relu(), lambda: rand(128, 16, 3, 3)),
    "bias_per_channel": (lambda x: x + rand(16, 1, 1, seed=1), lambda: rand(128, 16, 7, 7)),
    "bias_last_dim": (lambda x: x * rand(3, seed=2), lambda: rand(128, 3, 3)),
    "bias_middle_dim": (lambda x: x - rand(3, 1, seed=4), lambda: rand(128, 3, 3)),
    "sliced_input": (lambda x: x.neg(), lambda: base[:, :, :3, :3]),
    "transposed_input": (lambda x: x.exp(), lambda: base[:, :, :3, :3].transpose(2, 3)),
    "expanded_input": (lambda x: x * 3, lambda: rand(128, 1, 3).expand(128, 3, 3)),
    "tril_mask": (lambda x: x.tril(), lambda: rand(128, 3, 3)),
    "arange_index": (lambda x: x + kiln.arange(9.0).reshape(3, 3), lambda: rand(128, 3, 3)),
    "bf16_cast": (lambda x: x.to(kiln.bfloat16), lambda: rand(64, 3, 7, 7)),
    "bf16_math": (lambda x: (x.to(kiln.bfloat16) * 2).float(), lambda: rand(96, 5, 3)),
    "two_outputs": (lambda x: (x + 1, x.sigmoid()), lambda: rand(70, 4, 3)),
    "size_one_dims": (lambda x: x.relu(), lambda: rand(256, 1, 3, 1, 3)),
    "pointwise_conv_weight": (lambda x: x.to(kiln.bfloat16), lambda: rand(512, 96, 1, 1)),
    "trailing_ones_sliced": (lambda x: x * 2, lambda: base[:, :, :1, :1]),
    "trailing_ones_bias": (lambda x: x + rand(96, 1, 1, seed=5), lambda: rand(128, 96, 1, 1)),
}


@pytest.mark.parametrize("name", list(CASES))
def test_compiled_equals_eager(name):
    fn, make = CASES[name]
    x = make()
    if name == "two_outputs":
        kiln.compiler.reset()
        with kiln.no_grad():
            got, want = kiln.compile(fn, backend=CpuBackend(fallback=False))(x), fn(x)
        for a, b in zip(got, want, strict=True):
            np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-6, atol=1e-6)
        return
    compiled_equals_eager(fn, x, exact=name != "transposed_input")


@pytest.mark.parametrize("dims", [(2, 3), (1, 2, 3), (3,)])
@pytest.mark.parametrize("op", ["sum", "amax", "mean"])
def test_reductions_over_small_trailing_dims(op, dims):
    x = rand(8, 64, 7, 7)
    compiled_equals_eager(lambda x: getattr(x, op)(dims), x, exact=op == "amax")
    sliced = base[:, :4, :3, :3]
    compiled_equals_eager(lambda x: getattr(x, op)(dims), sliced, exact=op == "amax")


def test_global_pool_reduction_lane_spans_the_plane():
    text = loop_text("""\
        graph @f(%x: f32[8, 512, 7, 7]) {
          %0 = sum(%x) {dim = [2, 3]} : f32[8, 512]
          return %0
        }
        """)
    assert "over [7, 7] order [i0, i1, r0, r1] vector r0..r1" in text
