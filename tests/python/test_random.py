"""Random numbers: generators and seeding, reproducibility, thread-count independence, and the
distributions of rand/randn/randint/randperm and the in-place samplers.

kiln's Philox numbers differ from torch's, so distributions are checked statistically (fixed
seeds keep the checks deterministic) and torch serves as the oracle for shapes and dtypes.
"""

import math

import numpy as np
import pytest
import torch
from conftest import DTYPES, FLOAT_DTYPES, INT_DTYPES

import kiln

N = 200_000


def as_np(t):
    return (t.float() if t.dtype == kiln.bfloat16 else t).numpy().astype(np.float64)


@pytest.fixture
def threads():
    """Runs a body under a given thread count and restores the default afterwards."""
    yield kiln.set_num_threads
    kiln.set_num_threads(0)


# ---- generators and seeding --------------------------------------------------------------------


def test_manual_seed_reproduces_every_sampler():
    def draw():
        return [
            kiln.rand(5).tolist(),
            kiln.randn(2, 3).tolist(),
            kiln.randint(0, 100, (6,)).tolist(),
            kiln.randperm(10).tolist(),
            kiln.empty(4).uniform_(-2, 2).tolist(),
            kiln.empty(4).exponential_().tolist(),
            kiln.empty(4, dtype=kiln.int32).random_(0, 1000).tolist(),
        ]

    assert kiln.manual_seed(123) is kiln.default_generator
    first = draw()
    kiln.manual_seed(123)
    assert draw() == first
    kiln.manual_seed(124)
    assert all(a != b for a, b in zip(draw(), first, strict=True))


def test_consecutive_draws_continue_the_stream():
    kiln.manual_seed(5)
    a, b = kiln.rand(3), kiln.rand(3)
    assert a.tolist() != b.tolist()
    kiln.manual_seed(5)
    assert kiln.rand(6).tolist() == a.tolist() + b.tolist()


def test_generator_objects_are_independent_streams():
    g = kiln.Generator()
    assert g.initial_seed() == torch.Generator().initial_seed()
    assert g.manual_seed(7) is g and g.initial_seed() == 7
    assert g.device == "cpu"
    kiln.manual_seed(0)
    a = kiln.rand(4, generator=g)
    before = kiln.rand(4)  # the default generator is untouched by g's draws
    kiln.manual_seed(0)
    assert kiln.rand(4).tolist() == before.tolist()
    g2 = kiln.Generator("cpu").manual_seed(7)
    assert kiln.rand(4, generator=g2).tolist() == a.tolist()
    with pytest.raises(TypeError, match="generator"):
        kiln.rand(2, generator=3)
    with pytest.raises(RuntimeError, match="CUDA"):
        kiln.Generator("cuda")


def test_seed_values():
    assert kiln.manual_seed(-1).initial_seed() == 2**64 - 1
    assert kiln.manual_seed(2**64 - 1).initial_seed() == 2**64 - 1
    with pytest.raises(ValueError, match="out of range"):
        kiln.manual_seed(2**64)
    with pytest.raises(TypeError):
        kiln.manual_seed("1")
    s = kiln.seed()
    assert isinstance(s, int) and kiln.initial_seed() == s
    g = kiln.Generator()
    s = g.seed()
    assert g.initial_seed() == s


def test_rng_state_round_trip():
    kiln.manual_seed(11)
    kiln.rand(3)
    state = kiln.get_rng_state()
    assert state.dtype == kiln.uint8 and state.dim() == 1
    a = kiln.randn(5).tolist()
    kiln.set_rng_state(state)
    assert kiln.randn(5).tolist() == a
    g = kiln.Generator().manual_seed(3)
    gs = g.get_state()
    b = kiln.rand(3, generator=g).tolist()
    assert g.set_state(gs) is g
    assert kiln.rand(3, generator=g).tolist() == b
    with pytest.raises(TypeError, match="uint8"):
        kiln.set_rng_state(kiln.zeros(16))
    with pytest.raises(TypeError, match="16 elements"):
        kiln.set_rng_state(kiln.zeros(3, dtype=kiln.uint8))


