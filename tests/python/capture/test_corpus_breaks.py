"""Capture corpus, part 2: one small program per graph-break reason.

Every program runs compiled (twice: the second call must hit the cache) and eagerly on clones
(`corpus_util.run_case`), and the test pins the graphs captured (op counts per capture, in
order: the frame, then its resume functions) and the break reasons. Breaks that execute the
breaking call or branch eagerly continue in a captured resume function (one more graph); the
others (in loops, in try blocks, unsupported bytecodes) continue natively (no more graphs).
"""

import contextlib
import math
import re
import time

import numpy as np
import pytest
from corpus_util import assert_same, clone_args, fresh_capture, run_case  # noqa: F401

import kiln
import kiln.nn as nn
import kiln.nn.functional as F

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


# -- data-dependent control flow --------------------------------------------------------------


def branch_on_tensor(x):
    y = x * 2
    if y.sum() > 0:
        y = y + 1
    else:
        y = y - 1
    return y.relu()


@pytest.mark.parametrize("sign", [1.0, -1.0], ids=["then", "else"])
def test_if_on_tensor_both_branches(sign):
    x = rand(3, 4).abs() * sign
    info = run_case(branch_on_tensor, x, expect_graphs=2, expect_breaks=1)
    assert info.op_counts == [3, 2]  # mul, sum, gt | add-or-sub, relu
    assert_breaks(info, DATA_BRANCH)
    assert info.breaks[0].hint.startswith("use kiln.where")


def test_if_on_tensor_then_other_branch_uses_the_same_frame_entry():
    compiled = kiln.compile(branch_on_tensor)
    pos, neg = rand(3, 4).abs(), -rand(3, 4).abs()
    for x in (pos, neg, pos, neg):
        assert_same(compiled(x), branch_on_tensor(x))
    # One entry for the frame; one resume function per branch target.
    assert len(kiln._C._capture.entries(branch_on_tensor.__code__)) == 1


def while_on_tensor(x):
    steps = 0
    while x.sum() < 10:
        x = x + 1
        steps += 1
    return x, steps


def test_while_on_tensor():
    info = run_case(while_on_tensor, rand(2, 2), expect_breaks=2)
    # The first test jumps eagerly into the loop; the test inside the loop continues natively.
    assert [c[0] for c in captures(info)] == ["while_on_tensor", "resume:while_on_tensor"]
    assert_breaks(info, DATA_BRANCH, DATA_BRANCH)


def test_while_on_tensor_not_entered():
    info = run_case(while_on_tensor, rand(2, 2) + 100, expect_graphs=2, expect_breaks=1)
    assert_breaks(info, DATA_BRANCH)


def and_on_tensor(x, flag):
    ok = flag and (x > 0).all()
    return x * 2 if ok else x


def test_and_or_on_tensor():
    run_case(and_on_tensor, rand(3).abs(), True, expect_breaks=1)
    info = run_case(and_on_tensor, rand(3).abs(), False, expect_graphs=1, expect_breaks=0)
    assert info.op_counts == [0]


def assert_on_tensor(x):
    y = x + 1
    assert y.sum() > -100, "too small"
    return y


def test_assert_on_tensor():
    info = run_case(assert_on_tensor, rand(3), expect_graphs=2, expect_breaks=1)
    assert_breaks(info, DATA_BRANCH)


def test_assert_on_tensor_fails_like_eager():
    compiled = kiln.compile(assert_on_tensor)
    with pytest.raises(AssertionError, match="too small"):
        compiled(kiln.full((3,), -1000.0))


def bool_of_tensor(x):
    return bool((x + 1).sum() > 0), x * 2


def int_of_tensor(x):
    return x * int(x.sum()), 1


def float_of_tensor(x):
    return x + float(x.max())


@pytest.mark.parametrize("fn,reason", [
    (bool_of_tensor, DATA_BRANCH),
    (int_of_tensor, "int() of a tensor"),
    (float_of_tensor, "float() of a tensor"),
])
def test_python_scalar_of_tensor(fn, reason):
    info = run_case(fn, rand(4).abs(), expect_graphs=2, expect_breaks=1, check_cached=False)
    assert_breaks(info, reason)


# -- reading tensor data into Python ----------------------------------------------------------


