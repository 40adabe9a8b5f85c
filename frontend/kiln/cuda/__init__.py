"""kiln.cuda: the CUDA devices kiln can see, with torch.cuda's names.

Tensors move with ``.to("cuda")`` / ``.cuda()`` / ``.cpu()`` or are made there with
``device="cuda"``; every op on them is a one-node graph of kiln's IR, generated as CUDA C,
compiled once per signature by NVRTC and run through the CUDA driver API (``cuda/``). Both
libraries are opened with dlopen on first use, so importing kiln never needs them. On a machine
without the NVIDIA driver or a GPU, ``is_available()`` is False, ``device_count()`` is 0, and
everything that needs a device raises ``RuntimeError("kiln: CUDA is not available: <reason>")``,
except the calls torch also lets through there (``empty_cache``, ``manual_seed``,
``manual_seed_all``, ``seed``: nothing to do).

``KILN_CUDA_EMULATOR=1`` (set before kiln is imported) replaces the GPUs with one device emulated
on the host: the same generated CUDA C, compiled by the host compiler, in host memory. Tests use
it to run the whole CUDA path on machines without a GPU; it is slow and not for real work.

Timing follows torch: ``Event(enable_timing=True)``, ``record()`` before and after, then
``end.synchronize()`` and ``start.elapsed_time(end)`` in milliseconds. kiln queues every copy and
kernel of a device on its default stream, so ``current_stream()`` and ``default_stream()`` are
that one stream; there are no other streams yet.
"""

from __future__ import annotations

import kiln
from kiln import _C

__all__ = [
    "Event",
    "Stream",
    "current_device",
    "current_stream",
    "default_stream",
    "empty_cache",
    "is_emulated",
    "memory_allocated",
    "memory_reserved",
    "device_count",
    "get_device_capability",
    "get_device_name",
    "get_device_properties",
    "is_available",
    "manual_seed",
    "manual_seed_all",
    "seed",
    "seed_all",
    "synchronize",
]


def is_available() -> bool:
    """Whether a CUDA driver and at least one device can be used."""
    return _C._cuda.is_available()


def device_count() -> int:
    """The number of CUDA devices (0 when CUDA is not available)."""
    return _C._cuda.device_count()


def _unavailable_error() -> RuntimeError:
    return RuntimeError(f"kiln: CUDA is not available: {_C._cuda.unavailable_reason()}")


def _require() -> None:
    if not _C._cuda.is_available():
        raise _unavailable_error()


def _index(device) -> int:
    """The device index of None (the current device), an int, 'cuda:1' or a kiln.device."""
    _require()
    if device is None:
        return current_device()
    if isinstance(device, int):
        index = device
    else:
        from kiln._tensor import device as device_type

        d = device_type(device)
        if d.type != "cuda":
            raise ValueError(f"Expected a cuda device, but got: {device}")
        index = current_device() if d.index is None else d.index
    if not 0 <= index < device_count():
        raise RuntimeError(f"kiln: CUDA device {index} does not exist ({device_count()} available)")
    return index


def current_device() -> int:
    """The index of the current device (kiln uses device 0)."""
    _require()
    return 0


def get_device_properties(device=None) -> dict:
    """name, major, minor, multi_processor_count, total_memory, max_threads_per_block."""
    return _C._cuda.device_properties(_index(device))


def get_device_name(device=None) -> str:
    """The device's name, e.g. 'NVIDIA H100 80GB HBM3'."""
    return get_device_properties(device)["name"]


def get_device_capability(device=None) -> tuple[int, int]:
    """The device's compute capability (major, minor)."""
    props = get_device_properties(device)
    return props["major"], props["minor"]


def synchronize(device=None) -> None:
    """Waits until all work on the device has finished."""
    _C._cuda.synchronize(_index(device))


def is_emulated() -> bool:
    """Whether the CUDA device is the host emulator (``KILN_CUDA_EMULATOR=1``)."""
    return _C._cuda.is_emulated()


def memory_allocated(device=None) -> int:
    """Bytes of device memory held by live tensors and programs on the device."""
    return _C._cuda.memory_allocated(_index(device))


def memory_reserved(device=None) -> int:
    """Bytes the caching allocator holds from the device: live, plus cached for reuse."""
    return _C._cuda.memory_reserved(_index(device))


def empty_cache(device=None) -> None:
    """Returns the cached, unused blocks of the device's memory to the device; nothing to do
    where CUDA is not available (as torch's, which scripts call unconditionally)."""
    if not is_available():
        return
    _C._cuda.empty_cache(_index(device))


def manual_seed(seed) -> None:
    """Seeds the random numbers of CUDA tensors. kiln draws them from its one generator, which
    this seeds; without CUDA it does nothing, as torch's (seed_everything calls it
    unconditionally)."""
    if is_available():
        kiln.manual_seed(seed)


