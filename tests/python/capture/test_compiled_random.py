"""Random numbers drawn inside compiled kernels: training-mode dropout, ``rand`` and
``rand_like`` compile (no eager node) and give eager's numbers bit for bit for the same
generator state, leaving the default generator where eager leaves it; several draws in one
graph keep eager's order; dynamic sizes reserve the call's element count; an explicit
generator keeps the call eager."""

from __future__ import annotations

import pytest
from corpus_util import fresh_capture  # noqa: F401 - autouse: empty caches around every test
from test_backend_compiled import rand

import kiln
import kiln.nn as nn
import kiln.nn.functional as F
from kiln._capture.backend_compiled import CpuBackend

FLOATS = [kiln.float32, kiln.float64, kiln.float16, kiln.bfloat16]


def same_bits(a, b):
    assert a.dtype == b.dtype and a.shape == b.shape
    assert kiln.equal(a.isnan(), b.isnan())
    assert kiln.equal(kiln.nan_to_num(a), kiln.nan_to_num(b)), (a, b)


def draws_as_eager(fn, *args, calls=(), dynamic=None, strict=True, seed=123):
    """Compiles `fn`; for each argument tuple runs eager and compiled from one seed and checks
    equal results (every tensor of a tuple) and an equal generator state afterwards. Returns
    the backend."""
    kiln.compiler.reset()
    backend = CpuBackend(fallback=not strict)
    compiled = kiln.compile(fn, backend=backend, dynamic=dynamic)
    for call_args in [args, *calls]:
        with kiln.no_grad():
            kiln.manual_seed(seed)
            ref = fn(*[a.clone() for a in call_args])
            ref_state = kiln.get_rng_state()
            kiln.manual_seed(seed)
            out = compiled(*[a.clone() for a in call_args])
            state = kiln.get_rng_state()
        refs = ref if isinstance(ref, tuple) else (ref,)
        outs = out if isinstance(out, tuple) else (out,)
        for o, r in zip(outs, refs, strict=True):
            same_bits(o, r)
        assert kiln.equal(state, ref_state), "the generator must end where eager's ends"
    return backend


def one_compiled_part(backend):
    (report,) = backend.reports
    assert report.eager_nodes == 0 and report.fallbacks == [], report.eager
    assert len(report.parts) == 1
    return report


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("p", [0.1, 0.5, 0.9, 1.0])
def test_dropout_draws_eagers_mask(dtype, p):
    # Fused code rounds float16/bfloat16 once per kernel, eager once per op, so a chain after
    # the dropout may differ in the last bit there; doubling and the mask's multiply do not.
    def fn(x):
        y = F.dropout(x.relu() * 2, p=p, training=True)
        return y + 1 if dtype in (kiln.float32, kiln.float64) else y

    backend = draws_as_eager(fn, rand(5, 37, dtype=dtype))
    one_compiled_part(backend)


def test_dropout_keeps_nan_of_dropped_elements_as_eager():
    x = rand(4, 64)
    x[0, :] = float("nan")
    x[1, :] = float("inf")
    one_compiled_part(draws_as_eager(lambda t: F.dropout(t, 0.5), x))


def test_two_draws_keep_eagers_order():
    def fn(x, y):
        a = F.dropout(x, 0.3)
        b = kiln.rand(3, 5)
        c = F.dropout(y.t(), 0.6)  # a transposed input: elements are numbered row-major
        return a, c * 2, b

    backend = draws_as_eager(fn, rand(4, 5), rand(5, 3))
    one_compiled_part(backend)


