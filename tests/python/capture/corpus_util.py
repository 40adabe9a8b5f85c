"""Shared helper of the capture corpus: run a program compiled and eagerly, compare everything.

`run_case(fn, *args)` compiles `fn` (a function or a kiln.nn.Module) with a recording backend,
calls it twice on fresh clones of the tensor arguments and compares both results, and the
arguments after each call (in-place mutation), with an eager call of `fn` on other clones. It
returns a `CaseInfo`: the graphs the backend received, their op counts and the capture records
(graph breaks with their reasons). Expected graph / break counts are checked when given.
`Corpus` registers programs with their inputs and expected op counts for parametrized tests.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

import kiln

INT_DTYPES = {"bool", "uint8", "int8", "int16", "int32", "int64"}


@pytest.fixture(autouse=True)
def fresh_capture():
    """Every test starts and ends with empty capture caches (import this into a test module)."""
    kiln.compiler.reset()
    yield
    kiln.compiler.reset()


class RecordingBackend:
    """A kiln.compile backend that keeps every graph it is given, then delegates to `inner`
    ("eager": the graph's own Python code; or a callable backend)."""

    def __init__(self, inner="eager") -> None:
        self.inner = inner
        self.graphs: list = []
        self.example_inputs: list = []

    def __call__(self, graph, example_inputs):
        self.graphs.append(graph)
        self.example_inputs.append(list(example_inputs))
        if self.inner is None or self.inner == "eager":
            return graph.compile_python()
        return self.inner(graph, example_inputs)


class CaseInfo:
    """What one run_case produced."""

    def __init__(self, compiled, backend, records, graphs_first_call: int) -> None:
        self.compiled = compiled  # the kiln.compile result (call it again for guard tests)
        self.backend = backend
        self.records = records  # CaptureRecord per capture, in order (all calls so far)
        self.graphs_first_call = graphs_first_call

    @property
    def graphs(self) -> list:
        return self.backend.graphs

    @property
    def graph_count(self) -> int:
        """Graphs captured so far (every capture produces one, empty ones included)."""
        return len(self.backend.graphs)

    @property
    def op_counts(self) -> list:
        return [g.op_count() for g in self.backend.graphs]

    @property
    def breaks(self) -> list:
        """The BreakRecord of every capture that ended in a graph break."""
        return [r.break_record for r in self.records if r.break_record is not None]

    @property
    def break_count(self) -> int:
        return len(self.breaks)

    @property
    def break_reasons(self) -> list:
        return [b.reason for b in self.breaks]

    @property
    def guards(self) -> list:
        """The guard descriptions of every capture (a list of lists of str)."""
        return [r.guards for r in self.records]

    def __repr__(self) -> str:
        return (f"CaseInfo(graphs={self.graph_count}, ops={self.op_counts}, "
                f"breaks={self.break_reasons})")


def compiler_of(compiled):
    """The Compiler behind a kiln.compile result (function or OptimizedModule)."""
    inner = getattr(compiled, "_compiled_call", compiled)
    return inner._kiln_compiler


def clone_args(value):
    """A copy of `value` whose tensors (also inside lists, tuples and dicts) are fresh clones."""
    if isinstance(value, kiln.Tensor):
        c = value.detach().clone()
        if value.requires_grad:
            c.requires_grad_(True)
        return c
    if isinstance(value, list):
        return [clone_args(v) for v in value]
    if isinstance(value, tuple):
        items = [clone_args(v) for v in value]
        return type(value)(*items) if hasattr(type(value), "_fields") else type(value)(items)
    if isinstance(value, dict):
        return {k: clone_args(v) for k, v in value.items()}
    return value


def _np(t):
    t = t.detach()
    if t.dtype == kiln.bfloat16:
        t = t.float()
    return np.array(t.contiguous().numpy(), copy=True)


def assert_same(actual, expected, path="result", atol=1e-5, rtol=1e-5) -> None:
    """Asserts `actual` equals `expected`: same container types and keys, tensors with the same
    dtype, shape and values (allclose for floats, exact for ints and bools), Python values
    equal with the same type."""
    if isinstance(expected, kiln.Tensor):
        assert isinstance(actual, kiln.Tensor), f"{path}: {type(actual).__name__} is no tensor"
        assert actual.dtype == expected.dtype, f"{path}: dtype {actual.dtype} != {expected.dtype}"
        assert tuple(actual.shape) == tuple(expected.shape), (
            f"{path}: shape {tuple(actual.shape)} != {tuple(expected.shape)}")
        assert actual.requires_grad == expected.requires_grad, f"{path}: requires_grad differs"
        a, e = _np(actual), _np(expected)
        if expected.dtype.name in INT_DTYPES:
            np.testing.assert_array_equal(a, e, err_msg=path)
        else:
            np.testing.assert_allclose(a, e, atol=atol, rtol=rtol, equal_nan=True, err_msg=path)
        return
    assert type(actual) is type(expected), (
        f"{path}: type {type(actual).__name__} != {type(expected).__name__}")
    if isinstance(expected, (list, tuple)):
        assert len(actual) == len(expected), f"{path}: length {len(actual)} != {len(expected)}"
        for i, (a, e) in enumerate(zip(actual, expected, strict=True)):
            assert_same(a, e, f"{path}[{i}]", atol, rtol)
    elif isinstance(expected, dict):
        assert list(actual) == list(expected), f"{path}: keys {list(actual)} != {list(expected)}"
        for k in expected:
            assert_same(actual[k], expected[k], f"{path}[{k!r}]", atol, rtol)
    elif isinstance(expected, float):
        assert math.isclose(actual, expected, rel_tol=rtol, abs_tol=atol) or (
            math.isnan(actual) and math.isnan(expected)), f"{path}: {actual} != {expected}"
    else:
        assert actual == expected, f"{path}: {actual!r} != {expected!r}"


def run_case(fn, *args, expect_graphs=None, expect_breaks=None, backend="eager",
             call_kwargs=None, atol=1e-5, rtol=1e-5, calls=2, check_cached=True, **compile_kw):
    """Compiles `fn` (kiln.compile(..., **compile_kw) with a recording backend wrapping
    `backend`), calls it `calls` times with `args` / `call_kwargs` and compares each result and
    the arguments afterwards with an eager call on clones. With check_cached, calls after the
    first must not capture again. Returns a CaseInfo."""
    call_kwargs = dict(call_kwargs or {})
    kiln.compiler.reset()
    eager_args, eager_kwargs = clone_args(args), clone_args(call_kwargs)
    expected = fn(*eager_args, **eager_kwargs)
    rec = RecordingBackend(backend)
    compiled = kiln.compile(fn, backend=rec, **compile_kw)
    records: list = []
    compiler_of(compiled).recorder = records
    graphs_first = 0
    for i in range(calls):
        run_args, run_kwargs = clone_args(args), clone_args(call_kwargs)
        actual = compiled(*run_args, **run_kwargs)
        where = f"call {i + 1}"
        assert_same(actual, expected, f"{where}: result", atol, rtol)
        assert_same(run_args, eager_args, f"{where}: args after the call", atol, rtol)
        assert_same(run_kwargs, eager_kwargs, f"{where}: kwargs after the call", atol, rtol)
        if i == 0:
            graphs_first = len(rec.graphs)
        elif check_cached:
            assert len(rec.graphs) == graphs_first, (
                f"{where} captured again: {len(rec.graphs) - graphs_first} new graphs "
                f"({[r.recompile_reason for r in records[graphs_first:]]})")
    info = CaseInfo(compiled, rec, records, graphs_first)
    if expect_graphs is not None:
        assert info.graphs_first_call == expect_graphs, f"graph count: {info!r}"
    if expect_breaks is not None:
        assert info.break_count == expect_breaks, f"break count: {info!r}"
    return info


class Corpus:
    """A registry of corpus programs: `@corpus.case(make_args, ops=N)` registers a function,
    `@corpus.module_case(...)` a factory returning the kiln.nn.Module to compile; `run(name)`
    checks one program captures whole (one graph, no break) and matches eager."""

    class Case:
        """One registered program and what it is checked for."""

        def __init__(self, fn, make_args, ops, kwargs, factory, tol) -> None:
            self.fn = fn  # the program, or a factory of the module to compile
            self.make_args = make_args  # () -> tuple of positional inputs
            self.ops = ops  # ops the single graph must hold (None: not checked)
            self.kwargs = kwargs  # keyword inputs of the call
            self.factory = factory
            self.tol = tol

    def __init__(self) -> None:
        self.cases: dict = {}

    def _register(self, make_args, ops, kwargs, tol, factory):
        def register(fn):
            assert fn.__name__ not in self.cases, f"duplicate corpus program {fn.__name__}"
            self.cases[fn.__name__] = Corpus.Case(fn, make_args, ops, kwargs, factory, tol)
            return fn

        return register

    def case(self, make_args, ops=None, kwargs=None, tol=1e-5):
        """Registers a program; `make_args()` returns its positional inputs."""
        return self._register(make_args, ops, kwargs, tol, factory=False)

    def module_case(self, make_args, ops=None, kwargs=None, tol=1e-5):
        """Registers a factory returning the kiln.nn.Module to compile."""
        return self._register(make_args, ops, kwargs, tol, factory=True)

    def names(self) -> list:
        return sorted(self.cases)

    def run(self, name: str, fullgraph: bool) -> CaseInfo:
        """Runs program `name` through run_case (inputs made after seeding the generator)."""
        c = self.cases[name]
        kiln.manual_seed(0)
        fn = c.fn() if c.factory else c.fn
        args = c.make_args()
        info = run_case(fn, *args, call_kwargs=c.kwargs, expect_graphs=1, expect_breaks=0,
                        fullgraph=fullgraph, atol=c.tol, rtol=c.tol)
        if c.ops is not None:
            assert info.op_counts == [c.ops], f"op count: {info!r}"
        return info


# -- helpers of the break corpus -----------------------------------------------------------

DATA_BRANCH = "data-dependent branch"

def rand(*shape, seed=0):
    """A reproducible float32 tensor."""
    kiln.manual_seed(seed)
    return kiln.randn(*shape)


def captures(info):
    """[(code name, op count, break reason or None)] of every capture so far; resume functions
    are named `resume:<frame>` (their bytecode offsets are not part of the contract)."""
    return [(re.sub(r"__resume_at_\d+_", "resume:", r.code.co_name), r.graph.op_count(),
             r.break_record.reason if r.break_record else None) for r in info.records]


def assert_breaks(info, *fragments):
    """The break reasons, in order, contain `fragments` (one per break)."""
    reasons = info.break_reasons
    assert len(reasons) == len(fragments), captures(info)
    for reason, fragment in zip(reasons, fragments, strict=True):
        assert fragment in reason, captures(info)
