"""Gradients of the reducing selections against PyTorch: kthvalue, median / nanmedian along a
dim and mode, with and without keepdim; the gradient goes to the selected element."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import kiln  # noqa: E402

G = np.random.default_rng(0)

CASES = {
    "kthvalue": lambda m, x: m.kthvalue(x, 2, 1).values,
    "kthvalue_keepdim": lambda m, x: x.kthvalue(3, dim=-1, keepdim=True).values,
    "median": lambda m, x: x.median(dim=0).values,
    "median_keepdim": lambda m, x: m.median(x, 1, keepdim=True).values,
    "nanmedian": lambda m, x: x.nanmedian(-1).values,
    "mode": lambda m, x: m.mode(x.round(), 1).values,
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_selection_gradients_match_torch(name):
    a = (G.standard_normal((4, 5)) * 3).astype(np.float32)
    fn = CASES[name]
    x, t = kiln.from_numpy(a.copy()).requires_grad_(), torch.from_numpy(a.copy()).requires_grad_()
    ours, theirs = fn(kiln, x), fn(torch, t)
    np.testing.assert_allclose(ours.detach().numpy(), theirs.detach().numpy())
    w = G.standard_normal(tuple(theirs.shape)).astype(np.float32)
    (ours * kiln.from_numpy(w)).sum().backward()
    (theirs * torch.from_numpy(w)).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("name", ["median", "nanmedian"])
def test_whole_tensor_median_gradient_goes_to_the_selected_element(name):
    a = (G.standard_normal((3, 4)) * 3).astype(np.float32)
    if name == "nanmedian":
        a[1, 2] = np.nan
    x, t = kiln.from_numpy(a.copy()).requires_grad_(), torch.from_numpy(a.copy()).requires_grad_()
    ours, theirs = getattr(x, name)(), getattr(t, name)()
    np.testing.assert_allclose(ours.item(), theirs.item())
    (ours * 3).backward()
    (theirs * 3).backward()
    np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy())
