"""kiln.profiler: torch.profiler's interface over the ranges code marks with ``record_function``.

kiln has no kernel-level tracer to hand to torch's Kineto, so a ``profile`` records the
``record_function`` ranges (and, with a schedule, one ``ProfilerStep#N`` range per step) that
close while it records: wall-clock start and end, per thread. ``key_averages().table()`` totals
them by name, self time being a range's time minus that of the ranges nested in it, and
``export_chrome_trace`` writes them as a Chrome trace (chrome://tracing, Perfetto). Schedules
follow torch's: ``schedule(...)`` decides per step whether to record, and ``on_trace_ready``
runs when a recording cycle ends.

Inside code compiled by ``kiln.compile`` a ``record_function`` block is captured as a block that
changes nothing (``_capture/calls.py``): the ops in it are part of the compiled graph, so no range
is recorded for them.
"""

from __future__ import annotations

import enum
import functools
import gzip
import json
import os
import threading
import time
import warnings

__all__ = [
    "ProfilerAction",
    "ProfilerActivity",
    "profile",
    "record_function",
    "schedule",
    "supported_activities",
    "tensorboard_trace_handler",
]


class ProfilerActivity(enum.Enum):
    CPU = 0
    XPU = 1
    MTIA = 2
    CUDA = 3
    HPU = 4
    PrivateUse1 = 5


class ProfilerAction(enum.Enum):
    NONE = 0
    WARMUP = 1
    RECORD = 2
    RECORD_AND_SAVE = 3


def supported_activities() -> set:
    return {ProfilerActivity.CPU}


_recording: list = []  # the profilers recording now: every closing range goes to each


def _now_us() -> float:
    return time.perf_counter_ns() / 1000.0


class record_function:  # noqa: N801 - torch's name
    """A named range, as a context manager or a decorator; profilers recording when it closes
    keep it. kiln.compile's capture treats the block as one that changes nothing."""

    _kiln_noop_context_in_capture = True

    def __init__(self, name: str, args: str | None = None) -> None:
        self.name = name
        self.args = args
        self._starts: list = []  # a stack: one instance may be entered again inside itself

    def __enter__(self):
        self._starts.append(_now_us())
        return self

    def __exit__(self, *exc) -> bool:
        start = self._starts.pop()
        if _recording:
            event = FunctionEvent(self.name, start, _now_us(), threading.get_ident())
            for prof in list(_recording):
                prof._events.append(event)
        return False

    def __call__(self, fn):
        name, args_ = self.name, self.args

        @functools.wraps(fn)
        def wrapped(*args, **kwargs):
            with record_function(name, args_):  # a new range per call (kiln.compile takes it)
                return fn(*args, **kwargs)

        return wrapped


class FunctionEvent:
    """One recorded range, times in microseconds (torch's unit)."""

    def __init__(self, name: str, start_us: float, end_us: float, thread: int) -> None:
        self.name = self.key = name
        self.start_us = start_us
        self.end_us = end_us
        self.thread = thread
        self.count = 1
        self.cpu_time_total = end_us - start_us
        self.self_cpu_time_total = self.cpu_time_total  # less its children's, once known
        self.device_time_total = self.self_device_time_total = 0.0

    @property
    def cpu_time(self) -> float:
        return self.cpu_time_total / max(self.count, 1)

    cuda_time_total = self_cuda_time_total = property(lambda self: 0.0)

    def __repr__(self) -> str:
        return (f"<FunctionEvent name={self.name!r} cpu_time_total={self.cpu_time_total:.3f}us "
                f"self_cpu_time_total={self.self_cpu_time_total:.3f}us count={self.count}>")


class FunctionEventAvg(FunctionEvent):
    """The ranges of one name, totalled."""

    def __init__(self, name: str) -> None:
        super().__init__(name, 0.0, 0.0, 0)
        self.count = 0

    def add(self, e: FunctionEvent) -> None:
        self.count += e.count
        self.cpu_time_total += e.cpu_time_total
        self.self_cpu_time_total += e.self_cpu_time_total


def _fmt_us(us: float) -> str:
    if us >= 1e6:
        return f"{us / 1e6:.3f}s"
    if us >= 1e3:
        return f"{us / 1e3:.3f}ms"
    return f"{us:.3f}us"


