"""kiln.compile's default backend: graphs compiled by the CPU compiler equal eager kiln.

Every op family compiled on its own (strict: a decline fails the test) against the eager
kernels, within per-dtype tolerances, on shapes with sizes 1, primes and tails that are not a
multiple of the vector width, transposed and broadcast inputs and symbolic sizes; the GPT and
ResNet-style models with the default backend; partitions around unsupported ops; aliasing of
returned views; the kiln._C._compiler binding (errors, specialization checks); the
kernel cache across processes; KILN_LOGS output.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
from corpus_util import fresh_capture  # noqa: F401 - autouse: empty caches around every test

import kiln
import kiln.nn as nn
import kiln.nn.functional as F
from kiln._capture import backend_compiled, logs
from kiln._capture.backend_compiled import BackendCompilerFailed, CpuBackend

ROOT = Path(__file__).resolve().parents[3]
C = kiln._C._compiler
P = kiln._C._ir.parse

# (rtol, atol) of compiled vs eager per result dtype: f32 math uses ~2-ulp polynomials and
# reductions reassociate; f16/bf16 round once per fused kernel instead of after every op.
TOL = {
    kiln.float32: (2e-5, 2e-5),
    kiln.float64: (1e-10, 1e-10),
    kiln.float16: (4e-3, 4e-3),
    kiln.bfloat16: (3e-2, 3e-2),
}


@kiln.compiler.allow_in_graph
def opaque(x):  # a node the compiler cannot look into
    return x.erfc()


def assert_same(out, ref, tol=None):
    """`out` equals `ref`: same structure, dtypes and shapes; values within TOL (exact for ints
    and bools)."""
    if isinstance(ref, (tuple, list)):
        assert type(out) is type(ref) and len(out) == len(ref)
        for a, b in zip(out, ref, strict=True):
            assert_same(a, b, tol)
        return
    if not isinstance(ref, kiln.Tensor):
        assert type(out) is type(ref) and out == ref
        return
    assert isinstance(out, kiln.Tensor)
    assert out.dtype == ref.dtype and tuple(out.shape) == tuple(ref.shape)
    a, b = out.detach().contiguous(), ref.detach().contiguous()
    if a.dtype in TOL:
        rtol, atol = tol or TOL[a.dtype]
        np.testing.assert_allclose(a.double().numpy(), b.double().numpy(), rtol=rtol, atol=atol)
    else:
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def clone_args(args):
    return [a.clone() if isinstance(a, kiln.Tensor) else a for a in args]


def run_compiled(fn, *args, dynamic=None, strict=True, tol=None, calls=None):
    """Compiles `fn` with the CPU backend (strict: a decline raises), checks its results on
    `args` (and on each argument tuple of `calls`) against eager runs on clones, arguments
    after the call included; returns the backend (its `reports`). Starts from empty caches."""
    kiln.compiler.reset()
    backend = CpuBackend(fallback=not strict)
    compiled = kiln.compile(fn, backend=backend, dynamic=dynamic)
    for call_args in [args] + list(calls or []):
        ours, theirs = clone_args(call_args), clone_args(call_args)
        with kiln.no_grad():
            out, ref = compiled(*ours), fn(*theirs)
        assert_same(out, ref, tol)
        assert_same(ours, theirs, tol)
    return backend


def rand(*shape, dtype=kiln.float32, seed=0, low=-2.0, high=2.0):
    g = np.random.default_rng(seed + 7 * len(shape) + sum(shape))
    t = kiln.from_numpy(g.uniform(low, high, shape).astype(np.float64))
    return t.to(dtype)


SHAPES = [(1,), (7,), (3, 17), (2, 1, 33), (5, 16), (4, 37)]
FLOATS = [kiln.float32, kiln.float64, kiln.float16, kiln.bfloat16]

UNARY = {
    "neg": lambda x: -x,
    "abs": lambda x: x.abs(),
    "exp": lambda x: x.exp(),
    "log": lambda x: (x.abs() + 0.5).log(),
    "sqrt": lambda x: x.abs().sqrt(),
    "rsqrt": lambda x: (x.abs() + 0.1).rsqrt(),
    "tanh": lambda x: x.tanh(),
    "sigmoid": lambda x: x.sigmoid(),
    "erf": lambda x: kiln.erf(x),
    "erfc": lambda x: kiln.erfc(x),
    "relu": lambda x: F.relu(x),
    "gelu": lambda x: F.gelu(x),
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "silu": lambda x: F.silu(x),
    "pow": lambda x: x.abs() ** 1.5,
}


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary(name, dtype):
    fn = UNARY[name]
    for shape in SHAPES[1::2] if dtype in (kiln.float16, kiln.bfloat16) else SHAPES:
        run_compiled(lambda x: fn(x) * 2, rand(*shape, dtype=dtype))


BINARY = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "div": lambda a, b: a / (b.abs() + 1),
    "maximum": lambda a, b: kiln.maximum(a, b),
    "minimum": lambda a, b: kiln.minimum(a, b),
    "where_lt": lambda a, b: kiln.where(a < b, a, b * 0.5),
    "compare": lambda a, b: (a >= b, a == a, a != b, a > 0.5, b <= a),
    "scalars": lambda a, b: 2.5 * a - b / 4 + 1,
}


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_broadcast(name, dtype):
    fn = BINARY[name]
    pairs = [((5, 16), (5, 16)), ((3, 17), (17,)), ((4, 1, 9), (1, 6, 1)), ((1,), (2, 31))]
    for sa, sb in pairs:
        run_compiled(fn, rand(*sa, dtype=dtype), rand(*sb, dtype=dtype, seed=1))


@pytest.mark.parametrize("dtype", [kiln.int32, kiln.int64, kiln.int8, kiln.uint8])
def test_integer_arithmetic(dtype):
    a = kiln.randint(0, 20, (6, 19)).to(dtype)
    b = kiln.randint(1, 5, (19,)).to(dtype)
    run_compiled(lambda a, b: (a + b * 3 - 1, kiln.maximum(a, b), a > b, a.sum(1)), a, b)


def test_type_promotion():
    i = kiln.randint(0, 9, (4, 13))
    f = rand(4, 13)
    h = rand(13, dtype=kiln.float16)
    run_compiled(lambda i, f, h: (i * 0.5, i + f, f + h, h * 2, i.float() / 3, i + True), i, f, h)
    run_compiled(lambda b, f: (b & (f > 0), kiln.where(b, f, 0.0)), f > 0.5, f)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_reductions(dtype):
    x = rand(6, 5, 37, dtype=dtype)
    tol = (2e-2, 2e-2) if dtype == kiln.bfloat16 else None
    run_compiled(lambda x: (x.sum(), x.sum(-1), x.sum((0, 2), keepdim=True), x.mean(1)), x,
                 tol=tol)
    run_compiled(lambda x: (x.amax(-1), x.amin(0, keepdim=True), x.argmax(-1)), x)
    run_compiled(lambda x: (x.var(-1), x.var(1, correction=0), x.logsumexp(-1)), x, tol=tol)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_softmax_and_norms(dtype):
    for shape in [(3, 17), (2, 4, 64), (1, 129)]:
        x = rand(*shape, dtype=dtype)
        run_compiled(lambda x: (F.softmax(x, -1), F.log_softmax(x, dim=0)), x)
        w = rand(shape[-1], dtype=dtype, seed=2)
        b = rand(shape[-1], dtype=dtype, seed=3)
        run_compiled(lambda x, w, b: F.layer_norm(x, (x.shape[-1],), w, b, 1e-5), x, w, b)
        run_compiled(lambda x: F.layer_norm(x, x.shape[-1:]) * 3, x)


def test_views_on_contiguous_and_transposed_inputs():
    fns = [
        lambda x: x.view(-1, 4).exp(),
        lambda x: x.reshape(2, -1).sum(0),
        lambda x: x.permute(2, 0, 1) * 2,
        lambda x: x.transpose(0, 2).reshape(-1) + 1,
        lambda x: x[1:, :, ::2].tanh(),
        lambda x: x[:, 0] - x[:, -1],
        lambda x: x.unsqueeze(1).expand(3, 5, 4, 8) + 1,
        lambda x: x[:1].squeeze(0) * x[2],
        lambda x: x.narrow(2, 1, 5).sigmoid(),
    ]
    x = rand(3, 4, 8)
    xt = rand(8, 4, 3).permute(2, 1, 0)  # same shape, not contiguous
    assert not xt.is_contiguous()
    for fn in fns:
        run_compiled(fn, x)
        if fn is not fns[0]:  # view(-1, 4) of the permuted input is an error, as in torch
            run_compiled(fn, xt)
    with pytest.raises(RuntimeError, match="use .reshape"):
        fns[0](xt.clone())  # clone keeps the permuted strides (torch's preserve_format)


def test_broadcast_input_with_zero_strides():
    x = rand(1, 33).expand(5, 33)
    assert x.stride() == (0, 1)
    run_compiled(lambda x, y: (x * y).sum(-1), x, rand(5, 33))


def test_cat_and_mixed_sources():
    a, b = rand(5, 7), rand(5, 11)
    run_compiled(lambda a, b: kiln.cat([a.exp(), b, a * 2], dim=1).sum(-1), a, b)
    run_compiled(lambda a, b: kiln.cat([a.t(), b.t()]).relu(), a, b)


def test_library_calls_with_epilogues():
    x, w, bias = rand(2, 9, 16), rand(24, 16, seed=1), rand(24, seed=2)
    run_compiled(lambda x, w, b: F.gelu(F.linear(x, w, b)) * 2, x, w, bias, tol=(1e-4, 1e-4))
    run_compiled(lambda x, w: (x @ w.t()).softmax(-1), x, w, tol=(1e-4, 1e-4))
    q, k, v = rand(2, 3, 10, 8), rand(2, 3, 10, 8, seed=1), rand(2, 3, 10, 8, seed=2)
    run_compiled(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True) + q,
                 q, k, v, tol=(1e-4, 1e-4))
    ids = kiln.randint(0, 20, (3, 5))
    run_compiled(lambda ids, emb: F.embedding(ids, emb).sum(-1), ids, rand(20, 6))


def test_gathers_fuse_with_producers_and_consumers():
    """embedding, gather and index_select are loops with indirect loads: no extern, no eager
    node; the index may be computed in the graph and the gathered rows feed a reduction."""
    emb, ids = rand(20, 6), kiln.randint(0, 20, (3, 5))
    backend = run_compiled(lambda ids, emb: (F.embedding(ids, emb.exp()) * 2).sum(-1), ids, emb)
    (report,) = backend.reports
    assert report.eager_nodes == 0 and len(report.infos) == 1
    # exp(emb) is one kernel (a gathered buffer is materialized), the gather, scale and sum one
    assert report.infos[0]["kernels"] == 2
    for ids32 in (ids.int(), kiln.tensor([[0, 19], [19, 0]], dtype=kiln.int32)):
        run_compiled(lambda ids, emb: F.embedding(ids, emb, padding_idx=3) + 1, ids32, emb)
    x = rand(4, 9)
    # positions computed from values in the graph, or repeated
    run_compiled(lambda x: x.gather(1, (x.abs() * 4).long() % 9).softmax(-1), x)
    run_compiled(lambda x, i: x.index_select(0, i) * x[:3], x, kiln.tensor([3, 0, 3]))
    run_compiled(lambda x, i: kiln.index_select(x.t(), 1, i).sum(0), x, kiln.tensor([3, 3, 1]))
    run_compiled(lambda x, i: kiln.gather(x, 0, i), x, kiln.tensor([[3, 0, 1], [2, 2, 2]]))


def test_gathers_with_symbolic_sizes():
    fn = lambda ids, emb: F.embedding(ids, emb).relu().sum(1)  # noqa: E731
    emb = rand(50, 16)
    backend = run_compiled(fn, kiln.randint(0, 50, (3, 7)), emb, dynamic=True,
                           calls=[(kiln.randint(0, 50, (2, 3)), emb),
                                  (kiln.randint(0, 50, (9, 31)), rand(50, 16, seed=2))])
    (report,) = backend.reports
    assert report.eager_nodes == 0 and report.eager_calls == 0 and len(report.infos) == 1
    g = lambda x, i: x.gather(-1, i) * 2  # noqa: E731
    backend = run_compiled(g, rand(5, 8), kiln.randint(0, 8, (5, 3)), dynamic=True,
                           calls=[(rand(11, 13, seed=1), kiln.randint(0, 13, (11, 2)))])
    assert all(r.eager_nodes == 0 and r.eager_calls == 0 for r in backend.reports)


def test_gathers_match_torch():
    torch = pytest.importorskip("torch")
    g = np.random.default_rng(0)
    w = g.standard_normal((30, 8)).astype(np.float32)
    ids = g.integers(0, 30, (4, 6))
    x = g.standard_normal((6, 10)).astype(np.float32)
    gi = g.integers(0, 10, (6, 4))
    si = g.integers(0, 6, (5,))

    def fn(mod, F, w, ids, x, gi, si):
        return (F.embedding(ids, w).sum(1), mod.gather(x, 1, gi).exp(),
                mod.index_select(x, 0, si).amax(-1))

    with kiln.no_grad():
        ours = kiln.compile(lambda *a: fn(kiln, F, *a), backend=CpuBackend(fallback=False))(
            *(kiln.from_numpy(a) for a in (w, ids, x, gi, si)))
    theirs = fn(torch, torch.nn.functional, *(torch.from_numpy(a) for a in (w, ids, x, gi, si)))
    for a, b in zip(ours, theirs, strict=True):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-5)


def test_indexing_by_one_int_tensor():
    """x[idx] with one int64/int32 tensor anywhere among slices, ints, None and Ellipsis is one
    `index` node (negative entries count from the end), fused with its neighbours."""
    x, i, i2 = rand(3, 5, 8), kiln.tensor([1, -1, 0]), kiln.tensor([[1, 2], [3, -2]])
    cases = [
        (lambda x, i: x[i] * 2, i),
        (lambda x, i: x[:, i].sum(-1), i),
        (lambda x, i: x[..., i].exp(), i2),
        (lambda x, i: x[0, :, i] + 1, i2),  # ints are selects first, as in torch
        (lambda x, i: x[None, 1:, i, ::2] - x[0, 0, 0], i.int()),
        (lambda x, i: x[:, i] * 2, kiln.tensor(-2)),  # a 0-d index drops the dim
    ]
    for fn, idx in cases:
        backend = run_compiled(fn, x, idx)
        (report,) = backend.reports
        assert report.eager_nodes == 0 and len(report.infos) == 1
        assert report.infos[0]["kernels"] == 1, fn.__code__.co_firstlineno
    backend = run_compiled(lambda x, i: x[:, i].relu(), x, i, dynamic=True,
                           calls=[(rand(4, 9, 2, seed=1), kiln.tensor([8, -9, 3, 3]))])
    assert all(r.eager_nodes == 0 and r.eager_calls == 0 for r in backend.reports)
    # nanoGPT's head: a constant list index is a slice
    backend = run_compiled(lambda x: x[:, [-1], :] * 2, x)
    assert backend.reports[0].eager_nodes == 0


def test_indexing_by_several_adjacent_tensors():
    """x[i, j] (broadcast, adjacent) is one index node over the merged dims, at a position each
    tensor's entry is checked into: out of its own dim, the part reruns eagerly and eager's
    error names it (a merged dim alone would read a neighbouring row)."""
    x = rand(4, 5, 6)
    cases = [
        (lambda x, i, j: x[i, j] * 2, (kiln.tensor([0, 3, -1]), kiln.tensor([4, 0, -5]))),
        (lambda x, i, j: x[:, i, j].exp(), (kiln.tensor([[0], [3]]), kiln.tensor([1, 2, 5]))),
        (lambda x, i, j, k: x[i, j, k] + 1, (kiln.tensor([1, 2]), kiln.tensor([0, 4]),
                                             kiln.tensor([5, -6]))),
        (lambda x, i, j: x[i, j], (kiln.tensor([0, 3], dtype=kiln.int32),
                                   kiln.tensor([1, 2], dtype=kiln.int32))),
    ]
    for fn, idx in cases:
        backend = run_compiled(fn, x, *idx)
        (report,) = backend.reports
        # the position may be its own kernel when the result broadcasts it (x[:, i, j])
        assert report.eager_nodes == 0 and report.infos[0]["kernels"] <= 2
    # the label-picking idiom of loss code, with symbolic sizes
    pick = lambda x, t: x[kiln.arange(x.shape[0]), t].log().neg().mean()  # noqa: E731
    backend = run_compiled(pick, rand(6, 10, low=0.1), kiln.tensor([0, 3, 1, 9, 2, 2]),
                           dynamic=True, calls=[(rand(3, 7, low=0.1), kiln.tensor([6, 0, 1]))])
    assert all(r.eager_nodes == 0 and r.eager_calls == 0 for r in backend.reports)
    f = kiln.compile(lambda x, i, j: x[i, j] * 2, backend=CpuBackend(fallback=False))
    with kiln.no_grad():
        f(x, kiln.tensor([0, 1]), kiln.tensor([0, 1]))
        for bad in (([0, 1], [0, 5]), ([4, 1], [0, 1]), ([-5, 0], [0, 0])):
            with pytest.raises(IndexError) as eager:
                x[kiln.tensor(bad[0]), kiln.tensor(bad[1])]
            with pytest.raises(IndexError) as ours:
                f(x, kiln.tensor(bad[0]), kiln.tensor(bad[1]))
            assert str(ours.value) == str(eager.value)


def test_index_tensors_separated_by_other_indices():
    """Torch's rule: int tensors separated by a slice, None or Ellipsis put their (broadcast)
    dims first; ints are selects first, so they do not separate. Against torch's shapes too."""
    x = rand(3, 4, 5, 6)
    i, j = kiln.tensor([0, 2]), kiln.tensor([[1], [-1]])
    cases = [
        (lambda x, i, j: x[i, :, j], (2, 2, 4, 6)),
        (lambda x, i, j: x[:, i, :, j] * 2, (2, 2, 3, 5)),
        (lambda x, i, j: x[i, None, j], (2, 2, 1, 5, 6)),
        (lambda x, i, j: x[0, i, :, j].exp(), (2, 2, 5)),
        (lambda x, i, j: x[:, i, 0, j], (3, 2, 2)),  # the int is a select: adjacent, in place
        (lambda x, i, j: x[i, ..., j] + 1, (2, 2, 4, 5)),
        (lambda x, i, j: x[i, 1:3, 2, j], (2, 2, 2)),
    ]
    tx = torch.from_numpy(x.numpy())
    ti, tj = torch.from_numpy(i.numpy()), torch.from_numpy(j.numpy())
    for fn, shape in cases:
        assert tuple(fn(tx, ti, tj).shape) == shape
        backend = run_compiled(fn, x, i, j)
        (report,) = backend.reports
        assert report.eager_nodes == 0
        with kiln.no_grad():
            got = kiln.compile(fn, backend=CpuBackend(fallback=False))(x, i, j)
        np.testing.assert_array_equal(got.numpy(), fn(tx, ti, tj).numpy())


