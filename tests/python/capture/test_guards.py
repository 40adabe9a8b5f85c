"""Guard trees of kiln._C._capture: accessors, leaf checks, tensors, symbols, order, errors."""

import collections
import math
import threading

import pytest

import kiln
from kiln._C import _capture as C

SCALE = 2.5
CONFIG = {"layers": 2}


def frame_fn(x, y):
    """The function whose globals/closure the accessors read (no closure)."""
    return x, y


def make_closure():
    """A function with two cells: a filled one and one that is still empty."""
    filled = [1, 2]

    def inner():
        return filled, late

    if not filled:  # never true: the cell of `late` stays empty
        late = None
    return inner


def check(gm, *args, func=frame_fn):
    """(check(), first_failure()) of gm on args, which must agree."""
    ok = gm.check(args, func)
    failure = gm.first_failure(args, func)
    assert ok == (failure is None)
    return ok, failure


def one_check(add, value, text="guard"):
    """A manager with one check on args[0], added by add(node, text)."""
    gm = C.GuardManager()
    add(gm.root.arg(0), text)
    return check(gm, value)


PASS = (True, None)
FAIL = (False, "guard")


def test_identity_type_none_checks():
    obj = object()
    assert one_check(lambda n, t: n.check_id(obj, t), obj) == PASS
    assert one_check(lambda n, t: n.check_id(obj, t), object()) == FAIL
    assert one_check(lambda n, t: n.check_type(int, t), 3) == PASS
    assert one_check(lambda n, t: n.check_type(int, t), True) == FAIL  # exact type, not subclass
    assert one_check(lambda n, t: n.check_none(t), None) == PASS
    assert one_check(lambda n, t: n.check_none(t), 0) == FAIL
    assert one_check(lambda n, t: n.check_not_none(t), 0) == PASS
    assert one_check(lambda n, t: n.check_not_none(t), None) == FAIL
    with pytest.raises(TypeError, match="expected a type"):
        C.GuardManager().root.arg(0).check_type(3, "x")


@pytest.mark.parametrize(
    "expected,value,ok",
    [
        (1, 1, True),
        (1, 2, False),
        (1, 1.0, False),
        (1, True, False),
        (True, True, True),
        (False, 0, False),
        (2**80, 2**80, True),
        (0.5, 0.5, True),
        (0.0, -0.0, False),
        (float("nan"), float("nan"), True),
        ("ab", "a" + "b", True),
        ("ab", "ba", False),
        (None, None, True),
        ((1, (2, "x")), (1, (2, "x")), True),
        ((1, 2), (1, 2.0), False),
        ((1, 2), [1, 2], False),
        ((1, 2), (1, 2, 3), False),
        (kiln.float32, kiln.float32, True),
        (kiln.float32, kiln.float16, False),
    ],
)
def test_check_equals(expected, value, ok):
    assert one_check(lambda n, t: n.check_equals(expected, t), value) == (PASS if ok else FAIL)


class Sized:
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n


def test_check_len():
    for value, ok in [((1, 2), True), ([1, 2], True), ({1: 2, 3: 4}, True), (Sized(2), True),
                      ((1,), False), ("ab", True), (3, False), (Sized(-1), False)]:
        assert one_check(lambda n, t: n.check_len(2, t), value) == (PASS if ok else FAIL), value
    with pytest.raises(ValueError):
        C.GuardManager().root.arg(0).check_len(-1, "x")


def test_check_dict_keys():
    add = lambda n, t: n.check_dict_keys(["a", "b"], t)  # noqa: E731
    assert one_check(add, {"a": 1, "b": 2}) == PASS
    assert one_check(add, collections.OrderedDict(a=1, b=2)) == PASS
    assert one_check(add, {"b": 2, "a": 1}) == FAIL  # order matters
    assert one_check(add, {"a": 1}) == FAIL
    assert one_check(add, {"a": 1, "b": 2, "c": 3}) == FAIL
    assert one_check(add, [("a", 1), ("b", 2)]) == FAIL