class EventList(list):
    """Events with torch's ``table`` and ``total_average``."""

    def table(self, sort_by=None, row_limit=100, max_src_column_width=75,
              max_name_column_width=55, max_shapes_column_width=80, header=None,
              top_level_events_only=False, **kwargs) -> str:
        rows = list(self)
        if sort_by is not None:
            rows.sort(key=lambda e: getattr(e, sort_by, 0), reverse=True)
        if row_limit is not None and row_limit >= 0:
            rows = rows[:row_limit]
        self_total = sum(e.self_cpu_time_total for e in self) or 1.0
        width = min(max([len(e.name) for e in rows] + [4]), max_name_column_width)
        cols = ["Self CPU %", "Self CPU", "CPU total %", "CPU total", "CPU time avg", "# of Calls"]
        line = "-" * width + "  " + "  ".join("-" * 12 for _ in cols)
        out = [line] if header is None else [header, line]
        out += ["Name".ljust(width) + "  " + "  ".join(c.rjust(12) for c in cols), line]
        for e in rows:
            values = [f"{100 * e.self_cpu_time_total / self_total:.2f}%",
                      _fmt_us(e.self_cpu_time_total),
                      f"{100 * e.cpu_time_total / self_total:.2f}%", _fmt_us(e.cpu_time_total),
                      _fmt_us(e.cpu_time), str(e.count)]
            name = e.name if len(e.name) <= width else e.name[:width - 3] + "..."
            out.append(name.ljust(width) + "  " + "  ".join(v.rjust(12) for v in values))
        out += [line, f"Self CPU time total: {_fmt_us(sum(e.self_cpu_time_total for e in self))}"]
        return "\n".join(out) + "\n"

    def total_average(self) -> FunctionEventAvg:
        total = FunctionEventAvg("Total")
        for e in self:
            total.add(e)
        return total

    @property
    def self_cpu_time_total(self) -> float:
        return sum(e.self_cpu_time_total for e in self)


def _with_self_times(events: list) -> list:
    """Sets each event's self time: its time less that of the events directly inside it (same
    thread)."""
    by_thread: dict = {}
    for e in events:
        e.self_cpu_time_total = e.cpu_time_total
        by_thread.setdefault(e.thread, []).append(e)
    for evs in by_thread.values():
        evs.sort(key=lambda e: (e.start_us, -e.end_us))
        open_: list = []
        for e in evs:
            while open_ and open_[-1].end_us <= e.start_us:
                open_.pop()
            if open_ and e.end_us <= open_[-1].end_us:
                open_[-1].self_cpu_time_total -= e.cpu_time_total
            open_.append(e)
    return events


def _default_schedule_fn(_: int) -> ProfilerAction:
    return ProfilerAction.RECORD


def schedule(*, wait: int, warmup: int, active: int, repeat: int = 0, skip_first: int = 0,
             skip_first_wait: int = 0):
    """torch.profiler.schedule: the action of each step number (torch's arithmetic)."""

    def schedule_fn(step: int) -> ProfilerAction:
        if step < 0:
            raise AssertionError(f"Step must be non-negative. Got {step}.")
        if step < skip_first:
            return ProfilerAction.NONE
        step -= skip_first
        if skip_first_wait != 0:
            step += wait
        num_steps = wait + warmup + active
        if repeat > 0 and step / num_steps >= repeat:
            return ProfilerAction.NONE
        mod_step = step % num_steps
        if mod_step < wait:
            return ProfilerAction.NONE
        if mod_step < wait + warmup:
            return ProfilerAction.WARMUP
        return (ProfilerAction.RECORD if mod_step < num_steps - 1
                else ProfilerAction.RECORD_AND_SAVE)

    if wait < 0 or warmup < 0 or active <= 0 or repeat < 0 or skip_first < 0:
        raise AssertionError(
            f"Invalid profiler schedule arguments. Got wait={wait} (need >= 0), warmup={warmup} "
            f"(need >= 0), active={active} (need > 0), repeat={repeat} (need >= 0), "
            f"skip_first={skip_first} (need >= 0).")
    if warmup == 0:
        warnings.warn("Profiler won't be using warmup, this can skew profiler results",
                      stacklevel=2)
    return schedule_fn


def tensorboard_trace_handler(dir_name, worker_name=None, use_gzip=False,
                              use_python_export=False):
    """A handler that writes nothing: kiln's traces have no TensorBoard plugin format (call
    ``prof.export_chrome_trace(path)`` in your own ``on_trace_ready`` instead)."""

    def handler(prof) -> None:
        return None

    return handler


_RECORDING = (ProfilerAction.RECORD, ProfilerAction.RECORD_AND_SAVE)


