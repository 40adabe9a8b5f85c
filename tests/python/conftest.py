"""Shared helpers for the op tests: kiln results are compared with PyTorch's on the same inputs."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import kiln  # noqa: E402

DTYPES = [
    "float32", "float64", "float16", "bfloat16", "int8", "uint8", "int16", "int32", "int64", "bool"
]
FLOAT_DTYPES = ["float32", "float64", "float16", "bfloat16"]
INT_DTYPES = ["int8", "uint8", "int16", "int32", "int64"]

# Absolute/relative tolerance per dtype of the *result*.
TOL = {
    "float16": (1e-3, 1e-3),
    "bfloat16": (1e-2, 1e-2),
    "float32": (1e-5, 1e-5),
    "float64": (1e-10, 1e-10),
}


def to_torch(t):
    """A torch copy of a kiln tensor (through float32 for bfloat16, which NumPy lacks)."""
    t = t.detach()
    if t.dtype == kiln.bfloat16:
        return torch.from_numpy(t.float().numpy().copy()).bfloat16()
    return torch.from_numpy(np.array(t.numpy(), copy=True))


def to_kiln(t):
    """A kiln copy of a torch tensor."""
    if t.dtype == torch.bfloat16:
        return kiln.from_numpy(t.float().numpy().copy()).bfloat16()
    return kiln.from_numpy(t.detach().contiguous().numpy().copy())


def make(shape, dtype, seed=0, low=-3.0, high=3.0):
    """A random torch tensor of `dtype` (a name) and the same values as a kiln tensor."""
    g = torch.Generator().manual_seed(seed)
    td = getattr(torch, dtype)
    if dtype == "bool":
        t = torch.rand(shape, generator=g) > 0.5
    elif dtype in INT_DTYPES:
        lo = 0 if dtype == "uint8" else int(low) * 3
        t = torch.randint(lo, int(high) * 3 + 1, shape, generator=g).to(td)
    else:
        t = (torch.rand(shape, generator=g, dtype=torch.float64) * (high - low) + low).to(td)
    return t, to_kiln(t)


def grad_pair(*shape, seed=0):
    """The same float64 standard-normal values as a torch and a kiln leaf requiring grad."""
    a = np.random.default_rng(seed).standard_normal(shape)
    return torch.tensor(a, requires_grad=True), kiln.tensor(a, requires_grad=True)


def assert_close(k, t, atol=None, rtol=None, check_dtype=True):
    """Asserts kiln tensor `k` equals torch tensor `t` in dtype, shape and values."""
    assert isinstance(k, kiln.Tensor), f"expected a kiln.Tensor, got {type(k)}"
    tname = str(t.dtype).replace("torch.", "")
    if check_dtype:
        assert k.dtype.name == tname, f"dtype {k.dtype.name} != torch {tname}"
    assert tuple(k.shape) == tuple(t.shape), f"shape {tuple(k.shape)} != torch {tuple(t.shape)}"
    a, r = TOL.get(tname, (0, 0))
    atol = a if atol is None else atol
    rtol = r if rtol is None else rtol
    kt = to_torch(k).to(t.dtype)
    torch.testing.assert_close(kt, t, atol=atol, rtol=rtol, equal_nan=True, check_dtype=False)
