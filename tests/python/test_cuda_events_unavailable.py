"""kiln.cuda.Event and streams on a machine without a usable GPU: an event may be made, and
everything that needs a device says CUDA is not available."""

import pytest

import kiln
from kiln import _C

needs_no_cuda = pytest.mark.skipif(kiln.cuda.is_available(), reason="a CUDA device is present")
PREFIX = "kiln: CUDA is not available: "


@needs_no_cuda
def test_events_are_lazy_and_recording_needs_a_device():
    e = kiln.cuda.Event(enable_timing=True)
    assert e.query()  # nothing recorded, nothing to wait for
    e.synchronize()
    with pytest.raises(RuntimeError, match=PREFIX):
        e.record()
    with pytest.raises(ValueError, match="Both events must be recorded"):
        e.elapsed_time(kiln.cuda.Event(enable_timing=True))
    with pytest.raises(RuntimeError, match=PREFIX):
        _C._cuda.event_create(0, True)


@needs_no_cuda
def test_streams_need_a_device():
    with pytest.raises(RuntimeError, match=PREFIX):
        kiln.cuda.current_stream()
    with pytest.raises(RuntimeError, match=PREFIX):
        kiln.cuda.default_stream(0)
