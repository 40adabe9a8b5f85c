"""Average pooling with ceil_mode differentiates (it raised NotImplementedError): ResNet-D's
AvgPool2d(2, 2, ceil_mode=True, count_include_pad=False) shortcut trains, eagerly and compiled.
Gradients equal torch's for 1-d, 2-d and 3-d pools, padded or not, with and without the padding
counted, and with a divisor override."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import kiln
import kiln.nn.functional as KF
from kiln._capture.backend_compiled import CpuBackend

CASES = [
    dict(kernel_size=2, stride=2, ceil_mode=True, count_include_pad=False),
    dict(kernel_size=3, stride=2, padding=1, ceil_mode=True),
    dict(kernel_size=3, stride=2, padding=1, ceil_mode=True, count_include_pad=False),
]
SHAPES = {1: (2, 3, 10), 2: (2, 3, 7, 9), 3: (1, 2, 5, 6, 7)}


@pytest.mark.parametrize("nd", [1, 2, 3])
@pytest.mark.parametrize("case", range(len(CASES) + 1))
def test_ceil_mode_gradients_match_torch(nd, case):
    kw = CASES[case] if case < len(CASES) else dict(kernel_size=2, stride=2, ceil_mode=True,
                                                    divisor_override=3)  # fmt: skip
    if nd == 1 and "divisor_override" in kw:
        kw = dict(kernel_size=2, ceil_mode=True)  # avg_pool1d has no divisor_override
    rng = np.random.default_rng(nd * 10 + case)
    x = rng.normal(size=SHAPES[nd])
    ours, theirs = kiln.from_numpy(x).requires_grad_(), torch.from_numpy(x).requires_grad_()
    name = f"avg_pool{nd}d"
    out, ref = getattr(KF, name)(ours, **kw), getattr(torch.nn.functional, name)(theirs, **kw)
    weights = rng.normal(size=tuple(ref.shape))
    (out * kiln.from_numpy(weights)).sum().backward()
    (ref * torch.from_numpy(weights)).sum().backward()
    np.testing.assert_allclose(out.detach().numpy(), ref.detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(ours.grad.numpy(), theirs.grad.numpy(), rtol=1e-12, atol=1e-14)


def test_resnet_d_shortcut_trains_compiled():
    nn = kiln.nn
    kiln.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.AvgPool2d(2, 2, ceil_mode=True,
                                                           count_include_pad=False),
                          nn.Flatten(), nn.Linear(4 * 3 * 4, 2))  # fmt: skip
    x = kiln.randn(2, 3, 8, 10)
    backend = CpuBackend(fallback=False)
    kiln.compile(model, backend=backend)(x).sum().backward()
    compiled = [p.grad.clone() for p in model.parameters()]
    for p in model.parameters():
        p.grad = None
    model(x).sum().backward()
    for got, p in zip(compiled, model.parameters(), strict=True):
        np.testing.assert_allclose(got.numpy(), p.grad.numpy(), rtol=1e-5, atol=1e-6)
    assert backend.reports[0].backward_parts == 1
