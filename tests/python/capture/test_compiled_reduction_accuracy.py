"""Compiled floating-point sums accumulate in blocks: a long float32 sum keeps the precision of
eager's (and NumPy's order of magnitude), where one running vector accumulator per lane lost
three digits over 10^7 elements. Every length near the block and vector boundaries sums all
its elements."""

from __future__ import annotations

import numpy as np
import pytest
from corpus_util import fresh_capture  # noqa: F401 - autouse: empty caches around every test

import kiln
from kiln._capture.backend_compiled import CpuBackend


def compiled(fn):
    return kiln.compile(fn, backend=CpuBackend(fallback=False))  # a decline raises


def test_a_long_float32_sum_keeps_its_precision():
    a = kiln.from_numpy(np.full(4 * 10**6, 0.1, np.float32))
    exact = 4 * 10**6 * float(np.float32(0.1))
    for fn in (lambda x: x.sum(), lambda x: x.mean() * x.shape[0], lambda x: (x * 1).sum(0)):
        got = compiled(fn)(a).item()
        assert abs(got - exact) / exact < 2e-5, got


@pytest.mark.parametrize("n", [1, 63, 64, 65, 16383, 16384, 16385, 65536 + 17, 200003])
def test_every_length_sums_every_element(n):
    x = np.random.default_rng(n).random(n).astype(np.float32)
    got = compiled(lambda x: x.sum())(kiln.from_numpy(x)).item()
    want = x.astype(np.float64).sum()
    assert abs(got - want) <= 2e-6 * n, (got, want)


def test_row_sums_of_a_wide_matrix():
    x = np.full((3, 3 * 10**5), 0.1, np.float32)
    got = compiled(lambda x: x.sum(1))(kiln.from_numpy(x)).numpy()
    np.testing.assert_allclose(got, x.astype(np.float64).sum(1), rtol=2e-5)
