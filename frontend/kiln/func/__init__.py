"""kiln.func: torch.func's function transforms over the autograd engine.

``functional_call`` runs a module with other tensors in place of its parameters and buffers;
``grad`` and ``vjp`` are reverse mode; ``jvp`` is forward mode, derived from the reverse rules as
``kiln.autograd.forward_ad`` derives it (the double-vjp identity).
"""

from __future__ import annotations

import contextlib

import kiln
from kiln.autograd import forward_ad
from kiln.nn.modules.module import _bump_version

__all__ = ["functional_call", "grad", "grad_and_value", "jvp", "vjp"]


def _owner(module, path: str):
    *parents, leaf = path.split(".")
    for p in parents:
        module = getattr(module, p)
    return module, leaf


@contextlib.contextmanager
def _swapped(module, tensors: dict, strict: bool):
    names = dict(module.named_parameters(remove_duplicate=False))
    names.update(dict(module.named_buffers(remove_duplicate=False)))
    unknown = sorted(set(tensors) - set(names))
    if unknown:
        raise RuntimeError(f"functional_call got unexpected keys: {unknown}")
    if strict:
        missing = sorted(set(names) - set(tensors))
        if missing:
            raise RuntimeError(f"functional_call: missing keys (strict=True): {missing}")
    saved = []
    try:
        for name, value in tensors.items():
            owner, leaf = _owner(module, name)
            table = owner._parameters if leaf in owner._parameters else owner._buffers
            saved.append((owner, table, leaf, table[leaf]))
            table[leaf] = value
            _bump_version(owner)
        yield
    finally:
        for owner, table, leaf, old in reversed(saved):
            table[leaf] = old
            _bump_version(owner)


def functional_call(
    module, parameter_and_buffer_dicts, args=(), kwargs=None, *, tie_weights=True, strict=False
):
    """``module(*args, **kwargs)`` with the given tensors as its parameters and buffers (by
    their ``named_parameters``/``named_buffers`` names); the module is unchanged afterwards."""
    if isinstance(parameter_and_buffer_dicts, (list, tuple)):
        merged = {}
        for d in parameter_and_buffer_dicts:
            overlap = set(merged) & set(d)
            if overlap:
                raise ValueError(f"functional_call: {sorted(overlap)} appear in several dicts")
            merged.update(d)
        parameter_and_buffer_dicts = merged
    if not isinstance(args, tuple):
        args = (args,)
    with _swapped(module, dict(parameter_and_buffer_dicts), strict):
        return module(*args, **(kwargs or {}))


def _inputs(args, argnums):
    nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)
    args = list(args)
    for i in nums:
        args[i] = args[i].detach().requires_grad_()
    return args, nums


def grad_and_value(func, argnums=0, has_aux=False):
    """A function returning ``(gradient of func's scalar output w.r.t. args[argnums], value)``."""

    def wrapper(*args, **kwargs):
        with kiln.enable_grad():
            xs, nums = _inputs(args, argnums)
            out = func(*xs, **kwargs)
            value, aux = out if has_aux else (out, None)
            if not isinstance(value, kiln.Tensor) or value.numel() != 1:
                raise RuntimeError("grad: the function must return a one-element tensor")
            grads = kiln.autograd.grad(value, [xs[i] for i in nums], allow_unused=True)
        grads = tuple(
            kiln.zeros_like(xs[i]) if g is None else g for g, i in zip(grads, nums, strict=True)
        )
        g = grads[0] if isinstance(argnums, int) else grads
        value = value.detach()
        return (g, (value, aux)) if has_aux else (g, value)

    return wrapper


def grad(func, argnums=0, has_aux=False):
    """A function returning the gradient of ``func``'s scalar output w.r.t. ``args[argnums]``."""
    inner = grad_and_value(func, argnums, has_aux)

    def wrapper(*args, **kwargs):
        g, value = inner(*args, **kwargs)
        return (g, value[1]) if has_aux else g

    return wrapper


def vjp(func, *primals, has_aux=False):
    """``(func(*primals), vjp_fn)``: ``vjp_fn(cotangents)`` gives one gradient per primal."""
    with kiln.enable_grad():
        xs = [p.detach().requires_grad_() for p in primals]
        out = func(*xs)
        out, aux = out if has_aux else (out, None)
    outs = (out,) if isinstance(out, kiln.Tensor) else tuple(out)

    def vjp_fn(cotangents):
        cts = (cotangents,) if isinstance(cotangents, kiln.Tensor) else tuple(cotangents)
        grads = kiln.autograd.grad(outs, xs, cts, retain_graph=True, allow_unused=True)
        return tuple(kiln.zeros_like(x) if g is None else g for g, x in zip(grads, xs, strict=True))

    detached = out.detach() if isinstance(out, kiln.Tensor) else tuple(o.detach() for o in outs)
    return (detached, vjp_fn, aux) if has_aux else (detached, vjp_fn)


def jvp(func, primals, tangents, *, has_aux=False):
    """``(func(*primals), J tangents)``, the Jacobian-vector product (forward mode)."""
    primals, tangents = tuple(primals), tuple(tangents)
    if len(primals) != len(tangents):
        raise RuntimeError("jvp: expected as many tangents as primals")
    with kiln.enable_grad():
        xs = [p.detach().requires_grad_() for p in primals]
        out = func(*xs)
        out, aux = out if has_aux else (out, None)
        outs = (out,) if isinstance(out, kiln.Tensor) else tuple(out)
    jvps = forward_ad.jvp_of(outs, xs, [t.to(x.dtype) for t, x in zip(tangents, xs, strict=True)])
    jvps = tuple(kiln.zeros_like(o) if j is None else j for j, o in zip(jvps, outs, strict=True))
    value = out.detach() if isinstance(out, kiln.Tensor) else tuple(o.detach() for o in outs)
    tangent_out = jvps[0] if isinstance(out, kiln.Tensor) else jvps
    return (value, tangent_out, aux) if has_aux else (value, tangent_out)