def test_arg_accessor_out_of_range_fails():
    gm = C.GuardManager()
    gm.root.arg(2).check_none("args[2] is None")
    assert check(gm, 1, 2, None) == PASS
    assert check(gm, 1, 2) == (False, "args[2] is None")
    with pytest.raises(ValueError):
        gm.root.arg(-1)


def test_global_accessor_and_builtins_fallback():
    gm = C.GuardManager()
    gm.root.global_("SCALE").check_equals(2.5, "G['SCALE'] == 2.5")
    gm.root.global_("len").check_id(len, "G['len'] is len")
    gm.root.global_("CONFIG").item("layers").check_equals(2, "G['CONFIG']['layers'] == 2")
    assert check(gm) == PASS
    CONFIG["layers"] = 3
    try:
        assert check(gm) == (False, "G['CONFIG']['layers'] == 2")
    finally:
        CONFIG["layers"] = 2
    missing = C.GuardManager()
    missing.root.global_("NOT_DEFINED_ANYWHERE").check_none("G['NOT_DEFINED_ANYWHERE'] is None")
    assert check(missing) == (False, "G['NOT_DEFINED_ANYWHERE'] is None")
    bare = C.GuardManager()
    bare.root.global_("NOT_DEFINED_ANYWHERE")
    assert check(bare) == (False, "G['NOT_DEFINED_ANYWHERE'] is missing")
    # A function shadowing a builtin in its globals wins over the builtin.
    ns = {"len": "shadow"}
    exec("def g():\n    return len\n", ns)
    shadow = C.GuardManager()
    shadow.root.global_("len").check_equals("shadow", "shadowed")
    assert shadow.check((), ns["g"]) and not shadow.check((), frame_fn)


def test_closure_accessor():
    fn = make_closure()
    names = fn.__code__.co_freevars
    gm = C.GuardManager()
    gm.root.closure(names.index("filled")).check_len(2, "len(filled) == 2")
    assert check(gm, func=fn) == PASS
    assert check(gm, func=frame_fn) == (False, "len(filled) == 2")  # no closure at all
    empty = C.GuardManager()
    empty.root.closure(names.index("late")).check_none("late is None")
    assert check(empty, func=fn) == (False, "late is None")  # empty cell
    out = C.GuardManager()
    out.root.closure(5).check_none("closure[5]")
    assert check(out, func=fn) == (False, "closure[5]")


def test_held_accessor_reads_the_held_object_by_identity():
    """held(obj) reaches an object the entry keeps (a baked parameter, whose .grad changes
    between calls); equal-valued objects are different nodes."""
    p, q = kiln.nn.Parameter(kiln.ones(1)), kiln.nn.Parameter(kiln.ones(1))
    gm = C.GuardManager()
    node = gm.root.held(p, "net.weight")
    assert gm.root.held(p, "again") is node and gm.root.held(q, "other") is not node
    assert node.source == "net.weight"
    node.attr("grad").check_none("net.weight.grad is None")
    assert check(gm) == PASS
    p.grad = kiln.ones(1)
    assert check(gm) == (False, "net.weight.grad is None")
    with pytest.raises(TypeError):
        gm.root.arg(0).held(p, "x")


class Obj:
    a = 1

    @property
    def broken(self):
        raise ZeroDivisionError("property raised")


def test_attr_accessor():
    gm = C.GuardManager()
    node = gm.root.arg(0).attr("a")
    node.check_equals(1, "x.a == 1")
    assert node.source == "args[0].a"
    assert check(gm, Obj()) == PASS
    o = Obj()
    o.a = 2
    assert check(gm, o) == (False, "x.a == 1")
    assert check(gm, 5) == (False, "x.a == 1")  # AttributeError: guard fails, error cleared
    raising = C.GuardManager()
    raising.root.arg(0).attr("broken").check_none("x.broken is None")
    assert check(raising, Obj()) == (False, "x.broken is None")


