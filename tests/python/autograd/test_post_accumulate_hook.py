"""Tensor.register_post_accumulate_grad_hook: called with the leaf after its .grad has
accumulated, once per accumulation, as torch's; removable; refused on non-leaves."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import kiln  # noqa: E402


def _run(m):
    w = m.ones(3, requires_grad=True)
    seen = []
    handle = w.register_post_accumulate_grad_hook(lambda p: seen.append(p.grad.clone()))
    (w * 2).sum().backward()
    (w * w).sum().backward()  # accumulates onto the first gradient
    handle.remove()
    (w * 3).sum().backward()  # not seen
    return [s.numpy() for s in seen], w.grad.numpy()


def test_hook_sees_each_accumulated_gradient_as_torch():
    ours, theirs = _run(kiln), _run(torch)
    assert len(ours) == len(theirs) == 2
    for a, b in zip(ours[0] + [ours[1]], theirs[0] + [theirs[1]], strict=True):
        np.testing.assert_array_equal(a, b)


def test_hook_is_refused_where_torch_refuses():
    x = kiln.ones(2, requires_grad=True)
    with pytest.raises(RuntimeError, match="non-leaf"):
        (x * 2).register_post_accumulate_grad_hook(lambda p: None)
    with pytest.raises(RuntimeError, match="doesn't require gradient"):
        kiln.ones(2).register_post_accumulate_grad_hook(lambda p: None)


def _order(m):
    x = m.ones(3)
    w1 = m.ones(3, requires_grad=True)
    w2 = m.ones(3, requires_grad=True)
    early = (w2 * 0).sum()  # w2's accumulator is made before the layer below records
    h = x * w1
    events = []
    h.register_hook(lambda g: events.append("layer below"))
    w2.register_post_accumulate_grad_hook(lambda p: events.append("w2 accumulated"))
    (h * w2).sum().backward()
    del early
    return events


def test_a_ready_leaf_accumulates_before_the_rest_of_the_backward_as_torch():
    # DistributedDataParallel starts a bucket's all-reduce in this hook: it must run as soon
    # as the gradient exists, not after the earlier layers' backward
    assert _order(kiln) == _order(torch) == ["w2 accumulated", "layer below"]
