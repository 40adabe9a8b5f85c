"""kiln.linalg against torch.linalg: the norms (values and gradients, every supported ord, dims,
keepdim, dtype), the products (vecdot, multi_dot in its cheapest order, cross), their errors,
and the same functions under kiln.compile with nothing on eager kernels."""

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from conftest import grad_pair as pair  # noqa: E402

import kiln  # noqa: E402
from kiln._capture.backend_compiled import CpuBackend  # noqa: E402


def check(fn_t, fn_k, *shapes):
    ts, ks = zip(*[pair(*s, seed=i) for i, s in enumerate(shapes)], strict=True)
    out_t, out_k = fn_t(*ts), fn_k(*ks)
    np.testing.assert_allclose(out_k.detach().numpy(), out_t.detach().numpy(), rtol=1e-10,
                               atol=1e-12)
    w = np.random.default_rng(9).standard_normal(tuple(out_t.shape))
    (out_t * torch.tensor(w)).sum().backward()
    (out_k * kiln.tensor(w)).sum().backward()
    for t, k in zip(ts, ks, strict=True):
        np.testing.assert_allclose(k.grad.numpy(), t.grad.numpy(), rtol=1e-9, atol=1e-12)


VECTOR = [(2, None, False), (1, 1, True), (math.inf, (0, 2), False), (-math.inf, -1, False),
          (3, (1,), True), (0.5, None, True)]


@pytest.mark.parametrize("ord_,dim,keepdim", VECTOR)
def test_vector_norm(ord_, dim, keepdim):
    check(lambda x: torch.linalg.vector_norm(x, ord_, dim, keepdim),
          lambda x: kiln.linalg.vector_norm(x, ord_, dim, keepdim), (2, 3, 4))


@pytest.mark.parametrize("ord_", ["fro", 1, -1, math.inf, -math.inf])
@pytest.mark.parametrize("keepdim", [False, True])
def test_matrix_norm(ord_, keepdim):
    check(lambda a: torch.linalg.matrix_norm(a, ord_, keepdim=keepdim),
          lambda a: kiln.linalg.matrix_norm(a, ord_, keepdim=keepdim), (2, 3, 4))
    check(lambda a: torch.linalg.matrix_norm(a, ord_, dim=(0, 2)),
          lambda a: kiln.linalg.matrix_norm(a, ord_, dim=(0, 2)), (3, 2, 4))


@pytest.mark.parametrize("args", [dict(), dict(dim=1), dict(ord=1), dict(ord="fro"),
                                  dict(ord=math.inf, dim=(0, 1)), dict(dim=(1, 0), keepdim=True)],
                         ids=str)
def test_norm_dispatch(args):
    check(lambda a: torch.linalg.norm(a, **args), lambda a: kiln.linalg.norm(a, **args), (3, 4))


def test_norm_of_a_vector_and_of_a_batch():
    check(lambda a: torch.linalg.norm(a, 3), lambda a: kiln.linalg.norm(a, 3), (5,))
    check(lambda a: torch.linalg.norm(a), lambda a: kiln.linalg.norm(a), (2, 3, 4))
    t, k = pair(3, 4)
    t, k = t.float(), k.float()
    want = torch.linalg.norm(t, dtype=torch.float64)
    got = kiln.linalg.norm(k, dtype=kiln.float64)
    assert got.dtype == kiln.float64
    np.testing.assert_allclose(got.item(), want.item(), rtol=1e-12)
    with pytest.raises(RuntimeError, match="without narrowing"):
        kiln.linalg.vector_norm(k.double(), dtype=kiln.float32)


def test_products():
    check(lambda a, b: torch.linalg.vecdot(a, b), lambda a, b: kiln.linalg.vecdot(a, b),
          (4, 3), (3,))
    check(lambda a, b: torch.linalg.cross(a, b), lambda a, b: kiln.linalg.cross(a, b),
          (5, 3), (1, 3))
    check(lambda a, b: torch.linalg.cross(a, b, dim=0), lambda a, b: kiln.linalg.cross(
        a, b, dim=0), (3, 2), (3, 2))
    shapes = [(5,), (5, 30), (30, 2), (2, 40), (40,)]
    check(lambda *t: torch.linalg.multi_dot(t), lambda *t: kiln.linalg.multi_dot(t), *shapes)
    check(lambda a, b, c: torch.linalg.multi_dot([a, b, c]),
          lambda a, b, c: kiln.linalg.multi_dot([a, b, c]), (10, 100), (100, 5), (5, 50))


def test_errors():
    a = kiln.randn(3, 4)
    with pytest.raises(NotImplementedError, match="singular values"):
        kiln.linalg.matrix_norm(a, "nuc")
    with pytest.raises(RuntimeError, match="Order 3 not supported"):
        kiln.linalg.matrix_norm(a, 3)
    with pytest.raises(RuntimeError, match="must be 1D or 2D"):
        kiln.linalg.norm(kiln.randn(2, 3, 4), 1)
    with pytest.raises(RuntimeError, match="floating point"):
        kiln.linalg.vector_norm(kiln.ones(3, dtype=kiln.int64))
    with pytest.raises(RuntimeError, match="must have length 3"):
        kiln.linalg.cross(a, a)


def test_norms_compile_whole():
    def fn(x, w):
        g = x @ w
        return (kiln.linalg.vector_norm(g, dim=-1) + kiln.linalg.matrix_norm(w, 1)
                + kiln.linalg.norm(x, dim=0).sum())

    backend = CpuBackend(fallback=False)
    x, w = kiln.randn(6, 4), kiln.randn(4, 5)
    np.testing.assert_allclose(kiln.compile(fn, backend=backend)(x, w).numpy(), fn(x, w).numpy(),
                               rtol=1e-5)
    assert backend.reports[0].eager_nodes == 0
    assert kiln.explain(fn)(x, w).graph_break_count == 0