class Mapping:
    def __getitem__(self, key):
        if key == "k":
            return "v"
        raise KeyError(key)


def test_item_accessor():
    gm = C.GuardManager()
    first = gm.root.arg(0).item(0)
    first.check_equals("a", "x[0] == 'a'")
    gm.root.arg(0).item(-1).check_equals("c", "x[-1] == 'c'")
    assert first.source == "args[0][0]"
    assert check(gm, ("a", "b", "c")) == PASS
    assert check(gm, ["a", "b", "c"]) == PASS
    assert check(gm, "abc") == PASS  # generic __getitem__
    assert check(gm, ("a", "b", "d")) == (False, "x[-1] == 'c'")
    assert check(gm, ()) == (False, "x[0] == 'a'")

    keyed = C.GuardManager()
    keyed.root.arg(0).item(("t", 1)).check_equals(5, "x[('t', 1)] == 5")
    keyed.root.arg(1).item("k").check_equals("v", "y['k'] == 'v'")
    assert check(keyed, {("t", 1): 5}, Mapping()) == PASS
    assert check(keyed, {("t", 2): 5}, Mapping()) == (False, "x[('t', 1)] == 5")
    assert check(keyed, {("t", 1): 5}, {}) == (False, "y['k'] == 'v'")
    # A defaultdict is read without inserting the missing key.
    dd = collections.defaultdict(int)
    assert check(keyed, dd, Mapping())[0] is False
    assert len(dd) == 0
    with pytest.raises(TypeError):
        keyed.root.arg(0).item([1])  # unhashable


def test_accessors_are_shared_and_root_rules():
    gm = C.GuardManager()
    a = gm.root.arg(0)
    assert gm.root.arg(0) is a
    assert a.attr("w") is a.attr("w") and a.item("k") is a.item("k")
    assert a.item(1) is not a.item(True) and a.item(1) is not a.item(1.0)
    assert gm.root.global_("g") is gm.root.global_("g")
    a.check_none("one")
    gm.root.arg(0).check_none("two")
    assert a.own_checks() == ["one", "two"] and gm.num_checks == 2
    with pytest.raises(TypeError):
        gm.root.attr("x")
    with pytest.raises(TypeError):
        gm.root.check_none("root")
    with pytest.raises(TypeError):
        a.arg(0)
    # Nodes keep their manager alive.
    node = C.GuardManager().root.arg(0)
    node.check_none("x is None")
    assert node.num_checks == 1
    with pytest.raises(TypeError):
        gm.check([1], frame_fn)


def tensor_guard(dtype=kiln.float32, sizes=(2, 3), strides=(3, 1), requires_grad=False):
    gm = C.GuardManager()
    gm.root.arg(0).check_tensor(dtype, list(sizes), strides and list(strides), requires_grad,
                                "cpu", "tensor")
    return gm


def test_check_tensor():
    x = kiln.zeros(2, 3)
    assert check(tensor_guard(), x) == PASS
    assert check(tensor_guard(dtype=kiln.float64), x) == (False, "tensor")
    assert check(tensor_guard(), kiln.zeros(2, 4)) == (False, "tensor")
    assert check(tensor_guard(sizes=(2, None), strides=(None, 1)), kiln.zeros(2, 7)) == PASS
    assert check(tensor_guard(sizes=(None, None), strides=None), kiln.zeros(5, 6)) == PASS
    assert check(tensor_guard(sizes=(None, None), strides=None), kiln.zeros(5)) == (False, "tensor")
    t = kiln.zeros(3, 2).t()  # sizes (2, 3), strides (1, 2)
    assert check(tensor_guard(), t) == (False, "tensor")
    assert check(tensor_guard(strides=(1, 2)), t) == PASS
    x.requires_grad = True
    assert check(tensor_guard(), x) == (False, "tensor")
    assert check(tensor_guard(requires_grad=True), x) == PASS
    p = kiln.nn.Parameter(kiln.zeros(2, 3), requires_grad=False)
    assert type(p) is not kiln.Tensor
    assert check(tensor_guard(), p) == PASS
    for other in (None, [[0.0] * 3] * 2, 1.0):
        assert check(tensor_guard(), other) == (False, "tensor")
    with pytest.raises(ValueError, match="different lengths"):
        tensor_guard(strides=(1,))


