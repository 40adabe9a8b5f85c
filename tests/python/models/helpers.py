"""Helpers for the kiln.nn tests: build the same layer in torch and kiln with identical state."""

import torch
from conftest import assert_close, make, to_kiln

import kiln
import kiln.nn as knn

# Tolerances for layers that accumulate (matmul, conv, norms) in reduced precision.
LAYER_TOL = {
    "float32": (1e-4, 1e-4),
    "float64": (1e-10, 1e-10),
    "float16": (1e-2, 1e-2),
    "bfloat16": (6e-2, 6e-2),
}


def randomize(module):
    """Non-trivial parameters (and positive float buffers) so ones/zeros inits can't hide bugs."""
    with torch.no_grad():
        for p in module.parameters():
            p.uniform_(-1.0, 1.0)
        for b in module.buffers():
            if b.is_floating_point():
                b.uniform_(0.5, 1.5)


def copy_state(km, tm):
    """Loads torch module `tm`'s state into kiln module `km` (as the task's models do)."""
    return km.load_state_dict({k: to_kiln(v) for k, v in tm.state_dict().items()})


def pair(name, *args, dtype="float32", random_state=True, **kwargs):
    """(torch module, kiln module) of class `name` with the same args, state and dtype; also
    checks that both print the same."""
    torch.manual_seed(0)
    tm = getattr(torch.nn, name)(*args, **kwargs)
    km = getattr(knn, name)(*args, **kwargs)
    assert repr(km) == repr(tm)
    if random_state:
        randomize(tm)
    copy_state(km, tm)
    tm.to(getattr(torch, dtype))
    km.to(getattr(kiln, dtype))
    return tm, km


def run_both(tm, km, t_inputs, k_inputs):
    with torch.no_grad():
        expected = tm(*t_inputs)
    return km(*k_inputs), expected


def check(tm, km, t_inputs, k_inputs, dtype="float32", atol=None, rtol=None):
    """Runs both modules on the same inputs and compares the outputs."""
    got, expected = run_both(tm, km, t_inputs, k_inputs)
    a, r = LAYER_TOL[dtype]
    assert_close(got, expected, atol=a if atol is None else atol, rtol=r if rtol is None else rtol)
    return got, expected


def noncontiguous(shape, dtype, seed=0):
    """make() for `shape`, but as a reversed-strides (transposed) view."""
    t, k = make(tuple(reversed(shape)), dtype, seed=seed)
    dims = tuple(range(len(shape) - 1, -1, -1))
    return t.permute(dims), k.permute(*dims)
