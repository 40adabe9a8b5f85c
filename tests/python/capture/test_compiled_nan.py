"""NaN through compiled float32 exp and what is built on it (softmax, sigmoid, silu, softplus,
elu, mish): a NaN stays NaN, also where the compiler sees it as a constant (a fully masked
softmax row: exp(-inf - -inf)), which the exp polynomial's integer conversion made garbage."""

from __future__ import annotations

import pytest
from corpus_util import fresh_capture  # noqa: F401 - autouse: empty caches around every test

import kiln
import kiln.nn.functional as F
from kiln._capture.backend_compiled import CpuBackend

OPS = {"exp": kiln.exp, "expm1": kiln.expm1, "sigmoid": kiln.sigmoid, "silu": F.silu,
       "softplus": F.softplus, "elu": F.elu, "mish": F.mish,
       "softmax": lambda x: x.softmax(-1)}  # fmt: skip


@pytest.mark.parametrize("name", sorted(OPS))
@pytest.mark.parametrize("dtype", [kiln.float32, kiln.float64], ids=str)
def test_a_constant_nan_stays_nan(name, dtype):
    op = OPS[name]

    def fn(x):
        return op(x * float("nan"))

    x = kiln.randn(2, 40, dtype=dtype)
    backend = CpuBackend(fallback=False)
    got = kiln.compile(fn, backend=backend)(x)
    assert got.isnan().all().item() and fn(x).isnan().all().item()
    assert [r.eager_nodes for r in backend.reports] == [0]


def test_a_fully_masked_softmax_row_is_nan():
    def fn(x):
        mask = kiln.ones(3, 8, dtype=kiln.bool)  # a mask the graph builds from shapes
        return kiln.where(mask, float("-inf"), x).softmax(-1)

    x = kiln.randn(3, 8)
    backend = CpuBackend(fallback=False)
    assert kiln.compile(fn, backend=backend)(x).isnan().all().item()
    assert fn(x).isnan().all().item()
    assert [r.eager_nodes for r in backend.reports] == [0]
