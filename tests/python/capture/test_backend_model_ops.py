"""The ops of the model zoo's networks as .kir ops that the CPU backend compiles, against eager.

arange, identity dropout, split/chunk (slices), contiguous, inference batch_norm, max/avg and
adaptive average pooling, and in-place activations: each compiled on its own (strict: a decline
fails) on odd sizes, size-1 dims and the variants of its arguments, with no eager node; the
GPT-style and ResNet-style models write no opaque ``call`` and compile to eager's results with a
dynamic batch.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from corpus_util import fresh_capture  # noqa: F401 - autouse: empty caches around every test
from test_backend_compiled import assert_same, rand, run_compiled

import kiln
import kiln.nn as nn
import kiln.nn.functional as F
from kiln._capture.backend_compiled import CpuBackend

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from models import convnet, gpt  # noqa: E402


def compiled(fn, *args, dynamic=None, calls=None):
    """Compiles `fn` strictly, checks it against eager and returns its partition reports (one
    per capture), which must have no eager node."""
    backend = run_compiled(fn, *args, dynamic=dynamic, calls=calls)
    assert backend.reports
    for report in backend.reports:
        assert report.eager_nodes == 0 and report.fallbacks == [], report.eager
    return backend.reports


def kir_of(fn, *args, **kwargs) -> str:
    """The .kir text of the one graph kiln.compile captures from `fn(*args)`."""
    graphs = []

    def backend(g, example_inputs):
        graphs.append(g)
        return g.compile_python()

    kiln.compiler.reset()
    kiln.compile(fn, backend=backend, fullgraph=True, **kwargs)(*args)
    (g,) = graphs
    return g.to_kir()


# --- arange, dropout, contiguous, split --------------------------------------------------------


@pytest.mark.parametrize(
    "make",
    [
        lambda n: kiln.arange(n),
        lambda n: kiln.arange(0, n, dtype=kiln.long),
        lambda n: kiln.arange(2, 3 * n + 1, 3),
        lambda n: kiln.arange(n, 0, -1, dtype=kiln.float32),
        lambda n: kiln.arange(n, dtype=kiln.float64) * 0.5,
    ],
    ids=["end", "long", "step", "negative_step", "f64"],
)
def test_arange(make):
    def fn(x):
        return x * make(x.shape[-1]).to(x.dtype)

    for n in (1, 7, 16):
        compiled(fn, rand(3, n))
    assert "arange()" in kir_of(fn, rand(3, 7))


FLOAT_RANGES = [(9.0,), (0.5, 5.0, 0.5), (-1, 1, 0.25), (0.1, 1.0, 0.1), (10.0, 1.0, -1.5),
                (0, 2.5), (3.0, 3.0)]


@pytest.mark.parametrize("args", FLOAT_RANGES, ids=str)
@pytest.mark.parametrize("dtype", [None, kiln.float64, kiln.bfloat16])
def test_arange_of_floats(args, dtype):
    """Eager's length (ceil in double) and its values start + i * step in float64, rounded to the
    dtype once: equal to eager, float32 and bfloat16 bit for bit (float64 to one rounding: eager's
    C++ may contract start + i * step into one fused multiply-add)."""
    n = kiln.arange(*args).numel()

    def fn(x):
        return x * kiln.arange(*args, dtype=dtype)

    x = rand(2, n).to(dtype or kiln.float32)
    got = run_compiled(fn, x, tol=(5e-16, 0) if dtype is kiln.float64 else (0, 0))
    assert got.reports[0].eager_nodes == 0
    assert f"arange() {{end = {n}}}" in kir_of(fn, x)


def test_arange_of_a_dynamic_size():
    def fn(x):
        return x + kiln.arange(x.shape[0]).float().unsqueeze(1)

    compiled(fn, rand(5, 3), dynamic=True, calls=[(rand(9, 3),), (rand(1, 3),)])
    assert "arange() {end = s0} : i64[s0]" in kir_of(fn, rand(5, 3), dynamic=True)


def test_identity_dropout_is_its_input():
    drop = nn.Dropout(0.5).eval()

    def fn(x):
        y = F.dropout(x * 2, p=0.3, training=False)
        return F.dropout(y + 1, p=0.0) + drop(y)

    compiled(fn, rand(4, 5))  # strict: nothing runs eagerly
    kir = kir_of(fn, rand(4, 5))
    assert "dropout" not in kir and "call(" not in kir


def test_training_dropout_draws_in_the_kernel():
    kir = kir_of(lambda x: F.dropout(x, p=0.5, training=True), rand(4, 5))
    assert "philox_state() {count = 20} : i64[2]" in kir and "call(" not in kir


@pytest.mark.parametrize("shape", [(1, 5, 3), (4, 3, 7), (2, 1, 1)])
def test_contiguous(shape):
    def fn(x):
        t = (x * 2).transpose(0, 2).contiguous()
        return t.view(-1), (x + 1).contiguous()

    compiled(fn, rand(*shape))
    kir = kir_of(fn, rand(*shape))
    # a dense value (or a transpose that moves only size-1 dims) is its own contiguous()
    assert kir.count("contiguous(") == (0 if shape == (2, 1, 1) else 1)


SPLITS = {
    "split_even": lambda x: x.split(3, dim=1),
    "split_tail": lambda x: x.split(4, dim=1),
    "split_sections": lambda x: kiln.split(x, [2, 1, 6], dim=1),
    "split_last_dim": lambda x: x.split(2, -1),
    "chunk": lambda x: x.chunk(3, dim=1),
    "chunk_fn": lambda x: kiln.chunk(x, 2, 0),
}


@pytest.mark.parametrize("name", sorted(SPLITS))
def test_split_and_chunk_are_slices(name):
    def fn(x):
        pieces = SPLITS[name](x * 2)
        return tuple(p.exp() for p in pieces) + (pieces[-1] * pieces[0].sum(),)

    for shape in [(4, 9, 5), (1, 9, 1)]:
        compiled(fn, rand(*shape))
    kir = kir_of(fn, rand(4, 9, 5))
    assert "slice(" in kir and "call(" not in kir


def test_split_keeps_a_dynamic_batch():
    def fn(x):
        q, k, v = x.split(4, dim=2)
        return q * k + v

    backend = CpuBackend(fallback=False)
    compiled_fn = kiln.compile(fn, backend=backend)
    for batch in (2, 5, 7):
        x = rand(batch, 3, 12, seed=batch)
        kiln.mark_dynamic(x, 0)
        assert_same(compiled_fn(x), fn(x))
    (report,) = backend.reports  # one symbolic capture
    assert report.eager_nodes == 0
    x = rand(2, 3, 12)
    kiln.mark_dynamic(x, 0)
    assert "slice(%L_x) {dim = 2, end = 4} : f32[s0, 3, 4]" in kir_of(fn, x)


def test_split_along_a_dynamic_dim_compiles_with_its_piece_count_guarded():
    """The last piece ends at the symbolic size; the capture guards the size along the split
    dim, since the number of pieces the program unpacks depends on it."""
    kir = kir_of(lambda x: x.split(2, dim=0), rand(4, 3), dynamic=True)
    assert "slice(%L_x) {end = s0, start = 2} : f32[s0 - 2, s1]" in kir

    def fn(x):
        a, b = x.split(2, dim=0)
        return a * 2, b + 1

    backend = CpuBackend(fallback=False)
    compiled = kiln.compile(fn, backend=backend, dynamic=True)
    for x in (rand(4, 3), rand(4, 5), rand(3, 5)):
        assert_same(compiled(x), fn(x))
    with pytest.raises(ValueError, match="too many values to unpack"):
        compiled(rand(6, 3))  # three pieces, as eager gives them
    assert len(backend.reports) == 3  # rows 4 (cols dynamic), then 3; 6 fails in the capture


# --- batch_norm and pools ----------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(2, 3), (1, 3, 7), (2, 3, 5, 4), (3, 3, 1, 1)])
@pytest.mark.parametrize("affine", ["both", "weight", "none"])
def test_batch_norm_inference(shape, affine):
    c = shape[1]
    mean, var = rand(c, seed=1), rand(c, seed=2, low=0.1, high=2.0)
    w, b = rand(c, seed=3), rand(c, seed=4)
    weight = None if affine == "none" else w
    bias = b if affine == "both" else None

    def fn(x):
        return F.batch_norm(x, mean, var, weight, bias, training=False, eps=1e-3).relu()

    compiled(fn, rand(*shape))
    assert "batch_norm(" in kir_of(fn, rand(*shape))


def test_batch_norm_module_in_eval_with_a_dynamic_batch():
    bn = nn.BatchNorm2d(4)
    bn.running_mean.copy_(rand(4, seed=5))
    bn.running_var.copy_(rand(4, seed=6, low=0.5, high=3.0))
    bn.eval()
    compiled(lambda x: bn(x) * 2, rand(2, 4, 5, 3), dynamic=True, calls=[(rand(3, 4, 5, 3),)])


MAX_POOLS = [
    dict(kernel_size=2),
    dict(kernel_size=3, stride=2, padding=1),
    dict(kernel_size=(3, 2), stride=(2, 1), padding=(1, 0), ceil_mode=True),
    dict(kernel_size=2, stride=2, ceil_mode=True),
    dict(kernel_size=3, dilation=2),
    dict(kernel_size=(2, 3), stride=1, dilation=(1, 2), padding=(1, 1)),
]


@pytest.mark.parametrize("kw", MAX_POOLS, ids=str)
@pytest.mark.parametrize("shape", [(2, 3, 7, 9), (1, 1, 8, 8), (3, 11, 6)])
def test_max_pool2d(kw, shape):
    compiled(lambda x: F.max_pool2d(x * 2, **kw) + 1, rand(*shape))


@pytest.mark.parametrize("dtype", [kiln.float64, kiln.bfloat16, kiln.int32, kiln.uint8])
def test_padded_max_pool2d_over_dtypes(dtype):
    """Padded pools are loop code: a point in the padding contributes the dtype's lowest value."""
    x = rand(2, 3, 9, 8, low=-50, high=50).to(dtype)
    compiled(lambda x: F.max_pool2d(x, 3, 2, 1), x)
    compiled(lambda x: F.max_pool2d(x, (2, 3), 1, (1, 1), ceil_mode=True), x)


