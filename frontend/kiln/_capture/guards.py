"""What a capture assumed, recorded as guards and compiled into a C++ guard tree.

The symbolic evaluator records a guard whenever it reads a value whose identity, type, value or
tensor properties the graph depends on. `GuardSet.build()` turns the records into a
`kiln._C._capture.GuardManager`, which evaluates them in C++ (cheapest checks first) on every
call; no Python runs on a cache hit.
"""

from __future__ import annotations

import types

from kiln import _C
from kiln._capture.sources import (
    ArgSource,
    AttrSource,
    ClosureSource,
    GlobalSource,
    HeldSource,
    ItemSource,
    Source,
)


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


class GuardSet:
    """Guards of one capture, deduplicated, in the order they were recorded."""

    def __init__(self) -> None:
        self._checks: dict = {}
        self._sym_checks: dict = {}
        self._relations: dict = {}  # relation text -> ((name, slot) pairs, description)
        self._flags: dict = {}

    def _add(self, key, source: Source, method: str, args: tuple, text: str) -> None:
        if source is not None and not source.guardable():
            return
        self._checks.setdefault(key, (source, method, args, text))

    def type(self, source, value) -> None:
        t = type(value)
        text = f"type({source}) is {t.__qualname__}"
        self._add(("type", source), source, "check_type", (t,), text)

    def id(self, source, value) -> None:
        label = getattr(value, "__qualname__", None) or getattr(value, "__name__", None)
        label = label or type(value).__name__
        if isinstance(value, (types.BuiltinMethodType, types.MethodType)) and not isinstance(
                value.__self__, types.ModuleType):
            # bound anew on every access (itertools.chain.from_iterable): equal, never the same
            self._add(("eq", source), source, "check_equals", (value,), f"{source} == {label}")
            return
        self._add(("id", source), source, "check_id", (value,), f"{source} is {label}")

    def equals(self, source, value) -> None:
        if value is None:
            self._add(("none", source), source, "check_none", (), f"{source} is None")
            return
        self._add(("eq", source), source, "check_equals", (value,), f"{source} == {_short(value)}")

    _PY_OPS = {"lt": 0, "le": 1, "eq": 2, "ne": 3, "gt": 4, "ge": 5}  # Py_LT .. Py_GE

    def compare(self, source, op: str, value, expected: bool) -> None:
        """`(source OP value) == expected`, OP one of lt le eq ne gt ge: a number the code only
        compared (`random.random() < 0.5`) is guarded on the comparison, not on its value."""
        symbol = {"lt": "<", "le": "<=", "eq": "==", "ne": "!=", "gt": ">", "ge": ">="}[op]
        text = f"({source} {symbol} {value!r}) is {expected}"
        self._add(("cmp", source, op, value), source, "check_compare",
                  (self._PY_OPS[op], value, bool(expected)), text)

    def length(self, source, n: int) -> None:
        self._add(("len", source), source, "check_len", (n,), f"len({source}) == {n}")

    def dict_keys(self, source, keys) -> None:
        keys = list(keys)
        text = f"{source}.keys() == {_short(keys)}"
        self._add(("keys", source), source, "check_dict_keys", (keys,), text)

    def tensor(self, source, t, dynamic_dims=(), sym_names=None, any_strides=False) -> None:
        """dtype, rank, static sizes and strides, requires_grad of the tensor at `source`
        (`any_strides`: the strides are not checked, the entry makes the tensor contiguous)."""
        sizes = [None if d in dynamic_dims else s for d, s in enumerate(t.shape)]
        strides = list(t.stride())
        if dynamic_dims or any_strides:
            strides = [None] * len(strides)  # strides follow the symbolic sizes
        shown = [sym_names.get(d, "?") if s is None else str(s) for d, s in enumerate(sizes)] if (
            sym_names is not None
        ) else [("?" if s is None else str(s)) for s in sizes]
        where = t._device_str
        text = (
            f"{source}: tensor {t.dtype}[{', '.join(shown)}] strides {tuple(t.stride())}"
            f" requires_grad={t.requires_grad}" + ("" if where == "cpu" else f" on {where}")
        )
        args = (t.dtype, sizes, strides, bool(t.requires_grad), where)
        self._add(("tensor", source), source, "check_tensor", args, text)

    def ndarray(self, source, arr, dynamic_dims=(), sym_names=None) -> None:
        """type, dtype (the buffer format), rank, static sizes and strides of a NumPy array."""
        self.type(source, arr)
        sizes = [None if d in dynamic_dims else s for d, s in enumerate(arr.shape)]
        strides = [None] * arr.ndim if dynamic_dims else list(arr.strides)
        shown = [(sym_names or {}).get(d, "?") if s is None else str(s)
                 for d, s in enumerate(sizes)]
        text = f"{source}: ndarray {arr.dtype}[{', '.join(shown)}] strides {arr.strides}"
        fmt = memoryview(arr).format
        args = (fmt, arr.itemsize, sizes, strides)
        self._add(("ndarray", source), source, "check_array", args, text)

    def bind_size(self, source, dim: int, sym: int, sym_name: str) -> None:
        text = f"{source}.size({dim}) -> {sym_name}"
        self._add(("bind", source, dim), source, "bind_size", (dim, sym), text)

    def bind_int(self, source, sym: int, sym_name: str) -> None:
        """A dynamic int argument's value as symbol `sym` (for relations over it)."""
        text = f"{source} -> {sym_name}"
        self._add(("bind", source, "int"), source, "bind_int", (sym,), text)

    def sym(self, kind: str, a: int, b: int, text: str) -> None:
        self._sym_checks.setdefault((kind, a, b), text)

    def relation(self, relation: str, slots: list, text: str) -> None:
        """A relation between symbols that a shape rule assumed (`s0 >= 100`: a slice's end
        within the size), with the slot of each symbol it names."""
        self._relations.setdefault(relation, (slots, text))

    def flag(self, obj, attr: str, value, text: str) -> None:
        self._flags.setdefault((id(obj), attr), (obj, attr, value, text))

    def describe(self) -> list[str]:
        texts = [text for (_, _, _, text) in self._checks.values()]
        texts += [text for (_, _, _, text) in self._flags.values()]
        texts += list(self._sym_checks.values())
        texts += [text for _, text in self._relations.values()]
        return texts

    def build(self):
        """The C++ guard tree for these checks."""
        gm = _C._capture.GuardManager()
        nodes: dict = {}

        def node_of(source):
            if source in nodes:
                return nodes[source]
            if isinstance(source, ArgSource):
                node = gm.root.arg(source.index)
            elif isinstance(source, GlobalSource):
                node = gm.root.global_(source.key)
            elif isinstance(source, ClosureSource):
                node = gm.root.closure(source.index)
            elif isinstance(source, HeldSource):
                node = gm.root.held(source.obj, source.label)
            elif isinstance(source, AttrSource):
                node = node_of(source.base).attr(source.attr)
            elif isinstance(source, ItemSource):
                node = node_of(source.base).item(source.key)
            elif hasattr(source, "guard_node"):  # a source that reads its value its own way
                node = source.guard_node(node_of)
            else:
                raise TypeError(f"no guard accessor for source {source!r}")
            nodes[source] = node
            return node

        for source, method, args, text in self._checks.values():
            getattr(node_of(source), method)(*args, text)
        for obj, attr, value, text in self._flags.values():
            gm.check_global_flag(obj, attr, value, text)
        for (kind, a, b), text in self._sym_checks.items():
            getattr(gm, f"add_sym_{kind}")(a, b, text)
        for relation, (slots, text) in self._relations.items():
            gm.add_sym_relation(relation, slots, text)
        return gm
