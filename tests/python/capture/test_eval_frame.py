"""The PEP 523 frame hook of kiln._C._capture: callbacks, per-code caches, marks, threads."""

import asyncio
import gc
import sys
import threading
import weakref

import pytest

from kiln._C import _capture as C

pytestmark = pytest.mark.skipif(not C.is_supported(), reason="the frame hook needs CPython 3.11")


@pytest.fixture(autouse=True)
def clean_hook():
    """Every test starts and ends with no callback and empty caches."""
    C.set_callback(None)
    C.reset()
    yield
    C.set_callback(None)
    C.reset()
    assert C.skip_depth() == 0


def passing():
    """A GuardManager without checks (always passes)."""
    return C.GuardManager()


def equals_first(value):
    """A GuardManager that passes when args[0] == value."""
    gm = C.GuardManager()
    gm.root.arg(0).check_equals(value, f"args[0] == {value!r}")
    return gm


class Recorder:
    """A callback that records (func name, args) and replaces the frames of `watched` codes."""

    def __init__(self, watched, make=None):
        self.watched = {f.__code__ for f in watched}
        self.calls = []
        self.make = make or (lambda func: hooked)

    def __call__(self, func, args, code):
        assert code is func.__code__
        assert isinstance(args, tuple)
        if code not in self.watched:
            return None
        self.calls.append((func.__name__, args))
        return self.make(func)


def hooked(func, *args):
    """The replacement most tests install: returns the frame's arguments, tagged. Entries are
    called as entry(func, *args): the function object comes first."""
    assert callable(func)
    return ("hooked", args)


def original(a, b=2, *args, c, **kw):
    return ("orig", a, b, args, c, kw)


def plain(x):
    return ("plain", x)


def test_replacement_result_and_argument_layout():
    rec = Recorder([original])
    assert C.set_callback(rec) is None
    assert C.is_enabled()
    # localsplus order: positional, keyword-only, *args tuple, **kwargs dict.
    assert original(1, c=3, x=4) == ("hooked", (1, 2, 3, (), {"x": 4}))
    assert original(1, 5, 6, 7, c=8) == ("hooked", (1, 5, 8, (6, 7), {}))
    assert original(c=0, a=9) == ("hooked", (9, 2, 0, (), {}))
    assert rec.calls == [
        ("original", (1, 2, 3, (), {"x": 4})),
        ("original", (1, 5, 8, (6, 7), {})),
        ("original", (9, 2, 0, (), {})),
    ]
    C.set_callback(None)
    assert original(1, c=3) == ("orig", 1, 2, (), 3, {})


def test_argument_layout_edge_cases():
    def captured(x, y):
        return lambda: x + y  # x, y become cells after the frame starts

    def kwonly(*, a, b=1):
        return a + b

    def noargs():
        return "none"

    rec = Recorder([captured, kwonly, noargs])
    C.set_callback(rec)
    assert captured(1, 2) == ("hooked", (1, 2))
    assert kwonly(a=5) == ("hooked", (5, 1))
    assert noargs() == ("hooked", ())
    C.set_callback(None)
    assert captured(1, 2)() == 3 and kwonly(a=5) == 6 and noargs() == "none"


def test_callback_sees_function_and_code():
    seen = []

    def cb(func, args, code):
        if code is plain.__code__:
            seen.append((func, args, code))
        return None

    C.set_callback(cb)
    assert plain(7) == ("plain", 7)
    assert seen == [(plain, (7,), plain.__code__)]


def test_none_runs_frame_and_asks_again():
    rec = Recorder([plain], make=lambda func: None)
    C.set_callback(rec)
    assert [plain(1), plain(2)] == [("plain", 1), ("plain", 2)]
    assert rec.calls == [("plain", (1,)), ("plain", (2,))]
    assert C.entries(plain.__code__) == []


