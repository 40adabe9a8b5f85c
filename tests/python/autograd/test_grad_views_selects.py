"""Gradients of movedim/moveaxis, masked_select and broadcast_tensors against torch's (they
returned results that did not require grad: the coverage probes of test_coverage.py found the
first two, kiln.linalg.cross the third)."""

import numpy as np
import pytest
from test_linalg_grads import check

torch = pytest.importorskip("torch")
import kiln  # noqa: E402


@pytest.mark.parametrize("src,dst", [(0, 2), ((0, 1), (2, 0)), (-1, 0), ((0, 2), (1, 0))])
def test_movedim_gradient(src, dst):
    check(lambda x: torch.movedim(x, src, dst) * 1.0, lambda x: kiln.movedim(x, src, dst) * 1.0,
          (2, 3, 4))
    check(lambda x: x.moveaxis(src, dst), lambda x: x.moveaxis(src, dst), (2, 3, 4))


def test_movedim_result_records_history():
    x = kiln.randn(2, 3, 4, requires_grad=True)
    y = kiln.movedim(x, 0, 2)
    assert y.shape == (3, 4, 2) and y.grad_fn is not None
    s = kiln.tensor(2.0, requires_grad=True)  # a 0-d tensor: nothing moves
    (kiln.movedim(s, 0, 0) * 3).backward()
    assert s.grad.item() == 3.0


@pytest.mark.parametrize("mask_shape", [(3, 4), (4,), (1, 4)], ids=["same", "row", "broadcast"])
def test_masked_select_gradient(mask_shape):
    mask = np.random.default_rng(3).standard_normal(mask_shape) > 0

    def fn(lib):
        return lambda x: lib.masked_select(x, lib.tensor(mask)) * 2

    check(fn(torch), fn(kiln), (3, 4))
    check(lambda x: x.masked_select(torch.tensor(mask)), lambda x: x.masked_select(
        kiln.tensor(mask)), (3, 4))


def test_broadcast_tensors_gradient():
    def fn(lib):
        return lambda a, b, c: sum(t * (k + 1)
                                   for k, t in enumerate(lib.broadcast_tensors(a, b, c)))

    check(fn(torch), fn(kiln), (3, 1), (1, 4), (4,))
