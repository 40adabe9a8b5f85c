"""The user-facing API of kiln.compile: argument validation, fullgraph errors, what can be
compiled (functions, lambdas, bound methods, partials, modules), kiln.compiler.disable / reset,
and the unsupported-Python-version error path.
"""

import functools
import inspect
import sys
import threading

import pytest
from corpus_util import RecordingBackend, assert_same, compiler_of, fresh_capture  # noqa: F401

import kiln
import kiln.nn as nn
from kiln._capture import compile as compile_mod

C = kiln._C._capture


def rand(*shape, seed=0):
    """A reproducible float32 tensor."""
    kiln.manual_seed(seed)
    return kiln.randn(*shape)


def line_of(fn, text):
    """(line number, stripped source line) of the first line of `fn` containing `text`."""
    lines, first = inspect.getsourcelines(fn)
    for i, line in enumerate(lines):
        if text in line:
            return first + i, line.strip()
    raise AssertionError(f"{text!r} not in {fn.__name__}")


def simple(x, y):
    return (x + y).relu() * 2


# -- argument validation ----------------------------------------------------------------


@pytest.mark.parametrize("backend", ["inductor", "", 3, object()])
def test_unknown_backend_is_rejected(backend):
    with pytest.raises(ValueError, match="unknown backend") as err:
        kiln.compile(simple, backend=backend)
    assert "expected None, 'kiln', 'eager' or a callable" in str(err.value)


@pytest.mark.parametrize("backend", [None, "kiln", "eager"])
def test_named_backends_are_accepted(backend):
    compiled = kiln.compile(simple, backend=backend)
    assert_same(compiled(rand(3), rand(3, seed=1)), simple(rand(3), rand(3, seed=1)))


def test_backend_fallback_option_is_validated_and_passed_on():
    assert kiln.compile(simple, options={"backend_fallback": False})._kiln_compiler.options == {
        "backend_fallback": False}
    with pytest.raises(ValueError, match="known: recompile_limit, backend_fallback"):
        kiln.compile(simple, options={"fallback": False})


@pytest.mark.parametrize("mode", [None, "default", "reduce-overhead", "max-autotune",
                                  "max-autotune-no-cudagraphs"])
def test_known_modes_are_accepted(mode):
    compiled = kiln.compile(simple, mode=mode)
    assert_same(compiled(rand(3), rand(3, seed=1)), simple(rand(3), rand(3, seed=1)))


@pytest.mark.parametrize("mode", ["fast", "DEFAULT", 1])
def test_unknown_mode_is_rejected(mode):
    with pytest.raises(ValueError, match="unknown mode"):
        kiln.compile(simple, mode=mode)


def test_unknown_options_are_rejected():
    with pytest.raises(ValueError, match=r"unknown options \['epilogue_fusion', 'trace'\]"):
        kiln.compile(simple, options={"trace": True, "epilogue_fusion": 1,
                                      "recompile_limit": 3})


def test_options_are_not_mutated():
    options = {"recompile_limit": 3}
    kiln.compile(simple, options=options)
    assert options == {"recompile_limit": 3}


@pytest.mark.parametrize("value", [3, "abc", None])
def test_non_callable_is_rejected(value):
    if value is None:  # kiln.compile() with no model returns a decorator
        assert callable(kiln.compile())
        return
    with pytest.raises(TypeError, match="expects a function or a kiln.nn.Module"):
        kiln.compile(value)


def test_backend_returning_a_non_callable_fails_at_the_first_call():
    compiled = kiln.compile(simple, backend=lambda graph, example_inputs: 42)
    with pytest.raises(TypeError, match="backend must return a callable"):
        compiled(rand(3), rand(3))


def test_callable_backend_gets_the_graph_and_example_inputs():
    seen = []

    def backend(graph, example_inputs):
        seen.append((graph.op_count(), [tuple(t.shape) for t in example_inputs]))
        return graph.compile_python()

    compiled = kiln.compile(simple, backend=backend)
    x, y = rand(2, 3), rand(2, 3, seed=1)
    assert_same(compiled(x, y), simple(x, y))
    assert_same(compiled(x, y), simple(x, y))
    assert seen == [(3, [(2, 3), (2, 3)])]  # add, relu, mul; captured once


def test_eager_backend_and_default_backend_agree():
    x, y = rand(4), rand(4, seed=1)
    for backend in (None, "eager"):
        kiln.compiler.reset()
        assert_same(kiln.compile(simple, backend=backend)(x, y), simple(x, y))