def test_indexing_that_runs_eagerly_says_why():
    x = rand(3, 5)
    for fn, idx, why in [(lambda x, m: x[m], x > 0, "boolean-mask")]:
        backend = run_compiled(fn, x, idx, strict=False)
        (report,) = backend.reports
        assert report.eager_nodes == 1
        assert why in str(report.fallbacks)


def test_gather_out_of_range_raises_eagers_error():
    """A compiled gather checks every position; out of range, the part reruns eagerly (nothing
    was written) so the error is eager's: its type, op, dim and the user's line."""
    emb, x = rand(10, 4), rand(3, 5)
    cases = [
        (lambda ids, emb: F.embedding(ids, emb).sum(-1), (kiln.tensor([1, 2]), emb),
         (kiln.tensor([1, 10]), emb)),
        (lambda ids, emb: F.embedding(ids, emb) * 2, (kiln.tensor([1, 2]), emb),
         (kiln.tensor([-1, 0]), emb)),  # embedding does not wrap negative indices
        (lambda x, i: (x * 2).gather(1, i), (x, kiln.tensor([[0], [1], [2]])),
         (x, kiln.tensor([[0], [5], [2]]))),
        (lambda x, i: x.index_select(0, i).exp(), (x, kiln.tensor([2, 0])),
         (x, kiln.tensor([2, 3]))),
        (lambda x, i: x[:, i] + 1, (x, kiln.tensor([-5, 4])), (x, kiln.tensor([0, -6]))),
    ]
    for fn, good, bad in cases:
        kiln.compiler.reset()
        backend = CpuBackend(fallback=False)
        compiled = kiln.compile(fn, backend=backend)
        with kiln.no_grad():
            assert_same(compiled(*good), fn(*good))
            with pytest.raises(Exception) as eager:
                fn(*bad)
            with pytest.raises(type(eager.value)) as ours:
                compiled(*bad)
        assert str(ours.value) == str(eager.value)
        assert "out of" in str(ours.value)
        (report,) = backend.reports
        assert report.eager_nodes == 0 and report.eager_calls == 0


