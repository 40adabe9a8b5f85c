"""copy.deepcopy and pickle of tensors and of modules holding buffers (EMA models, target
networks and multiprocessing all copy models this way), and integer casts that carry no
gradient, as in torch."""

from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest

import kiln


@pytest.mark.parametrize("dtype", [kiln.float32, kiln.float64, kiln.bfloat16, kiln.float16,
                                   kiln.int64, kiln.int32, kiln.uint8, kiln.bool])  # fmt: skip
def test_pickle_round_trips_values_dtype_and_shape(dtype):
    t = (kiln.randn(3, 4) * 5).to(dtype).t()  # a non-contiguous view
    u = pickle.loads(pickle.dumps(t))
    assert u.dtype == dtype and tuple(u.shape) == (4, 3)
    np.testing.assert_array_equal(u.to(kiln.float64).numpy(), t.to(kiln.float64).numpy())
    zero_d = pickle.loads(pickle.dumps(kiln.tensor(2.5, dtype=kiln.float64)))
    assert zero_d.dim() == 0 and zero_d.item() == 2.5


def test_pickle_keeps_requires_grad_as_a_leaf():
    x = kiln.randn(3, requires_grad=True)
    for t in (x, x * 2):
        u = pickle.loads(pickle.dumps(t))
        assert u.requires_grad and u.is_leaf


def test_deepcopy_of_a_tensor():
    x = kiln.randn(3, requires_grad=True)
    x.grad = kiln.ones(3)
    y = copy.deepcopy(x)
    assert y is not x and y.requires_grad and y.is_leaf and y.grad.tolist() == [1.0] * 3
    y.data.add_(1)
    assert not (y == x).all().item()  # its own storage
    shared = [x, x]
    a, b = copy.deepcopy(shared)
    assert a is b  # the memo keeps identity
    with pytest.raises(RuntimeError, match="graph leaves"):
        copy.deepcopy(x * 2)


def test_deepcopy_and_pickle_of_a_module_with_buffers():
    m = kiln.nn.Sequential(kiln.nn.Linear(3, 4), kiln.nn.BatchNorm1d(4))
    m.train()
    m(kiln.randn(5, 3))  # running statistics move off their initial values
    for twin in (copy.deepcopy(m), pickle.loads(pickle.dumps(m))):
        assert type(twin[0].weight).__name__ == "Parameter" and twin[0].weight.requires_grad
        assert twin[0].weight is not m[0].weight
        for (name, a), (_, b) in zip(m.state_dict().items(), twin.state_dict().items(),
                                     strict=True):  # fmt: skip
            np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=name)
        twin.eval()
        x = kiln.randn(2, 3)
        m.eval()
        np.testing.assert_allclose(twin(x).detach().numpy(), m(x).detach().numpy())
        m.train()


@pytest.mark.parametrize("cast", [lambda t: t.int(), lambda t: t.long(), lambda t: t.bool(),
                                  lambda t: t.to(kiln.uint8), lambda t: t.round().long()])
def test_integer_casts_carry_no_gradient(cast):
    x = kiln.randn(4, requires_grad=True)
    assert not cast(x).requires_grad
    assert x.half().requires_grad and x.double().requires_grad
