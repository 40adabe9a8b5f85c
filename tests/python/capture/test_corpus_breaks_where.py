"""Capture corpus, part 2b: where graph breaks happen — in loops, try and with blocks, inlined
functions, resume functions that break again, and submodules — and what survives them (closure
cells, values on the stack, in-place updates)."""

import contextlib
import math

import pytest
from corpus_util import (  # noqa: F401
    DATA_BRANCH,
    assert_breaks,
    assert_same,
    captures,
    clone_args,
    fresh_capture,
    rand,
    run_case,
)

import kiln
import kiln.nn as nn
import kiln.nn.functional as F

# -- where breaks happen: loops, try, with, inlined functions, nested -----------------------


def break_in_loop(x):
    for i in range(3):
        x = x + 1
        print("step", i)
        x = x * 2
    return x


def test_break_inside_loop_continues_natively(capsys):
    info = run_case(break_in_loop, rand(3), expect_graphs=1, expect_breaks=1)
    assert info.op_counts == [1]
    assert capsys.readouterr().out == "step 0\nstep 1\nstep 2\n" * 3


def break_in_try(x):
    try:
        y = x + 1
        print("in try")
        y = y * 2
    except ValueError:
        y = x
    return y


def break_in_try_caught(x):
    try:
        y = x + 1
        raise ValueError("caught")
    except ValueError as e:
        y = y * len(str(e))
    return y


@pytest.mark.parametrize("fn", [break_in_try, break_in_try_caught])
def test_break_inside_try_continues_natively(fn):
    info = run_case(fn, rand(3), expect_graphs=1, expect_breaks=1)
    assert info.op_counts == [1]


def break_in_no_grad(x):
    with kiln.no_grad():
        y = x * 2
        print("no grad")
        z = y + 1
    return z, z.requires_grad, kiln.is_grad_enabled()


def test_break_inside_no_grad_keeps_grad_mode():
    x = rand(3).requires_grad_()
    info = run_case(break_in_no_grad, x, expect_graphs=1, expect_breaks=1)
    assert info.op_counts == [1]
    assert kiln.is_grad_enabled()


def helper_prints(y):
    print("helper")
    return y * 2


def inlined_break(x):
    y = x + 1
    z = helper_prints(y)
    return z - 1


def test_break_in_inlined_function_breaks_at_the_call(capsys):
    info = run_case(inlined_break, rand(3), expect_breaks=2)
    # The parent breaks at the call; the call runs (and is captured on its own), then the
    # parent continues in its resume function.
    assert captures(info) == [
        ("inlined_break", 1, "print() is a side effect"),
        ("helper_prints", 0, "print() is a side effect"),
        ("resume:helper_prints", 1, None),
        ("resume:inlined_break", 1, None),
    ]
    assert info.breaks[0].source_line == "z = helper_prints(y)"
    assert capsys.readouterr().out == "helper\n" * 3


def deep_inner(y):
    if y.sum() > 0:
        return y * 3
    return y


def deep_middle(y):
    return deep_inner(y + 1) - 1


def deep_outer(x):
    return deep_middle(x * 2) / 2


@pytest.mark.parametrize("sign", [1.0, -1.0], ids=["then", "else"])
def test_break_two_levels_deep(sign):
    info = run_case(deep_outer, rand(4).abs() * sign, expect_graphs=6, expect_breaks=3)
    # Each level breaks at its call; the innermost at its branch; then each level resumes.
    assert [c[0] for c in captures(info)] == [
        "deep_outer", "deep_middle", "deep_inner",
        "resume:deep_inner", "resume:deep_middle", "resume:deep_outer"]
    assert all(DATA_BRANCH in r for r in info.break_reasons)


def nested_breaks(x):
    y = x + 1
    print("a")
    y = y * 2
    print("b")
    return y - 1


def test_resume_function_breaks_again(capsys):
    info = run_case(nested_breaks, rand(3), expect_graphs=3, expect_breaks=2)
    assert info.op_counts == [1, 1, 1]
    assert [c[0] for c in captures(info)] == [
        "nested_breaks", "resume:nested_breaks",
        "resume:resume:nested_breaks"]
    assert capsys.readouterr().out == "a\nb\n" * 3


def break_mid_expression(x):
    return x + helper_prints(x * 3) + x * 4


def break_in_call_args(x):
    return kiln.cat([x, helper_prints(x), x * 2], dim=0)


def break_with_kwargs(x):
    return kiln.stack([x, note_kw(x, scale=3.0)], dim=1)


def note_kw(t, *, scale):
    print("kw", scale)
    return t * scale


@pytest.mark.parametrize("fn,callee,ops", [
    (break_mid_expression, "helper_prints", [1, 0, 1, 3]),  # x * 3 | - | * 2 | add, mul, add
    (break_in_call_args, "helper_prints", [0, 0, 1, 2]),  # - | - | * 2 | mul, cat
    (break_with_kwargs, "note_kw", [0, 0, 1, 1]),  # - | - | * scale | stack
])
def test_break_with_values_on_the_stack(fn, callee, ops):
    info = run_case(fn, rand(3), expect_graphs=4, expect_breaks=2)
    assert [c[0] for c in captures(info)] == [
        fn.__name__, callee, f"resume:{callee}", f"resume:{fn.__name__}"]
    assert info.op_counts == ops


def closure_across_break(x):
    k = 3

    def scale(t):
        return t * k

    y = scale(x)
    print("c")
    return scale(y) + k


def test_closure_cells_survive_a_break():
    # The nested function reaches the resume function as a new object per call: it is
    # guarded by its code and closure contents, so the second call hits the cache.
    info = run_case(closure_across_break, rand(3), expect_graphs=2, expect_breaks=1)
    assert info.op_counts == [1, 2]