def test_dynamic_serves_two_sizes_with_one_compile():
    def fn(x, w):
        return F.layer_norm((x @ w).relu(), (w.shape[1],)) * x.shape[0]

    w = rand(16, 24)
    backend = run_compiled(fn, rand(5, 16), w, dynamic=True, tol=(1e-4, 1e-4),
                           calls=[(rand(9, 16, seed=4), w), (rand(31, 16, seed=5), w)])
    (report,) = backend.reports  # one capture served all three sizes, compiled
    assert report.eager_nodes == 0 and len(report.infos) == 1 and report.eager_calls == 0
    # the matmul's inner sizes must agree: w's first size is spelled as x's, checked per call
    assert report.infos[0]["assumptions"]


def test_automatic_dynamic_after_a_size_change():
    backend = run_compiled(lambda x: F.softmax(x * 2, -1).sum(0), rand(4, 10),
                           calls=[(rand(6, 10, seed=1),), (rand(11, 10, seed=2),)])
    assert len(backend.reports) == 2  # static, then one dynamic graph for every later size
    assert all(r.eager_calls == 0 for r in backend.reports)


def test_part_runs_eagerly_for_inputs_it_was_not_compiled_for():
    # an opaque call's result is typed by the example (static sizes) in a dynamic graph, so
    # the compiled part after it refuses other sizes and that call runs eagerly.
    backend = run_compiled(lambda x: (opaque(x) * 2).exp().sum(-1), rand(5, 8),
                           dynamic=True, strict=False,
                           calls=[(rand(7, 8, seed=1),), (rand(5, 8, seed=2),)])
    (report,) = backend.reports
    assert len(report.parts) == 1 and report.eager_nodes == 1
    assert report.eager_calls == 1  # the size-7 call; size 5 ran compiled again


