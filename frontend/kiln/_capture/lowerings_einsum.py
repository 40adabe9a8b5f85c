"""``kiln.einsum`` as graph ops (lowerings.py explains the mechanism). Operands fold left in
pairs; each pair keeps the letters the output or a later operand needs. A pair that is one
batched matrix product (one free letter on each side, one contracted letter, shared batch
letters) is a ``matmul`` between two permutes, so it runs on the GEMM library; any other pair is
a broadcast multiply summed over its contracted letters, which fusion turns into one reduction
that never materializes the product. '...' stands for upper-case letters aligned from the right.
Repeated letters within an operand (diagonals) and the sublist form stay eager."""

from __future__ import annotations

import kiln
from kiln._capture.graph_build import Decline, Node, dtype_short
from kiln._capture.lowerings import lowering


def _s_einsum(equation, *operands): ...


_ELLIPSIS_LETTERS = "ZYXWVUTSRQPONMLKJIHGFEDCBA"  # the dims '...' stands for, from the right


def _parse(equation: str, ranks: list[int]) -> tuple[list[str], str]:
    """The letters of each operand and of the output, with '...' spelled out as upper-case
    letters aligned from the right (broadcast like numpy's)."""
    eq = equation.replace(" ", "")
    lhs, arrow, out = eq.partition("->")
    inputs = lhs.split(",")
    if len(inputs) != len(ranks):
        raise Decline("einsum equation that does not match its operands")
    spelled, widest = [], 0
    for letters, rank in zip(inputs, ranks, strict=True):
        if "..." in letters:
            n = rank - (len(letters) - 3)
            if n < 0:
                raise Decline("einsum operand of another rank than its letters")
            widest = max(widest, n)
            letters = letters.replace("...", _ELLIPSIS_LETTERS[:n][::-1])
        spelled.append(letters)
    ellipsis = _ELLIPSIS_LETTERS[:widest][::-1]
    if arrow:
        out = out.replace("...", ellipsis)
    if not all(s.isalpha() or s == "" for s in spelled + [out]) or any(
            c.isupper() for c in "".join(inputs) + out.replace(ellipsis, "")):  # fmt: skip
        raise Decline("einsum equation with letters other than a-z")
    if any(len(set(s)) != len(s) for s in spelled + [out]):
        raise Decline("einsum with a repeated letter (a diagonal)")
    if not arrow:  # implicit output: '...' then the letters seen once, sorted
        seen = "".join(inputs)
        out = ellipsis + "".join(sorted(c for c in set(seen) if c.islower() and seen.count(c) == 1))
    if set(out) - set("".join(spelled)):
        raise Decline("einsum output letter not in any operand")
    return spelled, out


class _Term:
    """A graph value whose dims are named by `letters`."""

    def __init__(self, val, letters: str):
        self.val, self.letters = val, letters


def _permute(w, t: _Term, letters: str, loc) -> _Term:
    if t.letters == letters:
        return t
    (v,) = w.emit("permute", [t.val], {"dims": [t.letters.index(c) for c in letters]}, loc)
    return _Term(v, letters)


def _sum_out(w, t: _Term, keep: str, loc) -> _Term:
    """Sums the letters of `t` not in `keep`."""
    dims = [k for k, c in enumerate(t.letters) if c not in keep]
    if not dims:
        return t
    (v,) = w.emit("sum", [t.val], {"dim": dims}, loc)
    return _Term(v, "".join(c for c in t.letters if c in keep))


def _as_matmul(w, a: _Term, b: _Term, keep: str, loc) -> _Term | None:
    """a @ b when the pair is one batched matrix product, else None."""
    shared = [c for c in a.letters if c in b.letters]
    batch = [c for c in shared if c in keep]
    contracted = [c for c in shared if c not in keep]
    free_a = [c for c in a.letters if c not in b.letters]
    free_b = [c for c in b.letters if c not in a.letters]
    if len(contracted) != 1 or len(free_a) != 1 or len(free_b) != 1:
        return None
    (k,), (m,), (n,) = contracted, free_a, free_b
    batch_s = "".join(batch)
    lhs = _permute(w, a, batch_s + m + k, loc)
    rhs = _permute(w, b, batch_s + k + n, loc)
    (v,) = w.emit("matmul", [lhs.val, rhs.val], {}, loc)
    return _Term(v, batch_s + m + n)


def _broadcast_to(w, t: _Term, letters: str, loc) -> _Term:
    """`t` permuted to the order of `letters` it has, with a dim of one for each it lacks."""
    t = _permute(w, t, "".join(c for c in letters if c in t.letters), loc)
    v = t.val
    for k, c in enumerate(letters):
        if c not in t.letters:
            (v,) = w.emit("unsqueeze", [v], {"dim": k}, loc)
    return _Term(v, letters)


def _contract(w, a: _Term, b: _Term, keep: str, loc) -> _Term:
    a, b = _sum_out(w, a, keep + b.letters, loc), _sum_out(w, b, keep + a.letters, loc)
    if (product := _as_matmul(w, a, b, keep, loc)) is not None:
        return product
    kept = "".join(c for c in dict.fromkeys(a.letters + b.letters) if c in keep)
    summed = "".join(c for c in dict.fromkeys(a.letters + b.letters) if c not in keep)
    full = kept + summed
    (v,) = w.emit("mul", [_broadcast_to(w, a, full, loc).val, _broadcast_to(w, b, full, loc).val],
                  {}, loc)  # fmt: skip
    return _sum_out(w, _Term(v, full), kept, loc)


@lowering(_s_einsum, "kiln.einsum")
def _einsum(w, node, a):
    equation, operands = a["equation"], list(a["operands"])
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = list(operands[0])
    if not isinstance(equation, str) or not operands or not all(
            isinstance(o, Node) for o in operands):  # fmt: skip
        raise Decline("einsum's sublist form")
    values = [w.tensor(o) for o in operands]
    inputs, out = _parse(equation, [len(v.type.sizes) for v in values])
    loc = node.meta.get("loc")
    terms = []
    for v, letters in zip(values, inputs, strict=True):
        if len(v.type.sizes) != len(letters):
            raise Decline("einsum operand of another rank than its letters")
        terms.append(_Term(v, letters))
    acc = terms[0]
    for k in range(1, len(terms)):
        later = "".join(t.letters for t in terms[k + 1 :])
        acc = _contract(w, acc, terms[k], out + later, loc)
    acc = _sum_out(w, acc, out, loc)
    if acc.letters == out and any(acc.val is t.val for t in terms):
        raise Decline("an einsum that is its operand")  # eager returns the operand itself
    if acc.letters != out:
        w.emit_node(node, "permute", [acc.val], {"dims": [acc.letters.index(c) for c in out]})
        return
    example = node.meta.get("example")
    t = acc.val.type
    if not isinstance(example, kiln.Tensor) or len(t.sizes) != example.dim() or (
            t.dtype != dtype_short(example.dtype)):  # fmt: skip
        raise Decline("an einsum whose rule disagrees with eager")
    w.values[id(node)] = acc.val
