"""Small independent kernels of a compiled program share one launch ([Note: launches] in
passes/schedule/schedule.h): their parallel ranges are laid end to end and split over threads
as one, so a chunk may end inside any of them. Random programs of independent small outputs of
different shapes (pointwise chains, row reductions, transposes) run compiled at 1 to 4 threads
and equal eager, in fewer kernels than outputs."""

from __future__ import annotations

import numpy as np
import pytest
from corpus_util import fresh_capture  # noqa: F401 - autouse: empty caches around every test

import kiln
from kiln._capture.backend_compiled import CpuBackend

UNARY = [lambda t: t.exp(), lambda t: t.tanh(), lambda t: t * 3 - 1, lambda t: t.relu(),
         lambda t: t.abs().sqrt(), lambda t: t.sigmoid()]
FINAL = [lambda t: t, lambda t: t.sum(-1), lambda t: t.amax(-1), lambda t: t.t().contiguous(),
         lambda t: t[:, ::2]]


def program(rng):
    """(fn, inputs): 3 to 6 independent outputs of random small shapes."""
    # up to 64 x 1000 (a launch takes kernels of at most 2^16 points): a few such outputs
    # split over threads, with chunk ends falling inside kernels
    shapes = [(int(rng.integers(1, 65)), int(rng.integers(1, 1001))) for _ in
              range(int(rng.integers(3, 7)))]
    plans = [([UNARY[int(k)] for k in rng.integers(0, len(UNARY), int(rng.integers(1, 4)))],
              FINAL[int(rng.integers(0, len(FINAL)))]) for _ in shapes]

    def fn(*xs):
        outs = []
        for x, (chain, final) in zip(xs, plans, strict=True):
            for op in chain:
                x = op(x)
            outs.append(final(x))
        return tuple(outs)

    inputs = [kiln.from_numpy(rng.standard_normal(s).astype(np.float32)) for s in shapes]
    return fn, inputs


@pytest.mark.parametrize("seed", range(8))
def test_independent_outputs_share_launches_and_equal_eager(seed):
    fn, inputs = program(np.random.default_rng(seed))
    want = fn(*inputs)
    backend = CpuBackend(fallback=False)
    compiled = kiln.compile(fn, backend=backend)
    try:
        for threads in (1, 2, 3, 4):
            kiln.set_num_threads(threads)
            got = compiled(*inputs)
            for g, w in zip(got, want, strict=True):
                np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-5, atol=1e-5,
                                           err_msg=f"{threads} threads")
    finally:
        kiln.set_num_threads(0)  # back to the default
    [report] = backend.reports
    assert report.eager_nodes == 0
    kernels = sum(info["kernels"] for info in report.infos)
    assert kernels < len(want), (kernels, len(want))