def test_passing_entry_is_used_without_callback():
    rec = Recorder([plain])
    gm = passing()
    C.add_entry(plain.__code__, gm, hooked)
    C.set_callback(rec)
    assert plain(3) == ("hooked", (3,))
    assert rec.calls == []
    [(g, fn)] = C.entries(plain.__code__)
    assert g is gm and fn is hooked


def test_failing_guard_calls_callback():
    rec = Recorder([plain], make=lambda func: lambda f, x: ("fresh", x))
    C.add_entry(plain.__code__, equals_first(1), hooked)
    C.set_callback(rec)
    assert plain(1) == ("hooked", (1,))
    assert plain(2) == ("fresh", 2)
    assert rec.calls == [("plain", (2,))]


def test_entries_front_insert_and_most_recent_first():
    gm1, gm2 = equals_first(1), equals_first(2)
    f1, f2 = (lambda f, x: ("one", x)), (lambda f, x: ("two", x))
    C.add_entry(plain.__code__, gm1, f1)
    C.add_entry(plain.__code__, gm2, f2)
    assert [g for g, _ in C.entries(plain.__code__)] == [gm2, gm1]
    C.set_callback(Recorder([]))
    assert plain(1) == ("one", 1)
    assert [g for g, _ in C.entries(plain.__code__)] == [gm1, gm2]
    assert plain(2) == ("two", 2)
    assert [(g, f) for g, f in C.entries(plain.__code__)] == [(gm2, f2), (gm1, f1)]


def test_mark_skip_ignores_entries_and_callback():
    rec = Recorder([plain])
    C.add_entry(plain.__code__, passing(), hooked)
    C.mark_skip(plain.__code__)
    assert C.is_skipped(plain.__code__)
    C.set_callback(rec)
    assert plain(4) == ("plain", 4)
    assert rec.calls == []


def test_mark_no_capture_uses_entries_and_runs_misses():
    rec = Recorder([plain])
    C.add_entry(plain.__code__, equals_first(1), hooked)
    C.mark_no_capture(plain.__code__)
    assert C.is_no_capture(plain.__code__) and not C.is_skipped(plain.__code__)
    C.set_callback(rec)
    assert plain(1) == ("hooked", (1,))
    assert plain(2) == ("plain", 2)
    assert rec.calls == []


def test_reset_clears_entries_and_marks():
    C.add_entry(plain.__code__, passing(), hooked)
    C.mark_skip(original.__code__)
    C.mark_no_capture(plain.__code__)
    C.reset()
    assert C.entries(plain.__code__) == []
    assert not C.is_skipped(original.__code__)
    assert not C.is_no_capture(plain.__code__)
    rec = Recorder([plain])
    C.set_callback(rec)
    assert plain(5) == ("hooked", (5,))
    assert rec.calls == [("plain", (5,))]


def test_generators_and_coroutines_are_not_intercepted():
    def gen(n):
        yield from range(n)

    async def coro(x):
        return x + 1

    async def agen():
        yield 1

    async def drain():
        return [v async for v in agen()]

    rec = Recorder([gen, coro, agen, drain])
    C.set_callback(rec)
    assert list(gen(3)) == [0, 1, 2]
    assert asyncio.run(coro(1)) == 2
    assert asyncio.run(drain()) == [1]
    assert rec.calls == []


def test_module_and_class_bodies_are_not_intercepted():
    seen = []
    C.set_callback(lambda func, args, code: seen.append(code.co_name))
    ns = {}
    exec(compile("class A:\n    y = 1\nz = A.y + 1\n", "<kiln-test>", "exec"), ns)
    C.set_callback(None)
    assert ns["z"] == 2
    assert "<module>" not in seen and "A" not in seen


def test_callback_exception_propagates_and_hook_recovers():
    def cb(func, args, code):
        if code is plain.__code__:
            raise ValueError("boom")
        return None

    C.set_callback(cb)
    with pytest.raises(ValueError, match="boom"):
        plain(1)
    assert C.is_enabled()
    assert C.skip_depth() == 0
    C.set_callback(Recorder([plain]))
    assert plain(1) == ("hooked", (1,))


