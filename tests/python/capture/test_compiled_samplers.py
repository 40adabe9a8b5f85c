"""The in-place samplers ``uniform_``, ``normal_`` and ``exponential_`` compile (they were eager
nodes): the kernel draws eager's numbers from the same generator counters, in eager's
accumulation type, and writes them into the tensor; the generator ends where eager's ends."""

from __future__ import annotations

import math

import numpy as np
import pytest
from corpus_util import fresh_capture  # noqa: F401 - autouse: empty caches around every test

import kiln
import kiln.nn as nn
from kiln._capture.backend_compiled import CpuBackend

FLOATS = [kiln.float32, kiln.float64, kiln.float16, kiln.bfloat16]

SAMPLERS = {
    "uniform": lambda t: t.uniform_(-1.5, 2.5),
    "uniform_default": lambda t: t.uniform_(),
    "uniform_keywords": lambda t: t.uniform_(to=0.5),
    "normal": lambda t: t.normal_(0.25, 3.0),
    "normal_default": lambda t: t.normal_(),
    "exponential": lambda t: t.exponential_(2.5),
}
# ulps of the dtype: uniform_ rounds once as eager does; normal_ and exponential_ go through
# the compiled log/sin/cos, within a few ulps of the C library's.
ULPS = {"uniform": 0, "uniform_default": 0, "uniform_keywords": 0, "normal": 8,
        "normal_default": 8, "exponential": 4}  # fmt: skip


def run_both(fn, *args):
    backend = CpuBackend(fallback=False)
    compiled = kiln.compile(fn, backend=backend)
    eager_args = [a.clone() for a in args]
    kiln.manual_seed(11)
    want = fn(*eager_args)
    after_eager = kiln.rand(3)
    compiled_args = [a.clone() for a in args]
    kiln.manual_seed(11)
    got = compiled(*compiled_args)
    after_compiled = kiln.rand(3)
    assert after_compiled.tolist() == after_eager.tolist(), "the generator moved differently"
    (report,) = backend.reports
    assert report.eager_nodes == 0 and report.fallbacks == [] and len(report.parts) == 1
    return want, got, eager_args, compiled_args


def assert_ulps(got, want, ulps):
    g, w = got.double().numpy(), want.double().numpy()
    eps = float(kiln.finfo(got.dtype).eps)
    np.testing.assert_allclose(g, w, rtol=ulps * eps, atol=ulps * eps)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("sampler", sorted(SAMPLERS))
def test_sampler_draws_eagers_numbers(sampler, dtype):
    draw = SAMPLERS[sampler]

    def fn(x, t):
        draw(t)
        return x * t

    x = kiln.arange(35, dtype=dtype).reshape(5, 7)
    want, got, eager_args, compiled_args = run_both(fn, x, kiln.empty(5, 7, dtype=dtype))
    ulps = ULPS[sampler] if dtype in (kiln.float32, kiln.float64) else 1
    ulps = max(ulps, 1) if dtype == kiln.float64 else ulps  # eager's float64 fma
    assert_ulps(compiled_args[1], eager_args[1], ulps)
    assert_ulps(got[0] if isinstance(got, tuple) else got, want, max(2 * ulps, 1))


def test_sampler_into_a_slice_view():
    def fn(t):
        t[1:, ::2].uniform_(0.0, 4.0)
        return t + 1

    want, got, eager_args, compiled_args = run_both(fn, kiln.zeros(6, 4))
    assert compiled_args[0].tolist() == eager_args[0].tolist()
    assert got.tolist() == want.tolist()


def test_init_functions_compile():
    def fn(w, b):
        nn.init.kaiming_uniform_(w, a=math.sqrt(5))
        nn.init.normal_(b, 0.0, 0.02)
        return w.sum() + b.sum()

    want, got, eager_args, compiled_args = run_both(fn, kiln.empty(16, 8), kiln.empty(16))
    assert compiled_args[0].tolist() == eager_args[0].tolist()
    assert_ulps(compiled_args[1], eager_args[1], 8)


def test_exponential_mean_and_range():
    def fn(t):
        return t.exponential_(4.0) * 1

    got = kiln.compile(fn, backend=CpuBackend(fallback=False))(kiln.empty(200_000))
    values = got.numpy()
    assert (values >= 0).all() and np.isfinite(values).all()
    assert abs(values.mean() - 0.25) < 0.005


def test_explicit_generator_breaks_with_the_reason():
    gen = kiln.Generator().manual_seed(3)

    def fn(t):
        t.uniform_(0, 1, generator=gen)
        return t * 2

    report = kiln.explain(fn)(kiln.empty(4))
    (reason,) = report.break_reasons
    assert "explicit kiln.Generator" in reason.reason
    gen.manual_seed(3)
    want = fn(kiln.empty(4))
    gen.manual_seed(3)
    assert kiln.compile(fn)(kiln.empty(4)).tolist() == want.tolist()


@pytest.mark.parametrize("dtype", [kiln.int64, kiln.int32, kiln.uint8, kiln.float32], ids=str)
def test_randint_draws_eagers_integers(dtype):
    def fn(x):
        a = kiln.randint(0, 10, (3, 5), dtype=dtype)
        b = kiln.randint(7, (4,), dtype=dtype)
        c = kiln.randint_like(x, 2, 9)
        return a * 2, b, c + x

    want, got, _, _ = run_both(fn, kiln.zeros(2, 6))
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype and g.tolist() == w.tolist()


def test_randint_of_a_wider_range_stays_eager():
    def fn(x):
        return kiln.randint(-(2**40), 2**40, (3,)) + x

    backend = CpuBackend(fallback=True)
    kiln.manual_seed(1)
    got = kiln.compile(fn, backend=backend)(kiln.zeros(3, dtype=kiln.int64))
    kiln.manual_seed(1)
    assert got.tolist() == fn(kiln.zeros(3, dtype=kiln.int64)).tolist()
    (report,) = backend.reports
    assert any("2^32" in reason for _, _, reason in report.fallbacks), report.fallbacks


def test_random_into_a_tensor_draws_eagers_integers():
    def fn(x):
        y = kiln.empty(3, 4, dtype=kiln.int64).random_(2, 9)
        z = kiln.empty(5).random_(7)
        return y * 2, z + x

    want, got, _, _ = run_both(fn, kiln.zeros(5))
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype and g.tolist() == w.tolist()
