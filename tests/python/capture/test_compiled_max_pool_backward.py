"""max_pool2d's input gradient in compiled backwards: windows that tile the input are loop code
(the picked position per window, then the gradient where it was picked), equal bit for bit to
eager's and torch's, including ties (the first maximum), NaNs (the last NaN) and windows of
-inf; overlapping windows keep eager's kernel."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from corpus_util import fresh_capture  # noqa: F401 - autouse: empty caches around every test

import kiln
import kiln.nn.functional as F
from kiln._capture.backend_compiled import CpuBackend


@pytest.mark.parametrize("kernel,stride", [(2, None), (3, None), ((2, 3), None), (3, 2)])
def test_gradient_equals_eager_and_torch(kernel, stride):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, 3, 12, 12)).astype(np.float32)
    x[0, 0, 0, :4] = x[0, 0, 0, 0]  # ties
    x[1, 1, :3, :3] = np.nan  # NaNs
    x[1, 2, 0, 1] = np.nan
    x[0, 1, :3, :3] = -np.inf

    def loss(t):
        return F.max_pool2d(t, kernel, stride).mul(1.5).sum()

    ours = kiln.from_numpy(x).requires_grad_()
    backend = CpuBackend(fallback=False)
    kiln.compile(loss, backend=backend)(ours).backward()
    ref = kiln.from_numpy(x).requires_grad_()
    loss(ref).backward()
    theirs = torch.from_numpy(x).requires_grad_()
    torch.nn.functional.max_pool2d(theirs, kernel, stride).mul(1.5).sum().backward()
    np.testing.assert_array_equal(ours.grad.numpy(), ref.grad.numpy())
    np.testing.assert_array_equal(ref.grad.numpy(), theirs.grad.numpy())
    assert backend.reports[0].backward_parts == 1
