"""kiln.autograd: reverse-mode automatic differentiation, as torch.autograd.

Ops record a graph of ``grad_fn`` nodes while grad mode is on and an input requires grad; the C++
engine (``autograd/engine.cc``) walks it backwards with each op's derivative rule
(``autograd/derivatives.h``). This module is the Python surface: ``backward``, ``grad``,
``Function`` for custom rules, ``gradcheck``/``gradgradcheck``, the grad-mode context managers and
``forward_ad`` (dual tensors).
"""

from __future__ import annotations

from kiln import _C
from kiln._grad_mode import (
    enable_grad,
    inference_mode,
    is_grad_enabled,
    is_inference_mode_enabled,
    no_grad,
    set_grad_enabled,
)
from kiln.autograd import forward_ad
from kiln.autograd.function import Function, FunctionCtx
from kiln.autograd.gradcheck import gradcheck, gradgradcheck

__all__ = [
    "Function",
    "FunctionCtx",
    "Variable",
    "backward",
    "enable_grad",
    "forward_ad",
    "grad",
    "gradcheck",
    "gradgradcheck",
    "inference_mode",
    "is_grad_enabled",
    "is_inference_mode_enabled",
    "no_grad",
    "set_grad_enabled",
]

Node = _C._autograd.Node


class _VariableMeta(type):
    def __instancecheck__(cls, obj) -> bool:
        return isinstance(obj, _C.Tensor)


class Variable(metaclass=_VariableMeta):
    """torch's legacy wrapper, kept by older code (`Variable(x)`,
    `Variable(x, requires_grad=True)`): every tensor is one, and calling it returns the tensor
    itself, with the flag set when given."""

    def __new__(cls, data, requires_grad: bool = False, volatile: bool = False):
        if not isinstance(data, _C.Tensor):
            raise TypeError(f"Variable data has to be a tensor, but got {type(data).__name__}")
        if requires_grad:
            data.requires_grad_(True)
        return data


def _as_tuple(x):
    if x is None:
        return None
    if isinstance(x, _C.Tensor):
        return (x,)
    return tuple(x)


def backward(
    tensors,
    grad_tensors=None,
    retain_graph=None,
    create_graph=False,
    grad_variables=None,
    inputs=None,
):
    """Accumulates the gradients of ``tensors`` into the ``.grad`` of the leaves they depend on."""
    if grad_variables is not None:
        grad_tensors = grad_variables
    tensors = _as_tuple(tensors)
    grads = _as_tuple(grad_tensors)
    _C._autograd.backward(tensors, grads, retain_graph, create_graph, _as_tuple(inputs))


def grad(
    outputs,
    inputs,
    grad_outputs=None,
    retain_graph=None,
    create_graph=False,
    only_inputs=True,
    allow_unused=None,
    is_grads_batched=False,
    materialize_grads=False,
):
    """The gradients of ``outputs`` with respect to ``inputs`` (a tuple, one per input).

    Leaves' ``.grad`` are left alone. An input the outputs do not depend on raises unless
    ``allow_unused`` (or ``materialize_grads``, which returns zeros for it instead of None).
    """
    if is_grads_batched:
        raise NotImplementedError("autograd.grad: is_grads_batched=True is not supported yet")
    single = isinstance(inputs, _C.Tensor)
    inputs = _as_tuple(inputs)
    if allow_unused is None:
        allow_unused = materialize_grads
    result = _C._autograd.grad(
        _as_tuple(outputs),
        inputs,
        _as_tuple(grad_outputs),
        retain_graph,
        create_graph,
        bool(allow_unused),
    )
    if materialize_grads:
        import kiln

        result = tuple(
            kiln.zeros_like(i) if g is None else g for g, i in zip(result, inputs, strict=True)
        )
    return result if not single else result
