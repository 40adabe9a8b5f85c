"""Random fused chains of elementwise ops and reductions, compiled by the CPU backend vs eager.

Each case is a seeded random program over 1-3 inputs whose shapes broadcast to one base shape
(sizes 1, primes and 16/33 so vector loops get tails): unary ops on bounded values, binary ops
with broadcasting, keepdim reductions, softmax/log_softmax; some inputs are transposed, some
cases use float64, some are captured with dynamic=True and run at a second size. The backend is
strict (a decline fails the case), so every op here must compile; the results must equal eager
within tolerances and the whole graph must be one compiled part (one fused program).
"""

from __future__ import annotations

import random

import pytest
from corpus_util import fresh_capture  # noqa: F401 - autouse: empty caches around every test
from test_backend_compiled import rand, run_compiled

import kiln
import kiln.nn.functional as F

UNARY = {
    "tanh": lambda x: x.tanh(),
    "sigmoid": lambda x: x.sigmoid(),
    "relu": lambda x: x.relu(),
    "neg": lambda x: -x,
    "abs": lambda x: x.abs(),
    "exp_tanh": lambda x: x.tanh().exp(),
    "log1": lambda x: (x.abs() + 1).log(),
    "sqrt": lambda x: x.abs().sqrt(),
    "gelu": lambda x: F.gelu(x),
    "silu": lambda x: F.silu(x),
    "scale": lambda x: x * 0.75 + 0.25,
}
BINARY = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "div": lambda a, b: a / (b.abs() + 1),
    "max": lambda a, b: kiln.maximum(a, b),
    "min": lambda a, b: kiln.minimum(a, b),
    "where": lambda a, b: kiln.where(a > b, a, b),
}
REDUCE = {
    "sum": lambda x, d: x.sum(d, keepdim=True),
    "mean": lambda x, d: x.mean(d, keepdim=True),
    "amax": lambda x, d: x.amax(d, keepdim=True),
    "amin": lambda x, d: x.amin(d, keepdim=True),
    "softmax": lambda x, d: F.softmax(x, d),
    "log_softmax": lambda x, d: F.log_softmax(x, d),
}
SIZES = [1, 2, 3, 5, 7, 16, 17, 33]


def make_case(seed: int):
    """(function, inputs, dynamic, second inputs or None) of case `seed`."""
    rng = random.Random(seed)
    rank = rng.randint(1, 3)
    base = [rng.choice(SIZES) for _ in range(rank)]
    dtype = kiln.float64 if rng.random() < 0.2 else kiln.float32
    inputs = []
    for k in range(rng.randint(1, 3)):
        shape = [s if k == 0 or rng.random() < 0.7 else 1 for s in base]
        shape = shape[rng.randint(0, rank - 1):] if k and rng.random() < 0.3 else shape
        inputs.append(shape)
    transposed = [len(s) >= 2 and rng.random() < 0.3 for s in inputs]
    steps = []
    n_values = len(inputs)
    for _ in range(rng.randint(2, 8)):
        kind = rng.random()
        if kind < 0.45:
            steps.append(("u", rng.choice(sorted(UNARY)), rng.randrange(n_values)))
        elif kind < 0.8:
            steps.append(("b", rng.choice(sorted(BINARY)), rng.randrange(n_values),
                          rng.randrange(n_values)))
        else:
            steps.append(("r", rng.choice(sorted(REDUCE)), rng.randrange(n_values),
                          rng.randrange(rank)))
        n_values += 1
    extra = rng.randrange(n_values)
    program = tuple(steps)

    def fn(*xs):
        vals = list(xs)
        for step in program:
            if step[0] == "u":
                vals.append(UNARY[step[1]](vals[step[2]]))
            elif step[0] == "b":
                vals.append(BINARY[step[1]](vals[step[2]], vals[step[3]]))
            else:
                x = vals[step[2]]
                vals.append(REDUCE[step[1]](x, -1 - step[3] % x.dim()))
        return vals[-1], vals[extra] * 2

    def tensors(scale_seed, grow=0):
        out = []
        for k, shape in enumerate(inputs):
            shape = [s + grow if s > 1 else s for s in shape]
            if transposed[k]:
                out.append(rand(*reversed(shape), dtype=dtype, seed=scale_seed + k).t()
                           if len(shape) == 2 else
                           rand(*shape[:-2], shape[-1], shape[-2], dtype=dtype,
                                seed=scale_seed + k).transpose(-1, -2))
            else:
                out.append(rand(*shape, dtype=dtype, seed=scale_seed + k))
        return out

    dynamic = rng.random() < 0.25
    second = tensors(100, grow=3) if dynamic else None
    return fn, tensors(seed), dynamic, second


@pytest.mark.parametrize("seed", range(50))
def test_random_chain(seed):
    fn, args, dynamic, second = make_case(seed)
    calls = [tuple(second)] if second is not None else []
    backend = run_compiled(fn, *args, dynamic=dynamic or None, tol=(2e-4, 2e-4), calls=calls)
    report = backend.reports[0]
    assert report.eager_nodes == 0 and report.eager_calls == 0
    assert len(report.parts) <= 1  # everything compiles into one part
    if dynamic:
        assert len(backend.reports) == 1  # the second size ran without a new capture
