"""Tensor.unfold (sliding windows as a new last dim) against torch's: values and gradients for
windows that overlap, tile and leave a remainder, negative dims, ViT patch extraction, errors,
and the same call under kiln.compile; movedim/moveaxis compile as a permute."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import kiln  # noqa: E402
from kiln._capture.backend_compiled import CpuBackend  # noqa: E402


@pytest.mark.parametrize("dim,size,step", [(1, 3, 1), (1, 2, 2), (-1, 3, 2), (0, 2, 1),
                                           (2, 5, 5), (1, 7, 1)])
def test_unfold_matches_torch(dim, size, step):
    a = np.random.default_rng(0).standard_normal((3, 7, 5))
    t, k = torch.tensor(a, requires_grad=True), kiln.tensor(a, requires_grad=True)
    out_t, out_k = t.unfold(dim, size, step), k.unfold(dim, size, step)
    assert tuple(out_k.shape) == tuple(out_t.shape)
    np.testing.assert_array_equal(out_k.detach().numpy(), out_t.detach().numpy())
    w = np.random.default_rng(1).standard_normal(tuple(out_t.shape))
    (out_t * torch.tensor(w)).sum().backward()
    (out_k * kiln.tensor(w)).sum().backward()
    np.testing.assert_allclose(k.grad.numpy(), t.grad.numpy(), rtol=1e-12)


def test_vit_patches_compile():
    def patches(x, p=4):
        b, c = x.shape[:2]
        return x.unfold(2, p, p).unfold(3, p, p).reshape(b, c, -1, p * p).transpose(1, 2)

    x = kiln.randn(2, 3, 8, 12)
    want = torch.tensor(x.numpy()).unfold(2, 4, 4).unfold(3, 4, 4).reshape(2, 3, -1, 16)
    np.testing.assert_array_equal(patches(x).numpy(), want.transpose(1, 2).numpy())
    backend = CpuBackend(fallback=False)
    np.testing.assert_array_equal(kiln.compile(patches, backend=backend)(x).numpy(),
                                  patches(x).numpy())
    assert backend.reports[0].eager_nodes == 0


def test_unfold_errors():
    x = kiln.randn(3, 4)
    with pytest.raises(RuntimeError, match="maximum size for tensor at dimension 1 is 4"):
        x.unfold(1, 5, 1)
    with pytest.raises(RuntimeError, match="step is 0"):
        x.unfold(1, 2, 0)
    with pytest.raises(IndexError, match="Dimension out of range"):
        x.unfold(2, 1, 1)


@pytest.mark.parametrize("src,dst", [(0, 2), ((0, 1), (2, 0)), (-1, 0)])
def test_movedim_compiles_as_a_permute(src, dst):
    def fn(x):
        return kiln.movedim(x, src, dst) * 2 + x.moveaxis(src, dst)

    x = kiln.randn(2, 3, 4)
    backend = CpuBackend(fallback=False)
    np.testing.assert_array_equal(kiln.compile(fn, backend=backend)(x).numpy(), fn(x).numpy())
    assert backend.reports[0].eager_nodes == 0
