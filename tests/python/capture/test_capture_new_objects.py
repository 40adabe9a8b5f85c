"""Instances of plain user classes created inside compiled code.

Creating one (`Plain(2.5).apply(x)`) is captured whole: `__init__` and methods are inlined,
attribute writes are tracked and seen by later reads. An object that outlives the capture
(returned, live at a graph break, passed to code that runs eagerly, stored outside) is built once
with its final attributes. Classes whose instances need a real object (their own `__new__`, a
metaclass, attribute hooks) break the graph at the call and run like eager.
"""

import dataclasses

import pytest
from corpus_util import (  # noqa: F401 - fresh_capture: autouse fixture
    assert_same,
    captures,
    compiler_of,
    fresh_capture,
    run_case,
)

import kiln


def r(*shape, seed=0):
    kiln.manual_seed(seed)
    return kiln.randn(*shape)


class Plain:
    def __init__(self, s):
        self.s = s

    def apply(self, x):
        return x * self.s


def make_and_apply(x):
    return Plain(2.5).apply(x)


def test_creating_a_plain_object_is_one_graph():
    x = r(3, 4)
    info = run_case(make_and_apply, x, expect_graphs=1, expect_breaks=0)
    assert info.op_counts == [1]
    out = kiln.explain(make_and_apply)(x)
    assert (out.graph_count, out.graph_break_count) == (1, 0)
    assert out.ops_per_graph == [["operator.mul"]]
    assert_same(out.result, make_and_apply(x))


class Base:
    bias = 1.0  # a class attribute, read through the class (guarded)

    def __init__(self, scale):
        self.scale = scale
        self.calls = 0

    def step(self, t):
        self.calls += 1
        return t * self.scale + self.bias


class Derived(Base):
    def __init__(self, scale, shift):
        super().__init__(scale)
        self.shift = shift
        self._offset = 0.0

    @property
    def offset(self):
        return self._offset

    @offset.setter
    def offset(self, value):
        self._offset = value * 2

    def __call__(self, t):
        return self.step(t) + self.shift + self.offset

    def __len__(self):
        return self.calls


def methods_properties_and_writes(x):
    d = Derived(2.0, x.sum(dim=0))  # a tensor attribute
    d.offset = 0.25  # through the property's setter
    y = d(x)
    if d:  # __len__: one call so far
        y = d(y)
    d.extra = 3
    name = "more"
    setattr(d, name, 4)
    assert isinstance(d, Base) and type(d) is Derived and hasattr(d, "more")
    assert not hasattr(d, "missing") and callable(d)
    return y * (d.calls + d.extra + getattr(d, name) + len(d)), d.shift


def test_methods_properties_super_and_attribute_writes():
    info = run_case(methods_properties_and_writes, r(3, 4), expect_graphs=1, expect_breaks=0)
    assert info.graphs[0].op_count() > 0


def test_class_attributes_are_guarded():
    def f(x):
        return Base(2.0).step(x)

    compiled = kiln.compile(f, backend="eager")
    x = r(3)
    assert_same(compiled(x), f(x))
    Base.bias = 5.0
    try:
        assert_same(compiled(x), f(x))  # the changed class attribute recompiles
    finally:
        Base.bias = 1.0


class Acc:
    def __init__(self, x):
        self.total = x
        self.n = 1

    def add(self, t):
        self.total = self.total + t
        self.n += 1
        return self


def returns_objects(x, y):
    acc = Acc(x).add(y).add(y * 2)
    acc.me = acc  # refers to itself
    return acc, [acc], Plain(x.relu())


def test_returned_objects_are_built_with_their_final_attributes():
    x, y = r(3), r(3, seed=1)
    records = []
    compiled = kiln.compile(returns_objects, backend="eager")
    compiler_of(compiled).recorder = records
    for _ in range(2):
        acc, in_list, plain = compiled(x, y)
        want, _, want_plain = returns_objects(x, y)
        assert type(acc) is Acc and type(plain) is Plain
        assert in_list[0] is acc and acc.me is acc  # one object, however often it is reached
        assert sorted(vars(acc)) == ["me", "n", "total"] and acc.n == 3
        assert_same(acc.total, want.total)
        assert_same(plain.s, want_plain.s)
    assert len(records) == 1 and records[0].break_record is None


@kiln.compiler.disable
def read_scale(obj):
    return obj.s


_escaped = []


class Holder:
    item = None