def test_padded_max_pool2d_propagates_nan():
    x = rand(1, 2, 6, 6)
    x[0, 0, 0, 0] = float("nan")  # read by the corner windows, next to the padding
    x[0, 1, 3, 2] = float("nan")
    compiled(lambda x: F.max_pool2d(x, 3, 2, 1), x)


AVG_POOLS = [
    dict(kernel_size=2),
    dict(kernel_size=3, stride=2, padding=1),
    dict(kernel_size=3, stride=2, padding=1, count_include_pad=False),
    dict(kernel_size=(2, 3), stride=2, padding=1, ceil_mode=True),
    dict(kernel_size=2, ceil_mode=True, count_include_pad=False),
    dict(kernel_size=3, divisor_override=5),
]


@pytest.mark.parametrize("kw", AVG_POOLS, ids=str)
@pytest.mark.parametrize("shape", [(2, 3, 7, 9), (1, 1, 8, 8), (3, 11, 6)])
def test_avg_pool2d(kw, shape):
    compiled(lambda x: F.avg_pool2d(x * 2, **kw) + 1, rand(*shape))


@pytest.mark.parametrize("size", [(1, 1), 1, (2, 3), (None, 2), 4])
@pytest.mark.parametrize("shape", [(2, 3, 7, 9), (1, 5, 4, 4), (3, 8, 8)])
def test_adaptive_avg_pool2d(size, shape):
    compiled(lambda x: F.adaptive_avg_pool2d(x.exp(), size) * 2, rand(*shape))