def test_decorator_forms():
    @kiln.compile
    def plain(x):
        return x * 3

    @kiln.compile(backend="eager", dynamic=False)
    def configured(x):
        return x - 3

    x = rand(3)
    assert_same(plain(x), x * 3)
    assert_same(configured(x), x - 3)
    assert plain.__name__ == "plain" and configured.__wrapped__.__name__ == "configured"


def test_wrapper_keeps_metadata_and_the_original():
    compiled = kiln.compile(simple)
    assert compiled.__name__ == "simple"
    assert compiled.__doc__ == simple.__doc__
    assert compiled._kiln_original is simple
    assert compiler_of(compiled).recompile_limit == 8


# -- fullgraph --------------------------------------------------------------------------


def branchy(x):
    y = x * 2
    if y.sum() > 0:
        return y
    return -y


def prints_inside(x):
    print("side effect")
    return x


def calls_printer(x):
    y = x + 1
    return prints_inside(y) * 2


def item_reader(x):
    return x * x.sum().item()


@pytest.mark.parametrize("fn,reason,marker,hint", [
    (branchy, "data-dependent branch", "if y.sum() > 0:", "use kiln.where"),
    (item_reader, "Tensor.item() reads a value", "x.sum().item()", "keep values as tensors"),
    (prints_inside, "print() is a side effect", "print(", "remove print()"),
])
def test_fullgraph_error_names_reason_file_line_and_source(fn, reason, marker, hint):
    compiled = kiln.compile(fn, fullgraph=True)
    with pytest.raises(kiln.compiler.CaptureError) as err:
        compiled(rand(3).abs())
    lineno, source = line_of(fn, marker)
    message = str(err.value)
    assert message.startswith(f"kiln.compile(fullgraph=True): graph break: {reason}")
    assert f"  {__file__}:{lineno}: {source}" in message.splitlines()
    assert f"hint: {hint}" in message
    assert isinstance(err.value, RuntimeError)
    assert C.entries(fn.__code__) == []  # nothing was installed


def test_fullgraph_error_in_an_inlined_function_shows_both_lines():
    compiled = kiln.compile(calls_printer, fullgraph=True)
    with pytest.raises(kiln.compiler.CaptureError) as err:
        compiled(rand(3))
    lines = str(err.value).splitlines()
    call_line, call_src = line_of(calls_printer, "prints_inside(y)")
    print_line, print_src = line_of(prints_inside, "print(")
    assert lines[1] == f"  {__file__}:{call_line}: {call_src}"
    assert lines[2] == f"  {__file__}:{print_line}: {print_src}"  # innermost last


def test_fullgraph_succeeds_without_breaks():
    backend = RecordingBackend()
    compiled = kiln.compile(simple, fullgraph=True, backend=backend)
    x, y = rand(3), rand(3, seed=1)
    assert_same(compiled(x, y), simple(x, y))
    assert len(backend.graphs) == 1


def test_fullgraph_error_when_the_arguments_cannot_be_captured():
    def lookup(x, table):
        return x * table[0.5]

    with pytest.raises(kiln.compiler.CaptureError,
                       match="a dict whose keys are not str, int, types or modules"):
        kiln.compile(lookup, fullgraph=True)(rand(2), {0.5: 2.0})
    assert_same(kiln.compile(lookup)(rand(2), {0.5: 2.0}), rand(2) * 2.0)


def test_capture_error_is_exported():
    assert kiln.compiler.CaptureError is kiln._capture.convert_frame.CaptureError


# -- what can be compiled ---------------------------------------------------------------


def test_lambda():
    compiled = kiln.compile(lambda x, k=2: x * k + 1)
    x = rand(3)
    assert_same(compiled(x), x * 2 + 1)
    assert_same(compiled(x, k=5), x * 5 + 1)


class Scaler:
    """A plain object with a method that reads an attribute."""

    def __init__(self, k) -> None:
        self.k = k

    def apply(self, x):
        return x * self.k


def test_bound_method_and_attribute_guard():
    obj = Scaler(3.0)
    compiled = kiln.compile(obj.apply)
    x = rand(3)
    assert_same(compiled(x), x * 3.0)
    obj.k = 4.0
    assert_same(compiled(x), x * 4.0)
    assert len(C.entries(Scaler.apply.__code__)) == 2