def test_inplace_mutation_before_a_break_reaches_the_argument():
    def mutate(x):
        x.add_(1)
        print("m")
        x.mul_(2)
        return x.sum()

    info = run_case(mutate, rand(3), expect_breaks=1)  # run_case also compares the argument
    assert info.op_counts[0] == 1


class Block(nn.Module):
    """A module whose forward breaks on a data-dependent branch."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        h = self.fc(x)
        if h.mean() > 0:
            h = F.relu(h)
        return h * 2


class Stack(nn.Module):
    """Blocks in a ModuleList; each one breaks."""

    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([Block(), Block()])

    def forward(self, x):
        for block in self.blocks:
            x = block(x) + x
        return x


def test_break_in_a_submodule_forward():
    kiln.manual_seed(0)
    model = Block()
    info = run_case(model, rand(2, 4), expect_graphs=2, expect_breaks=1)
    assert_breaks(info, DATA_BRANCH)


def test_break_in_modules_called_in_a_loop():
    kiln.manual_seed(1)
    model = Stack()
    info = run_case(model, rand(2, 4))
    # The top loop is a loop: its call breaks natively, each block is captured on its own.
    assert info.break_count >= 2
    assert "block(x)" in info.breaks[0].source_line


class Hooked(nn.Module):
    """A module with a forward hook (hooks are not captured)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(3, 3)
        self.seen = []
        self.fc.register_forward_hook(lambda mod, inp, out: self.seen.append(out.shape[0]))

    def forward(self, x):
        return self.fc(x) + 1


def test_module_with_forward_hook_breaks_and_runs_the_hook():
    model = Hooked()
    compiled = kiln.compile(model)
    x = rand(2, 3)
    assert_same(compiled(x), model.fc(x) + 1)
    assert model.seen == [2, 2]


# -- disabled functions and side-effect order ------------------------------------------------


LOG = []


@kiln.compiler.disable
def note(tag, value=None):
    """Records an event eagerly (never captured)."""
    LOG.append((tag, None if value is None else round(float(value.sum()), 4)))


def ordered_effects(x):
    note("start")
    y = x + 1
    note("mid", y)
    z = y * 2
    note("end", z)
    return z


def test_side_effects_run_once_and_in_order():
    LOG.clear()
    x = kiln.ones(2)
    ordered_effects(x)
    expected = list(LOG)
    assert expected == [("start", None), ("mid", 4.0), ("end", 8.0)]
    LOG.clear()
    info = run_case(ordered_effects, x, expect_graphs=4, expect_breaks=3)
    assert LOG == expected * 3  # eager + two compiled calls
    assert all("kiln.compiler.disable" in r for r in info.break_reasons)
    assert info.op_counts == [0, 1, 1, 0]


def test_print_order_with_capsys(capsys):
    def chatty(x):
        print(1)
        y = x + 1
        print(2, y.shape)
        return y

    run_case(chatty, rand(2), expect_graphs=3, expect_breaks=2)
    assert capsys.readouterr().out == "1\n2 kiln.Size([2])\n" * 3


# -- generators, context managers, arguments that cannot be captured -------------------------


def escaping_genexpr(x):
    y = x + 1
    return (y * i for i in range(3))


def escaping_generator(x):
    def gen():
        yield x
        yield x + 1

    return gen()


@pytest.mark.parametrize("fn", [escaping_genexpr, escaping_generator])
def test_escaping_generator_breaks_and_stays_lazy(fn):
    compiled = kiln.compile(fn)
    records = []
    compiled._kiln_compiler.recorder = records
    x = rand(3)
    g = compiled(x)
    assert type(g).__name__ == "generator"
    assert_same(list(g), list(fn(x)))
    assert "a generator escapes" in records[0].break_record.reason


def consumed_generator(x):
    return sum(x * i for i in range(4)), tuple(x + i for i in range(2))


def test_consumed_generator_does_not_break():
    info = run_case(consumed_generator, rand(3), expect_graphs=1, expect_breaks=0,
                    fullgraph=True)
    assert info.op_counts == [10]  # 4 mul + 4 add (sum starts at 0) | 2 add


def generator_function(x):
    yield x + 1
    yield x * 2


def test_compiled_generator_function_runs_eagerly():
    compiled = kiln.compile(generator_function)
    x = rand(2)
    assert_same(list(compiled(x)), list(generator_function(x)))
    assert kiln._C._capture.entries(generator_function.__code__) == []


def unknown_context_manager(x):
    with contextlib.nullcontext():
        y = x * 2
    return y + 1


def test_an_unsupported_with_block_breaks():
    # The call making the context manager runs eagerly; the with-block continues natively.
    info = run_case(unknown_context_manager, rand(3), expect_graphs=2, expect_breaks=2)
    assert_breaks(info, "call to nullcontext", "with-block over")


def float_keys(x, table):
    return x * table[0.5]


def test_argument_that_cannot_be_wrapped_runs_the_frame_eagerly():
    info = run_case(float_keys, rand(2), {0.5: 3.0}, expect_graphs=0, check_cached=False)
    # no graph: a record per try, the whole function's break, for explain() to name
    assert info.records
    for record in info.records:
        assert not record.graph.nodes
        assert record.break_record.reason.startswith("the whole function runs eagerly: ")


def math_on_tensor_data(x):
    return x * math.sqrt(x.shape[0]), math.floor(x.sum())


def test_math_function_on_a_tensor_breaks():
    info = run_case(math_on_tensor_data, rand(4), expect_graphs=2, expect_breaks=1)
    assert_breaks(info, "floor() returns a Python int computed from tensor data")
