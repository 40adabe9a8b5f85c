"""The default device (kiln.set_default_device, `with kiln.device(...)`) on CUDA tensors: the
factories and modules made inside a block live on the device, blocks nest and restore, and
compiled code is guarded on input devices and the default device (a function compiled for CPU
tensors captures again for CUDA ones)."""

import numpy as np
import pytest

import kiln
from kiln._capture.backend_compiled import CpuBackend

pytestmark = pytest.mark.skipif(not kiln.cuda.is_available(),
                                reason="no CUDA device (the emulator: KILN_CUDA_EMULATOR=1)")


def test_factories_and_modules_follow_the_block():
    with kiln.device("cuda"):
        assert kiln.get_default_device().type == "cuda"
        made = [kiln.zeros(2), kiln.ones(2, 3), kiln.randn(4), kiln.tensor([1.0, 2.0]),
                kiln.arange(3), kiln.full((2,), 7.0), kiln.empty(3)]
        assert all(t.device.type == "cuda" for t in made)
        assert kiln.zeros(2, device="cpu").device.type == "cpu"  # an explicit device wins
        model = kiln.nn.Sequential(kiln.nn.Linear(3, 4), kiln.nn.LayerNorm(4))
        assert all(p.device.type == "cuda" for p in model.parameters())
        out = model(kiln.randn(5, 3))
        assert out.device.type == "cuda"
        with kiln.device("cpu"):
            assert kiln.ones(1).device.type == "cpu"
        assert kiln.ones(1).device.type == "cuda"
    assert kiln.zeros(1).device.type == "cpu"
    kiln.set_default_device("cuda")
    try:
        assert kiln.ones(2).device.type == "cuda"
        with kiln.device("cpu"):
            assert kiln.ones(2).device.type == "cpu"
    finally:
        kiln.set_default_device(None)
    assert kiln.ones(2).device.type == "cpu"


def test_compiled_code_captures_per_device():
    def fn(x):
        return x * 2 + kiln.ones(x.shape[0]) + kiln.arange(x.shape[0])

    backend = CpuBackend()
    compiled = kiln.compile(fn, backend=backend)
    x = kiln.randn(4)
    assert compiled(x).device.type == "cpu"
    with kiln.device("cuda"):
        xc = x.cuda()
        got = compiled(xc)
        assert got.device.type == "cuda"
        np.testing.assert_allclose(got.cpu().numpy(), fn(xc).cpu().numpy(), rtol=1e-6)
    assert compiled(x).device.type == "cpu"
    assert len(backend.reports) == 2  # one capture per device, the CPU one reused
    with kiln.device("cuda"):
        guards = kiln.explain(fn)(x.cuda()).guards
    assert any(g.endswith("on cuda:0") for g in guards)
    assert "default device is cuda" in guards
