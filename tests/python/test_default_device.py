"""kiln.set_default_device / get_default_device and `with kiln.device(...)` without CUDA: the CPU
works as torch's, asking for CUDA fails at the factory with a clear error (not at the block),
and the state is restored after errors (tests/python/cuda covers the CUDA side)."""

import pytest

import kiln


def test_cpu_default_and_blocks():
    assert kiln.get_default_device() == kiln.device("cpu")
    with kiln.device("cpu") as d:
        assert d == kiln.device("cpu") and kiln.zeros(2).device.type == "cpu"
    kiln.set_default_device("cpu")
    kiln.set_default_device(None)
    assert kiln.ones(1).device.type == "cpu"


@pytest.mark.skipif(kiln.cuda.is_available(), reason="checks the error without CUDA")
def test_cuda_without_a_device_fails_at_the_factory():
    with kiln.device("cuda"):
        with pytest.raises(RuntimeError, match="CUDA is not available"):
            kiln.zeros(2)
        assert kiln.zeros(2, device="cpu").device.type == "cpu"
    assert kiln.zeros(2).device.type == "cpu"


def test_bad_device_names():
    with pytest.raises((RuntimeError, ValueError)):
        kiln.set_default_device("tpu")
    assert kiln.get_default_device() == kiln.device("cpu")
