"""kiln.func against torch.func: functional_call, grad, grad_and_value, vjp and jvp."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.func as tfunc  # noqa: E402

import kiln  # noqa: E402
import kiln.func as kfunc  # noqa: E402


def pair(values):
    a = np.asarray(values, dtype=np.float64)
    return kiln.tensor(a), torch.tensor(a)


def close(k, t, tol=1e-10):
    np.testing.assert_allclose(k.detach().numpy(), t.detach().numpy(), rtol=tol, atol=tol)


def f(m, x, y):
    return (x.sin() * y + (x @ y.t()).tanh().sum(1, keepdim=True)).sum()


def test_grad_and_argnums():
    kx, tx = pair(np.random.default_rng(0).standard_normal((3, 4)))
    ky, ty = pair(np.random.default_rng(1).standard_normal((3, 4)))
    close(
        kfunc.grad(lambda a, b: f(kiln, a, b))(kx, ky),
        tfunc.grad(lambda a, b: f(torch, a, b))(tx, ty),
    )
    kg = kfunc.grad(lambda a, b: f(kiln, a, b), argnums=(0, 1))(kx, ky)
    tg = tfunc.grad(lambda a, b: f(torch, a, b), argnums=(0, 1))(tx, ty)
    for a, b in zip(kg, tg, strict=True):
        close(a, b)
    (g, v) = kfunc.grad_and_value(lambda a: (a * a).sum())(kx)
    close(g, 2 * tx)
    close(v, (tx * tx).sum())
    assert not kx.requires_grad  # the transform does not touch its inputs


def test_vjp_and_jvp():
    kx, tx = pair(np.random.default_rng(2).standard_normal((3, 4)))
    kv, tv = pair(np.random.default_rng(3).standard_normal((3, 4)))

    def g(m, x):
        return (x.exp() * x.sigmoid()).softmax(-1) @ x.t()

    kout, kfn = kfunc.vjp(lambda a: g(kiln, a), kx)
    tout, tfn = tfunc.vjp(lambda a: g(torch, a), tx)
    close(kout, tout)
    ct = np.random.default_rng(4).standard_normal((3, 3))
    close(kfn(kiln.tensor(ct))[0], tfn(torch.tensor(ct))[0])
    kval, kj = kfunc.jvp(lambda a: g(kiln, a), (kx,), (kv,))
    tval, tj = tfunc.jvp(lambda a: g(torch, a), (tx,), (tv,))
    close(kval, tval)
    close(kj, tj, tol=1e-9)


def test_jvp_through_a_write_into_a_view_equals_torch():
    x = np.random.default_rng(6).standard_normal((3, 4))

    def write_through_a_view(a):
        y = a * 1
        y[0] = a[1] * 2
        return y

    ours = kfunc.jvp(
        write_through_a_view, (kiln.tensor(x),), (kiln.ones(3, 4, dtype=kiln.float64),)
    )
    theirs = tfunc.jvp(
        write_through_a_view, (torch.tensor(x),), (torch.ones(3, 4, dtype=torch.float64),)
    )
    for a, b in zip(ours, theirs, strict=True):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-12)


def test_functional_call_matches_torch_and_restores_the_module():
    torch.manual_seed(0)
    tm = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3))
    km = kiln.nn.Sequential(kiln.nn.Linear(4, 3), kiln.nn.BatchNorm1d(3))
    km.load_state_dict({k: kiln.tensor(v.detach().numpy()) for k, v in tm.state_dict().items()})
    x = np.random.default_rng(5).standard_normal((6, 4))
    new = {"0.weight": np.full((3, 4), 0.5), "1.running_mean": np.ones(3)}
    tm.eval()
    km.eval()
    t_out = tfunc.functional_call(
        tm,
        {k: torch.tensor(v, dtype=torch.float32) for k, v in new.items()},
        (torch.tensor(x, dtype=torch.float32),),
    )
    k_out = kfunc.functional_call(
        km,
        {k: kiln.tensor(v, dtype=kiln.float32) for k, v in new.items()},
        (kiln.tensor(x, dtype=kiln.float32),),
    )
    close(k_out, t_out, tol=1e-6)
    close(km[0].weight, tm[0].weight)  # restored
    assert km[0].weight.requires_grad
    # Gradients flow to the tensors passed in, not to the module's parameters.
    w = kiln.tensor(new["0.weight"], dtype=kiln.float32).requires_grad_()
    kfunc.functional_call(
        km, {"0.weight": w}, (kiln.tensor(x, dtype=kiln.float32),)
    ).sum().backward()
    assert w.grad is not None and km[0].weight.grad is None
    with pytest.raises(RuntimeError, match="unexpected keys"):
        kfunc.functional_call(km, {"nope": w}, (kiln.ones(1, 4),))
