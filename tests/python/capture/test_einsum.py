"""kiln.einsum compiled as graph ops (lowerings_einsum.py): matrix-product pairs on the GEMM
extern, other contractions as one fused multiply-sum reduction; implicit outputs, ellipses
and chains of operands; against PyTorch, with zero eager nodes."""

from __future__ import annotations

import numpy as np
import pytest
from corpus_util import fresh_capture  # noqa: F401 - autouse: empty caches around every test
from test_backend_compiled import run_compiled

import kiln

G = np.random.default_rng(0)

# equation, operand shapes, whether every pair is a matrix product (one GEMM extern each)
CASES = [
    ("ij,jk->ik", [(3, 4), (4, 5)], True),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)], True),
    ("bhqd,bhkd->bhqk", [(2, 3, 4, 8), (2, 3, 5, 8)], True),
    ("b h q k, b h k d -> b h q d", [(2, 3, 4, 5), (2, 3, 5, 8)], True),
    ("ik,jk->ij", [(3, 4), (5, 4)], True),
    ("ij,jk", [(3, 4), (4, 5)], True),
    ("xy,yz,zw->xw", [(2, 3), (3, 4), (4, 5)], True),
    ("...ij,...jk->...ik", [(2, 3, 4), (2, 4, 5)], True),
    ("ij,j->i", [(3, 4), (4,)], False),
    ("i,j->ij", [(3,), (4,)], False),
    ("ij->j", [(3, 4)], False),
    ("ij->", [(3, 4)], False),
    ("ij,ij->", [(3, 4), (3, 4)], False),
    ("bn,anm,bm->ba", [(2, 3), (4, 3, 5), (2, 5)], False),
    ("abc,cd->abd", [(2, 3, 4), (4, 5)], False),
    ("...ij,jk->...ik", [(2, 2, 3, 4), (4, 5)], False),
    ("b...d,bd->b...", [(2, 3, 4, 5), (2, 5)], False),
]


@pytest.mark.parametrize("eq,shapes,gemm", CASES, ids=[c[0] for c in CASES])
def test_einsum_compiles_and_matches_torch(eq, shapes, gemm):
    torch = pytest.importorskip("torch")
    arrays = [G.standard_normal(s).astype(np.float32) for s in shapes]
    args = [kiln.from_numpy(a) for a in arrays]
    backend = run_compiled(lambda *a: kiln.einsum(eq, *a), *args, tol=(1e-5, 1e-5))
    (report,) = backend.reports
    assert report.eager_nodes == 0 and len(report.parts) == 1
    info = report.infos[0]
    if gemm:
        assert info["generated_kernels"] == 0 and info["extern_kernels"] == len(shapes) - 1
    with kiln.no_grad():
        ours = kiln.compile(lambda *a: kiln.einsum(eq, *a))(*args)
    theirs = torch.einsum(eq, *(torch.from_numpy(a) for a in arrays))
    assert tuple(ours.shape) == tuple(theirs.shape)
    np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-5, atol=1e-5)


def test_einsum_with_symbolic_sizes():
    fn = lambda q, k: kiln.einsum("bhqd,bhkd->bhqk", q, k).softmax(-1)  # noqa: E731
    backend = run_compiled(fn, kiln.randn(2, 3, 4, 8), kiln.randn(2, 3, 5, 8), dynamic=True,
                           calls=[(kiln.randn(3, 2, 7, 8), kiln.randn(3, 2, 6, 8))])
    assert all(r.eager_nodes == 0 and r.eager_calls == 0 for r in backend.reports)


def test_a_transposing_einsum_is_a_permute():
    backend = run_compiled(lambda x: kiln.einsum("ij->ji", x) + 1, kiln.randn(3, 4))
    assert backend.reports[0].eager_nodes == 0


def test_unsupported_forms_stay_eager_with_a_reason():
    x = kiln.randn(3, 3)
    for eq, why in [("ii->i", "diagonal"), ("ij->ij", "is its operand")]:
        backend = run_compiled(lambda x: kiln.einsum(eq, x), x, strict=False)
        assert why in str(backend.reports[0].fallbacks)
