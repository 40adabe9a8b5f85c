"""Ops the table spells without a node kind of their own (KILN_EAGER_SPELLING rows) that the
capture writes as other ops: square as a product, positive as its input, rsub as a subtraction,
float_power as pow in float64, addcmul / addcdiv as their multiply and add. Each compiles into
one part with no eager node and gives eager's values. erfc, a table op of its own, is checked
against torch over its whole range, the tail where 1 - erf would lose it included."""

from __future__ import annotations

import numpy as np
import pytest
from corpus_util import fresh_capture  # noqa: F401 - autouse: empty caches around every test

import kiln
from kiln._capture.backend_compiled import CpuBackend

RNG = np.random.default_rng(11)


def tensor(dtype, shape=(4, 6)):
    a = RNG.uniform(0.5, 2.0, shape)
    return (
        kiln.tensor(a).to(dtype) if dtype != kiln.int64 else kiln.tensor(RNG.integers(-5, 6, shape))
    )


CASES = {
    "square": lambda x, y: kiln.square(x) + x.square(),
    "positive": lambda x, y: kiln.positive(x) * 2 + (+y) + x.positive(),
    "rsub": lambda x, y: kiln.rsub(x, y) + kiln.rsub(x, y, alpha=3) + kiln.rsub(x, 2),
    "float_power": lambda x, y: (
        kiln.float_power(x, y) + x.float_power(2) + kiln.float_power(x, 0.5)
    ),
    "addcmul": lambda x, y: kiln.addcmul(x, y, x, value=0.5) + x.addcmul(y, y),
}
DTYPES = {
    "square": [kiln.float32, kiln.float64, kiln.int64],
    "positive": [kiln.float32, kiln.int64],
    "rsub": [kiln.float32, kiln.float64, kiln.int64],
    "float_power": [kiln.float32, kiln.int64],
    "addcmul": [kiln.float32, kiln.float64],
}


@pytest.mark.parametrize(
    "name,dtype", [(n, d) for n in sorted(CASES) for d in DTYPES[n]], ids=lambda v: str(v)
)
def test_compiles_in_one_part_as_eager(name, dtype):
    x, y = tensor(dtype), tensor(dtype)
    backend = CpuBackend(fallback=False)
    got = kiln.compile(CASES[name], backend=backend)(x, y)
    want = CASES[name](x, y)
    (report,) = backend.reports
    assert report.eager_nodes == 0 and report.fallbacks == [] and len(report.parts) == 1
    assert got.dtype == want.dtype
    np.testing.assert_allclose(
        got.numpy(), want.numpy(), rtol=1e-6 if dtype == kiln.float32 else 1e-12
    )


def test_in_place_square_and_addcdiv_write_their_input():
    def step(p, g, v):
        v.square_()
        p.addcdiv_(g, v.add(1.0), value=-0.1)
        return p.sum()

    args = [tensor(kiln.float32) for _ in range(3)]
    eager = [a.clone() for a in args]
    want = step(*eager)
    backend = CpuBackend(fallback=False)
    got = kiln.compile(step, backend=backend)(*args)
    assert backend.reports[0].eager_nodes == 0
    np.testing.assert_allclose(got.item(), want.item(), rtol=1e-6)
    for a, e in zip(args, eager, strict=True):
        np.testing.assert_allclose(a.numpy(), e.numpy(), rtol=1e-6)


@pytest.mark.parametrize("dtype", [kiln.float32, kiln.float64])
@pytest.mark.parametrize("n", [1, 7, 1027])  # scalar tails and whole vectors
def test_erfc_compiles_with_torch_values_in_the_tails(dtype, n):
    import torch

    x = kiln.linspace(-6.0, 27.0 if dtype == kiln.float64 else 10.0, n).to(dtype)
    backend = CpuBackend(fallback=False)
    got = kiln.compile(lambda t: kiln.erfc(t) * 2 + t.erfc_().neg(), backend=backend)(x.clone())
    (report,) = backend.reports
    assert report.eager_nodes == 0 and len(report.parts) == 1
    ref = torch.special.erfc(torch.from_numpy(x.numpy()))
    want = (ref * 2 - ref).numpy()
    # relative: erfc(10) is 2e-45 in float32 (denormal), erfc(27) 5e-319 in float64
    tiny = 1e-38 if dtype == kiln.float32 else 1e-300
    np.testing.assert_allclose(got.numpy(), want, rtol=4e-6 if dtype == kiln.float32 else 1e-13,
                               atol=tiny)
    assert (got.numpy()[x.numpy() > 4.0] > 0).all()  # not 1 - erf(x), which is 0 there
