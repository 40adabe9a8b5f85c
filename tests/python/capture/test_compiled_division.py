"""Compiled division is correctly rounded, as eager's, torch's and NumPy's: a divisor shared by
a row (a broadcast sum, a Python number) is not turned into a multiply by its reciprocal, which
moved floor(49 * k / 49) to k - 1. Softmax still scales by the row's reciprocal, as eager's."""

from __future__ import annotations

import numpy as np
import torch
from corpus_util import fresh_capture  # noqa: F401 - autouse: empty caches around every test

import kiln
from kiln._capture.backend_compiled import CpuBackend


def compiled(fn):
    """fn compiled strictly: a part that does not compile raises instead of running eagerly."""
    return kiln.compile(fn, backend=CpuBackend(fallback=False))


def test_division_by_a_number_is_exact_where_it_should_be():
    x = kiln.from_numpy(49.0 * np.arange(1, 65))
    got = compiled(lambda x: (x / 49).floor())(x)
    np.testing.assert_array_equal(got.numpy(), np.arange(1, 65))


def test_division_is_bitwise_eagers():
    g = np.random.default_rng(0)
    for dtype in (np.float32, np.float64):
        e = kiln.from_numpy(g.random((64, 96)).astype(dtype))
        row = e[:, :1] * 1.0  # a divisor broadcast along each row
        for fn in (lambda e, r: e / 100.0, lambda e, r: e / r, lambda e, r: e / e[0],
                   lambda e, r: 3.0 / (e + 1)):
            got, want = compiled(fn)(e, row), fn(e, row)
            np.testing.assert_array_equal(got.numpy(), want.numpy())
            np.testing.assert_array_equal(want.numpy(), fn(e.numpy(), row.numpy()))  # NumPy
        # torch too, where it divides (its 3 / t is 3 * reciprocal(t))
        theirs = torch.from_numpy(e.numpy()) / torch.from_numpy(row.numpy())
        np.testing.assert_array_equal(compiled(lambda e, r: e / r)(e, row).numpy(),
                                      theirs.numpy())


def test_softmax_matches_eager():
    x = kiln.randn(32, 100)
    np.testing.assert_allclose(compiled(lambda x: x.softmax(-1))(x).numpy(),
                               x.softmax(-1).numpy(), rtol=1e-6, atol=1e-8)
