"""The capture's calls of kiln's own functions (`kiln.f(...)` recorded as graph nodes, by
CallMixin.call): dtype facts folded to constants, metadata functions, tensors of literal
numbers built in the graph, and kiln._assert without a graph break."""

from __future__ import annotations

import inspect

import kiln
from kiln._capture import ops
from kiln._capture import variables as V
from kiln._capture.calls_access import AccessMixin

__all__ = ["DTYPE_FACTS", "KilnCallMixin", "dtype_fact"]

# Facts about dtypes: constants of the capture (the dtypes and ranks they read are guarded).
DTYPE_FACTS = (kiln.finfo, kiln.iinfo, kiln.result_type, kiln.can_cast, kiln.promote_types)


def dtype_fact(fn, args, kwargs) -> V.VT:
    try:
        return V.ConstVar(fn(*[ops.to_example(a) for a in args],
                             **{k: ops.to_example(v) for k, v in kwargs.items()}))
    except (TypeError, ValueError, RuntimeError) as e:
        raise V.Unsupported(f"{fn.__name__}() raised {type(e).__name__}: {e}") from None


def _assert_signature(condition, message): ...
_ASSERT = inspect.signature(_assert_signature)


def _s_literal(data, dtype=None, device=None, requires_grad=False, pin_memory=False): ...
_LITERAL = inspect.signature(_s_literal)


def _legacy_dtype(fn):
    """The dtype of a legacy typed constructor (kiln.FloatTensor, ...), else None."""
    from kiln import _legacy_tensors as legacy

    name = getattr(fn, "__name__", None)
    return legacy._DTYPES[name] if legacy.CONSTRUCTORS.get(name) is fn else None


