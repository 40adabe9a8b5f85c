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


def test_unbind_is_one_node_whose_backward_stacks_the_parts_gradients():
    """An RNN steps through `x.unbind(0)`: one UnbindBackward0 node for all parts (a select per
    part would add a zero-padded copy of x per part in the backward), gradients equal torch's
    with parts unused and used twice; a part written in place is refused as torch refuses it."""
    data = np.random.default_rng(0).standard_normal((6, 3, 4)).astype(np.float32)

    def run(lib):
        x = lib.tensor(data, requires_grad=True)
        parts = (x * 1.0).unbind(1)
        out = (parts[0] * 2).sum() + (parts[0] * parts[2]).sum()  # parts[1] unused
        out.backward()
        with pytest.raises(RuntimeError, match="Output 3 of Unbind is a view"):
            x.clone().unbind(0)[3].mul_(3.0)
        return parts, x.grad.numpy()

    kparts, kgrad = run(kiln)
    _, tgrad = run(torch)
    np.testing.assert_allclose(kgrad, tgrad, rtol=1e-6)
    assert {p.grad_fn.name() for p in kparts} == {"UnbindBackward0"}
    assert len({id(p.grad_fn) for p in kparts}) == 1
