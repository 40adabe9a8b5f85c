"""max_pool3d and avg_pool3d compile (they were eager nodes) as two 2-d pools: over rows and
columns, then over depth. Values and gradients equal torch's (averages within rounding of the
two-stage sum), with padding, strides, dilation, ceil_mode and count_include_pad."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as TF
from corpus_util import fresh_capture  # noqa: F401 - autouse: empty caches around every test

import kiln
import kiln.nn as nn
import kiln.nn.functional as F
from kiln._capture.backend_compiled import CpuBackend

CASES = [
    dict(kernel_size=2),
    dict(kernel_size=3, stride=1, padding=1),
    dict(kernel_size=(2, 3, 2), stride=(1, 2, 2), padding=(1, 1, 0)),
    dict(kernel_size=3, stride=2, padding=1, ceil_mode=True),
    dict(kernel_size=(3, 2, 2), stride=2, ceil_mode=True),
]
MAX_ONLY = [dict(kernel_size=2, dilation=2), dict(kernel_size=(2, 2, 3), dilation=(2, 1, 2),
                                                  padding=1)]  # fmt: skip


def compiled_and_torch(fn, tfn, x, grad):
    backend = CpuBackend(fallback=False)
    kx = kiln.tensor(x, requires_grad=grad)
    tx = torch.tensor(x, requires_grad=grad)
    got = kiln.compile(fn, backend=backend)(kx)
    want = tfn(tx)
    (report,) = backend.reports
    assert report.eager_nodes == 0 and len(report.parts) == 1
    if grad:
        assert report.backward_parts == 1
        weight = np.random.default_rng(1).normal(size=tuple(want.shape))
        (got * kiln.tensor(weight)).sum().backward()
        (want * torch.tensor(weight)).sum().backward()
        return got, want, kx.grad, tx.grad
    return got, want, None, None


@pytest.mark.parametrize("case", CASES + MAX_ONLY, ids=str)
@pytest.mark.parametrize("grad", [False, True])
def test_max_pool3d(case, grad):
    x = np.random.default_rng(0).normal(size=(2, 3, 7, 8, 9))
    got, want, gx, tx = compiled_and_torch(lambda t: F.max_pool3d(t, **case) * 2,
                                           lambda t: TF.max_pool3d(t, **case) * 2, x, grad)
    np.testing.assert_array_equal(got.detach().numpy(), want.detach().numpy())
    if grad:
        np.testing.assert_allclose(gx.numpy(), tx.numpy(), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("case", CASES, ids=str)
@pytest.mark.parametrize("count_include_pad", [True, False])
@pytest.mark.parametrize("grad", [False, True])
def test_avg_pool3d(case, count_include_pad, grad):
    x = np.random.default_rng(0).normal(size=(2, 3, 7, 8, 9))
    got, want, gx, tx = compiled_and_torch(
        lambda t: F.avg_pool3d(t, count_include_pad=count_include_pad, **case) + 1,
        lambda t: TF.avg_pool3d(t, count_include_pad=count_include_pad, **case) + 1, x, grad)
    np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-12)
    if grad:
        np.testing.assert_allclose(gx.numpy(), tx.numpy(), rtol=1e-12, atol=1e-14)


def test_max_pool3d_ties_take_eagers_first_maximum():
    x = np.zeros((1, 1, 4, 4, 4))  # every window ties: the gradient goes where torch puts it
    got, want, gx, tx = compiled_and_torch(lambda t: F.max_pool3d(t, 2),
                                           lambda t: TF.max_pool3d(t, 2), x, True)
    np.testing.assert_array_equal(gx.numpy(), tx.numpy())


def test_pool3d_modules_in_a_float32_net():
    net = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.MaxPool3d(2),
                        nn.AvgPool3d(2, ceil_mode=True))
    x = kiln.randn(2, 2, 8, 8, 8)
    backend = CpuBackend(fallback=False)
    with kiln.no_grad():
        got = kiln.compile(net, backend=backend)(x)
        np.testing.assert_allclose(got.numpy(), net(x).numpy(), rtol=1e-5, atol=1e-6)
    assert backend.reports[0].eager_nodes == 0


def test_divisor_override_stays_eager_with_the_reason():
    backend = CpuBackend()
    x = kiln.randn(1, 2, 4, 4, 4)
    got = kiln.compile(lambda t: F.avg_pool3d(t, 2, divisor_override=3), backend=backend)(x)
    np.testing.assert_allclose(got.numpy(), F.avg_pool3d(x, 2, divisor_override=3).numpy())
    (report,) = backend.reports
    assert any("divisor_override" in reason for _, _, reason in report.fallbacks)
