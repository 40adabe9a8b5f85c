"""Shared helpers for the kiln.optim tests: the same parameters and gradients in torch and kiln,
and comparisons of parameters and optimizer state."""

import numpy as np
import torch

import kiln
import kiln.nn as knn

SHAPES = [(5,), (3, 4), (2, 3, 7)]

# (rtol, atol) per dtype for values after several optimizer steps. Most float32 runs are
# bit-identical to torch's; the exceptions come from torch's float32 sqrt (MKL's vectorized
# one, off by an ulp in about 1% of elements, where kiln's is correctly rounded) and, for
# float64, from torch's fused multiply-add in addcmul (an ulp per step).
TOL = {"float32": (1e-6, 1e-7), "float64": (1e-13, 1e-15)}


class _GradParameter(knn.Parameter):
    """A Parameter whose ``.grad`` is a plain attribute; used only while kiln.Tensor.grad is a
    read-only property (before the autograd engine lands). The optimizers only read
    ``p.grad`` and assign None to it, which works the same on either."""

    grad = None


def _grad_is_settable() -> bool:
    p = knn.Parameter(kiln.zeros(1))
    try:
        p.grad = kiln.ones(1)
    except AttributeError:
        return False
    ok = p.grad is not None
    p.grad = None
    return ok


PARAM_CLS = knn.Parameter if _grad_is_settable() else _GradParameter


def kiln_param(arr):
    """A kiln Parameter holding a copy of ``arr``."""
    return PARAM_CLS(kiln.from_numpy(np.array(arr, copy=True)))


def torch_param(arr):
    """A torch Parameter holding a copy of ``arr``."""
    return torch.nn.Parameter(torch.from_numpy(np.array(arr, copy=True)))


def make_params(dtype, seed=0, shapes=SHAPES):
    """Matching lists of torch and kiln parameters with the same random values."""
    rng = np.random.default_rng(seed)
    arrays = [rng.standard_normal(s).astype(dtype) for s in shapes]
    return [torch_param(a) for a in arrays], [kiln_param(a) for a in arrays]


def set_grads(tparams, kparams, rng, skip=()):
    """Gives both parameter lists the same random gradient; indices in ``skip`` get None."""
    for i, (tp, kp) in enumerate(zip(tparams, kparams, strict=True)):
        if i in skip:
            tp.grad, kp.grad = None, None
            continue
        g = rng.standard_normal(tuple(tp.shape)).astype(tp.detach().numpy().dtype)
        tp.grad = torch.from_numpy(g.copy())
        kp.grad = kiln.from_numpy(g.copy())


def run_steps(topt, kopt, tparams, kparams, rng, steps=10, skip=()):
    """Steps both optimizers on the same fresh gradients, comparing parameters each step."""
    for _ in range(steps):
        set_grads(tparams, kparams, rng, skip)
        topt.step()
        kopt.step()
        assert_params_close(kparams, tparams)


def to_numpy(t):
    """A NumPy copy of a torch or kiln tensor (detached)."""
    return np.array(t.detach().numpy(), copy=True)


def assert_tensors_close(k, t, dtype=None):
    """kiln tensor ``k`` equals torch tensor ``t`` in dtype, shape and values (per-dtype tol)."""
    assert isinstance(k, kiln.Tensor), type(k)
    tname = str(t.dtype).replace("torch.", "")
    assert k.dtype.name == tname, (k.dtype.name, tname)
    assert tuple(k.shape) == tuple(t.shape)
    rtol, atol = TOL.get(dtype or tname, (0, 0))
    np.testing.assert_allclose(to_numpy(k), to_numpy(t), rtol=rtol, atol=atol)


def assert_params_close(kparams, tparams):
    for kp, tp in zip(kparams, tparams, strict=True):
        assert_tensors_close(kp, tp)


def assert_state_dicts_match(ksd, tsd, dtype=None):
    """Same layout (keys, param indices, hyperparameters) and the same state values."""
    assert sorted(ksd) == sorted(tsd) == ["param_groups", "state"]
    assert len(ksd["param_groups"]) == len(tsd["param_groups"])
    for kg, tg in zip(ksd["param_groups"], tsd["param_groups"], strict=True):
        assert sorted(kg) == sorted(tg)
        for key, tv in tg.items():
            kv = kg[key]
            if isinstance(tv, torch.Tensor):
                assert_tensors_close(kv, tv, dtype)
            else:
                assert kv == tv, (key, kv, tv)
    assert sorted(ksd["state"]) == sorted(tsd["state"])
    for idx, tstate in tsd["state"].items():
        kstate = ksd["state"][idx]
        assert sorted(kstate) == sorted(tstate), idx
        for key, tv in tstate.items():
            kv = kstate[key]
            if isinstance(tv, torch.Tensor):
                # `step` is compared exactly: it counts, in the same dtype as torch's.
                assert_tensors_close(kv, tv, None if key == "step" else dtype)
            else:
                assert kv == tv


def state_dict_to_kiln(sd):
    """A torch optimizer state dict with every tensor converted to kiln (same layout)."""

    def conv(v):
        if isinstance(v, torch.Tensor):
            return kiln.from_numpy(to_numpy(v))
        if isinstance(v, dict):
            return {k: conv(x) for k, x in v.items()}
        if isinstance(v, list):
            return [conv(x) for x in v]
        if isinstance(v, tuple):
            return tuple(conv(x) for x in v)
        return v

    return conv(sd)
