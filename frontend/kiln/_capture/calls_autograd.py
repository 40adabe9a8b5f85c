"""Callables that stand for autograd machinery in captured code: the fresh grad-mode object a
`@no_grad()` / `@inference_mode()` wrapper enters per call (a grad-mode region of the graph),
and a custom autograd.Function's `apply` (one node that runs the Function eagerly)."""

from __future__ import annotations

import weakref

import kiln
from kiln._capture import variables as V

_EAGER_APPLY: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def eager_apply(cls):
    """`cls.apply`, run uncaptured (its forward is the Function's own business)."""
    runner = _EAGER_APPLY.get(cls)
    if runner is None:
        from kiln._capture.compile import disable

        runner = _EAGER_APPLY[cls] = disable(cls.apply)
    return runner


def is_function_apply(fn: V.BoundMethodVar) -> bool:
    owner = getattr(fn.self_var, "value", None)
    return isinstance(fn.self_var, V.ObjectVar) and isinstance(owner, type) and issubclass(
        owner, kiln.autograd.Function) and isinstance(fn.fn, V.FunctionVar) and (
        fn.fn.fn is kiln.autograd.Function.apply.__func__)


def is_grad_mode_clone(fn: V.BoundMethodVar) -> bool:
    from kiln._grad_mode import _DecoratorContextManager

    owner = getattr(fn.self_var, "value", None)
    return isinstance(fn.self_var, V.ObjectVar) and isinstance(
        owner, _DecoratorContextManager) and isinstance(fn.fn, V.FunctionVar) and (
        fn.fn.fn.__name__ == "clone")


def grad_mode_of(mode_object) -> bool:
    """The grad mode inside a no_grad / enable_grad / set_grad_enabled / inference_mode."""
    if isinstance(mode_object, kiln.inference_mode):
        return not mode_object.mode
    if isinstance(mode_object, kiln.set_grad_enabled):
        return mode_object.mode
    return isinstance(mode_object, kiln.enable_grad)
