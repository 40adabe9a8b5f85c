"""Decompositions: a call written define-by-run as graph ops, ``b.add(x, b.mul(y, 2))``.

A decomposition is a Python function of a `Builder` and the call's arguments, bound to the
signature given to `decomposition` (torch's, so defaults apply). Each ``b.op(*operands,
**attrs)`` adds one ops.def node through the capture's `GraphWriter`, typed by the op's shape
rule at once (``b.sizes(v)``, ``b.dtype(v)``), with the call's source line; Python numbers
become ``constant`` operands. What the function returns (a value, or a tuple of values for a
call that returns a tuple) stands for the call, and must type as eager's result did, else the
call stays an opaque ``call``; so does a call whose arguments the decomposition cannot express
(it raises `Decline`). The graph ops carry their own derivative rules, so a decomposed call
trains compiled with no rule of its own. Registered decompositions take precedence over the
op table's rows, like the lowerings in lowerings*.py.
"""

from __future__ import annotations

from kiln._capture.graph_build import Decline, Val, check_type, dtype_short
from kiln._capture.lowerings import lowering

__all__ = ["Builder", "Decline", "decomposition"]

_FLOATS = ("f16", "bf16", "f32", "f64")


class Builder:
    """Graph ops by name for one call's decomposition: ``b.mul(x, 2.0)``, ``b.sum(x, dim=[1])``;
    an op with several results returns them as a tuple."""

    def __init__(self, w, node):
        self._w, self._node, self._loc = w, node, node.meta.get("loc")

    def __getattr__(self, op: str):
        if op.startswith("_"):
            raise AttributeError(op)

        def build(*operands, **attrs):
            values = [v if isinstance(v, Val) else self._w.operand(v) for v in operands]
            results = self._w.emit(op, values, attrs, self._loc)
            return results[0] if len(results) == 1 else tuple(results)

        return build

    # -- arguments -------------------------------------------------------------------------------

    def tensor(self, v) -> Val:
        """A tensor argument's value (Decline for anything else)."""
        return self._w.tensor(v)

    def optional(self, v) -> Val | None:
        return None if v is None else self._w.tensor(v)

    def float_tensor(self, v) -> Val:
        """A floating-point tensor argument (Decline for integers: eager rejects or promotes
        them in ways these decompositions do not spell out)."""
        t = self._w.tensor(v)
        if t.type.dtype not in _FLOATS:
            raise Decline(f"a {t.type.dtype} tensor where a floating-point one is decomposed")
        return t

    def int_(self, v) -> int:
        return self._w.int_(v)

    def ints(self, v) -> list[int]:
        return self._w.ints(v)

    def syms(self, v) -> list[str]:
        """Int arguments as SymInt text (symbolic where they are run-time sizes)."""
        return self._w.syms(v)

    def number(self, v, name: str) -> float | int:
        """A constant Python number argument."""
        if type(v) not in (int, float, bool):
            raise Decline(f"{name} computed at run time")
        return v

    def result_written(self) -> bool:
        """Whether the program writes in place into the call's result or into a value computed
        from it: a call whose eager result is a view of its input (diagonal) decomposed as a new
        value must decline then, or the write would miss the input."""
        from kiln._capture.partition_rules import mutates

        reached, todo = {id(self._node)}, list(self._node.users)
        while todo:
            n = todo.pop()
            if id(n) in reached:
                continue
            reached.add(id(n))
            if mutates(n) and id(n.args[0]) in reached:
                return True
            todo += n.users
        return False

    # -- types -----------------------------------------------------------------------------------

    @staticmethod
    def sizes(v: Val) -> list[str]:
        """Symbolic sizes as SymInt text: ``["s0", "8"]``."""
        return list(v.type.sizes)

    @staticmethod
    def rank(v: Val) -> int:
        return len(v.type.sizes)

    @staticmethod
    def dtype(v: Val) -> str:
        """The short dtype name: ``f32``."""
        return v.type.dtype

    @staticmethod
    def dtype_name(dtype) -> str:
        """A kiln dtype as attributes spell it: ``f32``."""
        return dtype if isinstance(dtype, str) else dtype_short(dtype)

    @staticmethod
    def dim(d: int, rank: int) -> int:
        """`d` wrapped into [0, rank) (Decline when out of range: eager raises its error)."""
        if not -rank <= d < max(rank, 1):
            raise Decline(f"dim {d} out of range for rank {rank}")
        return d % max(rank, 1)

    # -- common compositions ---------------------------------------------------------------------

    def cast(self, v: Val, dtype) -> Val:
        """`v` as `dtype` (a kiln dtype or a short name); no node when it already is."""
        short = self.dtype_name(dtype)
        return v if v.type.dtype == short else self.__getattr__("cast")(v, dtype=short)

    def reduce(self, values: Val, reduction: str) -> Val:
        """A loss's reduction: 'none', 'mean' or 'sum' of every element."""
        if reduction == "none":
            return values
        if reduction == "mean":
            return self.mean(values)
        if reduction == "sum":
            return self.sum(values)
        raise Decline(f"reduction {reduction!r}")


def decomposition(sig, *targets):
    """Registers `fn(b, **arguments)` as the decomposition of calls of `targets` (dotted
    paths) whose arguments bind to `sig`."""

    def register(fn):
        def lower(w, node, a):
            out = fn(Builder(w, node), **a)
            example = node.meta.get("example")
            name = fn.__name__.lstrip("_")
            if isinstance(out, tuple):
                if not isinstance(example, tuple) or len(example) != len(out):
                    raise Decline(f"{name} returns {len(out)} values where eager gave another")
                for v, e in zip(out, example, strict=True):
                    check_type(v, e, name)
            else:
                check_type(out, example, name)
            w.values[id(node)] = out

        lowering(sig, *targets)(lower)
        return fn

    return register
