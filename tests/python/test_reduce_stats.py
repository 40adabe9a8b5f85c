"""Statistical reductions against PyTorch: var/std (correction, unbiased), var_mean/std_mean,
logsumexp, norm and linalg.vector_norm (every p)."""

import pytest
import torch
from conftest import DTYPES, FLOAT_DTYPES, assert_close, make, to_kiln
from test_reduce import NAN, check, layouts

import kiln

INF = float("inf")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("dim", [None, 0, -1, (0, 2), [1, 2]])
def test_var_std(dtype, dim):
    for t, k in layouts((3, 4, 5), dtype):
        for op in ("var", "std"):
            check(lambda m, x: getattr(m, op)(x, dim), t, k, upcast=True)
            check(lambda m, x: getattr(x, op)(dim, keepdim=True), t, k, upcast=True)
            check(lambda m, x: getattr(m, op)(x, dim, correction=0), t, k, upcast=True)
            check(lambda m, x: getattr(x, op)(dim=dim, correction=2.5), t, k, upcast=True)
            if dim is not None:
                check(lambda m, x: getattr(x, op)(dim, False, True), t, k, upcast=True)
                check(lambda m, x: getattr(m, op)(x, dim, unbiased=False), t, k, upcast=True)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_var_mean_std_mean_return_plain_tuples(dtype):
    for t, k in layouts((4, 6), dtype):
        for op in ("var_mean", "std_mean"):
            check(lambda m, x: getattr(m, op)(x), t, k, upcast=True)
            check(lambda m, x: getattr(m, op)(x, 1, keepdim=True), t, k, upcast=True)
            check(lambda m, x: getattr(m, op)(x, (0,), correction=0), t, k, upcast=True)
            check(lambda m, x: getattr(m, op)(x, 0, False), t, k, upcast=True)
            check(lambda m, x: getattr(m, op)(x, True), t, k, upcast=True)


@pytest.mark.filterwarnings("ignore:.*degrees of freedom")
def test_var_legacy_unbiased_positional_and_degenerate_counts():
    t, k = make((3, 4), "float64")
    check(lambda m, x: x.var(False), t, k)
    check(lambda m, x: x.std(True), t, k)
    check(lambda m, x: m.var(x, 0, True, True), t, k)
    # One element (or correction >= n): torch gives NaN or inf, not an error.
    one = torch.tensor([2.5])
    check(lambda m, x: m.var(x), one, to_kiln(one))
    check(lambda m, x: m.std(x, correction=3), t[0, :2], to_kiln(t[0, :2].contiguous()))
    for shape in [(0,), (0, 3), (3, 0)]:
        z = torch.zeros(shape)
        check(lambda m, x: m.var(x), z, to_kiln(z))
        check(lambda m, x: m.var_mean(x, 0), z, to_kiln(z))
        check(lambda m, x: m.std(x, -1), z, to_kiln(z))
    s = torch.tensor(3.0)
    check(lambda m, x: m.var(x, correction=0), s, to_kiln(s))


def test_var_is_sound_for_a_large_mean_and_infinities():
    g = torch.Generator().manual_seed(0)
    t = (torch.rand(50_000, generator=g, dtype=torch.float64) + 1e4).float()
    k = to_kiln(t)
    ref = t.double().var()
    assert abs(k.var().item() - ref.item()) <= 1e-4 * ref.item()
    bad = torch.tensor([[1.0, INF, 2.0], [1.0, 2.0, NAN]])
    check(lambda m, x: m.var(x, 1), bad, to_kiln(bad))


def test_var_errors():
    ki = to_kiln(torch.arange(6))
    with pytest.raises(RuntimeError, match="floating point"):
        ki.var()
    with pytest.raises(RuntimeError, match="floating point"):
        kiln.std_mean(ki)
    _, k = make((2, 3), "float32")
    with pytest.raises(RuntimeError, match="unbiased and the correction"):
        k.var(0, True, correction=1)
    with pytest.raises(IndexError, match="out of range"):
        k.std(3)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("dim", [0, -1, (0, 2), [1]])
def test_logsumexp(dtype, dim):
    for t, k in layouts((3, 4, 5), dtype):
        check(lambda m, x: m.logsumexp(x, dim), t, k, upcast=True)
        check(lambda m, x: x.logsumexp(dim, keepdim=True), t, k, upcast=True)


def test_logsumexp_is_stable_and_handles_infinities():
    big = torch.tensor([[1000.0, 1000.0, -1000.0], [-INF, -INF, -INF], [INF, 1.0, -INF]])
    check(lambda m, x: m.logsumexp(x, 1), big, to_kiln(big))
    check(lambda m, x: m.logsumexp(x, 0), big, to_kiln(big))
    withnan = torch.tensor([[1.0, NAN], [2.0, 3.0]])
    check(lambda m, x: m.logsumexp(x, 1), withnan, to_kiln(withnan))
    for shape, dim in [((2, 0), 1), ((0, 3), 0), ((0, 3), 1), ((), 0)]:
        z = torch.zeros(shape)
        check(lambda m, x: m.logsumexp(x, dim), z, to_kiln(z))
    t, k = make((3, 40000), "float32")
    check(lambda m, x: m.logsumexp(x, 1), t, k)
    check(lambda m, x: m.logsumexp(x, (0, 1)), t, k)


P_VALUES = ["fro", 2, 1, INF, -INF, 0, 3, 0.5, -1.5]


@pytest.mark.parametrize("p", P_VALUES)
@pytest.mark.parametrize("dtype", [*FLOAT_DTYPES, "int64"])
def test_norm(p, dtype):
    for t, k in layouts((3, 4, 5), dtype):
        check(lambda m, x: m.norm(x, p), t, k, upcast=True)
        check(lambda m, x: x.norm(p, dim=1), t, k, upcast=True)
        check(lambda m, x: x.norm(p=p, dim=(0, 2), keepdim=True), t, k, upcast=True)
    check(lambda m, x: x.norm(p, dim=-1, dtype=m.float64), t, k)


@pytest.mark.parametrize("ord", [2, 1, INF, -INF, 0, 3.5, -2])
def test_linalg_vector_norm(ord):
    t, k = make((4, 6), "float32")
    want = torch.linalg.vector_norm(t, ord)
    assert_close(kiln._C._linalg_vector_norm(k, ord), want)
    want = torch.linalg.vector_norm(t, ord, dim=0, keepdim=True, dtype=torch.float64)
    got = kiln._C._linalg_vector_norm(k, ord, dim=0, keepdim=True, dtype=kiln.float64)
    assert_close(got, want)


def test_norm_special_cases_and_errors():
    t, k = make((3, 4), "float32")
    check(lambda m, x: m.norm(x), t, k)
    check(lambda m, x: m.norm(x, None, 1), t, k)
    z = torch.zeros(0, 3)
    check(lambda m, x: m.norm(x, INF, dim=1), z, to_kiln(z))
    check(lambda m, x: m.norm(x, 2), z, to_kiln(z))
    with pytest.raises(RuntimeError, match="inf norm on an empty tensor"):
        kiln.norm(to_kiln(z), INF)
    with pytest.raises(RuntimeError, match="floating point"):
        to_kiln(torch.arange(4)).norm()
    with pytest.raises(NotImplementedError, match="nuc"):
        k.norm("nuc")
    with pytest.raises(ValueError, match="unsupported p .bogus."):
        k.norm("bogus")
    with pytest.raises(RuntimeError, match="dtype should be floating point"):
        k.norm(2, dtype=kiln.int32)