def item_scale(x):
    s = x.sum().item()
    return x * s


def tolist_len(x):
    values = x.tolist()
    return x + len(values)


def numpy_shape(x):
    n = x.numpy().shape[0]
    return x * n


def data_ptr_check(x):
    y = x + 1
    return y, x.data_ptr() != 0


def nonzero_count(x):
    idx = (x > 0).nonzero()
    return idx.shape[0] + x.sum()


def equal_check(x):
    return x.equal(x + 0), x - 1


@pytest.mark.parametrize("fn,graphs,ops,reason", [
    (item_scale, 2, [1, 1], "Tensor.item()"),
    (tolist_len, 2, [0, 1], "Tensor.tolist()"),
    (numpy_shape, 2, [0, 1], "Tensor.numpy()"),
    (data_ptr_check, 2, [1, 0], "data_ptr()"),
    (nonzero_count, 2, [1, 2], "nonzero() has a data-dependent output shape"),
    (equal_check, 2, [1, 1], "Tensor.equal()"),
])
def test_data_reads_break(fn, graphs, ops, reason):
    x = kiln.tensor([[1.0, -2.0], [3.0, 0.5]])
    # data_ptr() differs per call: the int it returns is guarded in the resume function.
    info = run_case(fn, x, expect_graphs=graphs, expect_breaks=1,
                    check_cached=fn is not data_ptr_check)
    assert info.op_counts[:graphs] == ops
    assert_breaks(info, reason)


def test_item_value_change_recompiles_the_resume_function():
    compiled = kiln.compile(item_scale)
    for scale in (1.0, 2.0, 3.0):
        x = kiln.full((2,), scale)
        assert_same(compiled(x), item_scale(x))


# -- side effects and unknown calls -----------------------------------------------------------


def print_between(x):
    y = x + 1
    print("between", y.shape[0])
    return y * 2


def test_print_breaks_and_prints_once_per_call(capsys):
    info = run_case(print_between, rand(3), expect_graphs=2, expect_breaks=1)
    assert info.op_counts == [1, 1]
    assert_breaks(info, "print() is a side effect")
    assert capsys.readouterr().out == "between 3\n" * 3  # eager + two compiled calls


def numpy_function(x):
    y = x + 1
    s = np.sqrt(16.0)
    return y * 2, s


def time_function(x):
    start = time.time()
    y = x * 2
    return y, start > 0


def test_numpy_function_breaks():
    info = run_case(numpy_function, rand(3), expect_graphs=2, expect_breaks=1)
    assert_breaks(info, "call to sqrt")
    assert info.op_counts == [1, 1]


def test_time_function_breaks_and_its_float_is_guarded():
    info = run_case(time_function, rand(3), expect_breaks=1, check_cached=False)
    assert_breaks(info, "call to time")
    # The float time.time() returned is a constant of the resume function: a new value fails
    # its guard, so the resume function is captured again (results stay those of eager).
    assert [c[0] for c in captures(info)] == [
        "time_function", "resume:time_function", "resume:time_function"]
    assert "L['__kiln_resume'][0] ==" in info.records[2].recompile_reason


def id_builtin(x):
    y = x + 1
    return y, id(y) != 0


def vars_builtin(x, cfg):
    y = x * 2
    keys = sorted(vars(cfg))
    return y, keys


class Config:
    """A plain object whose attributes the programs read."""

    def __init__(self) -> None:
        self.scale = 2.0
        self.count = 0


@pytest.mark.parametrize("fn,extra,reason", [
    (id_builtin, (), "call to id"),
    (vars_builtin, (Config(),), "call to vars"),
])
def test_unsupported_builtins_break(fn, extra, reason):
    info = run_case(fn, rand(3), *extra, expect_breaks=1, check_cached=False)
    assert_breaks(info, reason)
    assert info.op_counts[0] == 1


def max_of_tensors(x, y):
    return max(x, y) + 1


def test_python_max_over_tensors_breaks():
    info = run_case(max_of_tensors, kiln.tensor([3.0]), kiln.tensor([1.0]), expect_breaks=1)
    assert_breaks(info, "max() over tensors")
    assert info.breaks[0].hint == "use kiln.maximum"


def tensor_from_python_data(x):
    return x + kiln.tensor([1.0, 2.0, 3.0])


