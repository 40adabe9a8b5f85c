"""einsum's derivative: the gradient of each operand is itself an einsum, of the output's
gradient with the other operands, onto the operand's labels (labels summed in that operand alone
come back by broadcasting; dims it broadcast are summed back). Eager einsum (kiln._C._einsum) is
one C++ kernel without a derivative rule, so kiln.einsum runs through `Einsum.apply` when an
operand requires grad. Autocast's lower-precision list holds einsum (torch's runs as bmm)."""

from __future__ import annotations

import kiln
from kiln import _C
from kiln.autograd.function import Function

_LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


def explicit_terms(equation: str, shapes: list) -> tuple[list[str], str]:
    """Each operand's labels, one per dim, and the output's, with `...` spelled out in unused
    letters (right-aligned across operands, as broadcasting aligns them) and an implicit output
    made explicit (the ellipsis dims, then the labels used once, in torch's order)."""
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    used = set(eq) - set(".,->")
    free = [c for c in _LETTERS if c not in used]
    widest = 0
    for term, shape in zip(terms, shapes, strict=True):
        if "..." in term:
            widest = max(widest, len(shape) - (len(term) - 3))
    ellipsis = "".join(free[:widest])
    out_terms = []
    for term, shape in zip(terms, shapes, strict=True):
        if "..." in term:
            n = len(shape) - (len(term) - 3)
            term = term.replace("...", ellipsis[widest - n:])
        out_terms.append(term)
    if arrow:
        out = rhs.replace("...", ellipsis)
    else:
        counts: dict = {}
        for c in "".join(out_terms):
            counts[c] = counts.get(c, 0) + 1
        once = sorted((c for c, k in counts.items() if k == 1 and c not in ellipsis),
                      key=_LETTERS.index)
        out = ellipsis + "".join(once)
    return out_terms, out


class Einsum(Function):
    @staticmethod
    def forward(ctx, equation, *operands):
        ctx.equation = equation
        ctx.save_for_backward(*operands)
        return _C._einsum(equation, list(operands))

    @staticmethod
    def backward(ctx, grad):
        operands = ctx.saved_tensors
        terms, out = explicit_terms(ctx.equation, [o.shape for o in operands])
        grads = []
        for i, x in enumerate(operands):
            if not ctx.needs_input_grad[i + 1]:
                grads.append(None)
                continue
            labels = terms[i]
            if len(set(labels)) != len(labels):
                raise NotImplementedError(
                    f"einsum('{ctx.equation}'): the derivative of an operand with a repeated "
                    "index (a diagonal) is not implemented yet")
            others = [t for j, t in enumerate(terms) if j != i]
            known = set(out).union(*map(set, others))
            kept = "".join(c for c in labels if c in known)
            g = kiln.einsum(",".join([out, *others]) + "->" + kept,
                            grad, *[o for j, o in enumerate(operands) if j != i])
            for pos, c in enumerate(labels):  # summed in x alone: every element got all of g
                if c not in known:
                    g = g.unsqueeze(pos)
            g = g.expand(*[s if gs == 1 else gs for s, gs in zip(x.shape, g.shape, strict=True)])
            broadcast = [d for d, (s, gs) in enumerate(zip(x.shape, g.shape, strict=True))
                         if s == 1 and gs != 1]
            if broadcast:
                g = g.sum(broadcast, keepdim=True)
            grads.append(g.to(x.dtype))
        return (None, *grads)


def lowered(operands: list) -> list:
    """The operands as autocast casts a batched GEMM's (einsum runs as them), by the C++ rule."""
    if not _C._autograd._autocast_any_enabled():
        return operands
    return [_C._autograd._autocast_lower(t) for t in operands]


def einsum(equation: str, operands: list):
    operands = lowered(list(operands))
    if kiln.is_grad_enabled() and any(isinstance(o, kiln.Tensor) and o.requires_grad
                                      for o in operands):
        return Einsum.apply(equation, *operands)
    return _C._einsum(equation, operands)