class KilnCallMixin(AccessMixin):
    def legacy_of_size(self, fn, args, kwargs):
        """kiln.Tensor(x.size()) or a typed constructor (BoolTensor(x.size())): a tensor of those
        sizes (zeros for torch's uninitialized memory), symbolic where they are; else None."""
        dtype = kiln.get_default_dtype() if fn is kiln.Tensor else _legacy_dtype(fn)
        if dtype is None or len(args) != 1 or kwargs or not isinstance(args[0], V.TupleVar) or (
                args[0].tuple_type is not kiln.Size):
            return None
        return ops.record(self.ctx, kiln.zeros, list(args[0].items),
                          {"dtype": V.ConstVar(dtype)}, "zeros")

    def call_kiln(self, fn, args, kwargs) -> V.VT:
        if fn is kiln._assert:
            return self.kiln_assert(args, kwargs)
        if (sized := self.legacy_of_size(fn, args, kwargs)) is not None:
            return sized
        if fn in DTYPE_FACTS:
            return dtype_fact(fn, args, kwargs)
        name = getattr(fn, "__name__", "?")
        if fn is kiln.is_tensor and len(args) == 1:
            return V.ConstVar(isinstance(args[0], V.TensorVar))
        if name in ("numel", "is_floating_point", "is_complex", "is_signed") and args and (
            isinstance(args[0], V.TensorVar)
        ):  # the module forms of these metadata methods
            return self.call_tensor_method(args[0], name, list(args[1:]), kwargs)
        if fn is kiln.from_numpy and len(args) == 1 and not kwargs and isinstance(
                args[0], V.TensorVar) and args[0].numpy and args[0].source is None and getattr(
                args[0], "array_source", None) is None:
            # an array the captured NumPy code made: the same values seen as a tensor (its
            # memory, as from_numpy shares it)
            from kiln._capture import calls_numpy

            return calls_numpy.reflag(args[0], array=False)
        if fn in (kiln.tensor, kiln.as_tensor, kiln.from_numpy) and args and isinstance(
                args[0], V.ConstVar) and type(args[0].value).__name__ == "ndarray" and (
                fn is kiln.from_numpy or not kwargs):
            # a NumPy array the code made of constants (PointNet's identity `from_numpy(
            # np.array([1, 0, 0, ...]).astype(np.float32))`): its numbers, in its dtype
            from kiln._numpy import _dtypes

            arr = args[0].value
            if _dtypes.supported(arr.dtype):
                literal = self.literal_tensor(kiln.tensor, [V.ConstVar(arr.tolist())], {
                    "dtype": V.ConstVar(_dtypes.to_kiln(arr.dtype))})
                if literal is not None:
                    return literal
        if fn in (kiln.tensor, kiln.as_tensor):
            literal = self.literal_tensor(fn, args, kwargs)
            if literal is not None:
                return literal
        if name in ops.DATA_DEPENDENT_FUNCTIONS:
            raise V.Unsupported(f"kiln.{name}() depends on data or creates a tensor from Python "
                                "data at run time")
        if fn is kiln.is_grad_enabled:
            return V.ConstVar(self.ctx.grad_enabled)
        if name in ("get_default_dtype",):
            return V.ConstVar(fn())
        if name in ("manual_seed", "seed", "set_rng_state", "get_rng_state", "set_num_threads",
                    "set_default_dtype", "compile"):
            raise V.Unsupported(f"kiln.{name}() changes global state")
        if any(isinstance(a, (V.ModuleVar, V.FunctionVar, V.NestedFunctionVar))
               for a in list(args) + list(kwargs.values())):
            raise V.Unsupported(f"kiln.{name}() with a module or function argument")
        if fn in (kiln.unflatten, kiln.unbind):
            parts = self.view_parts(name, list(args), kwargs)
            if parts is not None:
                return parts
        return ops.record(self.ctx, fn, list(args), kwargs, name)

    def literal_tensor(self, fn, args, kwargs) -> V.VT | None:
        """`kiln.tensor(0.5)`, `kiln.tensor([1.0, 2.0], device=x.device)`: a tensor of numbers the
        code spells (constants of the capture, at most 64 of them) built in the graph from
        `full` and `stack`, instead of a graph break. None for anything else (data that is a
        tensor or run-time values, requires_grad, another device): the call then breaks."""
        try:
            bound = _LITERAL.bind(*args, **kwargs)
        except TypeError:
            return None
        a = bound.arguments
        items = None  # a flat list of numbers some of which are run-time ints (sizes)
        if isinstance(a.get("data"), (V.ListVar, V.TupleVar)) and all(
            isinstance(i, V.SymIntVar) or isinstance(i, V.ConstVar) and type(i.value) in (
                int, float) for i in a["data"].items):  # fmt: skip
            items = list(a["data"].items)
            a["data"] = V.ConstVar([ops.to_example(i) for i in items])
        values = [a.get("data"), a.get("dtype"), a.get("device"), a.get("requires_grad")]
        if not all(v is None or v.is_const() for v in values):
            return None
        data, dtype, device, requires_grad = (None if v is None else v.const() for v in values)
        if requires_grad or (device is not None and kiln.device(device).type != "cpu"):
            return None
        if not isinstance(data, (int, float, bool, list, tuple)):
            return None
        try:
            example = kiln.tensor(data, dtype=dtype)
        except (TypeError, ValueError, RuntimeError):
            return None  # eager raises: the break runs it there
        if example.numel() > 64 or example.numel() == 0:
            return None
        dt = V.ConstVar(example.dtype)
        numbers = items if items is not None else [V.ConstVar(v)
                                                   for v in example.reshape(-1).tolist()]
        scalars = [ops.record(self.ctx, kiln.full, [V.ConstVar(()), v], {"dtype": dt}, "full")
                   for v in numbers]  # fmt: skip
        if example.dim() == 0:
            return scalars[0]
        flat = ops.record(self.ctx, kiln.stack, [V.ListVar(scalars)], {}, "stack")
        if example.dim() == 1:
            return flat
        return ops.record(self.ctx, kiln.Tensor.reshape, [flat, V.ConstVar(tuple(example.shape))],
                          {}, "reshape")

    def kiln_assert(self, args, kwargs) -> V.VT:
        """`kiln._assert(cond, msg)` without a graph break. A Python condition (shape checks)
        is decided now: the values it read are guarded, so it holds for every call the entry
        runs. A tensor condition is checked on its example and recorded as a node, which checks
        it again on each run (the node has no users: `is_impure` keeps it)."""
        try:
            bound = _ASSERT.bind(*args, **kwargs)
        except TypeError as e:
            raise V.Unsupported(f"kiln._assert(): {e}") from None
        cond, message = bound.arguments["condition"], bound.arguments["message"]
        if isinstance(message, V.LazyTextVar):  # shown only if the check fails, at run time
            if isinstance(cond, V.TensorVar):
                message = V.ConstVar(message.example)
            elif self.truth(cond):
                return V.ConstVar(None)
            else:
                raise V.AssertionFailed(message.example)
        if isinstance(cond, V.TensorVar):
            try:
                holds = bool(cond.example)
            except Exception as e:  # more than one element: eager raises the same
                raise V.Unsupported(f"_assert() raised {type(e).__name__}: {e}") from None
            if holds:
                self.ctx.graph.call(kiln._assert, (cond.node, ops.to_graph_arg(message)), {},
                                    None, loc=self.ctx.loc)
                return V.ConstVar(None)
        elif self.truth(cond):
            return V.ConstVar(None)
        raise V.AssertionFailed(_message_of(message))


def _message_of(message: V.VT):
    """The message of a failing kiln._assert as eager would show it (sizes: this call's)."""
    try:
        return ops.to_example(message)
    except V.Unsupported:
        return f"<{type(message).__name__}>"