SAMPLERS = {
    "rand": lambda g: kiln.rand(N, generator=g),
    "randn": lambda g: kiln.randn(N, dtype=kiln.float64, generator=g),
    "randint": lambda g: kiln.randint(-5, 2**40, (N,), generator=g),
    "randperm": lambda g: kiln.randperm(N // 4, generator=g),
    "uniform_": lambda g: kiln.empty(300, 700).t().uniform_(1, 3, generator=g),
    "normal_": lambda g: kiln.empty(N, dtype=kiln.bfloat16).normal_(2, 3, generator=g),
    "exponential_": lambda g: kiln.empty(N, dtype=kiln.float16).exponential_(2, generator=g),
    "random_": lambda g: kiln.empty(N, dtype=kiln.uint8).random_(generator=g),
    "bernoulli_": lambda g: kiln.empty(N, dtype=kiln.bool).bernoulli_(0.3, generator=g),
    "bernoulli": lambda g: kiln.bernoulli(kiln.full((N,), 0.25), generator=g),
    "normal": lambda g: kiln.normal(kiln.zeros(N), kiln.ones(1), generator=g),
    "multinomial": lambda g: kiln.multinomial(kiln.ones(300, 50), 20, generator=g),
    "multinomial_repl": lambda g: kiln.multinomial(kiln.ones(40, 9), 600, True, generator=g),
    "dropout": lambda g: kiln.dropout(kiln.ones(N), 0.4, generator=g),
}


@pytest.mark.parametrize("name", sorted(SAMPLERS))
def test_results_do_not_depend_on_the_thread_count(name, threads):
    results = []
    for n in (1, 2, 4):
        threads(n)
        g = kiln.Generator().manual_seed(2024)
        results.append(SAMPLERS[name](g).tolist())
    assert results[0] == results[1] == results[2]


def test_inplace_sampling_of_a_view_numbers_elements_in_row_major_order():
    g = kiln.Generator().manual_seed(9)
    base = kiln.zeros(4, 6)
    view = base.t()
    view.normal_(generator=g)
    g.manual_seed(9)
    assert view.tolist() == kiln.randn(6, 4, generator=g).tolist()
    assert base.t().tolist() == view.tolist()


# ---- distributions ----------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_rand_is_uniform_on_unit_interval(dtype):
    k = kiln.rand(N, dtype=getattr(kiln, dtype), generator=kiln.Generator().manual_seed(1))
    assert k.dtype.name == dtype == str(torch.rand(1, dtype=getattr(torch, dtype)).dtype)[6:]
    x = as_np(k)
    assert x.min() >= 0.0 and x.max() < 1.0
    assert abs(x.mean() - 0.5) < 0.005
    assert abs(x.var() - 1 / 12) < 0.002
    hist, _ = np.histogram(x, bins=8, range=(0, 1))
    assert np.all(np.abs(hist / N - 1 / 8) < 0.01)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_randn_is_standard_normal(dtype):
    x = as_np(kiln.randn(N, dtype=getattr(kiln, dtype), generator=kiln.Generator().manual_seed(2)))
    assert np.isfinite(x).all()
    assert abs(x.mean()) < 0.01
    assert abs(x.std() - 1) < 0.01
    assert abs(np.mean(np.abs(x) < 1) - 0.6827) < 0.005
    assert abs(np.mean(x**3)) < 0.03  # symmetric
    assert abs(np.mean(x**4) - 3) < 0.1  # normal kurtosis


@pytest.mark.parametrize("name", ["rand", "randn"])
@pytest.mark.parametrize("dtype", INT_DTYPES + ["bool"])
def test_float_samplers_reject_integer_dtypes(name, dtype):
    with pytest.raises(NotImplementedError, match=dtype):
        getattr(kiln, name)(3, dtype=getattr(kiln, dtype))
    with pytest.raises(NotImplementedError):
        getattr(torch, name)(3, dtype=getattr(torch, dtype))


@pytest.mark.parametrize("shape", [(), (0,), (2, 0, 3), (3, 1, 2)])
def test_sampler_shapes(shape):
    for name in ("rand", "randn"):
        assert tuple(getattr(kiln, name)(shape).shape) == tuple(getattr(torch, name)(shape).shape)
    assert kiln.randint(3, shape).shape == shape
    assert kiln.randint(3, shape).dtype == kiln.int64


@pytest.mark.parametrize("dtype", DTYPES)
def test_randint_dtypes_and_range(dtype):
    low, high = (0, 2) if dtype == "bool" else ((0, 200) if dtype == "uint8" else (-7, 9))
    k = kiln.randint(low, high, (N // 4,), dtype=getattr(kiln, dtype))
    t = torch.randint(low, high, (4,), dtype=getattr(torch, dtype))
    assert k.dtype.name == str(t.dtype)[6:]
    x = as_np(k)
    assert x.min() == low and x.max() == high - 1
    assert np.all(x == np.round(x))
    counts = np.bincount((x - low).astype(np.int64), minlength=high - low)
    assert np.all(np.abs(counts / len(x) - 1 / (high - low)) < 0.01)


def test_randint_argument_forms():
    assert kiln.randint(5, (3,)).shape == (3,)
    assert kiln.randint(5, size=(2, 2)).shape == (2, 2)
    assert kiln.randint(high=5, size=(2,)).shape == (2,)
    assert kiln.randint(low=3, high=5, size=(4,)).min().item() >= 3
    big = kiln.randint(-(2**62), 2**62, (1000,))
    assert big.abs().max().item() > 2**55
    assert kiln.randint(0, 2**25, (10,), dtype=kiln.float32).dtype == kiln.float32


def test_randint_errors():
    with pytest.raises(RuntimeError, match="low.*less than.*high"):
        kiln.randint(5, 5, (3,))
    with pytest.raises(RuntimeError, match="out of bounds for uint8"):
        kiln.randint(0, 300, (3,), dtype=kiln.uint8)
    with pytest.raises(RuntimeError, match="out of bounds for uint8"):
        kiln.randint(-1, 3, (3,), dtype=kiln.uint8)
    with pytest.raises(RuntimeError, match="out of bounds for bool"):
        kiln.randint(3, (2,), dtype=kiln.bool)
    with pytest.raises(TypeError, match="float"):
        kiln.randint(0.5, 3, (2,))
    with pytest.raises(TypeError):
        kiln.randint(3)


@pytest.mark.parametrize(
    "dtype", ["int64", "int32", "int16", "uint8", "float32", "float16", "float64", "bfloat16"]
)
def test_randperm_is_a_permutation(dtype):
    n = 200 if dtype in ("uint8", "bfloat16") else 1000
    k = kiln.randperm(n, dtype=getattr(kiln, dtype))
    assert k.dtype.name == dtype
    assert sorted(as_np(k).astype(np.int64).tolist()) == list(range(n))
    assert kiln.randperm(0).shape == (0,)
    assert kiln.randperm(1).tolist() == [0]


def test_randperm_is_uniform_over_positions():
    g = kiln.Generator().manual_seed(4)
    first = np.array([kiln.randperm(5, generator=g).tolist() for _ in range(4000)])
    freq = np.stack([(first == v).mean(axis=0) for v in range(5)])
    assert np.all(np.abs(freq - 0.2) < 0.03)


def test_randperm_errors():
    with pytest.raises(RuntimeError, match="negative dimension -1"):
        kiln.randperm(-1)
    with pytest.raises(NotImplementedError, match="bool"):
        kiln.randperm(3, dtype=kiln.bool)
    with pytest.raises(RuntimeError, match="too large for dtype uint8"):
        kiln.randperm(300, dtype=kiln.uint8)
    with pytest.raises(RuntimeError, match="2049"):
        kiln.randperm(3000, dtype=kiln.float16)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_uniform_normal_exponential_inplace(dtype):
    g = kiln.Generator().manual_seed(6)
    t = kiln.empty(N, dtype=getattr(kiln, dtype))
    assert t.uniform_(-2, 6, generator=g) is t
    x = as_np(t)
    assert x.min() >= -2 and x.max() <= 6 and abs(x.mean() - 2) < 0.05
    assert abs(x.var() - 64 / 12) < 0.1
    x = as_np(t.normal_(3, 0.5, generator=g))
    assert abs(x.mean() - 3) < 0.01 and abs(x.std() - 0.5) < 0.01
    x = as_np(t.normal_(mean=-1.0, std=0.0, generator=g))
    assert np.all(x == -1)
    x = as_np(t.exponential_(4, generator=g))
    assert x.min() >= 0 and abs(x.mean() - 0.25) < 0.005 and abs(x.std() - 0.25) < 0.01


def test_inplace_sampler_errors():
    t = kiln.zeros(3)
    with pytest.raises(RuntimeError, match="from=2 > to=1"):
        t.uniform_(2, 1)
    with pytest.raises(RuntimeError, match="std >= 0.0"):
        t.normal_(0, -1)
    with pytest.raises(RuntimeError, match="lambda > 0.0"):
        t.exponential_(0)
    i = kiln.zeros(3, dtype=kiln.int64)
    for call in (lambda: i.uniform_(), lambda: i.normal_(), lambda: i.exponential_()):
        with pytest.raises(NotImplementedError, match="int64"):
            call()


@pytest.mark.parametrize("dtype", DTYPES)
def test_random_inplace_ranges(dtype):
    k = kiln.empty(N // 4, dtype=getattr(kiln, dtype))
    x = as_np(k.random_(3 if dtype != "bool" else 2))
    assert set(np.unique(x).tolist()) == ({0.0, 1.0} if dtype == "bool" else {0.0, 1.0, 2.0})
    if dtype != "bool":
        x = as_np(k.random_(1, 4))
        assert set(np.unique(x).tolist()) == {1.0, 2.0, 3.0}
    x = as_np(k.random_())
    info_max = {"bool": 1, "float16": 2**11, "bfloat16": 2**8, "float32": 2**24, "float64": 2**53}
    hi = info_max.get(dtype) or np.iinfo(dtype).max
    assert x.min() >= 0 and x.max() <= hi and x.max() > hi / 2


def test_random_inplace_errors():
    with pytest.raises(RuntimeError, match="from=5 >= to=5"):
        kiln.zeros(2).random_(5, 5)
    with pytest.raises(RuntimeError, match="out of bounds for int8"):
        kiln.zeros(2, dtype=kiln.int8).random_(0, 200)


def test_float_mantissa_limits_keep_rand_below_one():
    # bfloat16 has 8 significand bits: every sample must be a multiple of 2^-8 below 1.
    x = as_np(kiln.rand(N, dtype=kiln.bfloat16))
    assert x.max() < 1.0 and np.all((x * 256) == np.round(x * 256))
    assert math.isclose(len(np.unique(x)), 256, rel_tol=0.01)
