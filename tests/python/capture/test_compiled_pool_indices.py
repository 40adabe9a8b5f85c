"""``max_pool2d(return_indices=True)`` compiled: the indices eager's pool gives (the first
maximum of a window; with a NaN in it, the last NaN), with padding, stride, dilation and
unbatched inputs; and a SegNet encoder-decoder step (pool with indices, ``max_unpool2d``)
compiled in one part, trained with eager's gradients."""

from __future__ import annotations

import numpy as np
import pytest
from corpus_util import fresh_capture  # noqa: F401 - autouse: empty caches around every test

import kiln
import kiln.nn as nn
import kiln.nn.functional as F
from kiln._capture.backend_compiled import CpuBackend


def compiled_once(fn, *args):
    backend = CpuBackend(fallback=False)
    with kiln.no_grad():
        got = kiln.compile(fn, backend=backend)(*args)
    (report,) = backend.reports
    assert report.eager_nodes == 0 and len(report.parts) == 1, report.eager
    return got


@pytest.mark.parametrize("shape,kw", [
    ((2, 3, 8, 8), {"kernel_size": 2}),
    ((2, 3, 9, 7), {"kernel_size": 3, "stride": 2, "padding": 1}),
    ((2, 3, 9, 11), {"kernel_size": (3, 2), "stride": (1, 2), "dilation": (2, 1)}),
    ((3, 6, 6), {"kernel_size": 2}),  # unbatched
])  # fmt: skip
def test_pool_indices_are_eagers(shape, kw):
    def fn(x):
        return F.max_pool2d(x.relu() * 2, return_indices=True, **kw)

    x = kiln.randn(*shape)
    got, want = compiled_once(fn, x), fn(x)
    assert kiln.equal(got[0], want[0]) and kiln.equal(got[1], want[1])
    assert got[1].dtype == kiln.int64


def test_ties_take_the_first_maximum_and_nan_the_last():
    x = kiln.randn(1, 2, 4, 4)
    x[0, 0, 0, 1] = x[0, 0, 1, 0] = float("nan")  # two NaNs in one window
    x[0, 1, :2, :2] = 3.0  # a four-way tie
    fn = lambda t: F.max_pool2d_with_indices(t, 2)  # noqa: E731
    got, want = compiled_once(fn, x), fn(x)
    assert kiln.equal(got[1], want[1])
    assert int(got[1][0, 0, 0, 0]) == 4 and int(got[1][0, 1, 0, 0]) == 0


class SegNetBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = nn.Conv2d(3, 8, 3, padding=1)
        self.pool = nn.MaxPool2d(2, return_indices=True)
        self.unpool = nn.MaxUnpool2d(2)
        self.dec = nn.Conv2d(8, 3, 3, padding=1)

    def forward(self, x):
        y, idx = self.pool(self.enc(x).relu())
        return self.dec(self.unpool(y, idx, output_size=x.shape[-2:]))


def test_segnet_block_trains_compiled_with_eagers_gradients():
    kiln.manual_seed(0)
    model = SegNetBlock()
    twin = SegNetBlock()
    twin.load_state_dict(model.state_dict())
    backend = CpuBackend(fallback=False)
    step = kiln.compile(model, backend=backend)
    x = kiln.randn(2, 3, 8, 10)
    loss = step(x).square().mean()
    loss.backward()
    want = twin(x).square().mean()
    want.backward()
    np.testing.assert_allclose(loss.item(), want.item(), rtol=1e-5)
    for p, q in zip(model.parameters(), twin.parameters(), strict=True):
        np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-4, atol=1e-6)
    assert all(r.eager_nodes == 0 for r in backend.reports), [r.eager for r in backend.reports]
