"""cat in compiled code: along the innermost dim (rotary embeddings), of head-merging reshapes
(attention), read through merged dims, and the gradient of a qkv split (a sum of
slice_scatters that simplify turns into a cat). Each equals eager, in one compiled part."""

from __future__ import annotations

import pytest
from corpus_util import fresh_capture  # noqa: F401 - autouse: empty caches around every test
from test_backend_compiled import rand, run_compiled
from test_compiled_training import grads_as_eager, trained_in_one_part

import kiln
import kiln.nn as nn


def _one_part(backend) -> None:
    assert [len(r.parts) for r in backend.reports] == [1]
    assert all(r.eager_nodes == 0 for r in backend.reports)


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return kiln.cat((-x2, x1), dim=-1)


@pytest.mark.parametrize("dtype", [kiln.float32, kiln.bfloat16, kiln.int32])
def test_rotary_embedding(dtype):
    def fn(q, cos, sin):
        return q * cos + rotate_half(q) * sin

    q = (rand(2, 5, 4, 32) * 3).to(dtype)
    cos, sin = rand(5, 1, 32, seed=1).to(dtype), rand(5, 1, 32, seed=2).to(dtype)
    _one_part(run_compiled(fn, q, cos, sin))
    _one_part(run_compiled(fn, q, cos, sin, dynamic=True,
                           calls=[((rand(3, 5, 4, 32, seed=3) * 3).to(dtype), cos, sin)]))


@pytest.mark.parametrize("sizes", [(16, 16, 16), (16, 8), (3, 3), (40, 24, 1)])
def test_cat_along_the_last_dim(sizes):
    def fn(*xs):
        return kiln.cat([x.exp() for x in xs], -1) * 2

    _one_part(run_compiled(fn, *[rand(6, 7, s, seed=i) for i, s in enumerate(sizes)]))


@pytest.mark.parametrize("dim", [0, 1, 2])
def test_cat_read_through_merged_dims(dim):
    def fn(a, b):
        shape = list(a.shape)
        shape[dim] *= 2
        merged = kiln.cat([a, b], dim).reshape(shape[0] * shape[1], shape[2]).sigmoid()
        return merged + 1, kiln.cat([a.neg(), b], dim).flatten()

    _one_part(run_compiled(fn, rand(4, 6, 8), rand(4, 6, 8, seed=1)))


def test_cat_of_merged_heads():
    def fn(q, k, v):
        def heads(t):
            return t.transpose(1, 2).reshape(t.shape[0], t.shape[2], -1)

        return kiln.cat([heads(q), heads(k) * 2, heads(v)], -1).tanh()

    _one_part(run_compiled(fn, rand(2, 4, 6, 8), rand(2, 4, 6, 8, seed=1),
                           rand(2, 4, 6, 8, seed=2)))


class QKV(nn.Module):
    def __init__(self, d=32, heads=4):
        super().__init__()
        self.heads, self.qkv, self.proj = heads, nn.Linear(d, 3 * d), nn.Linear(d, d)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2)
                   for z in self.qkv(x).split(c, dim=2))  # fmt: skip
        y = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(b, t, c))


def test_qkv_split_gradients_compile_in_one_part():
    """The split's gradient (three slice_scatters accumulated) becomes cat(dq, dk, dv) along the
    heads, and the gradients equal eager's."""
    kiln.manual_seed(0)
    block = QKV()
    backend = grads_as_eager(block, lambda s: [kiln.randn(2, 6, 32)], list(block.parameters()),
                             steps=2, tol=2e-5)
    trained_in_one_part(backend)
