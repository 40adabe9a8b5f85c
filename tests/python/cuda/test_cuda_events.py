"""kiln.cuda.Event and the default stream, with torch.cuda's API and error messages; and copies
of every size, large ones included, keeping every byte."""

import time

import numpy as np
import pytest

import kiln

# These run where kiln has a CUDA device: a GPU, or the host emulator (KILN_CUDA_EMULATOR=1,
# which scripts/test.sh sets for a second pytest run of this folder).
pytestmark = pytest.mark.skipif(not kiln.cuda.is_available(),
                                reason="no CUDA device (run with KILN_CUDA_EMULATOR=1)")


def test_elapsed_time_measures_the_work_between_records():
    x = kiln.ones(1000, device="cuda")
    (x * 2 + 1).sum().item()  # compiles the kernels outside the timed window (slow when cold)
    start = kiln.cuda.Event(enable_timing=True)
    end = kiln.cuda.Event(enable_timing=True)
    start.record()
    y = (x * 2 + 1).sum()
    time.sleep(0.05)  # on the emulator the host's clock is the device's
    end.record()
    end.synchronize()
    assert end.query() and start.query()
    ms = start.elapsed_time(end)
    assert isinstance(ms, float)
    assert ms > 0
    if kiln.cuda.is_emulated():
        assert 50 <= ms < 5000
    assert y.item() == 3000
    assert end.elapsed_time(start) == pytest.approx(-ms)
    # Recorded again, after `end`: the time runs from the latest record.
    start.record()
    start.synchronize()
    assert start.elapsed_time(end) <= 0


def test_events_before_record():
    e = kiln.cuda.Event()
    assert e.query()
    e.synchronize()  # nothing to wait for
    assert repr(e) == "<kiln.cuda.Event uninitialized>"
    e.record()
    assert repr(e) == "<kiln.cuda.Event device=cuda:0>"
    assert e.query()
    e.synchronize()


def test_elapsed_time_errors_match_torch():
    a = kiln.cuda.Event(enable_timing=True)
    b = kiln.cuda.Event(enable_timing=True)
    plain = kiln.cuda.Event()
    with pytest.raises(ValueError, match=r"Both events must be recorded before calculating "
                                         r"elapsed time\."):
        a.elapsed_time(b)
    a.record()
    with pytest.raises(ValueError, match="Both events must be recorded"):
        a.elapsed_time(b)
    with pytest.raises(ValueError, match="Both events must be recorded"):
        b.elapsed_time(a)
    plain.record()
    b.record()
    with pytest.raises(ValueError, match=r"Both events must be created with argument "
                                         r"'enable_timing=True'\."):
        a.elapsed_time(plain)
    with pytest.raises(ValueError, match="enable_timing=True"):
        plain.elapsed_time(b)
    # The C++ engine checks as well, for events recorded on both sides.
    with pytest.raises(ValueError, match="enable_timing=True"):
        a._event.elapsed_time(plain._event)
    b.synchronize()
    assert a.elapsed_time(b) >= 0


def test_interprocess_events_are_refused():
    with pytest.raises(NotImplementedError, match="interprocess"):
        kiln.cuda.Event(interprocess=True)
    assert kiln.cuda.Event(blocking=True).query()


def test_streams_are_the_default_stream():
    s = kiln.cuda.current_stream()
    assert s == kiln.cuda.default_stream() == kiln.cuda.default_stream(0)
    assert s == kiln.cuda.current_stream("cuda:0")
    assert hash(s) == hash(kiln.cuda.default_stream())
    assert s.device == "cuda:0" and s.device_index == 0 and s.cuda_stream == 0
    assert repr(s) == "<kiln.cuda.Stream device=cuda:0 cuda_stream=0x0>"
    x = kiln.ones(8, device="cuda") * 3
    s.synchronize()
    assert s.query()
    e = s.record_event()
    assert isinstance(e, kiln.cuda.Event) and e.query()
    timed = kiln.cuda.Event(enable_timing=True)
    assert s.record_event(timed) is timed
    s.wait_event(e)
    e.wait()
    s.wait_stream(kiln.cuda.default_stream())
    timed.record(s)
    assert x.sum().item() == 24
    with pytest.raises(RuntimeError, match="CUDA device 3 does not exist"):
        kiln.cuda.current_stream(3)
    with pytest.raises(ValueError, match="Expected a cuda device"):
        kiln.cuda.default_stream("cpu")


@pytest.mark.parametrize("nbytes", [1, 4096, (1 << 20) - 4, 1 << 20, (1 << 20) + 4,
                                    (7 << 20) + 12, (9 << 20) + 3])
def test_copies_of_every_size_keep_every_byte(nbytes):
    # Above 1 MiB the driver backend stages copies through pinned buffers in 2 MiB chunks.
    data = np.random.default_rng(nbytes).integers(0, 256, nbytes, dtype=np.uint8)
    x = kiln.from_numpy(data)
    c = x.to("cuda")
    np.testing.assert_array_equal(c.cpu().numpy(), data)
    # The same bytes as float32 (NaNs included): a copy moves bytes, not values.
    if nbytes % 4 == 0:
        f = kiln.from_numpy(data.view(np.float32).copy())
        np.testing.assert_array_equal(f.cuda().cpu().numpy().view(np.uint8), data)
