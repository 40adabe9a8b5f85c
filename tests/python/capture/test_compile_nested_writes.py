"""Writes through views of views (`out[:, i, j] = v`, `out[1:][::2] = v`, `out[i][j][k] = v`)
compile equal to eager: the lowering composes the nested scatters functionalization makes into
one region test per write, so a loop filling an output slot by slot inlines into one kernel
(tests/lit/schedule_slot_writes.kir pins the loop program)."""

from __future__ import annotations

import pytest
from corpus_util import fresh_capture  # noqa: F401 - autouse: empty caches around every test
from test_backend_compiled import rand, run_compiled

import kiln


def _no_eager(backend) -> None:
    assert backend.reports and all(r.eager_nodes == 0 for r in backend.reports)


def pool_slots(x):
    out = kiln.empty(x.shape[0], x.shape[1] // 2, x.shape[2] // 2, x.shape[3])
    for i in range(x.shape[1] // 2):
        for j in range(x.shape[2] // 2):
            out[:, i, j, :] = x[:, 2 * i:2 * i + 2, 2 * j:2 * j + 2, :].amax(dim=(1, 2))
    return out * 1


CASES = {
    "select_of_select": lambda x, v: _write(x, lambda t: t[:, 1], lambda t: t[:, 2], v[:4, 0]),
    "negative_indices": lambda x, v: _write(x, lambda t: t[-1], lambda t: t[-2], v[0]),
    "slice_of_slice_stepped": lambda x, v: _write(x, lambda t: t[1:], lambda t: t[:, ::2],
                                                  v[:3, None, :]),
    "select_of_slice": lambda x, v: _write(x, lambda t: t[:, 1:4], lambda t: t[0], v[:3]),
    "three_levels": lambda x, v: _three_levels(x, v),
    "overlapping_writes": lambda x, v: _overlapping(x, v),
    "float64_into_float32": lambda x, v: _write(x, lambda t: t[2], lambda t: t[1:3],
                                                v[0].double() * 1.5),
}


def _write(x, outer, inner, value):
    out = x.clone()
    inner(outer(out)).copy_(value)
    return out + 0


def _three_levels(x, v):
    out = x.clone()
    for i in range(2):
        for j in range(3):
            out[i][j][1:3] = v[i, j:j + 2]
    return out - 1


def _overlapping(x, v):
    """A later write over an earlier one's slot wins, as in eager."""
    out = x.clone()
    out[:, 1][1:3] = v[0]
    out[:, 1][2:4] = v[1] * 3
    out[:, 0][0] = out[:, 1][2]
    return out


@pytest.mark.parametrize("case", CASES)
def test_nested_writes_match_eager(case):
    _no_eager(run_compiled(CASES[case], rand(4, 5, 6), rand(6, 6, seed=1)))


def test_slot_filling_loop_compiles_to_one_pointwise_loop():
    backend = run_compiled(pool_slots, rand(2, 8, 8, 3))
    _no_eager(backend)
    [report] = backend.reports
    [info] = report.infos
    # the 16 window maxima and one loop writing every slot (`* 1` inlined into it): no copy
    # of the output per write
    assert info["loop_nodes"] == 16 + 1
    assert info["kernels"] == 1


def test_slot_filling_loop_with_a_dynamic_batch():
    _no_eager(run_compiled(pool_slots, rand(2, 4, 4, 3), dynamic=True,
                           calls=[(rand(5, 4, 4, 3),)]))