def test_models_gpt_demo_default_backend():
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        from demo import build_gpt
    finally:
        sys.path.remove(str(ROOT / "tools"))
    kiln.manual_seed(0)
    model = build_gpt(kiln, nn, F).eval()
    idx = kiln.randint(0, 512, (2, 64))
    backend = CpuBackend()
    compiled = kiln.compile(model, backend=backend)
    with kiln.no_grad():
        assert_same(compiled(idx), model(idx), tol=(1e-4, 1e-4))
        assert_same(compiled(idx), model(idx), tol=(1e-4, 1e-4))
    (report,) = backend.reports
    # every node is compiled: arange, the qkv splits (slices) and their getitems included
    assert report.compiled_nodes == 51 and report.eager_nodes == 0
    assert report.fallbacks == [] and len(report.parts) == 1
    kiln.compiler.reset()
    default = kiln.compile(model)  # backend=None is this backend
    with kiln.no_grad():
        assert_same(default(idx), model(idx), tol=(1e-4, 1e-4))


@pytest.mark.parametrize("which", ["resnet_block", "convnet", "gpt"])
def test_models_resnet_and_gpt(which):
    from models import convnet, gpt
    from test_corpus_constructs_modules import ResBlock

    kiln.manual_seed(0)
    if which == "resnet_block":
        model, args = ResBlock().eval(), (rand(2, 4, 8, 8),)
    elif which == "convnet":
        model, args = convnet.build(kiln, nn, F)().eval(), (rand(2, 3, 8, 8),)
    else:
        model, args = gpt.build(kiln, nn, F)(n_layer=2).eval(), (kiln.randint(0, 50, (2, 8)),)
    backend = run_compiled(model, *args, strict=False, tol=(1e-4, 1e-4))
    (report,) = backend.reports
    assert report.compiled_nodes > 0 and len(report.parts) >= 1


