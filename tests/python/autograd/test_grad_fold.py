"""Gradients of F.unfold (im2col) and F.fold (col2im), each the other's adjoint, against
PyTorch: kernel, dilation, padding and stride, batched and unbatched."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import kiln  # noqa: E402
import kiln.nn.functional as KF  # noqa: E402

G = np.random.default_rng(0)

UNFOLDS = [((2, 3, 6, 5), dict(kernel_size=2)),
           ((1, 2, 7, 7), dict(kernel_size=3, dilation=2, padding=1, stride=2)),
           ((2, 5, 4), dict(kernel_size=(2, 3), stride=(1, 2)))]  # fmt: skip


def _check(fn_ours, fn_theirs, a):
    x, t = kiln.from_numpy(a.copy()).requires_grad_(), torch.from_numpy(a.copy()).requires_grad_()
    ours, theirs = fn_ours(x), fn_theirs(t)
    np.testing.assert_allclose(ours.detach().numpy(), theirs.detach().numpy(), rtol=1e-6)
    w = G.standard_normal(tuple(theirs.shape)).astype(np.float32)
    (ours * kiln.from_numpy(w)).sum().backward()
    (theirs * torch.from_numpy(w)).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("shape,kw", UNFOLDS, ids=[str(c) for c in UNFOLDS])
def test_unfold_and_fold_gradients_match_torch(shape, kw):
    a = G.standard_normal(shape).astype(np.float32)
    _check(lambda x: KF.unfold(x, **kw), lambda t: torch.nn.functional.unfold(t, **kw), a)
    cols = torch.nn.functional.unfold(torch.from_numpy(a), **kw).numpy()
    size = shape[-2:]
    _check(
        lambda x: KF.fold(x, size, **kw), lambda t: torch.nn.functional.fold(t, size, **kw), cols
    )