def test_entry_exception_propagates():
    def bad(func, x):
        raise KeyError(x)

    C.add_entry(plain.__code__, passing(), bad)
    C.set_callback(Recorder([]))
    with pytest.raises(KeyError):
        plain(1)


def test_frames_inside_callback_run_as_written():
    inner = []

    def cb(func, args, code):
        if code is not original.__code__:
            return None
        assert not C.is_enabled()
        inner.append(plain(args[0]))  # plain is watched by rec, but the hook is off here
        return rec(func, args, code)

    rec = Recorder([original, plain])
    C.add_entry(plain.__code__, passing(), hooked)  # even cached entries are not used
    C.set_callback(cb)
    assert original(1, c=2) == ("hooked", (1, 2, 2, (), {}))
    assert inner == [("plain", 1)]
    assert rec.calls == [("original", (1, 2, 2, (), {}))]


def test_replacement_runs_with_hook_enabled():
    def compiled(func, a, b, c, args, kw):
        return ("compiled", plain(a))

    rec = Recorder([original, plain])
    rec.make = lambda func: compiled if func is original else hooked
    C.mark_skip(compiled.__code__)
    C.set_callback(rec)
    assert original(6, c=0) == ("compiled", ("hooked", (6,)))
    assert [name for name, _ in rec.calls] == ["original", "plain"]


def test_callback_may_clear_itself():
    def cb(func, args, code):
        if code is plain.__code__:
            C.set_callback(None)
        return None

    C.set_callback(cb)
    assert plain(2) == ("plain", 2)
    assert C.get_callback() is None
    assert C.eval_frame_state() == "default"


def test_set_callback_returns_previous_and_restores_default():
    first, second = Recorder([]), Recorder([])
    assert C.eval_frame_state() == "default"
    assert C.set_callback(first) is None
    assert C.eval_frame_state() == "kiln"
    assert C.set_callback(second) is first
    assert C.get_callback() is second
    assert C.set_callback(None) is second
    assert C.eval_frame_state() == "default"
    assert not C.is_enabled()
    with pytest.raises(TypeError):
        C.set_callback(42)


def test_skip_enter_and_exit():
    rec = Recorder([plain])
    C.set_callback(rec)
    C.skip_enter()
    C.skip_enter()
    assert not C.is_enabled() and C.skip_depth() == 2
    assert plain(1) == ("plain", 1)
    C.skip_exit()
    assert plain(1) == ("plain", 1)
    C.skip_exit()
    assert C.is_enabled()
    assert plain(1) == ("hooked", (1,))
    with pytest.raises(RuntimeError, match="skip_enter"):
        C.skip_exit()


def test_thread_without_callback_is_unaffected():
    rec = Recorder([plain])
    C.set_callback(rec)
    results = {}

    def worker():
        results["enabled"] = C.is_enabled()
        results["value"] = plain(9)

    t = threading.Thread(target=worker)
    t.start()
    t.join()
    assert results == {"enabled": False, "value": ("plain", 9)}
    assert plain(9) == ("hooked", (9,))
    assert rec.calls == [("plain", (9,))]


def test_hook_stays_installed_while_any_thread_has_a_callback():
    C.set_callback(Recorder([]))
    ready, done = threading.Event(), threading.Event()
    seen = {}

    def worker():
        C.set_callback(Recorder([plain]))
        seen["value"] = plain(1)
        ready.set()
        done.wait(10)
        C.set_callback(None)

    t = threading.Thread(target=worker)
    t.start()
    assert ready.wait(10)
    C.set_callback(None)
    assert C.eval_frame_state() == "kiln"  # the worker still has its callback
    assert plain(1) == ("plain", 1)
    done.set()
    t.join()
    assert seen["value"] == ("hooked", (1,))
    assert C.eval_frame_state() == "default"