def test_partition_around_an_unsupported_op():
    def fn(x, y):
        a = (x * 2).exp()
        b = opaque(a)  # no graph op: eager
        return (b + y).log_softmax(-1), a.sum()

    x, y = rand(4, 9), rand(9)
    backend = run_compiled(fn, x, y, strict=False)
    (report,) = backend.reports
    assert len(report.parts) == 2 and report.eager_nodes == 1
    (fallback,) = report.fallbacks
    assert fallback[1] == f"{__name__}.opaque" and "opaque" in fallback[2]
    kiln.compiler.reset()
    with pytest.raises(BackendCompilerFailed, match=f"{__name__}.opaque"):
        run_compiled(fn, x, y, strict=True)


def test_mutation_of_inputs_compiles_and_writes_back_in_order():
    def fn(x, y):
        z = x * 2
        x.add_(y)  # compiled: the part writes the caller's tensor back after it runs
        y[0] = 5.0  # item assignment: functionalized too
        return z + x, y.sum()

    backend = run_compiled(fn, rand(3, 8), rand(8))  # checks x and y after the call
    (report,) = backend.reports
    assert report.eager_nodes == 0 and len(report.parts) == 1
    assert report.fallbacks == []


def test_returned_views_alias_like_eager():
    backend = CpuBackend()

    def fn(x):
        y = x * 2
        return x.view(-1), x.t(), y, y.view(-1), y[1:], x.sum()

    x = rand(3, 4)
    a, b, y, yv, ys, s = kiln.compile(fn, backend=backend)(x)
    assert all(t._storage_ptr() == x._storage_ptr() for t in (a, b))
    assert all(t._storage_ptr() == y._storage_ptr() for t in (yv, ys))
    yv.mul_(0)  # as in eager, writing the view writes y
    assert float(y.abs().sum()) == 0.0
    assert_same(s, x.sum())