def test_symbols_shared_between_tensors():
    gm = C.GuardManager()
    gm.root.arg(0).bind_size(0, 0, "x.size(0) is s0")
    gm.root.arg(1).bind_size(-1, 0, "y.size(-1) is s0")
    gm.root.arg(1).bind_size(0, 1, "y.size(0) is s1")
    gm.add_sym_ge_const(0, 2, "s0 >= 2")
    gm.add_sym_ne_const(1, 1, "s1 != 1")
    assert check(gm, kiln.zeros(4, 3), kiln.zeros(5, 4)) == PASS
    assert check(gm, kiln.zeros(4, 3), kiln.zeros(5, 3)) == (False, "y.size(-1) is s0")
    assert check(gm, kiln.zeros(1, 3), kiln.zeros(5, 1)) == (False, "s0 >= 2")
    assert check(gm, kiln.zeros(4), kiln.zeros(1, 4)) == (False, "s1 != 1")
    assert check(gm, kiln.zeros(()), kiln.zeros(1, 4)) == (False, "x.size(0) is s0")
    assert check(gm, 4, kiln.zeros(1, 4)) == (False, "x.size(0) is s0")


def test_symbol_relations():
    def guard(add):
        gm = C.GuardManager()
        gm.root.arg(0).bind_size(0, 0, "s0")
        gm.root.arg(0).bind_size(1, 1, "s1")
        add(gm)
        return gm

    x = kiln.zeros(4, 6)
    cases = [
        (lambda g: g.add_sym_eq_const(0, 4, "t"), True),
        (lambda g: g.add_sym_eq_const(0, 5, "t"), False),
        (lambda g: g.add_sym_le_const(1, 6, "t"), True),
        (lambda g: g.add_sym_le_const(1, 5, "t"), False),
        (lambda g: g.add_sym_ge_const(1, 7, "t"), False),
        (lambda g: g.add_sym_ne_const(0, 4, "t"), False),
        (lambda g: g.add_sym_eq(0, 1, "t"), False),
        (lambda g: g.add_sym_eq(1, 1, "t"), True),
        (lambda g: g.add_sym_eq_const(2, 4, "t"), False),  # slot 2 is never bound
    ]
    for add, ok in cases:
        assert check(guard(add), x) == (PASS if ok else (False, "t"))
    assert check(guard(lambda g: g.add_sym_eq(0, 1, "t")), kiln.zeros(3, 3)) == PASS
    with pytest.raises(ValueError):
        C.GuardManager().add_sym_eq_const(-1, 0, "t")


def test_many_symbols():
    gm = C.GuardManager()
    for i in range(40):
        gm.root.arg(i).bind_size(0, i, f"s{i}")
        gm.add_sym_eq_const(i, i + 1, f"s{i} == {i + 1}")
    args = [kiln.zeros(i + 1) for i in range(40)]
    assert check(gm, *args) == PASS
    args[39] = kiln.zeros(3)
    assert check(gm, *args) == (False, "s39 == 40")


def test_global_flag():
    state = threading.local()
    state.grad_enabled = True
    gm = C.GuardManager()
    gm.check_global_flag(state, "grad_enabled", True, "grad_enabled == True")
    assert check(gm) == PASS
    state.grad_enabled = False
    assert check(gm) == (False, "grad_enabled == True")
    del state.grad_enabled
    assert check(gm) == (False, "grad_enabled == True")
    with pytest.raises(TypeError):
        gm.check_global_flag(state, 3, True, "bad name")


