"""Numbers known only at run time in the captured code: symbolic sizes and dynamic int and
float arguments. Arithmetic on them is recorded as graph nodes; comparisons are decided on the
example and guarded (a relation of symbols, a comparison of an argument with a constant), and a
value that must be a Python int specializes to its example (guarded)."""

from __future__ import annotations

import operator

from kiln._capture import ops
from kiln._capture import variables as V


class SymbolicMixin:
    def concrete_int(self, value: V.SymIntVar) -> int:
        """A symbolic size used as a Python int: specialize to its value (guarded)."""
        if value.sym is None:
            if getattr(value, "source", None) is not None:  # a dynamic int input
                self.ctx.guards.equals(value.source, value.hint)
                return value.hint
            raise V.RestartStatic()
        self.ctx.guards.sym("eq_const", value.sym, value.hint,
                            f"{self.ctx.symbols[value.sym][0]} == {value.hint}")
        return value.hint

    def sym_binary(self, op, a: V.VT, b: V.VT) -> V.VT:
        if op in (operator.lt, operator.le, operator.gt, operator.ge, operator.eq, operator.ne):
            return V.ConstVar(self.sym_compare(op, a, b))
        for v in (a, b):
            if not isinstance(v, (V.SymIntVar, V.ConstVar)) or (
                isinstance(v, V.ConstVar) and type(v.value) not in (int, bool)
            ):
                if isinstance(v, V.ConstVar) and isinstance(v.value, float):
                    continue
                raise V.Unsupported(f"{op.__name__} of a symbolic int and {type(v).__name__}")
        hint = op(ops.to_example(a), ops.to_example(b))
        node = self.ctx.graph.call(op, (ops.to_graph_arg(a), ops.to_graph_arg(b)), {}, hint,
                                   loc=self.ctx.loc)
        if isinstance(hint, bool):
            raise V.RestartStatic()
        if isinstance(hint, int):
            return V.SymIntVar(node, hint)
        if isinstance(hint, float):
            result = V.SymFloatVar(node, hint)
            if op is operator.truediv:
                result.quotient_of = (a, b)  # int() of it is a floor division (builtins_impl)
            return result
        raise V.Unsupported(f"{op.__name__} of symbolic numbers gives a {type(hint).__name__}")

    def _relation_text(self, op, a: V.VT, b: V.VT, result: bool) -> str | None:
        """`a op b` (or its negation when `result` is False) as SymRelation text over the
        entry's symbols, or None when a side has no symbolic spelling."""
        sides = []
        for v in (a, b):
            if isinstance(v, V.ConstVar) and type(v.value) is int:
                sides.append(str(v.value))
            elif isinstance(v, V.SymIntVar) and type(v.hint) is int:
                if v.sym is not None:
                    sides.append(self.ctx.symbols[v.sym][0])
                    continue
                self.ctx._sizes_of(v.node)  # types the int nodes recorded so far
                text = self.ctx._int_syms.get(id(v.node))
                if text is None:
                    return None
                sides.append(f"({text})")
            else:
                return None
        spelled = {operator.lt: "<", operator.le: "<=", operator.gt: ">", operator.ge: ">=",
                   operator.eq: "==", operator.ne: "!="}
        negated = {"<": ">=", "<=": ">", ">": "<=", ">=": "<", "==": "!=", "!=": "=="}
        if op not in spelled:
            return None
        rel = spelled[op] if result else negated[spelled[op]]
        return f"{sides[0]} {rel} {sides[1]}"

    def sym_compare(self, op, a: V.VT, b: V.VT) -> bool:
        sym_side = a if isinstance(a, V.SymIntVar) else b
        other = b if sym_side is a else a
        source = getattr(sym_side, "source", None)
        if sym_side.sym is None and source is not None:
            result = op(ops.to_example(a), ops.to_example(b))
            if isinstance(other, V.ConstVar) and type(other.value) in (int, float) and (
                source.guardable()
            ):  # a run-time number (a random draw, a float argument) compared with a constant
                flipped = {operator.lt: "gt", operator.gt: "lt", operator.le: "ge",
                           operator.ge: "le", operator.eq: "eq", operator.ne: "ne"}
                name = op.__name__ if sym_side is a else flipped[op]
                self.ctx.guards.compare(source, name, other.value, result)
                return result
            self.concrete_int(sym_side)
            return result
        result = op(ops.to_example(a), ops.to_example(b))
        if isinstance(other, V.SymIntVar) and other.sym is not None and sym_side.sym is not None \
                and op in (operator.eq, operator.ne) and (op is operator.eq) == result:
            # two sizes found equal (gpt-fast's `assert pos.shape[0] == k.shape[2]`): guarded
            # as a relation of the symbols, so both stay symbolic
            names = [self.ctx.symbols[v.sym][0] for v in (a, b)]
            self.ctx.guards.sym("eq", a.sym, b.sym, f"{names[0]} == {names[1]}")
            return result
        if sym_side.sym is None or not isinstance(other, V.ConstVar):
            # an expression of sizes (`k.shape[-2] + past.shape[-2] > cached`): the relation
            # that makes `result` hold, guarded as it is, keeps the sizes symbolic
            relation = self._relation_text(op, a, b, result)
            if relation is not None and self.ctx.guard_relation(relation, "a comparison"):
                return result
            raise V.RestartStatic()
        c = other.value
        if not isinstance(c, int):
            raise V.RestartStatic()
        # Normalize to "s OP c" and record the relation that makes `result` hold.
        flipped = {operator.lt: operator.gt, operator.gt: operator.lt, operator.le: operator.ge,
                   operator.ge: operator.le}
        if sym_side is b:
            op = flipped.get(op, op)
        s = sym_side.sym
        name = self.ctx.symbols[s][0]
        if op in (operator.eq, operator.ne):
            kind = "eq_const" if (op is operator.eq) == result else "ne_const"
            self.ctx.guards.sym(kind, s, c, f"{name} {'==' if kind == 'eq_const' else '!='} {c}")
        else:
            lower = {operator.gt: c + 1, operator.ge: c}.get(op)
            upper = {operator.lt: c - 1, operator.le: c}.get(op)
            if lower is not None:
                bound = ("ge_const", lower) if result else ("le_const", lower - 1)
            else:
                bound = ("le_const", upper) if result else ("ge_const", upper + 1)
            sign = ">=" if bound[0] == "ge_const" else "<="
            self.ctx.guards.sym(bound[0], s, bound[1], f"{name} {sign} {bound[1]}")
        return result
