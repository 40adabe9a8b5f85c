"""Gradients of F.interpolate against PyTorch: nearest, nearest-exact and the linear modes, by
size and by scale factor, align_corners, 1-d to 3-d, float32 and float64."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import kiln  # noqa: E402
import kiln.nn.functional as KF  # noqa: E402

G = np.random.default_rng(0)

CASES = [
    ((2, 3, 4, 5), dict(scale_factor=2)),
    ((2, 3, 4, 5), dict(size=(7, 9))),
    ((2, 3, 4, 5), dict(size=(3, 2))),  # downsampling: several outputs skip inputs
    ((2, 3, 4, 5), dict(size=(7, 9), mode="nearest-exact")),
    ((2, 3, 4, 5), dict(size=(7, 9), mode="bilinear")),
    ((2, 3, 4, 5), dict(scale_factor=1.5, mode="bilinear", align_corners=True)),
    ((2, 3, 6, 5), dict(size=(3, 4), mode="bilinear")),
    ((2, 3, 7), dict(scale_factor=2.5, mode="linear")),
    ((2, 3, 7), dict(size=11)),
    ((1, 2, 3, 4, 5), dict(scale_factor=2, mode="trilinear")),
    ((1, 2, 3, 4, 5), dict(size=(4, 5, 7))),
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape,kw", CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES])
def test_interpolate_gradients_match_torch(shape, kw, dtype):
    a = G.standard_normal(shape).astype(dtype)
    x, t = kiln.from_numpy(a.copy()).requires_grad_(), torch.from_numpy(a.copy()).requires_grad_()
    ours, theirs = KF.interpolate(x, **kw), torch.nn.functional.interpolate(t, **kw)
    w = G.standard_normal(tuple(theirs.shape)).astype(dtype)
    (ours * kiln.from_numpy(w)).sum().backward()
    (theirs * torch.from_numpy(w)).sum().backward()
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), rtol=tol, atol=tol)


def test_upsample_module_trains():
    m = kiln.nn.Sequential(kiln.nn.Conv2d(2, 2, 3, padding=1), kiln.nn.Upsample(scale_factor=2))
    m(kiln.randn(1, 2, 4, 4)).sum().backward()
    assert all(p.grad is not None for p in m.parameters())
