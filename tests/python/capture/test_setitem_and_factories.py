"""Item assignment (``x[index] = value``, index_put), ``clone`` and the factories (zeros,
ones, full and their _like / new_ forms) compiled: no eager node, results and written-back
inputs equal to eager's."""

from __future__ import annotations

import pytest
from corpus_util import fresh_capture  # noqa: F401 - autouse: empty caches around every test
from test_backend_compiled import rand, run_compiled

import kiln


def _compiles(fn, *args, **kw):
    backend = run_compiled(fn, *args, **kw)
    assert all(r.eager_nodes == 0 and r.eager_calls == 0 for r in backend.reports), [
        r.fallbacks for r in backend.reports]
    return backend


def test_basic_index_assignment():
    def slices(x, v):
        y = x.clone()
        y[:, 0] = 0
        y[1:, ..., 2] = v  # a tensor broadcast into the view
        y[0] = y[1]
        y[None, -1, :, 1:3] = 2.5
        return y * 2

    backend = _compiles(slices, rand(3, 4, 5), rand(4))
    assert len(backend.reports[0].parts) == 1


def test_assignment_to_an_input_is_written_back():
    def fn(x):
        x[:, 1] = 5.0
        x[2] += 1  # an in-place op on a view of the input
        return x.sum()

    _compiles(fn, rand(3, 4))  # run_compiled compares the input after the call too


def test_masked_assignment():
    def fill(x, m):
        y = x * 1
        y[m] = float("-inf")  # rows: the mask covers the leading dim
        y[y > 1] = 1
        return y

    _compiles(fill, rand(3, 4), kiln.tensor([True, False, True]))

    def causal(scores):
        t = scores.shape[-1]
        mask = kiln.ones(t, t, dtype=kiln.bool).triu(1)
        scores[:, mask] = -1e9
        return scores.softmax(-1)

    _compiles(causal, rand(2, 5, 5))


def test_assignment_through_an_int_tensor_is_an_index_put():
    def fn(x, i, v):
        y = x.clone()
        y[i] = 1.0
        y[:, i] = v
        y[..., i, :] += 1  # read, add, write back: no accumulation, as eager
        return y

    _compiles(fn, rand(4, 4, 5), kiln.tensor([0, -1]), rand(4, 2, 5))

    def on_input(x, i):
        x[0, ..., i] = 0
        x.index_put_((i,), x[1:3] * 2, accumulate=True)
        return x.sum()

    _compiles(on_input, rand(4, 4, 5), kiln.tensor([1, 1]))


def test_assignment_through_two_tensors_stays_eager_with_its_reason():
    def fn(x, i):
        y = x.clone()
        y[i, i] = 1.0
        return y

    backend = run_compiled(fn, rand(3, 4), kiln.tensor([0, 2]), strict=False)
    (report,) = backend.reports
    assert report.eager_nodes == 1 and "several tensors" in str(report.fallbacks)


@pytest.mark.parametrize("dynamic", [False, True])
def test_factories(dynamic):
    x = rand(3, 4)
    cases = [
        lambda x: kiln.zeros(3, 4) + x,
        lambda x: kiln.zeros(x.shape, dtype=kiln.int64) + 1,
        lambda x: kiln.ones_like(x) * x,
        lambda x: kiln.full((x.shape[0], 1), 2.5) * x,
        lambda x: kiln.full((3, 1), 7) * 2,  # an int fill gives int64
        lambda x: kiln.full((3, 4), True) & (x > 0),
        lambda x: kiln.full_like(x, -1) + x,
        lambda x: x.new_zeros(2, x.shape[1]) + 1,
        lambda x: x.new_ones((2, 4)) + x[:2],
        lambda x: x.new_full((2, 4), 3) + 1,
        lambda x: kiln.zeros_like(x, dtype=kiln.int32) + 1,
        lambda x: kiln.ones(0, 4) + 1,
    ]
    for fn in cases:
        calls = [(rand(5, 4, seed=1),)] if dynamic else None
        if fn is cases[0] or fn is cases[4] or fn is cases[5] or fn is cases[-1]:
            calls = None  # fixed sizes: one shape only
        _compiles(fn, x, dynamic=dynamic or None, calls=calls)


def test_clone_of_a_strided_tensor_stays_eager():
    backend = run_compiled(lambda x: x.t().clone() + 1, rand(3, 4), strict=False)
    assert "strided" in str(backend.reports[0].fallbacks)