manual_seed_all = manual_seed


def seed() -> None:
    if is_available():
        kiln.seed()


seed_all = seed


def _eager_programs_compiled() -> int:
    """How many eager op signatures have been compiled in this process (tests of the cache)."""
    return _C._cuda.eager_programs_compiled()


class Stream:
    """The default stream of a CUDA device, the one stream kiln queues a device's work on.

    Made by :func:`current_stream` and :func:`default_stream`; work on it runs in the order it
    was queued, so waiting for an event or a stream of the same device is already implied.
    """

    cuda_stream = 0  # the default stream's handle in CUDA's API

    def __init__(self, device=None):
        self.device_index = _index(device)

    @property
    def device(self):
        """The stream's device, ``kiln.device("cuda:N")``."""
        from kiln._tensor import device as device_type

        return device_type(f"cuda:{self.device_index}")

    def synchronize(self) -> None:
        """Waits until all work queued on the stream has finished."""
        synchronize(self.device_index)

    def query(self) -> bool:
        """Whether all work queued on the stream has finished, without waiting."""
        return self.record_event().query()

    def record_event(self, event: Event | None = None) -> Event:
        """Records ``event`` (a new one when None) at the current end of the stream."""
        event = Event() if event is None else event
        event.record(self)
        return event

    def wait_event(self, event: Event) -> None:
        """Makes later work on the stream wait for ``event``: implied on the same device; an
        event of another device is waited for on the host."""
        if event._event is not None and event._event.device != self.device_index:
            event.synchronize()

    def wait_stream(self, stream: Stream) -> None:
        """Makes later work on the stream wait for the work queued on ``stream`` so far."""
        self.wait_event(stream.record_event())

    def __eq__(self, other) -> bool:
        return isinstance(other, Stream) and other.device_index == self.device_index

    def __hash__(self) -> int:
        return hash(("kiln.cuda.Stream", self.device_index))

    def __repr__(self) -> str:
        return f"<kiln.cuda.Stream device=cuda:{self.device_index} cuda_stream=0x0>"


def current_stream(device=None) -> Stream:
    """The stream work on ``device`` is queued on: its default stream."""
    return Stream(device)


def default_stream(device=None) -> Stream:
    """The default stream of ``device``."""
    return Stream(device)


class Event:
    """A CUDA event, as ``torch.cuda.Event``: a marker in a device's stream that completes when
    the work queued before it does, and times that work with ``elapsed_time``.

    The device event is made at the first ``record()``, on the recording stream's device; before
    that the event counts as complete. ``blocking`` is accepted and waits spin, as torch's do
    without it; ``interprocess`` events are not supported. On the host emulator work is done when
    the call that queued it returns, so events are complete once recorded and time the host's
    clock.
    """

    def __init__(self, enable_timing: bool = False, blocking: bool = False,
                 interprocess: bool = False):
        if interprocess:
            raise NotImplementedError("kiln: interprocess CUDA events are not supported")
        self.enable_timing = bool(enable_timing)
        self.blocking = bool(blocking)
        self._event = None

    def record(self, stream: Stream | None = None) -> None:
        """Records the event at the current end of ``stream`` (the current stream when None)."""
        if stream is None:
            stream = current_stream()
        if self._event is None:
            self._event = _C._cuda.event_create(stream.device_index, self.enable_timing)
        elif self._event.device != stream.device_index:
            raise RuntimeError(f"kiln: Event device {self._event.device} does not match "
                               f"recording stream's device {stream.device_index}.")
        self._event.record()

    def wait(self, stream: Stream | None = None) -> None:
        """Makes later work on ``stream`` (the current stream when None) wait for the event."""
        (current_stream() if stream is None else stream).wait_event(self)

    def query(self) -> bool:
        """Whether the work before the last record has finished (True when never recorded)."""
        return self._event is None or self._event.query()

    def synchronize(self) -> None:
        """Waits until the work before the last record has finished."""
        if self._event is not None:
            self._event.synchronize()

    def elapsed_time(self, end_event: Event) -> float:
        """Milliseconds from this event's record to ``end_event``'s; both need
        ``enable_timing=True``, a record, and to have completed (``end_event.synchronize()``)."""
        if not (self.enable_timing and end_event.enable_timing):
            raise ValueError(
                "kiln: Both events must be created with argument 'enable_timing=True'.")
        if self._event is None or end_event._event is None:
            raise ValueError("kiln: Both events must be recorded before calculating elapsed time.")
        return self._event.elapsed_time(end_event._event)

    def __repr__(self) -> str:
        if self._event is None:
            return "<kiln.cuda.Event uninitialized>"
        return f"<kiln.cuda.Event device=cuda:{self._event.device}>"

from kiln.cuda import amp  # noqa: E402,F401 - torch.cuda.amp
