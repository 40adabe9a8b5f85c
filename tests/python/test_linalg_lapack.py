"""torch.linalg's solves and factorizations (solve, inv, cholesky, det, slogdet, eigh,
solve_triangular, ...) over the LAPACK-backed ops: values and gradients against torch's, float32
and float64, batches that broadcast; torch's errors (LinAlgError for singular and indefinite
input); compiled code with each op one extern node (no graph break, no eager node) and a
compiled backward."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import kiln  # noqa: E402
from kiln._capture.backend_compiled import CpuBackend  # noqa: E402

TOL = {np.float64: dict(rtol=1e-9, atol=1e-10), np.float32: dict(rtol=2e-4, atol=2e-5)}


def spd(n, batch=(), seed=0, dtype=np.float64):
    g = np.random.default_rng(seed)
    m = g.standard_normal((*batch, n, n))
    return (m @ np.swapaxes(m, -1, -2) + n * np.eye(n)).astype(dtype)


def general(n, batch=(), seed=1, dtype=np.float64):
    g = np.random.default_rng(seed)
    return (g.standard_normal((*batch, n, n)) + 2 * np.eye(n)).astype(dtype)


def both(*arrays, grad=False):
    k = [kiln.tensor(a, requires_grad=grad) for a in arrays]
    t = [torch.tensor(a, requires_grad=grad) for a in arrays]
    return k, t


def close(k, t, dtype=np.float64):
    np.testing.assert_allclose(k.detach().numpy(), t.detach().numpy(), **TOL[dtype])


CASES = {
    "solve_matrix": (lambda L, A, B: L.solve(A, B),
                     lambda: (general(5), general(5, seed=2)[:, :3])),
    "solve_vector": (lambda L, A, b: L.solve(A, b), lambda: (general(4), np.arange(4.0))),
    "solve_batch_broadcast": (lambda L, A, B: L.solve(A, B),
                              lambda: (general(3, (2, 1)), general(3, (4,), seed=3))),
    "solve_batch_of_vectors": (lambda L, A, b: L.solve(A, b),
                               lambda: (general(3, (2,)), np.ones((2, 3)))),
    "solve_right": (lambda L, A, B: L.solve(A, B, left=False),
                    lambda: (general(4), general(4, seed=4)[:2])),
    "inv": (lambda L, A: L.inv(A), lambda: (general(6, (2,)),)),
    "cholesky": (lambda L, A: L.cholesky(A), lambda: (spd(5, (3,)),)),
    "cholesky_upper": (lambda L, A: L.cholesky(A, upper=True), lambda: (spd(4),)),
    "det": (lambda L, A: L.det(A), lambda: (general(5, (2,)),)),
    "slogdet_logabsdet": (lambda L, A: L.slogdet(A)[1], lambda: (general(5, (3,)) - 1.5,)),
    "slogdet_sign": (lambda L, A: L.slogdet(A)[0], lambda: (general(5, (3,)) - 1.5,)),
    "eigvalsh": (lambda L, A: L.eigvalsh(A), lambda: (spd(6, (2,)),)),
    "eigvalsh_upper": (lambda L, A: L.eigvalsh(A, UPLO="U"), lambda: (np.triu(spd(5)),)),
    # eigenvectors are unique up to sign: V diag(w) V^T and V * V are sign-free
    "eigh_vectors": (lambda L, A: (lambda w, v: (v * w.unsqueeze(-2)) @ v.mT + v * v)(
        *L.eigh(A)), lambda: (spd(5, (2,)),)),
    "solve_triangular_upper": (lambda L, A, B: L.solve_triangular(A, B, upper=True),
                               lambda: (general(5), general(5, seed=5))),
    "solve_triangular_lower_unit": (
        lambda L, A, B: L.solve_triangular(A, B, upper=False, unitriangular=True),
        lambda: (general(4, (2,)), general(4, seed=6)[:, :2])),
    "solve_triangular_right": (lambda L, A, B: L.solve_triangular(A, B, upper=False, left=False),
                               lambda: (general(4), general(4, seed=7)[:3])),
}


@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_values_equal_torch(name, dtype):
    fn, make = CASES[name]
    k, t = both(*[a.astype(dtype) for a in make()])
    out_k, out_t = fn(kiln.linalg, *k), fn(torch.linalg, *t)
    assert out_k.dtype == getattr(kiln, str(out_t.dtype).split(".")[1])
    close(out_k, out_t, dtype)


@pytest.mark.parametrize("name", sorted(set(CASES) - {"slogdet_sign"}))
def test_gradients_equal_torch(name):
    fn, make = CASES[name]
    k, t = both(*make(), grad=True)
    out_k, out_t = fn(kiln.linalg, *k), fn(torch.linalg, *t)
    w = np.random.default_rng(9).standard_normal(tuple(out_t.shape))
    (out_k * kiln.tensor(w)).sum().backward()
    (out_t * torch.tensor(w)).sum().backward()
    for a, b in zip(k, t, strict=True):
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-8, atol=1e-10)


def test_top_level_torch_functions_use_the_same_kernels():
    (a,), (ta,) = both(spd(4, (2,)))
    for name in ("inverse", "det", "logdet", "cholesky"):
        close(getattr(kiln, name)(a), getattr(torch, name)(ta))
    close(kiln.slogdet(a)[1], torch.slogdet(ta)[1])
    (factor,), (tfactor,) = both(np.linalg.cholesky(spd(4)))
    (b,), (tb,) = both(general(4, seed=3)[:, :2])
    close(kiln.cholesky_solve(b, factor), torch.cholesky_solve(tb, tfactor))
    close(kiln.cholesky_inverse(factor), torch.cholesky_inverse(tfactor))


def test_singular_and_indefinite_input_raise_linalg_error():
    singular = kiln.tensor([[1.0, 2.0], [2.0, 4.0]])
    with pytest.raises(kiln.linalg.LinAlgError, match="singular"):
        kiln.linalg.solve(singular, kiln.ones(2))
    with pytest.raises(RuntimeError, match="singular"):  # a RuntimeError, as torch's
        kiln.linalg.inv(singular)
    batch = kiln.tensor(np.stack([np.eye(3), -np.eye(3)]))
    with pytest.raises(kiln.linalg.LinAlgError,
                       match=r"\(Batch element 1\).*leading minor of order 1 is not positive"):
        kiln.linalg.cholesky(batch)
    sign, logabsdet = kiln.linalg.slogdet(singular)
    assert float(sign) == 0.0 and float(logabsdet) == -np.inf
    assert float(kiln.linalg.det(singular)) == 0.0


def test_shape_and_dtype_errors_name_the_function():
    with pytest.raises(RuntimeError, match="linalg.solve: A must be batches of square matrices"):
        kiln.linalg.solve(kiln.ones(2, 3), kiln.ones(2))
    with pytest.raises(RuntimeError, match="linalg.cholesky: Expected a floating point"):
        kiln.linalg.cholesky(kiln.ones(2, 2, dtype=kiln.int64))
    with pytest.raises(RuntimeError, match="Incompatible shapes"):
        kiln.linalg.solve(kiln.eye(3), kiln.ones(4, 2))
    with pytest.raises(RuntimeError, match="UPLO"):
        kiln.linalg.eigh(kiln.eye(2), UPLO="X")


def compiled(fn):
    kiln.compiler.reset()
    backend = CpuBackend(fallback=False)
    return kiln.compile(fn, backend=backend, fullgraph=True), backend


def test_compiled_solvers_are_extern_nodes_of_one_part():
    def f(a, b):
        factor = kiln.linalg.cholesky(a)
        x = kiln.linalg.solve_triangular(factor, b, upper=False)
        w, v = kiln.linalg.eigh(a)
        sign, logdet = kiln.linalg.slogdet(a)
        return x.sum(0) * 2, kiln.linalg.solve(a, b) + 1, w.exp(), v.abs(), sign * logdet

    a, b = kiln.tensor(spd(6, (2,))), kiln.tensor(general(6, seed=3)[:, :2])
    fn, backend = compiled(f)
    for got, want in zip(fn(a, b), f(a, b), strict=True):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-12, atol=1e-12)
    (report,) = backend.reports
    assert report.eager_nodes == 0 and len(report.parts) == 1


def test_compiled_gaussian_process_likelihood_trains_with_a_compiled_backward():
    """The negative log marginal likelihood of a GP (cholesky, triangular solves, log det):
    gradients through the compiled backward equal eager autograd's and torch's."""
    x = np.linspace(0, 1, 12)[:, None]
    y = np.sin(6 * x[:, 0])

    def nll(lib, log_scale, log_noise, x, y):
        d2 = (x - x.T) ** 2
        k = (-d2 / (2 * log_scale.exp() ** 2)).exp() + log_noise.exp() * lib.eye(x.shape[0],
                                                                               dtype=x.dtype)
        factor = lib.linalg.cholesky(k)
        alpha = lib.cholesky_solve(y.unsqueeze(-1), factor)
        return 0.5 * (y.unsqueeze(-1) * alpha).sum() + factor.diagonal().log().sum()

    def grads(lib, fn):
        s = lib.tensor(-1.0, dtype=lib.float64, requires_grad=True)
        n = lib.tensor(-3.0, dtype=lib.float64, requires_grad=True)
        loss = fn(s, n, lib.tensor(x), lib.tensor(y))
        loss.backward()
        return float(loss), float(s.grad), float(n.grad)

    fn, backend = compiled(lambda s, n, x, y: nll(kiln, s, n, x, y))
    got = grads(kiln, fn)
    eager = grads(kiln, lambda *a: nll(kiln, *a))
    want = grads(torch, lambda *a: nll(torch, *a))
    np.testing.assert_allclose(got, eager, rtol=1e-12)
    np.testing.assert_allclose(got, want, rtol=1e-9)
    (report,) = backend.reports  # diagonal() read as a value compiles too
    assert report.eager_nodes == 0 and report.backward_parts >= 1


def test_compiled_solve_keeps_a_symbolic_size():
    kiln.compiler.reset()
    backend = CpuBackend(fallback=False)
    fn = kiln.compile(lambda a, b: kiln.linalg.solve(a, b) * 2, backend=backend, dynamic=True)
    for n in (3, 5, 8):
        a, b = kiln.tensor(general(n)), kiln.tensor(np.arange(float(n)))
        np.testing.assert_allclose(fn(a, b).numpy(), np.linalg.solve(a.numpy(), b.numpy()) * 2,
                                   rtol=1e-10)
    assert len(backend.reports) <= 2 and all(r.eager_nodes == 0 for r in backend.reports)


def test_compiled_singular_matrix_raises_linalg_error():
    fn, _ = compiled(lambda a: kiln.linalg.inv(a) + 1)
    fn(kiln.eye(2))
    with pytest.raises(kiln.linalg.LinAlgError, match="singular"):
        fn(kiln.zeros(2, 2))
