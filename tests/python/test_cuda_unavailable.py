"""kiln.cuda and CUDA devices on a machine without a usable GPU: False / 0 / clear errors.

Every test here needs CUDA to be unavailable (the CI machines); on a machine with a GPU they are
skipped, except the checks that hold everywhere.
"""

import pytest

import kiln
from kiln import _C

needs_no_cuda = pytest.mark.skipif(kiln.cuda.is_available(), reason="a CUDA device is present")
PREFIX = "kiln: CUDA is not available: "


def test_cuda_module_is_exported_and_consistent():
    assert kiln.cuda.is_available() in (True, False)
    assert isinstance(kiln.cuda.device_count(), int)
    assert (kiln.cuda.device_count() > 0) == kiln.cuda.is_available()
    assert (_C._cuda.unavailable_reason() == "") == kiln.cuda.is_available()


@needs_no_cuda
def test_queries_answer_false_and_zero():
    assert kiln.cuda.is_available() is False
    assert kiln.cuda.device_count() == 0
    reason = _C._cuda.unavailable_reason()
    assert reason  # says why: no driver library, cuInit failing, or no device
    assert "kiln:" not in reason


@needs_no_cuda
@pytest.mark.parametrize(
    "call",
    [
        lambda: kiln.cuda.current_device(),
        lambda: kiln.cuda.get_device_name(),
        lambda: kiln.cuda.get_device_name(0),
        lambda: kiln.cuda.get_device_capability("cuda:0"),
        lambda: kiln.cuda.get_device_properties(kiln.device("cuda", 0)),
        lambda: kiln.cuda.synchronize(),
        lambda: _C._cuda.synchronize(0),
        lambda: _C._cuda.device_properties(0),
        lambda: _C._cuda.driver_version(),
    ],
)
def test_device_functions_raise_a_clear_error(call):
    with pytest.raises(RuntimeError) as info:
        call()
    message = str(info.value)
    assert message.startswith(PREFIX)
    assert message == PREFIX + _C._cuda.unavailable_reason()


@needs_no_cuda
@pytest.mark.parametrize(
    "move",
    [
        lambda x: x.to("cuda"),
        lambda x: x.to("cuda:0"),
        lambda x: x.to(device="cuda"),
        lambda x: x.to(kiln.device("cuda", 0)),
        lambda x: x.to("cuda", kiln.float64),
        lambda x: x.cuda(),
        lambda x: x.cuda(0),
    ],
)
def test_tensors_cannot_move_to_cuda(move):
    x = kiln.ones(3)
    with pytest.raises(RuntimeError, match="^" + PREFIX):
        move(x)
    assert x.device == "cpu"


@needs_no_cuda
@pytest.mark.parametrize("dev", ["cuda", "cuda:0", kiln.device("cuda", 0), 0])
@pytest.mark.parametrize(
    "make",
    [
        lambda d: kiln.zeros(2, device=d),
        lambda d: kiln.full((2,), 1.5, device=d),
        lambda d: kiln.arange(3, device=d),
        lambda d: kiln.tensor([1, 2], device=d),
        lambda d: kiln.randn(2, device=d),
        lambda d: kiln.zeros_like(kiln.ones(2), device=d),
    ],
)
def test_factories_with_a_cuda_device_raise(make, dev):
    with pytest.raises(RuntimeError) as info:
        make(dev)
    message = str(info.value)
    assert message.startswith(PREFIX)
    assert "no CUDA device is available; use device='cpu'" in message


def test_cpu_paths_are_unchanged():
    x = kiln.arange(4, dtype=kiln.float32, device="cpu")
    assert x.to("cpu").tolist() == [0.0, 1.0, 2.0, 3.0]
    assert x.to("cpu", kiln.float64).dtype == kiln.float64
    assert x.to(device=kiln.device("cpu")).device == "cpu"
    assert kiln.zeros(2, device=kiln.device("cpu")).device == "cpu"
    assert kiln.device("cuda", 1).type == "cuda"  # naming a device needs no GPU
    assert str(kiln.device("cuda:1")) == "cuda:1"


def test_nvrtc_status_is_reported():
    version = _C._cuda.nvrtc_version()
    reason = _C._cuda.nvrtc_unavailable_reason()
    if version is None:
        assert reason.startswith("kiln: NVRTC is not available")
    else:
        major, minor = version
        assert major >= 11 and minor >= 0
        assert reason == ""
