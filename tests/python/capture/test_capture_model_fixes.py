"""Capture and backend behaviour the model zoo depends on to compile as one dynamic graph.

nn modules' Python helpers are inlined (MultiheadAttention's shape checks return bools), sizes
that are static stay Python ints when another dim is dynamic (inputs' static dims, and sizes of
intermediates that shape inference finds constant), `unflatten`/`unbind` are captured as the
views/selects they are, and the CPU backend never makes a split's tuple a part output.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from corpus_util import RecordingBackend, fresh_capture  # noqa: F401 - autouse fixture
from test_backend_compiled import assert_same, rand, run_compiled

import kiln
import kiln.nn as nn
import kiln.nn.functional as F
from kiln._capture.backend_compiled import CpuBackend

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from models import convnet, gpt  # noqa: E402

TOL = (1e-4, 1e-4)


def dynamic_batch(x):
    kiln.mark_dynamic(x, 0)
    return x


def compile_batches(fn, make, batches=(2, 5, 3), tol=None):
    """Compiles `fn` strictly with the CPU backend and checks it against eager on `make(b)` with
    a dynamic batch for each b; returns the partition reports (one per capture)."""
    backend = CpuBackend(fallback=False)
    compiled = kiln.compile(fn, backend=backend)
    with kiln.no_grad():
        for b in batches:
            x = dynamic_batch(make(b))
            assert_same(compiled(x), fn(x), tol)
    return backend.reports


def _mha_gpt():
    kiln.manual_seed(0)
    return gpt.build(kiln, nn, F)(use_mha=True, dropout=0.0).eval()


# --- nn modules' helpers are inlined -----------------------------------------------------------


def test_mha_gpt_is_one_full_graph():
    model = _mha_gpt()
    backend = RecordingBackend()
    idx = kiln.randint(0, 50, (2, 8))
    with kiln.no_grad():
        out = kiln.compile(model, backend=backend, fullgraph=True)(idx)
        assert_same(out, model(idx))
    (graph,) = backend.graphs
    kir = graph.to_kir()
    assert "call(" not in kir
    assert "_check_shapes" not in kir and "scaled_dot_product_attention(" in kir


def test_multihead_attention_module_compiles_fully():
    kiln.manual_seed(2)
    mha = nn.MultiheadAttention(16, 4, batch_first=True).eval()
    q, kv = rand(3, 5, 16, seed=1), rand(3, 7, 16, seed=2)

    def fn(q, kv):
        out, weights = mha(q, kv, kv)
        return out, weights

    backend = run_compiled(fn, q, kv, tol=TOL)
    (report,) = backend.reports
    assert report.eager_nodes == 0


def test_mha_shape_check_error_is_raised_as_in_eager():
    mha = nn.MultiheadAttention(8, 2).eval()
    bad = rand(2, 3, 4, 8)  # 4-D: _check_shapes raises AssertionError
    for fn in (mha, kiln.compile(mha, backend="eager"),
               kiln.compile(mha, backend="eager", fullgraph=True)):  # fmt: skip
        with pytest.raises(AssertionError, match="query should be unbatched 2D or batched 3D"):
            fn(bad, bad, bad)


# --- static sizes stay ints next to a dynamic batch --------------------------------------------


def test_compare_on_a_static_dim_of_an_input_keeps_the_batch_dynamic():
    def fn(x):
        b, t = x.size()
        if t > 16:
            raise ValueError("too long")
        return x * t + b

    backend = CpuBackend(fallback=False)
    compiled = kiln.compile(fn, backend=backend)
    for n in (2, 5, 3):
        x = dynamic_batch(rand(n, 8, seed=n))
        assert_same(compiled(x), fn(x))
    assert len(backend.reports) == 1


def test_compare_on_a_static_size_of_an_intermediate_keeps_the_batch_dynamic():
    def fn(x):
        y = (x * 2).transpose(0, 1)  # [4, B]
        if y.size(0) != 4:
            raise ValueError("unexpected")
        return y.contiguous().view(y.size(0), -1) + y.shape[0]

    backend = CpuBackend(fallback=False)
    compiled = kiln.compile(fn, backend=backend)
    for n in (2, 5, 3):
        x = dynamic_batch(rand(n, 4, seed=n))
        assert_same(compiled(x), fn(x))
    (report,) = backend.reports
    assert report.eager_nodes == 0


def test_compare_on_a_symbolic_size_of_an_intermediate_guards_the_symbol():
    def fn(x):
        y = (x + 1).transpose(0, 1)  # [3, B]
        if y.size(1) > 3:
            return y * 2
        return y * 3

    backend = CpuBackend(fallback=False)
    compiled = kiln.compile(fn, backend=backend)
    for n in (5, 7, 2, 3):
        x = dynamic_batch(rand(n, 3, seed=n))
        assert_same(compiled(x), fn(x))
    assert len(backend.reports) == 2  # B > 3 and B <= 3: one symbolic capture each


def test_view_of_a_transposed_intermediate_with_a_size_read_from_it():
    def fn(x):
        y = (x * 2).transpose(1, 2).contiguous()
        b, t, c = y.size()
        return y.view(b, t * c) + 1

    (report,) = compile_batches(fn, lambda b: rand(b, 3, 4, seed=b))
    assert report.eager_nodes == 0


def test_size_after_an_opaque_call_is_not_assumed_static():
    def fn(x):
        y = x.flip(0)  # no graph op: typed by its example, so its sizes are not inferred
        if y.size(0) > 3:
            return y * 2
        return y * 3

    compiled = kiln.compile(fn, backend="eager")
    for n in (5, 2, 4, 3):
        x = dynamic_batch(rand(n, 3, seed=n))
        assert_same(compiled(x), fn(x))


# --- unflatten and unbind ----------------------------------------------------------------------


def test_unflatten_and_unbind_are_views_and_selects():
    def fn(x):
        parts = (x * 2).unflatten(-1, (3, 4)).unbind(-2)
        a, b, c = kiln.unbind(kiln.unflatten(x, 2, (3, -1)), dim=2)
        return tuple(p.exp() for p in parts) + (a * b + c,)

    (report,) = compile_batches(fn, lambda b: rand(b, 5, 12, seed=b), tol=TOL)
    assert report.eager_nodes == 0
    recorder = RecordingBackend()
    kiln.compile(fn, backend=recorder)(rand(2, 5, 12))
    kir = recorder.graphs[0].to_kir()
    assert "call(" not in kir and "select(" in kir and "view(" in kir


def test_unbind_along_a_dynamic_dim_stays_a_call():
    recorder = RecordingBackend()
    fn = kiln.compile(lambda x: [t * 2 for t in x.unbind(0)], backend=recorder)
    x = dynamic_batch(rand(3, 4))
    assert_same(fn(x), [t * 2 for t in x.unbind(0)])
    assert 'target = "kiln.Tensor.unbind"' in recorder.graphs[0].to_kir()


def test_unflatten_with_wrong_sizes_raises_as_in_eager():
    fn = kiln.compile(lambda x: x.unflatten(1, (5, 5)) * 2, backend="eager")
    with pytest.raises(RuntimeError) as eager:
        rand(2, 12).unflatten(1, (5, 5))
    with pytest.raises(RuntimeError) as compiled:
        fn(rand(2, 12))
    assert str(compiled.value) == str(eager.value)


# --- the CPU backend never returns a split's tuple from a part ---------------------------------


@pytest.mark.parametrize("dynamic", [False, True])
def test_split_piece_recomputed_as_a_view_does_not_make_the_tuple_an_output(dynamic):
    def fn(x):
        a, b, c = (x * 2).split(4, dim=1)  # `a` escapes as a view of x * 2
        return a, b.exp(), c.t()

    backend = run_compiled(fn, rand(3, 12), dynamic=dynamic, tol=TOL)
    (report,) = backend.reports
    assert report.eager_nodes == 0 and report.fallbacks == []


def test_split_pieces_of_an_input_escape_as_views():
    def fn(x):
        a, b, c = x.split(4, dim=1)
        return a, b + 1, c

    backend = run_compiled(fn, rand(3, 12))
    (report,) = backend.reports
    assert report.fallbacks == []
    out = kiln.compile(fn, backend=CpuBackend(fallback=False))(x := rand(3, 12))
    assert out[0]._storage_ptr() == x._storage_ptr()  # a view of the input, as in eager


# --- the models --------------------------------------------------------------------------------


def _models():
    kiln.manual_seed(0)
    return {
        "gpt": (gpt.build(kiln, nn, F)().eval(), lambda b: kiln.randint(0, 50, (b, 8))),
        "mha": (_mha_gpt(), lambda b: kiln.randint(0, 50, (b, 8))),
        "convnet": (convnet.build(kiln, nn, F)().eval(), lambda b: rand(b, 3, 16, 16, seed=b)),
    }


@pytest.mark.parametrize("which", ["gpt", "mha", "convnet"])
@pytest.mark.parametrize("how", ["mark_dynamic", "dynamic=True"])
def test_models_compile_once_for_every_batch_size(which, how):
    model, make = _models()[which]
    backend = CpuBackend(fallback=False)
    fn = kiln.compile(model, backend=backend, dynamic=True if how == "dynamic=True" else None)
    with kiln.no_grad():
        for b in (2, 5, 3):
            x = make(b)
            if how == "mark_dynamic":
                kiln.mark_dynamic(x, 0)
            assert_same(fn(x), model(x), tol=TOL)
    (report,) = backend.reports
    assert report.eager_nodes == 0 and report.fallbacks == []


def test_compare_on_a_size_after_flatten_guards_the_batch():
    def fn(x):
        y = (x + 1).flatten(0, 1)  # [3 * B, 4]: written as a reshape to its own sizes
        if y.size(0) > 6:
            return y * 2
        return y * 3

    backend = CpuBackend(fallback=False)
    compiled = kiln.compile(fn, backend=backend)
    for n in (2, 5, 3, 2):
        x = dynamic_batch(rand(n, 3, 4, seed=n))
        assert_same(compiled(x), fn(x))
    # `3 * B > 6` is guarded as the relation it is (`3*s0 <= 6`, then `3*s0 > 6`), not the
    # example's 6: one capture per side of the branch, not one per batch size
    assert len(backend.reports) == 2


def test_sizes_after_flatten_keep_the_batch_dynamic():
    def fn(x):
        y = (x * 2).flatten(1)  # [B, 12]
        if y.size(1) != 12 or y.size(0) < 2:
            raise ValueError("unexpected")
        return y.view(y.size(0), 3, 4) + y.size(1)

    (report,) = compile_batches(fn, lambda b: rand(b, 3, 4, seed=b))
    assert report.eager_nodes == 0


def test_constant_tensors_built_in_forward_compile():
    """NeRF's `torch.Tensor([1e10])` (the legacy constructor) and PointNet's identity
    `torch.from_numpy(np.array([1, 0, 0, ...]).astype(np.float32))`: constants of the graph,
    not breaks."""

    def nerf_like(x):
        dists = x[..., 1:] - x[..., :-1]
        return kiln.cat([dists, kiln.Tensor([1e10]).expand(dists[..., :1].shape)], -1)

    def pointnet_like(x):
        iden = kiln.from_numpy(np.array([1, 0, 0, 0, 1, 0, 0, 0, 1]).astype(np.float32))
        return x + iden.view(1, 9).repeat(x.shape[0], 1)

    for fn, x in [(nerf_like, rand(4, 8)), (pointnet_like, rand(4, 9))]:
        explained = kiln.explain(fn)(x)
        assert_same(explained.result, fn(x))
        assert explained.graph_count == 1 and explained.graph_break_count == 0
        assert explained.fallbacks == [[]]  # the constants are graph nodes, nothing eager
        assert explained.result.dtype == kiln.float32


@pytest.mark.parametrize("dynamic", [False, True])
def test_legacy_constructors_of_a_size_make_tensors_of_that_size(dynamic):
    """deepspeech.pytorch's `torch.BoolTensor(x.size()).fill_(0)`: a Size argument is the
    sizes, not data (it once became a 1-d tensor of len(x.shape) elements when compiled)."""
    def masks(x, lengths):
        mask = kiln.BoolTensor(x.size()).fill_(0)
        for i in range(x.size(0)):
            mask[i, int(lengths[i]):] = True
        return x.masked_fill(mask, 0.0), kiln.FloatTensor(x.shape).zero_() + kiln.Tensor(x.size())

    compiled = kiln.compile(masks, dynamic=dynamic)
    for batch in (2, 3):
        x, lengths = rand(batch, 4), kiln.tensor([4, 2, 1][:batch])
        for got, want in zip(compiled(x, lengths), masks(x, lengths), strict=True):
            assert got.shape == want.shape and kiln.equal(got, want)


def test_comparing_a_module_type_with_eq_compiles():
    """deepspeech.pytorch's `if type(m) == nn.modules.conv.Conv2d:` over self.modules()."""
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Sequential(nn.Conv2d(1, 4, 3, stride=2, padding=1), nn.ReLU())

        def forward(self, lengths):
            for m in self.conv.modules():
                if type(m) == nn.modules.conv.Conv2d:  # noqa: E721 - the idiom under test
                    lengths = (lengths + 2 * m.padding[1] - 2) // m.stride[1] + 1
            return lengths

    m, lengths = M(), kiln.tensor([48, 40])
    assert kiln.explain(m)(lengths).graph_break_count == 0
    assert kiln.equal(kiln.compile(m)(lengths), m(lengths))


def test_clone_of_an_expanded_mask_compiles_and_keeps_the_batch_dynamic():
    """HF LLaMA's `causal_mask[None, None].expand(B, 1, -1, -1).clone()` then an in-place
    masked write: the clone is a dense copy (as torch's), compiled, so later batch sizes reuse
    one symbolic graph instead of recompiling each (it was an opaque call before)."""
    def f(mask):
        base = kiln.full((5, 5), -1.0).triu(1)
        cm = base[None, None].expand(mask.shape[0], 1, -1, -1).clone()
        pad = cm[:, :, :, :5] + mask[:, None, None, :]
        cm[:, :, :, :5] = cm[:, :, :, :5].masked_fill(pad == 0, -9.0)
        return cm, base

    backend = CpuBackend(fallback=False)  # an eager node raises
    compiled = kiln.compile(f, backend=backend)
    for batch in (2, 3, 4, 5):
        m = (rand(batch, 5) > 0).float()
        for got, want in zip(compiled(m), f(m), strict=True):
            assert kiln.equal(got, want)
    assert len(backend.reports) <= 2
