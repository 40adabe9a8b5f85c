"""The NPBench-style kernels of bench/numpy_kernels.py, unmodified, under kiln.compile.

Each kernel's results (its return value and every array it writes in place) equal NumPy's,
dtypes included, and the whole kernel is one graph: no graph break, and no op left to an
eager kernel (except where the note says why).
"""

import importlib.util
import os
import sys

import numpy as np
import pytest

import kiln

_PATH = os.path.join(os.path.dirname(__file__), "..", "..", "..", "bench", "numpy_kernels.py")
_spec = importlib.util.spec_from_file_location("numpy_kernels", _PATH)
K = importlib.util.module_from_spec(_spec)
sys.modules["numpy_kernels"] = K
_spec.loader.exec_module(K)

# Kernels with an op that runs on its eager kernel inside the compiled graph, and why (none
# now: sir_history's row writes into the history compile as region writes).
EAGER_NODES: dict[str, tuple[str, ...]] = {}


def _check_same(got, want, what):
    if isinstance(want, tuple):
        assert isinstance(got, tuple) and len(got) == len(want), what
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            _check_same(g, w, f"{what}[{i}]")
        return
    if want is None:
        assert got is None, what
        return
    assert type(got) is type(want), f"{what}: {type(got)} vs NumPy's {type(want)}"
    assert np.asarray(got).dtype == np.asarray(want).dtype, what
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12, err_msg=what)


@pytest.mark.parametrize("kernel", K.KERNELS, ids=lambda k: k.name)
def test_kernel_matches_numpy_in_one_graph(kernel):
    rng = np.random.default_rng(0)
    args = kernel.make(rng, 1)
    want_args = K.copy_args(args)
    want = kernel.fn(*want_args)
    got_args = K.copy_args(args)
    kiln.compiler.reset()
    report = kiln.explain(kernel.fn)(*got_args)
    _check_same(report.result, want, f"{kernel.name} result")
    for i in kernel.writes:
        _check_same(got_args[i], want_args[i], f"{kernel.name} argument {i} written in place")
    assert report.graph_break_count == 0, report.break_reasons
    assert report.graph_count == 1
    fallbacks = [f for graph in report.fallbacks for f in graph]
    assert len(fallbacks) == len(EAGER_NODES.get(kernel.name, ())), fallbacks
    assert eager_nodes(report) == len(EAGER_NODES.get(kernel.name, ()))


def eager_nodes(report) -> int:
    """Nodes of the captured graphs that ran on eager kernels (a part left uncompiled included:
    one that only writes into its inputs is compiled too)."""
    reports = [c.report for c in report.captures if c.report is not None]
    assert reports, "no capture went through kiln's compiler"
    return sum(r.eager_nodes for r in reports)


@pytest.mark.parametrize("kernel", K.KERNELS, ids=lambda k: k.name)
def test_kernel_second_call_hits_the_cache(kernel):
    """Other data, same shapes: the compiled entry runs again (no recapture), still NumPy's."""
    compiled = kiln.compile(kernel.fn)
    rng = np.random.default_rng(1)
    first = K.copy_args(kernel.make(rng, 1))
    compiled(*first)
    args = kernel.make(rng, 1)
    want_args, got_args = K.copy_args(args), K.copy_args(args)
    want = kernel.fn(*want_args)
    got = compiled(*got_args)
    _check_same(got, want, kernel.name)
    for i in kernel.writes:
        _check_same(got_args[i], want_args[i], f"{kernel.name} argument {i}")