def test_dropout_module_in_a_training_mlp():
    model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Dropout(0.2), nn.Linear(32, 8),
                          nn.Dropout(0.1)).train()
    for p in model.parameters():
        p.requires_grad_(False)
    kiln.compiler.reset()
    backend = CpuBackend(fallback=False)
    compiled = kiln.compile(model, backend=backend)
    x = rand(6, 16)
    with kiln.no_grad():
        for _ in range(2):  # the second call draws the next masks, as eager's would
            kiln.manual_seed(9)
            ref = model(x), model(x)
            kiln.manual_seed(9)
            out = compiled(x), compiled(x)
            for o, r in zip(out, ref, strict=True):
                assert kiln.equal(o == 0, r == 0)  # the same elements dropped
                assert kiln.allclose(o, r, rtol=1e-5, atol=1e-6)  # GEMM and GELU rounding
    one_compiled_part(backend)


def test_dropout_of_dynamic_sizes_reserves_the_calls_count():
    def fn(x):
        return F.dropout(x * 3, 0.4) - x

    backend = draws_as_eager(fn, rand(4, 9), dynamic=True,
                             calls=[(rand(7, 9),), (rand(12, 9),), (rand(4, 9),)])
    one_compiled_part(backend)


def test_inplace_dropout():
    def on_input(x):
        F.dropout(x, 0.5, inplace=True)
        return x * 2

    def on_intermediate(x):
        y = x + 1
        F.dropout(y, 0.5, True, True)
        return y

    def observed(x):
        y = x + 1
        v = y[:, 1:]
        F.dropout(y, 0.5, inplace=True)
        return v * 1

    drop = nn.Dropout(0.5, inplace=True).train()

    def module(x):
        y = x * 2
        drop(y)
        return y

    for fn in (on_intermediate, observed, module):
        one_compiled_part(draws_as_eager(fn, rand(4, 6)))
    # the mutated input is written back: equal after the call too
    x1, x2 = rand(4, 6), rand(4, 6)
    kiln.compiler.reset()
    compiled = kiln.compile(on_input, backend=CpuBackend(fallback=False))
    with kiln.no_grad():
        kiln.manual_seed(5)
        ref = on_input(x1)
        kiln.manual_seed(5)
        out = compiled(x2)
    same_bits(out, ref)
    same_bits(x2, x1)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_rand_and_rand_like(dtype):
    def fn(x):
        return x + kiln.rand(x.shape, dtype=dtype), kiln.rand_like(x) * 2, kiln.rand(2, 3, 4,
                                                                                   dtype=dtype)

    one_compiled_part(draws_as_eager(fn, rand(3, 17, dtype=dtype)))


def test_explicit_generator_stays_eager():
    g = kiln.Generator().manual_seed(7)

    def fn(x):
        return kiln.dropout(x * 2, 0.5, True, generator=g) + 1

    kiln.compiler.reset()
    with kiln.no_grad():
        out = kiln.compile(fn, backend=CpuBackend(fallback=True))(rand(4, 5))
        g.manual_seed(7)
        same_bits(out, fn(rand(4, 5)))  # the user's generator, drawn once, as eager draws


def test_dropout_kernel_fuses_with_its_neighbours():
    def fn(x):
        return F.dropout((x * 2).relu(), 0.5) * 3 + 1

    report = one_compiled_part(draws_as_eager(fn, rand(8, 8)))
    (info,) = report.infos
    # one kernel: the counter reservation (an extern) and one loop computing everything else
    assert info["kernels"] == 1 and info["extern_kernels"] == 1, info
    assert info["generated_kernels"] == 1, info


