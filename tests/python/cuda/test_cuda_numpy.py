"""NumPy code on CUDA tensors through kiln.compiler.wrap_numpy: compiled for the device (one
part, no eager node), results on the device, equal to NumPy's on the host copies."""

import numpy as np
import pytest

import kiln

# These run where kiln has a CUDA device: a GPU, or the host emulator (KILN_CUDA_EMULATOR=1,
# which scripts/test.sh sets for a second pytest run of this folder).
pytestmark = pytest.mark.skipif(not kiln.cuda.is_available(),
                                reason="no CUDA device (run with KILN_CUDA_EMULATOR=1)")


@kiln.compiler.wrap_numpy
def softmax_stats(x, y):
    z = np.sin(x) * 2.0 + y[1:].sum()
    e = np.exp(z - z.max())
    return e / e.sum(), np.where(z > 0, z, 0.0)


def test_numpy_code_compiles_for_cuda_tensors():
    kiln.compiler.reset()
    x, y = kiln.randn(33, dtype=kiln.float64), kiln.randn(9, dtype=kiln.float64)
    report = kiln.explain(softmax_stats)(x.cuda(), y.cuda())
    xs, ys = x.numpy(), y.numpy()
    z = np.sin(xs) * 2.0 + ys[1:].sum()
    want = (np.exp(z - z.max()) / np.exp(z - z.max()).sum(), np.where(z > 0, z, 0.0))
    for got, w in zip(report.result, want, strict=True):
        assert got.device.type == "cuda"
        np.testing.assert_allclose(got.cpu().numpy(), w, rtol=1e-12, atol=1e-15)
    assert report.graph_break_count == 0
    assert sum(c.report.eager_nodes for c in report.captures if c.report) == 0
