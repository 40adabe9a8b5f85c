"""Captures of one code object are serialized: threads whose first calls arrive together do not
each capture an entry of their own. A thread that waited for another's capture looks the cache
up again and runs the new entry when its guards pass, so 8 threads calling one compiled module
with batch sizes 4, 5 and 6 leave at most 2 entries (static, then a dynamic batch) and never
reach the recompile limit.
"""

import sys
import threading
import warnings

import pytest
from corpus_util import assert_same, compiler_of, fresh_capture  # noqa: F401

import kiln
import kiln.nn as nn
from kiln._capture.convert_frame import code_state

C = kiln._C._capture
THREADS = 8
BATCHES = (4, 5, 6)


class Mlp(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(16, 16) for _ in range(6)])

    def forward(self, x):
        for layer in self.layers:  # several layers: a capture long enough to interleave
            x = layer(x).relu()
        return x.sum(-1)


@kiln.compiler.disable
def kept_eager(t):
    return t


def breaks_once(x):
    y = kept_eager(x.sin())  # a graph break: the rest runs in a resume function
    return y * 2 + 1


@pytest.fixture
def fast_switches():
    """Switches threads every 10 us, so that captures surely run while others arrive."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    yield
    sys.setswitchinterval(interval)


def inputs():
    return {b: [kiln.randn(b, 16) for _ in range(THREADS)] for b in BATCHES}


def run_threads(fn, xs, calls=6):
    """Calls fn from THREADS threads started together; thread t's call i uses batch
    BATCHES[(t + i) % 3]. Returns {(thread, call): (batch, result)} and the warnings."""
    barrier = threading.Barrier(THREADS)
    results, errors = {}, []

    def work(t):
        try:
            barrier.wait()
            for i in range(calls):
                b = BATCHES[(t + i) % len(BATCHES)]
                results[t, i] = b, fn(xs[b][t])
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            errors.append(e)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        threads = [threading.Thread(target=work, args=(t,)) for t in range(THREADS)]
        for th in threads:
            th.start()
        for th in threads:
            th.join(timeout=300)
        assert not any(th.is_alive() for th in threads), "a thread hangs (deadlock?)"
    if errors:
        raise errors[0]
    assert len(results) == THREADS * calls
    return results, [str(w.message) for w in caught]


@pytest.mark.parametrize("backend", [None, "eager"])
def test_threads_share_the_entries_of_a_module(fast_switches, backend):
    kiln.manual_seed(0)
    model = Mlp().eval().requires_grad_(False)  # inference: worker threads start in grad mode
    compiled = kiln.compile(model, backend=backend)
    records = []
    compiler_of(compiled).recorder = records
    xs = inputs()
    with kiln.no_grad():
        results, messages = run_threads(compiled, xs)
        for (t, _), (b, out) in results.items():
            assert_same(out, model(xs[b][t]), atol=1e-4, rtol=1e-4)
    code = Mlp.forward.__code__
    assert not [m for m in messages if "recompile limit" in m], messages
    assert not C.is_no_capture(code)
    assert len(C.entries(code)) in (1, 2)
    assert len(records) == len(C.entries(code))  # no capture was thrown away


def test_threads_share_resume_functions(fast_switches):
    compiled = kiln.compile(breaks_once, backend="eager")
    records = []
    compiler_of(compiled).recorder = records
    xs = inputs()
    results, messages = run_threads(compiled, xs)
    for (t, _), (b, out) in results.items():
        assert_same(out, breaks_once(xs[b][t]))
    assert not [m for m in messages if "recompile limit" in m], messages
    assert len(code_state(breaks_once.__code__).resume_fns) == 1
    (resume,) = code_state(breaks_once.__code__).resume_fns.values()
    assert len(C.entries(breaks_once.__code__)) in (1, 2)
    assert len(C.entries(resume)) in (1, 2)
    assert len(records) == len(C.entries(breaks_once.__code__)) + len(C.entries(resume))


def test_a_miss_after_another_capture_takes_its_entry():
    # What a thread that waited sees: the hook missed before the other capture was added.
    compiled = kiln.compile(breaks_once, backend="eager")
    compiler = compiler_of(compiled)
    records = []
    compiler.recorder = records
    x = kiln.randn(4, 16)
    first = compiler.callback(breaks_once, (x,), breaks_once.__code__)
    again = compiler.callback(breaks_once, (x,), breaks_once.__code__)
    assert again is first and len(records) == 1
    assert len(C.entries(breaks_once.__code__)) == 1
    other = compiler.callback(breaks_once, (kiln.randn(4, 16).double(),), breaks_once.__code__)
    assert other is not first and len(records) == 2  # guards fail: a capture of its own


def nested_inner(x):
    return x.cos() + 1


compiled_inner = kiln.compile(nested_inner, backend="eager")


def nested_outer(x):
    y = kept_eager(x) * 2  # the break runs the rest, which calls a compiled function
    return compiled_inner(y) - 1


def test_compiled_calls_inside_compiled_frames_from_threads(fast_switches):
    compiled = kiln.compile(nested_outer, backend="eager")
    xs = inputs()
    results, messages = run_threads(compiled, xs, calls=3)
    for (t, _), (b, out) in results.items():
        assert_same(out, nested_outer(xs[b][t]))
    assert not [m for m in messages if "recompile limit" in m], messages