@pytest.mark.parametrize("seed,offset", [(0xFFFFFFFF12345678, 2**32 - 37), (2**63 + 5, 2**40 + 3)])
def test_counters_past_32_bits_and_wide_seeds(seed, offset):
    state = kiln.tensor(list(seed.to_bytes(8, "little") + offset.to_bytes(8, "little")),
                        dtype=kiln.uint8)

    def fn(x):
        return F.dropout(x, 0.5), kiln.rand(x.shape, dtype=kiln.float64)

    kiln.compiler.reset()
    backend = CpuBackend(fallback=False)
    compiled = kiln.compile(fn, backend=backend)
    x = rand(9, 11)
    with kiln.no_grad():
        kiln.set_rng_state(state)
        ref = fn(x)
        kiln.set_rng_state(state)
        out = compiled(x)
    for o, r in zip(out, ref, strict=True):
        same_bits(o, r)
    one_compiled_part(backend)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_randn_is_eagers_box_muller(dtype):
    """Element e of a compiled randn reads eager's block (e / 4, or e / 2 in float64) and branch:
    float64 is eager's bit for bit; in float32 the kernels' log, cos and sin round differently
    from libm's in the last bits (up to 3e-7 relative over 10^5 samples)."""
    def fn(x):
        return kiln.randn(3, 7, dtype=dtype), kiln.randn_like(x) * 2 + x

    kiln.compiler.reset()
    backend = CpuBackend(fallback=False)
    compiled = kiln.compile(fn, backend=backend)
    x = rand(5, 9, dtype=dtype)
    with kiln.no_grad():
        kiln.manual_seed(11)
        ref = fn(x)
        ref_state = kiln.get_rng_state()
        kiln.manual_seed(11)
        out = compiled(x)
        assert kiln.equal(kiln.get_rng_state(), ref_state)
    tol = {kiln.float64: 0.0, kiln.float32: 1e-6}.get(dtype, 1e-2)
    for o, r in zip(out, ref, strict=True):
        assert o.dtype == r.dtype
        assert kiln.allclose(o.double(), r.double(), rtol=tol, atol=tol), (o, r)
    one_compiled_part(backend)


@pytest.mark.parametrize("dtype", [kiln.float32, kiln.float64], ids=str)
@pytest.mark.parametrize("p", [0.3, 1.0])
def test_channel_dropout_draws_eagers_channels(dtype, p):
    """F.dropout1d/2d/3d, nn.Dropout2d and kiln.feature_dropout draw one Bernoulli per channel
    (eager's (N, C, 1, ...) noise), batched or not, in place or not."""
    drop2d = nn.Dropout2d(p).train()

    def fn(x1, x2, x3, u1, u3):
        a = F.dropout1d(x1 * 2, p)
        b = drop2d(x2) + 1
        c = F.dropout3d(x3, p, training=True)
        d = F.dropout1d(u1, p), F.dropout3d(u3, p)  # unbatched: one draw per channel
        e = kiln.feature_dropout(x2 - 1, p, True)
        return a, b, c, *d, e

    args = (rand(3, 4, 7, dtype=dtype), rand(2, 5, 3, 3, dtype=dtype),
            rand(2, 3, 2, 2, 2, dtype=dtype), rand(4, 6, dtype=dtype),
            rand(3, 2, 2, 2, dtype=dtype))  # fmt: skip
    one_compiled_part(draws_as_eager(fn, *args))

    def inplace(x):
        y = x * 3
        F.dropout2d(y, p, True, True)
        return y

    one_compiled_part(draws_as_eager(inplace, rand(2, 4, 3, 3, dtype=dtype)))


def drop_path(x, drop_prob: float = 0.2, training: bool = True, scale_by_keep: bool = True):
    """timm's DropPath (stochastic depth), verbatim but for the import."""
    if drop_prob == 0.0 or not training:
        return x
    keep_prob = 1 - drop_prob
    shape = (x.shape[0],) + (1,) * (x.ndim - 1)
    random_tensor = x.new_empty(shape).bernoulli_(keep_prob)
    if keep_prob > 0.0 and scale_by_keep:
        random_tensor.div_(keep_prob)
    return x * random_tensor


@pytest.mark.parametrize("dtype", [kiln.float32, kiln.float64], ids=str)
def test_drop_path_of_timm_compiles(dtype):
    """x.new_empty(shape).bernoulli_(keep) then div_ (stochastic depth): one draw per sample,
    eager's, in the kernel of the residual add; kiln.empty / empty_like lower too."""
    def block(x, y):
        return x + drop_path(y * 2, 0.25)

    one_compiled_part(draws_as_eager(block, rand(6, 5, 8, dtype=dtype),
                                     rand(6, 5, 8, dtype=dtype)))

    def samplers(x):
        a = kiln.empty(3, 4, dtype=dtype).bernoulli_(0.3)
        b = kiln.empty_like(x).bernoulli_(0.9) * x
        return a, b

    one_compiled_part(draws_as_eager(samplers, rand(2, 7, dtype=dtype)))


