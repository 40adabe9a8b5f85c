"""Compiled programs whose intermediates have no element (a mixture-of-experts expert that gets
no token: linear of x[idx] with idx empty): externs and loops on them return eager's empty or
zero results instead of reading a storage that was never allocated."""

from __future__ import annotations

import numpy as np
import pytest
from corpus_util import fresh_capture  # noqa: F401 - autouse: empty caches around every test

import kiln
import kiln.nn.functional as F
from kiln._capture.backend_compiled import CpuBackend

W = kiln.randn(8, 4)
K = kiln.randn(5, 3, 3, 3)

CASES = {
    "linear": (lambda x: F.linear(x * 2, W), (0, 4)),
    "matmul_inner_empty": (lambda x: (x * 2) @ kiln.randn(0, 6), (3, 0)),
    "softmax": (lambda x: (x * 2).softmax(-1), (0, 4)),
    "sum_over_nothing": (lambda x: (x * 2).sum(0), (0, 4)),
    "conv2d": (lambda x: F.conv2d(x * 2, K, padding=1), (0, 3, 6, 6)),
    "moe_expert_without_tokens": (
        lambda x: F.linear(x[kiln.where(x[:, 0] > 1e9)[0]], W).relu() * 3, (3, 4)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_empty_intermediates(name):
    fn, shape = CASES[name]
    x = kiln.randn(*shape)
    kiln.manual_seed(0)
    want = fn(x)
    kiln.manual_seed(0)
    backend = CpuBackend()
    got = kiln.compile(fn, backend=backend)(x)
    assert got.shape == want.shape
    assert sum(len(r.parts) for r in backend.reports) >= 1  # the empty value is compiled code's
    np.testing.assert_allclose(got.numpy(), want.numpy())