def test_functools_partial():
    compiled = kiln.compile(functools.partial(simple, rand(3, seed=4)))
    x = rand(3)
    assert_same(compiled(x), simple(rand(3, seed=4), x))
    assert len(C.entries(simple.__code__)) == 1


def test_keyword_and_varargs_calls():
    def fn(x, *rest, scale=1.0, **extra):
        out = x * scale
        for r in rest:
            out = out + r
        return out + extra.get("bias", 0.0)

    compiled = kiln.compile(fn)
    x, y = rand(3), rand(3, seed=1)
    assert_same(compiled(x, y, y, scale=2.0, bias=1.0), fn(x, y, y, scale=2.0, bias=1.0))
    assert_same(compiled(x), fn(x))


class TinyNet(nn.Module):
    """Linear + ReLU + Linear."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(4, 8)
        self.fc2 = nn.Linear(8, 3)
        self.register_buffer("offset", kiln.ones(3))

    def forward(self, x):
        return self.fc2(self.fc1(x).relu()) + self.offset


def test_module_state_dict_parameters_and_attributes_still_work():
    kiln.manual_seed(0)
    model = TinyNet()
    compiled = kiln.compile(model)
    assert isinstance(compiled, nn.Module)
    x = rand(2, 4)
    assert_same(compiled(x), model(x))
    assert compiled._orig_mod is model
    assert compiled.fc1 is model.fc1  # attributes come from the original module
    orig_params = dict(model.named_parameters())
    params = dict(compiled.named_parameters())
    assert sorted(params) == sorted(f"_orig_mod.{k}" for k in orig_params)  # torch's spelling
    for k, p in orig_params.items():
        assert params[f"_orig_mod.{k}"] is p
    state = compiled.state_dict()
    assert sorted(state) == sorted(f"_orig_mod.{k}" for k in model.state_dict())
    assert "OptimizedModule(" in repr(compiled)


def test_module_load_state_dict_reaches_the_compiled_graph():
    kiln.manual_seed(0)
    model, other = TinyNet(), TinyNet()
    compiled = kiln.compile(model)
    x = rand(2, 4)
    compiled(x)
    model.load_state_dict(other.state_dict())
    assert_same(compiled(x), other(x))


def test_module_train_eval_through_the_compiled_module():
    model = TinyNet()
    compiled = kiln.compile(model)
    compiled.eval()
    assert not model.training
    x = rand(2, 4)
    assert_same(compiled(x), model(x))
    compiled.train()
    assert model.training


def test_nested_compiled_functions():
    inner = kiln.compile(lambda t: t * 2)

    def outer(x):
        return inner(x) + 1

    compiled = kiln.compile(outer)
    x = rand(3)
    assert_same(compiled(x), x * 2 + 1)
    assert_same(compiled(x), x * 2 + 1)


def test_compiled_function_in_another_thread():
    compiled = kiln.compile(simple)
    x, y = rand(3), rand(3, seed=1)
    results = []
    worker = threading.Thread(target=lambda: results.append(compiled(x, y)))
    worker.start()
    worker.join()
    assert_same(results[0], simple(x, y))
    assert not C.is_enabled()  # no callback left behind on this thread


def test_hook_is_off_outside_compiled_calls():
    compiled = kiln.compile(simple)
    compiled(rand(2), rand(2))
    assert C.get_callback() is None
    with pytest.raises(ZeroDivisionError):
        kiln.compile(lambda x: x / 0 if isinstance(x, int) else x)(1)
    assert C.get_callback() is None


# -- disable / reset --------------------------------------------------------------------


def test_disable_keeps_a_function_eager():
    calls = []

    @kiln.compiler.disable
    def helper(t):
        calls.append(1)
        return t + 1

    def fn(x):
        return helper(x * 2) * 3

    compiled = kiln.compile(fn)
    x = rand(3)
    assert_same(compiled(x), fn(x))
    assert_same(compiled(x), fn(x))
    assert len(calls) == 4
    assert C.entries(helper.__wrapped__.__code__) == []
    assert C.is_skipped(helper.__wrapped__.__code__)


def test_disable_recursive_false_still_captures_callees():
    def callee(t):
        return t - 1

    @kiln.compiler.disable(recursive=False)
    def shallow(t):
        return callee(t) * 2

    compiled = kiln.compile(lambda x: shallow(x) + 1)
    x = rand(3)
    assert_same(compiled(x), (x - 1) * 2 + 1)
    assert C.entries(shallow.__wrapped__.__code__) == []
    assert len(C.entries(callee.__code__)) == 1


def test_disable_recursive_true_skips_callees():
    def callee(t):
        return t - 1

    @kiln.compiler.disable
    def deep(t):
        return callee(t) * 2

    kiln.compile(lambda x: deep(x) + 1)(rand(3))
    assert C.entries(callee.__code__) == []


def test_reset_forgets_entries_and_captures_again():
    backend = RecordingBackend()
    compiled = kiln.compile(simple, backend=backend)
    x, y = rand(3), rand(3, seed=1)
    compiled(x, y)
    compiled(x, y)
    assert len(backend.graphs) == 1 and len(C.entries(simple.__code__)) == 1
    kiln.compiler.reset()
    assert C.entries(simple.__code__) == []
    assert_same(compiled(x, y), simple(x, y))
    assert len(backend.graphs) == 2


def test_reset_forgets_resume_functions():
    def breaks(x):
        y = x + 1
        print("r")
        return y * 2

    backend = RecordingBackend()
    compiled = kiln.compile(breaks, backend=backend)
    compiled(rand(2))
    assert len(backend.graphs) == 2
    kiln.compiler.reset()
    compiled(rand(2))
    assert len(backend.graphs) == 4


# -- unsupported Python version ---------------------------------------------------------


class _Version(tuple):
    """A stand-in for sys.version_info with major/minor attributes."""

    major = property(lambda self: self[0])
    minor = property(lambda self: self[1])


@pytest.mark.parametrize("version", [(3, 10, 12), (3, 12, 1), (4, 0, 0)])
def test_unsupported_python_version(monkeypatch, version):
    monkeypatch.setattr(sys, "version_info", _Version(version + ("final", 0)))
    expected = f"kiln.compile needs CPython 3.11; this is {version[0]}.{version[1]}"
    with pytest.raises(RuntimeError, match=expected.replace(".", r"\.")):
        compile_mod._check_python()
    with pytest.raises(RuntimeError, match="needs CPython 3.11"):
        kiln.compile(simple)
    with pytest.raises(RuntimeError, match="needs CPython 3.11"):
        kiln.compile(backend="eager")


def test_supported_python_version_passes():
    assert sys.version_info[:2] == (3, 11)
    compile_mod._check_python()
    assert C.is_supported()


def test_a_deep_copy_of_a_compiled_module_runs_its_own_weights():
    """`ema = copy.deepcopy(compiled)` (timm's ModelEma, AveragedModel): the copy's calls use
    the copy's parameters, also as a child of a copied parent; pickling compiles again."""
    import copy
    import pickle

    m = kiln.nn.Linear(4, 1, bias=False)
    with kiln.no_grad():
        m.weight.fill_(1.0)
    compiled = kiln.compile(m)
    x = kiln.ones(1, 4)
    assert compiled(x).item() == 4.0
    ema = copy.deepcopy(compiled)
    with kiln.no_grad():
        ema.weight.fill_(0.5)
    assert ema(x).item() == 2.0 and compiled(x).item() == 4.0
    parent = kiln.nn.Sequential(compiled)
    twin = copy.deepcopy(parent)
    with kiln.no_grad():
        twin[0].weight.fill_(0.25)
    assert twin(x).item() == 1.0 and parent(x).item() == 4.0
    loaded = pickle.loads(pickle.dumps(compiled))
    assert type(loaded).__name__ == "OptimizedModule" and loaded(x).item() == 4.0
    assert loaded.weight is not compiled.weight


def test_averaged_model_update_in_a_compiled_step_does_not_recompile_every_step():
    """`ema.update_parameters(model)` in a compiled training step: its `self.n_averaged += 1`
    stores the buffer it just updated in place, which re-registered the buffer and bumped the
    module's version, so every step recaptured until the recompile limit."""
    from kiln.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

    kiln.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
    ema = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(0.9))
    buffer = ema.n_averaged
    opt = kiln.optim.SGD(model.parameters(), lr=0.1)

    def step(x, y):
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        ema.update_parameters(model)
        return loss

    explained = kiln.explain(step)
    x, y = kiln.randn(4, 8), kiln.randint(0, 2, (4,))
    for _ in range(10):
        out = explained(x, y)
    assert len(out.recompiles) <= 2, out.recompiles
    assert ema.n_averaged is buffer and int(ema.n_averaged) == 10