def rec_depth(n):
    return 0 if n == 0 else 1 + rec_depth(n - 1)


def test_deep_recursion_under_hook():
    count = []

    def cb(func, args, code):
        if code is rec_depth.__code__:
            count.append(args[0])
        return None

    C.set_callback(cb)
    assert rec_depth(400) == 400
    assert len(count) == 401
    with pytest.raises(RecursionError):
        rec_depth(sys.getrecursionlimit() * 5)
    assert C.is_enabled()
    # Cached entries: every level goes through a guard and a Python replacement.
    C.add_entry(rec_depth.__code__, passing(), lambda f, n: 0 if n == 0 else 1 + rec_depth(n - 1))
    assert rec_depth(300) == 300


class EqCalls:
    """An argument whose __eq__ runs Python code (and may raise)."""

    def __init__(self, action):
        self.action = action

    def __eq__(self, other):
        return self.action()

    __hash__ = object.__hash__


def test_guard_running_python_is_not_intercepted():
    rec = Recorder([plain])
    inside = []

    def action():
        inside.append(plain("inner"))
        return True

    token = EqCalls(action)
    gm = C.GuardManager()
    gm.root.arg(0).check_type(EqCalls, "type")
    gm.root.arg(0).check_equals(token, "eq")
    C.add_entry(plain.__code__, gm, hooked)
    C.set_callback(rec)
    other = EqCalls(action)
    assert plain(other) == ("hooked", (other,))
    assert inside == [("plain", "inner")]
    assert rec.calls == []


def test_guard_raising_or_resetting_falls_back_to_callback():
    def raising():
        raise RuntimeError("eq failed")

    def resetting():
        C.reset()
        return True

    rec = Recorder([plain])
    C.set_callback(rec)
    for action in (raising, resetting):
        gm = C.GuardManager()
        gm.root.arg(0).check_equals(EqCalls(action), "eq")
        C.add_entry(plain.__code__, gm, lambda f, x: "entry")
        arg = EqCalls(action)
        result = plain(arg)
        # reset() inside a passing guard: the entry still answers this call.
        assert result == ("entry" if action is resetting else ("hooked", (arg,)))
    assert len(rec.calls) == 1
    assert C.entries(plain.__code__) == []


def test_add_entry_argument_errors():
    with pytest.raises(TypeError, match="code object"):
        C.add_entry(plain, passing(), hooked)
    with pytest.raises(TypeError, match="GuardManager"):
        C.add_entry(plain.__code__, object(), hooked)
    with pytest.raises(TypeError, match="callable"):
        C.add_entry(plain.__code__, passing(), 3)
    with pytest.raises(TypeError):
        C.mark_skip("not code")


class CallableProbe:
    """A callable whose lifetime tests observe through a weak reference."""

    def __call__(self, *args):
        return "probe"


def test_references_are_released():
    probe, gm = CallableProbe(), passing()
    probe_ref, gm_ref = weakref.ref(probe), weakref.ref(gm)
    C.add_entry(plain.__code__, gm, probe)
    del probe, gm
    gc.collect()
    assert probe_ref() is not None and gm_ref() is not None
    C.reset()
    gc.collect()
    assert probe_ref() is None and gm_ref() is None

    # The code object's own state goes with it.
    ns = {}
    exec("def temp(x):\n    return x\n", ns)
    probe = CallableProbe()
    probe_ref = weakref.ref(probe)
    C.add_entry(ns["temp"].__code__, passing(), probe)
    del probe, ns
    gc.collect()
    assert probe_ref() is None

    cb = Recorder([])
    cb_ref = weakref.ref(cb)
    C.set_callback(cb)
    del cb
    gc.collect()
    assert cb_ref() is not None
    C.set_callback(None)
    gc.collect()
    assert cb_ref() is None