class profile:  # noqa: N801 - torch's name
    """torch.profiler.profile: records ``record_function`` ranges while its schedule says so.

    Only CPU ranges exist; the options torch uses for Kineto (shapes, memory, stacks, flops)
    are accepted and change nothing."""

    def __init__(self, *, activities=None, schedule=None, on_trace_ready=None,
                 record_shapes=False, profile_memory=False, with_stack=False, with_flops=False,
                 with_modules=False, experimental_config=None, execution_trace_observer=None,
                 acc_events=False, use_cuda=None, custom_trace_id_callback=None) -> None:
        self.activities = set(activities) if activities else supported_activities()
        self.schedule = schedule if schedule is not None else _default_schedule_fn
        self._record_steps = schedule is not None  # torch marks steps only when scheduled
        self.on_trace_ready = on_trace_ready
        self.record_shapes = record_shapes
        self.profile_memory = profile_memory
        self.with_stack = with_stack
        self.step_num = 0
        self.current_action = self.schedule(self.step_num)
        self._events: list = []
        self._metadata: dict = {}
        self._step_start: float | None = None
        self._started = False

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc) -> bool:
        self.stop()
        return False

    # -- recording ---------------------------------------------------------------------
    def _begin(self) -> None:
        self._events = []
        if self not in _recording:
            _recording.append(self)
        self._step_start = _now_us() if self._record_steps else None

    def _end(self) -> None:
        self._close_step()
        if self in _recording:
            _recording.remove(self)

    def _close_step(self) -> None:
        if self._step_start is not None and self in _recording:
            self._events.append(FunctionEvent(f"ProfilerStep#{self.step_num}", self._step_start,
                                              _now_us(), threading.get_ident()))
        self._step_start = None

    def _trace_ready(self) -> None:
        if self.on_trace_ready is not None:
            self.on_trace_ready(self)

    def start(self) -> None:
        self._started = True
        if self.current_action in _RECORDING:
            self._begin()

    def stop(self) -> None:
        if not self._started:
            return
        self._started = False
        if self.current_action in _RECORDING:
            self._end()
            self._trace_ready()

    def step(self) -> None:
        """Ends step ``step_num`` and applies the schedule's action for the next one."""
        previous = self.current_action
        if previous in _RECORDING:
            self._close_step()
        self.step_num += 1
        self.current_action = self.schedule(self.step_num)
        if not self._started:
            return
        was, now = previous in _RECORDING, self.current_action in _RECORDING
        if was and (previous is ProfilerAction.RECORD_AND_SAVE or not now):
            self._end()
            self._trace_ready()
            if now:
                self._begin()
        elif now and not was:
            self._begin()
        elif now and self._record_steps:
            self._step_start = _now_us()

    # -- results -----------------------------------------------------------------------
    def events(self) -> EventList:
        return EventList(_with_self_times(list(self._events)))

    def key_averages(self, group_by_input_shape=False, group_by_stack_n=0,
                     group_by_overload_name=False) -> EventList:
        averages: dict = {}
        for e in self.events():
            averages.setdefault(e.key, FunctionEventAvg(e.key)).add(e)
        return EventList(averages.values())

    def add_metadata(self, key: str, value: str) -> None:
        self._metadata[key] = value

    def add_metadata_json(self, key: str, value: str) -> None:
        self._metadata[key] = json.loads(value)

    def export_chrome_trace(self, path) -> str:
        """Writes the ranges as a Chrome trace (gzip-compressed when ``path`` ends in .gz); the
        file is replaced atomically, so a reader never sees a partial trace."""
        from kiln._export.atomic import atomic_write

        pid = os.getpid()
        trace = {
            "schemaVersion": 1,
            "displayTimeUnit": "ms",
            "traceEvents": [
                {"ph": "X", "cat": "user_annotation", "name": e.name, "pid": pid,
                 "tid": e.thread, "ts": e.start_us, "dur": e.cpu_time_total, "args": {}}
                for e in sorted(self._events, key=lambda e: e.start_us)
            ],
            **self._metadata,
        }
        data = json.dumps(trace).encode()
        if str(path).endswith(".gz"):
            data = gzip.compress(data)
        atomic_write(os.fspath(path), lambda f: f.write(data))
        return os.fspath(path)

    def export_stacks(self, path, metric: str = "self_cpu_time_total") -> None:
        raise NotImplementedError("kiln.profiler: stacks are not recorded (with_stack is "
                                  "accepted but kiln records only record_function ranges)")

    def export_memory_timeline(self, path, device=None) -> None:
        raise NotImplementedError("kiln.profiler: memory is not profiled")