def test_python_number_inputs_and_outputs():
    def fn(x, n):
        return x.shape[0] * 2, x * n, x.sum(0) * x.shape[1]

    run_compiled(fn, rand(3, 5), 3, strict=False, calls=[(rand(3, 5), 4), (rand(3, 5), 2.5)])


def test_compile_graph_binding():
    text = textwrap.dedent("""\
        graph @f(%x: f32[s0, 8], %w: f32[8], %n: int) {
          %0 = add(%x, %w) : f32[s0, 8]
          %1 = exp(%0) : f32[s0, 8]
          %2 = sum(%1) {dim = [1]} : f32[s0]
          %3 = sym_size(%x) {dim = 0} : int
          return %2, %x, %3
        }
        """)
    assert C.can_lower(P(text)) == (True, 0, "")
    g = C.compile_graph(P(text), {"filename": "f.kir", "input_symbols": {2: "s1"}})
    info = g.info
    assert info["kernels"] >= 1 and info["compile_seconds"] > 0
    assert info["cache"].startswith(("hit", "miss"))
    for n in (5, 1, 13):
        x, w = rand(n, 8), rand(8, seed=1)
        total, same_x, size = g(x, w, 3)
        assert same_x is x and size == n
        assert_same(total, (x + w).exp().sum(1))
    assert "kernel k0" in g.loop_text and "func.func" in g.mlir and "sym_size" in g.graph_text
    with pytest.raises(C.SpecializationError, match="size 8"):
        g(rand(4, 7), rand(8), 1)  # a static size differs: the caller runs eagerly instead
    with pytest.raises(C.SpecializationError, match="float32"):
        g(rand(4, 8, dtype=kiln.float64), rand(8), 1)
    with pytest.raises(TypeError, match="takes 3 inputs"):
        g(rand(4, 8))