def test_pool_modules_with_a_dynamic_batch():
    net = nn.Sequential(nn.MaxPool2d(3, 2, 1), nn.AvgPool2d(2, ceil_mode=True),
                        nn.AdaptiveAvgPool2d(1), nn.Flatten())  # fmt: skip
    compiled(net, rand(2, 3, 13, 13), dynamic=True, calls=[(rand(5, 3, 13, 13),)])


def test_pool_kir_attributes():
    kir = kir_of(lambda x: (F.max_pool2d(x, 3, 1, 1, ceil_mode=True),
                            F.avg_pool2d(x, 2, count_include_pad=False, divisor_override=3),
                            F.adaptive_avg_pool2d(x, (None, 1))), rand(1, 2, 6, 5))  # fmt: skip
    assert ("max_pool2d(%L_x) {ceil_mode = true, kernel_size = [3, 3], padding = [1, 1], "
            "stride = [1, 1]}") in kir  # fmt: skip
    assert ("avg_pool2d(%L_x) {count_include_pad = false, divisor_override = 3, "
            "kernel_size = [2, 2]}") in kir  # fmt: skip
    assert "adaptive_avg_pool2d(%L_x) {output_size = [6, 1]}" in kir
    assert "call(" not in kir


# --- in-place activations ------------------------------------------------------------------------


