"""F.max_unpool1d/2d and nn.MaxUnpool1d/2d against torch: values put back at max_pool's indices
(default and explicit output sizes, padding and stride, unbatched input), gradients, and torch's
errors for mismatched indices and output sizes."""

import numpy as np
import pytest
import torch

import kiln
import kiln.nn as nn
import kiln.nn.functional as F


def as_torch(t):
    return torch.tensor(t.numpy())


@pytest.mark.parametrize("shape,kernel,kw", [
    ((2, 3, 8, 8), 2, {}),
    ((2, 3, 9, 7), 3, {"stride": 2, "padding": 1}),
    ((3, 7, 7), 3, {"stride": 2, "padding": 1}),  # unbatched
    ((1, 2, 8, 9), 2, {"output_size": (8, 9)}),  # the odd column back
])  # fmt: skip
def test_max_unpool2d_equals_torch(shape, kernel, kw):
    x = kiln.randn(*shape)
    pool = {k: v for k, v in kw.items() if k != "output_size"}
    y, i = F.max_pool2d(x, kernel, return_indices=True, **pool)
    ty, ti = torch.nn.functional.max_pool2d(as_torch(x), kernel, return_indices=True, **pool)
    assert np.array_equal(i.numpy(), ti.numpy())
    got = F.max_unpool2d(y, i, kernel, **kw)
    want = torch.nn.functional.max_unpool2d(ty, ti, kernel, **kw)
    assert tuple(got.shape) == tuple(want.shape)
    np.testing.assert_array_equal(got.numpy(), want.numpy())
    module = nn.MaxUnpool2d(kernel, kw.get("stride"), kw.get("padding", 0))
    np.testing.assert_array_equal(module(y, i, kw.get("output_size")).numpy(), want.numpy())


def test_max_unpool1d_and_its_gradient_equal_torch():
    x = kiln.randn(2, 3, 10, requires_grad=True)
    tx = as_torch(x.detach()).requires_grad_()
    y, i = F.max_pool1d(x, 2, return_indices=True)
    ty, ti = torch.nn.functional.max_pool1d(tx, 2, return_indices=True)
    u = nn.MaxUnpool1d(2)(y * 3, i)
    tu = torch.nn.MaxUnpool1d(2)(ty * 3, ti)
    np.testing.assert_array_equal(u.detach().numpy(), tu.detach().numpy())
    g = kiln.randn(*u.shape)
    u.backward(g)
    tu.backward(as_torch(g))
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-6)


def test_errors_name_the_problem_as_torch_does():
    y, i = F.max_pool2d(kiln.randn(1, 1, 6, 6), 3, stride=2, return_indices=True)
    with pytest.raises(ValueError, match="Expected shape of indices to be same"):
        F.max_unpool2d(y, i[..., :1], 3, stride=2)
    with pytest.raises(ValueError, match=r"invalid output_size \[20, 20\] \(dim 0 must be "
                                         r"between 3 and 7\)"):  # fmt: skip
        F.max_unpool2d(y, i, 3, stride=2, output_size=(20, 20))