@pytest.mark.parametrize("dtype", [kiln.float32, kiln.float64], ids=str)
@pytest.mark.parametrize("p", [0.2, 0.7, 1.0])
def test_alpha_dropouts_draw_eagers_mask(dtype, p):
    """Alpha dropout (per element) and feature alpha dropout (per channel), through F, kiln
    and the modules, in and out of place: eager's values bit for bit, in one compiled part."""
    x = rand(4, 6, 5).to(dtype)
    alpha, feature = nn.AlphaDropout(p), nn.FeatureAlphaDropout(p)
    for fn in (lambda t: F.alpha_dropout(t, p, True) * 2,
               lambda t: F.feature_alpha_dropout(t, p, training=True) + 1,
               lambda t: kiln.alpha_dropout(t, p, True),
               lambda t: kiln.feature_alpha_dropout(t, p, train=True, inplace=True) * 3,
               lambda t: alpha(t).relu() + feature(t)):
        one_compiled_part(draws_as_eager(fn, x))


def test_alpha_dropout_off_or_of_integers():
    x = rand(3, 4)
    off = nn.AlphaDropout(0.5).eval()
    one_compiled_part(draws_as_eager(lambda t: off(t) + 1, x))
    kiln.compiler.reset()
    f = kiln.compile(lambda t: F.alpha_dropout(t, 0.5, True))
    with pytest.raises(RuntimeError, match="alpha_dropout"):  # eager's error, from eager
        f(kiln.ones(3, dtype=kiln.int64))


@pytest.mark.parametrize("dtype", [kiln.float32, kiln.float64, kiln.float16], ids=str)
def test_bernoulli_of_probability_tensors(dtype):
    """kiln.bernoulli(probs), x.bernoulli_(p_tensor) (broadcast) and bernoulli(x, p): eager's
    draws bit for bit, in one compiled part."""
    probs = rand(5, 7).abs().clamp(max=1).to(dtype)
    x = kiln.zeros(3, 5, 7)
    row = rand(7).abs().clamp(max=1)
    for fn in (lambda p, t: kiln.bernoulli(p) * 2,
               lambda p, t: t.clone().bernoulli_(p) + 1,
               lambda p, t: t.clone().bernoulli_(row) * 3,
               lambda p, t: p.bernoulli(0.3),
               lambda p, t: kiln.bernoulli(p, 0.6)):
        one_compiled_part(draws_as_eager(fn, probs, x))


def test_bernoulli_probabilities_outside_0_1_raise_eagers_error():
    kiln.compiler.reset()
    f = kiln.compile(lambda p: kiln.bernoulli(p) + 1)
    f(kiln.tensor([0.0, 1.0]))
    for bad in ([0.5, 1.5], [-0.1, 0.2], [float("nan"), 0.5]):
        with pytest.raises(RuntimeError, match="expected all probabilities to be in"):
            f(kiln.tensor(bad))


def test_bernoulli_rule_refuses_what_eager_refuses():
    state = "%0 = philox_state() {count = 12} : i64[2]"
    ints = (f"graph @g(%p: i64[3, 4]) {{\n  {state}\n  %1 = bernoulli(%0, %p) "
            "{dtype = f32, size = [3, 4]} : f32[3, 4]\n  return %1\n}")
    with pytest.raises(ValueError, match="not implemented for probability tensors of dtype"):
        kiln._C._ir.verify(ints)
    wide = (f"graph @g(%p: f32[5]) {{\n  {state}\n  %1 = bernoulli(%0, %p) "
            "{dtype = f32, size = [3, 4]} : f32[3, 4]\n  return %1\n}")
    with pytest.raises(ValueError, match="broadcast"):
        kiln._C._ir.verify(wide)