def seeds_inside(x):
    kiln.manual_seed(3)
    return x + kiln.rand(3)


def module_created_inside(x):
    lin = nn.Linear(3, 2)
    return lin(x).shape[-1] + x


@pytest.mark.parametrize("fn,ops,reason", [
    (tensor_from_python_data, [0, 1], "kiln.tensor()"),
    (seeds_inside, [0, 2], "kiln.manual_seed() changes global state"),
    (module_created_inside, [0, 1], "creating a Linear module"),
])
def test_kiln_calls_that_break(fn, ops, reason):
    # A module created by the frame reaches the resume function as a new object on every
    # call: its identity guard fails and the resume function is captured again.
    info = run_case(fn, rand(3), expect_graphs=2, expect_breaks=1,
                    check_cached=fn is not module_created_inside)
    assert info.op_counts[:2] == ops
    assert_breaks(info, reason)


def format_tensor(x):
    y = x + 1
    label = f"{y.sum()}"
    return y, len(label) > 0


def tensor_in_list(x, others):
    y = x * 2
    return y, x in others


def test_formatting_a_tensor_breaks():
    info = run_case(format_tensor, rand(2), expect_breaks=1)
    assert_breaks(info, "formatting a tensor")


def test_tensor_membership_breaks():
    info = run_case(tensor_in_list, rand(1), [rand(1, seed=1)], expect_breaks=1)
    assert_breaks(info, "`in` with a tensor")


# -- unsupported bytecodes: native continuation ----------------------------------------------


def import_inside(x):
    y = x + 1
    import math as m  # noqa: PLC0415

    return y * m.pi


COUNTER = 0


def global_store(x):
    global COUNTER
    y = x * 2
    COUNTER = 7
    return y + COUNTER


def class_inside(x):
    y = x - 1

    class Local:
        k = 3

    return y * Local.k


@pytest.mark.parametrize("fn,reason", [
    (import_inside, "IMPORT_NAME"),
    (global_store, "assignment to the global 'COUNTER'"),
    (class_inside, "LOAD_BUILD_CLASS"),
])
def test_unsupported_bytecode_continues_natively(fn, reason):
    info = run_case(fn, rand(3), expect_graphs=1, expect_breaks=1)
    assert info.op_counts == [1]  # the rest runs natively: no resume function is captured
    assert_breaks(info, reason)


def test_global_store_side_effect_happens():
    global COUNTER
    COUNTER = 0
    kiln.compile(global_store)(rand(3))
    assert COUNTER == 7


def raise_after_break(x):
    y = x + 1
    print("before raise")
    if y.shape[0] == 3:
        raise KeyError("three")
    return y


def raise_on_data(x):
    if (x > 0).any():
        raise ValueError("positive")
    return x


def test_raise_after_break_propagates_the_same_exception(capsys):
    compiled = kiln.compile(raise_after_break)
    records = []
    compiled._kiln_compiler.recorder = records
    for _ in range(2):
        with pytest.raises(KeyError, match="three"):
            compiled(rand(3))
    assert capsys.readouterr().out == "before raise\n" * 2
    # print breaks; the resume function breaks at the call making the KeyError, and the one
    # after it at the raise itself (which then runs natively).
    assert [r.break_record.reason for r in records] == [
        "print() is a side effect", "call to KeyError (type) is not supported",
        "raise statement reached (the frame raises at run time)"]
    assert_same(compiled(rand(4)), raise_after_break(rand(4)))


def test_raise_on_data_dependent_branch():
    compiled = kiln.compile(raise_on_data)
    with pytest.raises(ValueError, match="positive"):
        compiled(kiln.ones(2))
    assert_same(compiled(-kiln.ones(2)), -kiln.ones(2))


def op_error_after_break(x):
    y = x + 1
    print("p")
    return y @ y


def test_op_error_after_break_raises_like_eager(capsys):
    compiled = kiln.compile(op_error_after_break)
    with pytest.raises(RuntimeError) as compiled_err:
        compiled(rand(3, 4))
    with pytest.raises(RuntimeError) as eager_err:
        op_error_after_break(rand(3, 4))
    assert str(compiled_err.value) == str(eager_err.value)