def test_outputs_alias_inputs_only_where_the_text_says_so():
    text = textwrap.dedent("""\
        graph @s(%x: f32[4]) {
          %0 = constant() {value = 1} : int
          %1 = mul(%x, %0) : f32[4]
          return %1, %x
        }
        """)
    g = C.compile_graph(P(text))
    assert "mul" not in g.graph_text  # simplify made `x * 1` the input itself...
    x = rand(4)
    y, same = g(x)
    assert same is x  # ...but only the returned input is x; x * 1 is a new tensor, as in eager
    assert y._storage_ptr() != x._storage_ptr()
    assert_same(y, x)


def test_compile_graph_declines_name_node_op_and_location():
    text = textwrap.dedent("""\
        graph @g(%x: f32[4]) {
          %0 = exp(%x) : f32[4] loc("model.py":3)
          %1 = call(%0) {target = "mylib.op"} : f32[4] loc("model.py":4)
          return %1
        }
        """)
    ok, line, reason = C.can_lower(P(text, "g.kir"), "g.kir")
    assert (ok, line) == (False, 3)
    assert "%1 = call: cannot lower" in reason and "model.py:4" in reason
    with pytest.raises(NotImplementedError, match=r"g.kir:3:3: error: %1 = call: cannot lower.*"
                                                  r"\(from model.py:4\)"):
        C.compile_graph(P(text, "g.kir"), {"filename": "g.kir"})
    assert issubclass(C.LoweringError, NotImplementedError)
    with pytest.raises(ValueError, match="expected"):
        P("graph @bad(")


def test_declines_names_every_declining_node_in_one_walk():
    """The walk goes on past a decline (the node's results count as inputs of what follows), so
    the partitioner learns every eager node of a run at once."""
    text = textwrap.dedent("""\
        graph @g(%x: f32[4]) {
          %0 = call(%x) {target = "mylib.a"} : f32[4] loc("model.py":3)
          %1 = exp(%0) : f32[4]
          %2 = call(%1) {target = "mylib.b"} : f32[4] loc("model.py":5)
          %3 = add(%2, %x) : f32[4]
          return %3
        }
        """)
    found = C.declines(P(text, "g.kir"), "g.kir")
    assert [line for line, _ in found] == [2, 4]
    assert "%0 = call: cannot lower" in found[0][1] and "model.py:3" in found[0][1]
    assert "%2 = call: cannot lower" in found[1][1] and "model.py:5" in found[1][1]
    assert C.declines(P("graph @h(%x: f32[4]) {\n  %0 = exp(%x) : f32[4]\n  return %0\n}\n")) == []


def test_symbolic_assumption_is_checked_per_call():
    text = textwrap.dedent("""\
        graph @h(%a: f32[s0], %b: f32[s1]) {
          %0 = add(%a, %b) : f32[s0]
          return %0
        }
        """)
    g = C.compile_graph(P(text))
    # b's size is spelled s0: the input binding checks it
    assert g.info["assumptions"] == ["s1 == s0"]
    assert_same(g(rand(6), rand(6, seed=1))[0], rand(6) + rand(6, seed=1))
    with pytest.raises(C.SpecializationError, match="size s0 is 6 but input b makes it 1"):
        g(rand(6), rand(1))  # broadcasting: the compiled code would be wrong, it refuses
    # sizes that are no input's own symbol stay an assumption, checked per call
    text = text.replace("f32[s0]", "f32[s0*2]").replace("f32[s1]", "f32[s1*2]")
    g = C.compile_graph(P(text))
    assert g.info["assumptions"] == ["s0*2 == s1*2"]
    assert_same(g(rand(6), rand(6, seed=1))[0], rand(6) + rand(6, seed=1))
    with pytest.raises(C.SpecializationError, match="assumed s0\\*2 == s1\\*2"):
        g(rand(6), rand(4))


def test_default_and_named_backend_wiring(capsys):
    from kiln._capture.convert_frame import Compiler
    from kiln._capture.graph import Graph

    graph = Graph("wired")
    x = graph.placeholder("x", rand(4))
    y = graph.call(kiln.exp, (x,), {}, rand(4).exp())
    graph.output([y])
    fn = Compiler("kiln")._compile_graph(graph, None)
    assert fn.kiln_report.compiled_nodes == 1
    assert_same(fn(rand(4))[0], rand(4).exp())
    logs.configure("graph")
    try:
        out = kiln.compile(lambda x: x.exp() + 1)(rand(3))
    finally:
        logs.configure()
    assert_same(out, rand(3).exp() + 1)
    assert "backend: <lambda>_0: 1 compiled parts, 2 compiled nodes" in capsys.readouterr().err


