"""addcmul / addcdiv (and their in-place forms): one kernel over the three broadcast operands,
against torch for values, dtypes, gradients and errors, and compiled as their multiply and add."""

import numpy as np
import pytest
import torch

import kiln
from kiln._capture.backend_compiled import CpuBackend

RNG = np.random.default_rng(0)


def arrays(shapes, dtype=np.float32, positive=False):
    out = []
    for s in shapes:
        a = RNG.standard_normal(s)
        out.append((np.abs(a) + 0.5 if positive else a).astype(dtype))
    return out


@pytest.mark.parametrize("op", ["addcmul", "addcdiv"])
@pytest.mark.parametrize("shapes", [((5, 6), (5, 6), (5, 6)), ((3, 4), (4,), (3, 1)),
                                    ((1,), (2, 3), (3,)), ((), (4,), ())])  # fmt: skip
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
def test_values_equal_torch(op, shapes, dtype):
    a, b, c = arrays(shapes, np.float32)
    c = np.abs(c) + 0.5
    t = [torch.tensor(x).to(getattr(torch, dtype)) for x in (a, b, c)]
    k = [kiln.tensor(x).to(getattr(kiln, dtype)) for x in (a, b, c)]
    want = getattr(torch, op)(*t, value=0.37)
    got = getattr(kiln, op)(*k, value=0.37)
    assert str(got.dtype).split(".")[-1] == dtype and tuple(got.shape) == tuple(want.shape)
    exact = dtype in ("float32", "float64")
    np.testing.assert_allclose(got.float().numpy(), want.float().numpy(), rtol=0 if exact else 1e-2,
                               atol=0 if exact else 1e-2)  # fmt: skip


def test_promotion_and_integers_follow_torch():
    x, d = np.ones(3, np.float32), np.arange(3.0)
    i = np.arange(1, 4)
    got = kiln.addcmul(kiln.tensor(x), kiln.tensor(d), kiln.tensor(x))
    assert got.dtype == kiln.float64
    # an integer result casts the value to the integer type (0.5 -> 0), as torch does
    for value in (0.5, 3):
        want = torch.addcmul(torch.tensor(i), torch.tensor(i), torch.tensor(i), value=value)
        got = kiln.addcmul(kiln.tensor(i), kiln.tensor(i), kiln.tensor(i), value=value)
        assert got.dtype == kiln.int64
        np.testing.assert_array_equal(got.numpy(), want.numpy())
    with pytest.raises(RuntimeError, match="Integer division with addcdiv is no longer supported"):
        kiln.addcdiv(kiln.tensor(i), kiln.tensor(i), kiln.tensor(i))
    with pytest.raises(RuntimeError, match="Integer division with addcdiv is no longer supported"):
        kiln.addcdiv(kiln.tensor(x), kiln.tensor(i), kiln.tensor(i))  # a float self is no help
    with pytest.raises(RuntimeError, match="cannot be broadcast"):
        kiln.addcmul(kiln.ones(3), kiln.ones(2), kiln.ones(3))


@pytest.mark.parametrize("op", ["addcmul_", "addcdiv_"])
def test_in_place_writes_self(op):
    a, b, c = arrays([(4, 5), (5,), (4, 5)], positive=True)
    k = kiln.tensor(a)
    version = k._version
    assert getattr(k, op)(kiln.tensor(b), kiln.tensor(c), value=-0.25) is k
    assert k._version == version + 1
    want = getattr(torch.tensor(a), op)(torch.tensor(b), torch.tensor(c), value=-0.25)
    np.testing.assert_array_equal(k.numpy(), want.numpy())
    # a non-contiguous self (a transposed view) is written through the view
    base = kiln.tensor(a.T.copy())
    view = base.t()
    getattr(view, op)(kiln.tensor(b), kiln.tensor(c), value=-0.25)
    np.testing.assert_array_equal(base.numpy().T, want.numpy())
    # a result self cannot hold is torch's error
    with pytest.raises(RuntimeError, match="doesn't match the broadcast shape"):
        getattr(kiln.ones(5), op)(kiln.ones(4, 5), kiln.ones(5))
    with pytest.raises(RuntimeError, match="can't be cast"):
        getattr(kiln.ones(5, dtype=kiln.int64), op)(kiln.ones(5), kiln.ones(5))


@pytest.mark.parametrize("op", ["addcmul", "addcdiv"])
def test_gradients_equal_torch_and_gradcheck(op):
    a, b, c = arrays([(3, 4), (4,), (3, 1)], np.float64, positive=True)
    ks = [kiln.tensor(x, requires_grad=True) for x in (a, b, c)]
    ts = [torch.tensor(x, requires_grad=True) for x in (a, b, c)]
    out_k = getattr(kiln, op)(*ks, value=1.5)
    out_t = getattr(torch, op)(*ts, value=1.5)
    assert out_k.grad_fn.name() == out_t.grad_fn.name()
    g = RNG.standard_normal((3, 4))
    out_k.backward(kiln.tensor(g))
    out_t.backward(torch.tensor(g))
    for k, t in zip(ks, ts, strict=True):
        np.testing.assert_allclose(k.grad.numpy(), t.grad.numpy(), rtol=1e-12)
    assert kiln.autograd.gradcheck(lambda *x: getattr(kiln, op)(*x, value=1.5), ks)
    assert kiln.autograd.gradgradcheck(lambda *x: getattr(kiln, op)(*x, value=1.5), ks)


def test_compiled_in_one_part_with_no_eager_nodes():
    def step(p, g, v):
        v.mul_(0.9).addcmul_(g, g, value=0.1)
        return p.addcdiv(g, v.sqrt().add(1e-8), value=-0.01) + kiln.addcmul(p, g, v)

    args = arrays([(8, 16), (8, 16), (8, 16)], positive=True)
    eager_v = kiln.tensor(args[2])
    want = step(kiln.tensor(args[0]), kiln.tensor(args[1]), eager_v)
    compiled_v = kiln.tensor(args[2])
    report = kiln.explain(step)(kiln.tensor(args[0]), kiln.tensor(args[1]), compiled_v)
    assert report.graph_count == 1 and report.graph_break_count == 0
    backend = CpuBackend(fallback=False)  # a part the compiler declines raises
    got = kiln.compile(step, backend=backend)(
        kiln.tensor(args[0]), kiln.tensor(args[1]), kiln.tensor(args[2])
    )
    (part,) = backend.reports
    assert part.eager_nodes == 0 and part.fallbacks == [] and len(part.parts) == 1
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(compiled_v.numpy(), eager_v.numpy(), rtol=1e-6)
