"""Capture corpus, part 2: one small program per graph-break reason.

Every program runs compiled (twice: the second call must hit the cache) and eagerly on clones
(`corpus_util.run_case`), and the test pins the graphs captured (op counts per capture, in
order: the frame, then its resume functions) and the break reasons. Breaks that execute the
breaking call or branch eagerly continue in a captured resume function (one more graph); the
others (in loops, in try blocks, unsupported bytecodes) continue natively (no more graphs).
"""

import time

import numpy as np
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


def numpy_random(x):
    y = x + 1
    noise = np.random.rand(3)
    return y * 2, noise.shape


def test_numpy_on_constants_runs_at_capture_time():
    """np.sqrt(16.0) is a constant of the graph (NumPy computed it once): no break."""
    info = run_case(numpy_function, rand(3), expect_graphs=1, expect_breaks=0)
    assert info.op_counts == [2]


def test_numpy_random_breaks():
    """np.random draws on every call: it is never folded, NumPy runs it (a graph break)."""
    info = run_case(numpy_random, rand(3), expect_graphs=2, expect_breaks=1)
    assert_breaks(info, "np.random.rand() is not compiled")


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


def tensor_from_python_data(x):  # a list holding a tensor (literal numbers compile)
    return x + kiln.tensor([x.sum()])


def seeds_inside(x):
    kiln.manual_seed(3)
    return x + kiln.rand(3)


def module_created_inside(x):
    lin = nn.Linear(3, 2)
    return lin(x).shape[-1] + x


@pytest.mark.parametrize("fn,ops,reason", [
    (tensor_from_python_data, [1, 1], "kiln.tensor()"),
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
        "print() is a side effect", "the code raises KeyError: three",
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


def test_setattr_on_an_argument_object_is_replayed():
    cfg = Config()
    run_case(set_object_attr, rand(3), cfg, expect_graphs=1, expect_breaks=0)
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


def test_an_int_attribute_changed_on_every_call_becomes_a_run_time_int():
    """RWKV's `self.step += 1`: the first capture bakes the count and replays the store, the
    second marks it a counter, and from the third on it is read and written on every call (no
    new capture, no break); an assignment from outside is seen without a capture either."""
    kiln.manual_seed(0)
    eager, compiled_mod = Counting(), Counting()
    compiled_mod.load_state_dict(eager.state_dict())
    compiled = kiln.compile(compiled_mod)
    records = []
    compiled._compiled_call._kiln_compiler.recorder = records
    x = rand(2, 3)
    for _ in range(6):
        assert_same(compiled(x), eager(x))
    assert compiled_mod.calls == eager.calls == 6
    assert len(records) == 3 and all(r.break_record is None for r in records)
    compiled_mod.calls = eager.calls = 40
    assert_same(compiled(x), eager(x))
    assert compiled_mod.calls == 41 and len(records) == 3


def nonlocal_outside(x, counter=[0]):  # noqa: B006 - the mutable default is the point
    counter[0] += 1
    return x + counter[0]


def test_mutating_a_default_list_breaks():
    compiled = kiln.compile(nonlocal_outside)
    x = rand(2)
    first = compiled(x)
    second = compiled(x)
    assert_same(second - first, kiln.ones(2))


def test_a_list_made_in_compiled_code_keeps_its_identity_across_a_break():
    # at the break `E` is a local and `E.append` is on the stack: rebuilt as two lists, the
    # append after the break landed in a copy and the first energy was lost
    def energies(x, v, steps):
        E = []
        for _ in range(steps):
            v = v - 0.01 * x
            x = x + 0.01 * v
            E.append(float((v * v).sum()))
        return x, E

    x, v = kiln.randn(50, dtype=kiln.float64), kiln.randn(50, dtype=kiln.float64)
    want = energies(x, v, 12)
    got = kiln.compile(energies)(x, v, 12)
    assert_same(got[0], want[0])
    assert len(got[1]) == 12 and np.allclose(got[1], want[1], rtol=1e-12)

    def one(x):
        out = {"first": []}
        out["first"].append(float(x.sum()))
        return out

    assert kiln.compile(one)(x)["first"] == one(x)["first"]


def keyword_call_breaking_in_a_loop(a):
    out = []
    for i in range(2):  # the break is inside the loop: the frame resumes natively at the call
        out.append(kiln.unique(a[i], return_counts=True)[1] * 1)
    return out


def test_a_breaking_call_with_keywords_inside_a_loop_keeps_its_keywords():
    """The resume function re-runs the call's KW_NAMES (it resumed at PRECALL, and the call
    took its keyword values as positionals: return_index for return_counts)."""
    a = kiln.tensor([[1, 2, 3, 3], [0, 0, 0, 1]])
    compiled = kiln.compile(keyword_call_breaking_in_a_loop)
    for _ in range(2):
        got, want = compiled(a), keyword_call_breaking_in_a_loop(a)
        assert [g.tolist() for g in got] == [w.tolist() for w in want] == [[1, 1, 2], [3, 1]]
