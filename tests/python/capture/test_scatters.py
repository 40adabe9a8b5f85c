"""scatter, scatter_add, index_add and index_put compiled: eager's kernels as extern nodes
inside the compiled part (duplicates accumulate where the op says so), against PyTorch, with
out-of-range positions raising eager's error."""

from __future__ import annotations

import numpy as np
import pytest
from corpus_util import fresh_capture  # noqa: F401 - autouse: empty caches around every test
from test_backend_compiled import run_compiled

import kiln
from kiln._capture.backend_compiled import CpuBackend

G = np.random.default_rng(0)

CASES = {
    "scatter_add": lambda m, x, i, s: x.scatter_add(1, i, s) * 2,
    "scatter_add_into_zeros": lambda m, x, i, s: m.zeros(3, 4).scatter_add(1, i, s),
    "scatter_add_": lambda m, x, i, s: x.clone().scatter_add_(1, i, s).relu(),
    "scatter_reduce_add": lambda m, x, i, s: x.scatter(1, i, s, reduce="add"),
    "index_add": lambda m, x, i, s: x.index_add(0, i[0, :2], s[:2].repeat(1, 2), alpha=2) - 1,
    "index_put_accumulate": lambda m, x, i, s: x.index_put((i[0],), s[0, :, None], accumulate=True),
    # a number scattered: the one-hot idiom, and the value overload with a reduction
    "scatter_value_one_hot": lambda m, x, i, s: m.zeros(3, 4).scatter_(1, i, 1.0) * x,
    "scatter_value_multiply": lambda m, x, i, s: x.clone().scatter_(1, i, 2.5, reduce="multiply"),
    "scatter_value_keyword": lambda m, x, i, s: x.scatter(1, i, value=-1.0),
}


@pytest.mark.filterwarnings("ignore:The reduce argument of torch.scatter")
@pytest.mark.parametrize("name", sorted(CASES))
def test_scatters_compile_and_match_torch(name):
    torch = pytest.importorskip("torch")
    fn = CASES[name]
    arrays = [G.standard_normal((3, 4)).astype(np.float32), G.integers(0, 3, (3, 2)),
              G.standard_normal((3, 2)).astype(np.float32)]  # fmt: skip
    args = [kiln.from_numpy(a) for a in arrays]
    backend = run_compiled(lambda *a: fn(kiln, *a), *args)
    (report,) = backend.reports
    assert report.eager_nodes == 0 and len(report.parts) == 1
    with kiln.no_grad():
        ours = kiln.compile(lambda *a: fn(kiln, *a), backend=CpuBackend(fallback=False))(*args)
    theirs = fn(torch, *(torch.from_numpy(a) for a in arrays))
    np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-5, atol=1e-5)


def test_a_position_out_of_range_raises_eagers_error():
    f = kiln.compile(lambda x, i, s: x.scatter_add(1, i, s) * 2,
                     backend=CpuBackend(fallback=False))  # fmt: skip
    x, s = kiln.randn(3, 4), kiln.randn(3, 2)
    with kiln.no_grad():
        f(x, kiln.zeros(3, 2, dtype=kiln.int64), s)
        bad = kiln.tensor([[0, 4], [1, 1], [2, 2]])
        with pytest.raises(Exception) as eager:
            x.scatter_add(1, bad, s)
        with pytest.raises(type(eager.value)) as ours:
            f(x, bad, s)
    assert str(ours.value) == str(eager.value)
