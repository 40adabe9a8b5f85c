"""kiln.autograd.Function: user-defined ops with their own forward and backward.

``forward(ctx, *args)`` runs with grad mode off; when grad mode is on and a tensor argument
requires grad, the outputs get a node whose backward calls ``backward(ctx, *grad_outputs)``,
which returns one gradient (or None) per ``forward`` argument.
"""

from __future__ import annotations

from kiln import _C
from kiln._grad_mode import enable_grad, is_grad_enabled, no_grad

__all__ = ["Function", "FunctionCtx"]


class FunctionCtx:
    """What ``forward`` hands to ``backward``: saved tensors and flags, as torch's ctx."""

    def __init__(self):
        self.saved_tensors_ = ()
        self.needs_input_grad = ()
        self.non_differentiable = set()
        self.materialize_grads = True
        self._released = False

    def save_for_backward(self, *tensors):
        self.saved_tensors_ = tuple(tensors)
        self._versions = tuple(t._version if t is not None else None for t in tensors)

    @property
    def saved_tensors(self):
        if self._released:
            raise RuntimeError(
                "Trying to backward through the graph a second time (or directly access saved "
                "tensors after they have already been freed)."
            )
        for t, v in zip(self.saved_tensors_, getattr(self, "_versions", ()), strict=False):
            if t is not None and t._version != v:
                raise RuntimeError(
                    "one of the variables needed for gradient computation has been modified by "
                    f"an inplace operation: is at version {t._version}; expected version {v} "
                    "instead."
                )
        return self.saved_tensors_

    def mark_non_differentiable(self, *tensors):
        self.non_differentiable.update(id(t) for t in tensors)

    def mark_dirty(self, *tensors):
        pass

    def set_materialize_grads(self, value: bool):
        self.materialize_grads = bool(value)


class _FunctionMeta(type):
    def __init__(cls, name, bases, attrs):
        super().__init__(name, bases, attrs)
        cls._backward_name = f"{name}Backward"


class Function(metaclass=_FunctionMeta):
    """Subclass with static ``forward(ctx, ...)`` and ``backward(ctx, ...)``; call ``apply``."""

    @staticmethod
    def forward(ctx, *args, **kwargs):
        raise NotImplementedError("You must implement the forward function for custom Function")

    @staticmethod
    def backward(ctx, *grad_outputs):
        raise NotImplementedError("You must implement the backward function for custom Function")

    @classmethod
    def apply(cls, *args, **kwargs):
        ctx = FunctionCtx()
        ctx.needs_input_grad = tuple(
            isinstance(a, _C.Tensor) and a.requires_grad and is_grad_enabled() for a in args
        )
        with no_grad():
            out = cls.forward(ctx, *args, **kwargs)
        if not any(ctx.needs_input_grad):
            return out
        single = isinstance(out, _C.Tensor)
        outs = (out,) if single else tuple(out)
        # Outputs that alias an input get their own handle, so the input keeps its history.
        arg_ids = {id(a) for a in args if isinstance(a, _C.Tensor)}
        outs = tuple(
            o.view_as(o) if isinstance(o, _C.Tensor) and id(o) in arg_ids else o for o in outs
        )
        tensor_outs = [
            o for o in outs if isinstance(o, _C.Tensor) and id(o) not in ctx.non_differentiable
        ]
        positions = [
            i
            for i, o in enumerate(outs)
            if isinstance(o, _C.Tensor) and id(o) not in ctx.non_differentiable
        ]
        n_outs = len(outs)

        def run_backward(*grads):
            full = [None] * n_outs
            for p, g in zip(positions, grads, strict=True):
                full[p] = g
            if ctx.materialize_grads:
                import kiln

                full = [
                    kiln.zeros_like(o) if g is None and isinstance(o, _C.Tensor) else g
                    for g, o in zip(full, outs, strict=True)
                ]
            with enable_grad() if is_grad_enabled() else no_grad():
                result = cls.backward(ctx, *full)
            if not isinstance(result, tuple):
                result = (result,)
            if len(result) != len(args):
                raise RuntimeError(
                    f"function {cls._backward_name} returned an incorrect number of gradients "
                    f"(expected {len(args)}, got {len(result)})"
                )
            return tuple(
                g if needed else None
                for g, needed in zip(result, ctx.needs_input_grad, strict=True)
            )

        inputs = [a if isinstance(a, _C.Tensor) else None for a in args]
        _C._autograd._record_function(cls._backward_name, run_backward, inputs, tensor_outs)
        return outs[0] if single else outs