def test_describe_order():
    gm = C.GuardManager()
    gm.add_sym_ge_const(0, 2, "sym")
    x = gm.root.arg(0)
    x.bind_size(0, 0, "x bind")
    x.check_tensor(kiln.float32, [None], [1], False, "cpu", "x tensor")
    x.check_len(3, "x len")
    x.check_equals((1, 2), "x tuple")
    x.check_type(kiln.Tensor, "x type")
    x.attr("w").check_id(None, "x.w id")
    gm.root.arg(1).check_not_none("y not none")
    gm.check_global_flag(threading.local(), "f", 1, "flag")
    assert gm.describe() == [
        "flag", "x type", "x len", "x tuple", "x bind", "x tensor", "x.w id", "y not none", "sym",
    ]
    assert gm.num_checks == 9
    assert "x type" in repr(gm)


def test_evaluation_stops_at_first_failure_in_order():
    calls = []

    class Probe:
        def __eq__(self, other):
            calls.append("eq")
            return True

        __hash__ = object.__hash__

    gm = C.GuardManager()
    node = gm.root.arg(0)
    node.check_equals(Probe(), "eq")
    node.check_type(Probe, "type first")
    assert check(gm, 3) == (False, "type first")
    assert calls == []
    assert check(gm, Probe()) == PASS and calls == ["eq", "eq"]


class Raising:
    def __eq__(self, other):
        raise RuntimeError("user __eq__ failed")

    __hash__ = object.__hash__


def test_exceptions_in_checks_fail_and_are_cleared():
    gm = C.GuardManager()
    gm.root.arg(0).check_equals(Raising(), "x == token")
    assert check(gm, Raising()) == (False, "x == token")
    keys = C.GuardManager()
    keys.root.arg(0).check_dict_keys([Raising()], "keys")
    assert check(keys, {Raising(): 1}) == (False, "keys")
    flag = C.GuardManager()
    flag.check_global_flag(Obj(), "a", Raising(), "flag")
    assert check(flag) == (False, "flag")


def test_building_during_evaluation_is_refused():
    gm = C.GuardManager()
    errors = []

    class Builder:
        def __eq__(self, other):
            try:
                gm.root.arg(1).check_none("added late")
            except RuntimeError as e:
                errors.append(str(e))
            return True

        __hash__ = object.__hash__

    gm.root.arg(0).check_equals(Builder(), "eq")
    assert check(gm, Builder()) == PASS
    assert len(errors) == 2 and "being evaluated" in errors[0]
    assert gm.describe() == ["eq"]


def test_resume_style_arguments():
    # Python calls check() with any tuple as the "args" (e.g. a resume function's live values).
    gm = C.GuardManager()
    gm.root.arg(0).check_tensor(kiln.float32, [2], [1], False, "cpu", "t")
    gm.root.arg(1).check_equals(math.pi, "pi")
    assert gm.check((kiln.zeros(2), math.pi), None)
    assert gm.first_failure((kiln.zeros(2), 3.0), None) == "pi"
    glob = C.GuardManager()
    glob.root.global_("SCALE").check_equals(2.5, "g")
    assert glob.first_failure((), None) == "g"  # no function: no globals


def test_relation_checks_over_bound_sizes_and_ints():
    """A relation a shape rule assumed, over a tensor's size and an int argument's value (both
    bound to symbol slots); an unbound symbol fails the check."""
    gm = C.GuardManager()
    gm.root.arg(0).bind_size(0, 0, "x.size(0) -> s0")
    gm.root.arg(1).bind_int(1, "start -> s1")
    gm.add_sym_relation("s1 + 3 <= s0", [("s0", 0), ("s1", 1)], "s1 + 3 <= s0")
    assert check(gm, kiln.zeros(10), 7) == PASS
    assert check(gm, kiln.zeros(10), 8) == (False, "s1 + 3 <= s0")
    assert check(gm, kiln.zeros(10), True) == (False, "start -> s1")  # a bool is not an int
    assert "s1 + 3 <= s0" in gm.describe()
    unbound = C.GuardManager()
    unbound.add_sym_relation("s0 >= 4", [("s0", 0)], "s0 >= 4")
    assert check(unbound) == (False, "s0 >= 4")