def escapes(x, holder):
    p = Plain(3.0)
    p.extra = x + 1
    print("break")  # p is live across the break: the resume function gets the real object
    q = Plain(read_scale(p))  # an eager call sees the object too
    holder.item = q  # stored into an object from outside
    _escaped.append(p)  # mutates a global list
    return p.apply(x) + p.extra + q.s


def test_objects_escaping_through_breaks_and_eager_calls(capsys):
    x = r(3, 4)
    eager_holder, holder = Holder(), Holder()
    want = escapes(x, eager_holder)
    _escaped.clear()
    compiled = kiln.compile(escapes, backend="eager")
    records = []
    compiler_of(compiled).recorder = records
    assert_same(compiled(x, holder), want)
    # The last part stores into the holder and the global list: the entry replays both.
    assert [(r.code.co_name, r.break_record.reason if r.break_record else None)
            for r in records] == [
        ("escapes", "print() is a side effect"),
        ("__resume_at_80_escapes",
         "call to read_scale(), which kiln.compiler.disable keeps eager"),
        ("__resume_at_134___resume_at_80_escapes", None)]
    assert type(holder.item) is Plain and holder.item.s == 3.0
    (p,) = _escaped
    assert type(p) is Plain and sorted(vars(p)) == ["extra", "s"]
    assert_same(p.extra, x + 1)
    assert capsys.readouterr().out == "break\nbreak\n"
    assert_same(compiled(x, holder), want)  # the cached entries


class WithNew:
    def __new__(cls, s):
        obj = super().__new__(cls)
        obj.made = True
        return obj

    def __init__(self, s):
        self.s = s

    def apply(self, x):
        return x * self.s + self.made


def uses_custom_new(x):
    return WithNew(1.5).apply(x) + 1


def test_a_class_with_its_own_new_breaks_and_runs_like_eager():
    info = run_case(uses_custom_new, r(3, 4))
    # The call runs eagerly; the hook then captures its __new__ and __init__ as frames of their
    # own (they break on their own attribute writes), and the resume function the rest.
    assert [c[0] for c in captures(info)] == ["uses_custom_new", "__new__", "resume:__new__",
                                              "__init__", "resume:uses_custom_new"]
    assert info.break_reasons[0] == (
        "creating a WithNew object: it defines its own __new__ (or derives from a builtin type)")
    assert captures(info)[-1] == ("resume:uses_custom_new", 3, None)


class Slotted:
    __slots__ = ("s", "bias")

    def __init__(self, s):
        self.s = s
        self.bias = 1.0

    def apply(self, x):
        return x * self.s + self.bias


def uses_slots(x):
    obj = Slotted(0.5)
    return obj.apply(x), obj


def test_slots_are_captured_and_rebuilt():
    x = r(3, 4)
    compiled = kiln.compile(uses_slots, backend="eager")
    records = []
    compiler_of(compiled).recorder = records
    y, obj = compiled(x)
    assert_same(y, uses_slots(x)[0])
    assert type(obj) is Slotted and (obj.s, obj.bias) == (0.5, 1.0)
    assert len(records) == 1 and records[0].break_record is None


def assigns_a_missing_slot(x):
    obj = Slotted(0.5)
    obj.other = 1
    return x


def test_assigning_a_missing_slot_raises_like_eager():
    with pytest.raises(AttributeError):
        assigns_a_missing_slot(r(2))
    with pytest.raises(AttributeError):
        kiln.compile(assigns_a_missing_slot, backend="eager")(r(2))


@dataclasses.dataclass
class Options:
    scale: float = 2.0
    layers: tuple = (1, 2)

    def __post_init__(self):
        self.total = self.scale * len(self.layers)


def builds_a_dataclass(x):
    opts = Options(scale=3.0)
    return x * opts.total + opts.layers[1]


def test_dataclass_created_inside():
    run_case(builds_a_dataclass, r(3), expect_graphs=1, expect_breaks=0)


class Meta(type):
    pass


class WithMeta(metaclass=Meta):
    def __init__(self, s):
        self.s = s


def uses_metaclass(x):
    return x * WithMeta(2.0).s


def test_a_metaclass_breaks_with_a_reason():
    info = run_case(uses_metaclass, r(3))
    assert info.break_reasons[0] == ("creating a WithMeta object: its metaclass Meta may "
                                     "customize creation")
    assert captures(info)[-1] == ("resume:uses_metaclass", 1, None)
