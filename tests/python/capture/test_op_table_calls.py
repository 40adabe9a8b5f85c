"""Calls a table schema cannot bind on its own, each with its own capture lowering: div's
rounding modes, var/std with the legacy positional `unbiased`, Tensor.where's argument order.
Compiled strictly against eager, over float and integer dtypes where eager takes them."""

from __future__ import annotations

import pytest
from corpus_util import fresh_capture  # noqa: F401 - autouse: empty caches around every test
from test_backend_compiled import rand, run_compiled

import kiln


@pytest.mark.parametrize("mode", [None, "floor", "trunc"])
@pytest.mark.parametrize("dtype", [kiln.float32, kiln.float64, kiln.int64, kiln.int32, kiln.int16],
                         ids=str)
def test_div_rounding_modes(mode, dtype):
    a = (rand(4, 7) * 9).to(dtype)
    b = (rand(7, seed=3) * 4).to(dtype)
    if not dtype.is_floating_point:
        b = b + (b == 0).to(dtype)  # eager raises on an integer division by zero
    backend = run_compiled(lambda x, y: kiln.div(x, y, rounding_mode=mode) * 2, a, b)
    assert backend.reports[0].eager_nodes == 0
    run_compiled(lambda x, y: x.div(-3, rounding_mode=mode), a, b)


@pytest.mark.parametrize("op", ["var", "std"])
def test_variance_spellings(op):
    x = rand(5, 9)
    for call in (lambda t: getattr(t, op)(1), lambda t: getattr(t, op)(0, False),
                 lambda t: getattr(kiln, op)(t, False), lambda t: getattr(t, op)(correction=0),
                 lambda t: getattr(t, op)(dim=(0, 1), keepdim=True)):  # fmt: skip
        backend = run_compiled(call, x)
        assert backend.reports[0].eager_nodes == 0


def test_tensor_where_and_function_where():
    x, y = rand(3, 8), rand(8, seed=2)
    backend = run_compiled(lambda a, b: a.where(a > b, b) + kiln.where(a < 0, a, 0.5), x, y)
    assert backend.reports[0].eager_nodes == 0