def test_inplace_activation_of_an_intermediate_is_the_pure_op():
    def fn(x):
        y = F.relu(x * 2, inplace=True)
        return F.silu(y - 1, inplace=True) * 3

    kir = kir_of(fn, rand(3, 4))  # y is x * 2 itself (relu_ returns its operand) ...
    assert "relu(" in kir and "silu(" in kir and "call(" not in kir
    (report,) = run_compiled(fn, rand(3, 4)).reports  # ... and functionalize folds its copy_
    assert len(report.parts) == 1 and report.eager_nodes == 0
    assert report.infos[0]["kernels"] == 1


def test_inplace_activation_read_elsewhere_writes_back():
    def fn(x):
        y = x * 2
        v = y.view(-1)
        y.relu_()  # v sees the new values
        w = x + 1
        F.relu(w, inplace=True)
        z = (x - 1).sigmoid_()  # z is the mutated x - 1
        return v.sum(), w * 3, y, z.tanh_() + 1

    kir = kir_of(fn, rand(3, 4))
    assert kir.count("copy_(") == 4 and "call(" not in kir
    run_compiled(fn, rand(3, 4), strict=False)
    x = rand(3, 4)
    run_compiled(lambda t: t.relu_() * 2, x, strict=False)  # a caller's tensor: written back


# --- the models --------------------------------------------------------------------------------


def _models():
    kiln.manual_seed(0)
    return {
        "gpt": (gpt.build(kiln, nn, F)().eval(), lambda b: kiln.randint(0, 50, (b, 8))),
        "convnet": (convnet.build(kiln, nn, F)().eval(), lambda b: rand(b, 3, 16, 16)),
    }


@pytest.mark.parametrize("which", ["gpt", "convnet"])
def test_model_kir_has_no_call(which):
    model, make = _models()[which]
    with kiln.no_grad():
        kir = kir_of(model, make(2))
    assert "call(" not in kir


def test_mha_gpt_graphs_have_no_call():
    kiln.manual_seed(0)
    model = gpt.build(kiln, nn, F)(use_mha=True).eval()
    graphs = []

    def backend(g, example_inputs):
        graphs.append(g)
        return g.compile_python()

    kiln.compiler.reset()
    with kiln.no_grad():
        out = kiln.compile(model, backend=backend)(idx := kiln.randint(0, 50, (2, 8)))
        assert_same(out, model(idx))
    assert graphs and all("call(" not in g.to_kir() for g in graphs)


@pytest.mark.parametrize("which", ["gpt", "convnet"])
def test_models_compile_with_a_dynamic_batch(which):
    model, make = _models()[which]
    backend = CpuBackend()
    fn = kiln.compile(model, backend=backend)
    with kiln.no_grad():
        for b in (2, 5, 3):
            x = make(b)
            kiln.mark_dynamic(x, 0)
            assert_same(fn(x), model(x), tol=(1e-4, 1e-4))
    assert all(r.fallbacks == [] and r.compiled_nodes > 0 for r in backend.reports)
    assert len(backend.reports) == 1  # one capture serves every batch size


@pytest.mark.parametrize("which", ["gpt", "convnet"])
def test_models_compile_every_node(which):
    model, make = _models()[which]
    backend = CpuBackend()
    with kiln.no_grad():
        x = make(2)
        kiln.mark_dynamic(x, 0)
        assert_same(kiln.compile(model, backend=backend)(x), model(x), tol=(1e-4, 1e-4))
    (report,) = backend.reports
    assert report.eager_nodes == 0 and report.fallbacks == []


def test_inplace_activation_of_an_input_compiles_and_mutates_it():
    def f(x, y):
        z = kiln.nn.functional.relu(x, inplace=True)  # written back into x after the part
        w = kiln.nn.functional.relu(y * 2, inplace=True)  # an intermediate: the pure op
        return z + w

    backend = CpuBackend()
    x, y = kiln.randn(4, 5), kiln.randn(4, 5)
    x_ref, y_ref = x.clone(), y.clone()
    out = kiln.compile(f, backend=backend)(x, y)
    want = f(x_ref, y_ref)
    assert_same(out, want)
    assert_same(x, x_ref)  # the caller's tensor was mutated as in eager code
    (report,) = backend.reports
    assert report.eager_nodes == 0 and len(report.parts) == 1