def test_logs_perf_and_output_code(capsys):
    logs.configure("perf,+output_code")
    try:
        run_compiled(lambda x: F.softmax(x, -1), rand(3, 20))
    finally:
        logs.configure()
    err = capsys.readouterr().err
    assert "[kiln:perf] backend: compiled" in err and "kernel cache" in err
    assert "// scheduled loop program" in err and "func.func" in err
    assert "// LLVM IR" in err and "define void" in err


def test_kernel_cache_hit_in_a_second_process(tmp_path):
    script = tmp_path / "prog.py"
    script.write_text(textwrap.dedent("""\
        import kiln
        f = kiln.compile(lambda x: (x * 3.5).tanh().sum(-1))
        print(float(f(kiln.ones(3, 21)).sum()))
        """))
    env = dict(os.environ, KILN_CACHE_DIR=str(tmp_path / "cache"), KILN_LOGS="perf",
               PYTHONPATH=str(ROOT / "frontend"))
    runs = [subprocess.run([sys.executable, str(script)], env=env, capture_output=True,
                           text=True, timeout=120) for _ in range(2)]
    for r in runs:
        assert r.returncode == 0, r.stderr
    assert runs[0].stdout == runs[1].stdout
    assert "kernel cache miss (not-found 1)" in runs[0].stderr
    assert "kernel cache hit (disk)" in runs[1].stderr
    assert list((tmp_path / "cache" / "cpu").glob("*.o"))


_PEAK_SCRIPT = """\
import sys
import numpy as np
import kiln
import kiln.nn as nn
import kiln.nn.functional as F
from demo import build_gpt


def hwm_rss():
    vals = {}
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(("VmHWM:", "VmRSS:")):
                key, v = line.split(":")
                vals[key] = int(v.split()[0])
    return vals["VmHWM"], vals["VmRSS"]


kiln.set_num_threads(2)
kiln.manual_seed(0)
model = build_gpt(kiln, nn, F, d=768, heads=12, layers=2, ctx=256).eval()
idx = kiln.from_numpy(np.random.default_rng(0).integers(0, 512, size=(4, 256)))
if sys.argv[1] == "compiled":
    model = kiln.compile(model)
with kiln.no_grad():
    for _ in range(2):
        model(idx)
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    _, base = hwm_rss()
    for _ in range(3):
        out = model(idx)
        del out
    peak, _ = hwm_rss()
print((peak - base) / 1024)
"""


def _gpt_peak_mb(mode: str, tmp_path) -> float:
    """Peak RSS above resident (MB) of bench/compiler.py's GPT forward, in a fresh process."""
    script = tmp_path / "peak.py"
    script.write_text(_PEAK_SCRIPT)
    # Tensor memory: without the host block cache, which keeps freed blocks for reuse.
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536", KILN_HOST_CACHE_MB="0",
               PYTHONPATH=os.pathsep.join([str(ROOT / "frontend"), str(ROOT / "tools")]))
    r = subprocess.run([sys.executable, str(script), mode], env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return float(r.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="needs Linux /proc")
def test_compiled_gpt_peak_memory_not_above_eager(tmp_path):
    # A compiled part runs its intermediates out of the memory plan's arena (slots reused after
    # their last reader) and allocates only its outputs and extern results per call, so the
    # forward's peak stays at or below eager's (84 MB against eager's 42 MB back when every buffer
    # of a part was allocated up front).
    eager = _gpt_peak_mb("eager", tmp_path)
    compiled = _gpt_peak_mb("compiled", tmp_path)
    assert eager > 10  # the measurement sees the activations at all
    assert compiled <= eager * 1.05 + 2, f"compiled {compiled:.1f} MB, eager {eager:.1f} MB"


def test_backend_switch_env(monkeypatch):
    monkeypatch.setenv("KILN_BACKEND", "eager")
    assert not backend_compiled.default_backend_enabled()
    monkeypatch.delenv("KILN_BACKEND")
    assert backend_compiled.default_backend_enabled()


def test_backend_failure_runs_the_graph_eagerly(monkeypatch):
    def broken(*args):
        raise RuntimeError("compiler bug")

    monkeypatch.setattr(C, "declines", broken)
    backend = run_compiled(lambda x: x.exp() + 1, rand(3, 5), strict=False)
    (report,) = backend.reports
    assert report.parts == [] and report.eager_nodes == 2
    assert report.fallbacks == [("", "the whole graph", "RuntimeError: compiler bug")]
    with pytest.raises(BackendCompilerFailed, match="compiler bug"):
        run_compiled(lambda x: x.exp() + 1, rand(3, 5), strict=True)