def test_exception_traceback_names_the_user_line():
    compiled = kiln.compile(raise_after_break)
    with pytest.raises(KeyError) as err:
        compiled(rand(3))
    frames = [(f.name, f.lineno) for f in err.traceback]
    lines, first = __import__("inspect").getsourcelines(raise_after_break)
    raise_line = first + next(i for i, s in enumerate(lines) if "raise KeyError" in s)
    assert raise_line in [lineno + 1 for _, lineno in frames]


# -- mutation of objects from outside ---------------------------------------------------------


def set_object_attr(x, cfg):
    y = x * cfg.scale
    cfg.count = 5
    return y + cfg.count


def test_setattr_on_object_breaks_natively():
    cfg = Config()
    info = run_case(set_object_attr, rand(3), cfg, expect_graphs=1, expect_breaks=1)
    assert_breaks(info, "assignment to attribute 'count'")
    assert cfg.count == 5


class Counting(nn.Module):
    """A module that counts its calls in a Python attribute."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 3)
        self.calls = 0

    def forward(self, x):
        y = self.lin(x)
        self.calls = self.calls + 1
        return y * self.calls


def test_setattr_on_module_breaks_and_counts_like_eager():
    kiln.manual_seed(0)
    eager, compiled_mod = Counting(), Counting()
    compiled_mod.load_state_dict(eager.state_dict())
    compiled = kiln.compile(compiled_mod)
    records = []
    compiled._compiled_call._kiln_compiler.recorder = records
    x = rand(2, 3)
    for _ in range(3):
        assert_same(compiled(x), eager(x))
    assert compiled_mod.calls == eager.calls == 3
    first = records[0].break_record
    assert "assignment to attribute 'calls'" in first.reason
    assert first.source_line == "self.calls = self.calls + 1"


def append_to_arg(x, out):
    y = x + 1
    out.append(y)
    return y * 2


def test_mutating_a_list_argument_breaks():
    info = run_case(append_to_arg, rand(3), [], expect_graphs=2, expect_breaks=1)
    assert_breaks(info, "list.append on a list from outside the graph")
    assert info.op_counts == [1, 1]


def test_list_argument_mutation_is_visible_to_the_caller():
    out = []
    compiled = kiln.compile(append_to_arg)
    x = rand(3)
    compiled(x, out)
    compiled(x, out)
    assert len(out) == 2
    assert_same(out[1], x + 1)


def setitem_dict_arg(x, d):
    d["y"] = x * 2
    return x + 1


def test_mutating_a_dict_argument_breaks():
    info = run_case(setitem_dict_arg, rand(3), {"a": 1}, expect_breaks=1)
    assert_breaks(info, "item assignment")


def nonlocal_outside(x, counter=[0]):  # noqa: B006 - the mutable default is the point
    counter[0] += 1
    return x + counter[0]


def test_mutating_a_default_list_breaks():
    compiled = kiln.compile(nonlocal_outside)
    x = rand(2)
    first = compiled(x)
    second = compiled(x)
    assert_same(second - first, kiln.ones(2))


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


def inference_mode_block(x):
    with kiln.inference_mode():
        y = x * 2
    return y + 1


def unknown_context_manager(x):
    with contextlib.nullcontext():
        y = x * 2
    return y + 1


@pytest.mark.parametrize("fn,reason", [
    (inference_mode_block, "inference_mode()"),
    (unknown_context_manager, "call to nullcontext"),
])
def test_unsupported_with_blocks_break(fn, reason):
    # The call making the context manager runs eagerly; the with-block continues natively.
    info = run_case(fn, rand(3), expect_graphs=2, expect_breaks=2)
    assert_breaks(info, reason, "with-block over")


def float_keys(x, table):
    return x * table[0.5]


def test_argument_that_cannot_be_wrapped_runs_the_frame_eagerly():
    info = run_case(float_keys, rand(2), {0.5: 3.0}, expect_graphs=0, check_cached=False)
    assert info.records == []


def math_on_tensor_data(x):
    return x * math.sqrt(x.shape[0]), math.floor(x.sum())


def test_math_function_on_a_tensor_breaks():
    info = run_case(math_on_tensor_data, rand(4), expect_graphs=2, expect_breaks=1)
    assert_breaks(info, "floor() returns a Python int computed from tensor data")
