"""Calls compiled as a few graph ops (lowerings_compose.py): conv1d, addmm / addmv / baddbmm,
outer, F.normalize, against eager kiln and PyTorch, with zero eager nodes."""

from __future__ import annotations

import numpy as np
import pytest
from corpus_util import fresh_capture  # noqa: F401 - autouse: empty caches around every test
from test_backend_cpu import run_compiled

import kiln
import kiln.nn.functional as F
from kiln._capture.backend_cpu import CpuBackend

G = np.random.default_rng(0)


def _arr(*shape):
    return G.standard_normal(shape).astype(np.float32)


CASES = {
    "conv1d": (lambda m, F, x, w: F.conv1d(x, w, padding=1) + 1, [(2, 4, 10), (3, 4, 3)]),
    "conv1d_strided": (lambda m, F, x, w, b: F.conv1d(x, w, b, stride=2, dilation=2, groups=2),
                       [(2, 4, 11), (6, 2, 3), (6,)]),
    "addmm": (lambda m, F, c, a, b: m.addmm(c, a, b, beta=0.5, alpha=2), [(5,), (3, 4), (4, 5)]),
    "addmm_beta0": (lambda m, F, c, a, b: m.addmm(c, a, b, beta=0), [(3, 5), (3, 4), (4, 5)]),
    "addmv": (lambda m, F, c, a, b: m.addmv(c, a, b), [(3,), (3, 4), (4,)]),
    "baddbmm": (lambda m, F, c, a, b: m.baddbmm(c, a, b, alpha=0.5),
                [(2, 3, 5), (2, 3, 4), (2, 4, 5)]),
    "outer": (lambda m, F, a, b: m.outer(a, b) * 2, [(3,), (4,)]),
    "normalize": (lambda m, F, a: F.normalize(a, dim=-1), [(3, 4)]),
    "normalize_p1": (lambda m, F, a: F.normalize(a, p=1, dim=0, eps=1e-3), [(3, 4)]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_compiles_and_matches(name):
    torch = pytest.importorskip("torch")
    fn, shapes = CASES[name]
    arrays = [_arr(*s) for s in shapes]
    args = [kiln.from_numpy(a) for a in arrays]
    backend = run_compiled(lambda *a: fn(kiln, F, *a), *args, tol=(1e-4, 1e-4))
    (report,) = backend.reports
    assert report.eager_nodes == 0 and len(report.parts) == 1
    kiln.compiler.reset()
    with kiln.no_grad():
        ours = kiln.compile(lambda *a: fn(kiln, F, *a), backend=CpuBackend(fallback=False))(*args)
    theirs = fn(torch, torch.nn.functional, *(torch.from_numpy(a) for a in arrays))
    np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-4, atol=1e-4)


def test_beta_zero_ignores_nan_in_the_addend():
    c = kiln.full((3, 5), float("nan"))
    a, b = kiln.from_numpy(_arr(3, 4)), kiln.from_numpy(_arr(4, 5))
    backend = run_compiled(lambda c, a, b: kiln.addmm(c, a, b, beta=0), c, a, b)
    assert backend.reports[0].eager_nodes == 0


def test_conv1d_module_and_the_unsupported_forms():
    m = kiln.nn.Conv1d(4, 5, 3, padding=1).eval()
    backend = run_compiled(m, kiln.from_numpy(_arr(2, 4, 10)), tol=(1e-4, 1e-4))
    assert backend.reports[0].eager_nodes == 0
    w = kiln.from_numpy(_arr(3, 4, 3))
    backend = run_compiled(lambda x: F.conv1d(x, w, padding="same"), kiln.from_numpy(
        _arr(2, 4, 10)), strict=False, tol=(1e-4, 1e-4))  # fmt: skip
    assert "padding by name" in str(backend.reports[0].fallbacks)
