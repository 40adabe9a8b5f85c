"""Calls, attributes, items and operators on symbolic values (mixed into `Frame`).

Decides, per callee, whether a call is a tensor op (recorded in the graph), a Python function
(inlined as a child frame), a builtin evaluated at capture time on constants, or something that
must break the graph.
"""

from __future__ import annotations

import functools
import inspect
import operator
import types

import kiln
from kiln._capture import (
    calls_autograd,
    calls_numpy,
    calls_object,
    ops,
    optimizer_step,
    side_effects,
)
from kiln._capture import variables as V
from kiln._capture.calls_access import _ContainerMethod, _SuperVar, dict_key
from kiln._capture.calls_kiln import DTYPE_FACTS, KilnCallMixin, dtype_fact
from kiln._capture.calls_symbolic import SymbolicMixin
from kiln._capture.data_dependent import check_size_read
from kiln._capture.sources import AttrSource, HeldSource, ItemSource, held_container_source

_TENSOR = kiln.Tensor
_PURE_MODULES = ("math", "operator", "_operator")
_SIMPLE_BUILTINS = {
    abs, bool, float, int, str, repr, round, divmod, pow, hash, ord, chr, format, hex, oct, bin,
}


# kiln Python code that `call` does not record as one op: the capture machinery (its API reaches
# call_kiln through `inline`, which refuses what changes global state), and the modules' forwards
# and helpers (shape checks returning bools, mask canonicalization...): those are not tensor ops
# and are inlined like user code, so their tensor ops are recorded one by one.
# The composite ops too: written in kiln ops, they are captured part by part.
# torch's compatibility helpers too: kiln.jit's is_scripting()/annotate() fold to constants, and
# kiln.utils.checkpoint runs its function in place (see the capture hooks below).
_INLINED_KILN_MODULES = ("kiln._capture", "kiln.nn.modules", "kiln._ops_composite",
                         "kiln.nn._functional_composite", "kiln._numpy", "kiln.linalg",
                         "kiln._tensor_compat", "kiln._ops_shape", "kiln.jit",
                         "kiln.utils.checkpoint", "kiln.nn.init",
                         "kiln.amp.grad_scaler", "kiln.distributions",
                         "kiln.nn.utils._common", "kiln.nn.utils.clip_grad")  # fmt: skip
# Functions of the inlined modules that are still recorded as one node each: nn.init's fills
# that draw through NumPy or rejection loops (its samplers and helpers are inlined, so their
# draws compile).
_KEPT_WHOLE = {"kiln.nn.init": frozenset(("orthogonal_", "trunc_normal_", "eye_", "dirac_"))}

# Capture hooks for kiln's Python helpers that behave differently in compiled code: a function
# carrying _CAPTURE_VALUE returns that constant when captured (kiln.utils.checkpoint's
# `_is_compiling()`), and calling a class carrying _NOOP_CONTEXT makes a with-block that changes
# nothing (profiler ranges, attention backend choices: the ops in the block are compiled).
_CAPTURE_VALUE = "_kiln_value_in_capture"
# A function carrying _EAGER_REASON runs eagerly at a graph break with that reason: it reads or
# writes state the capture cannot see (vector_to_parameters' writes into the parameters), so
# recording it as one node, whose example runs at capture time, would apply its effect twice.
_EAGER_REASON = "_kiln_eager_reason"
_NOOP_CONTEXT = "_kiln_noop_context_in_capture"
# A function carrying _FOLD_CONSTANT_ARGS, called with constants only (types, numbers), runs at
# capture time and its result is a constant of the graph (kl_divergence's registry lookup).
_FOLD_CONSTANT_ARGS = "_kiln_fold_constant_args"


def _unflatten_signature(input, dim, sizes): ...
def _unbind_signature(input, dim=0): ...


_UNFLATTEN = inspect.signature(_unflatten_signature)
_UNBIND = inspect.signature(_unbind_signature)


@functools.cache
def _optimized_module():
    from kiln._capture.compile import OptimizedModule

    return OptimizedModule


@functools.cache
def _module_modes() -> frozenset:
    M = kiln.nn.Module
    return frozenset((M.train, M.eval))


@functools.cache
def _module_iterators() -> frozenset:
    """kiln.nn.Module's methods listing its parameters, buffers and submodules (overriding
    them in a subclass makes them ordinary methods again)."""
    M = kiln.nn.Module
    return frozenset((M.parameters, M.named_parameters, M.buffers, M.named_buffers, M.children,
                      M.named_children, M.modules, M.named_modules))  # fmt: skip


def _is_optimizer_step(fn) -> bool:
    """An optimizer's step (of kiln.optim's classes, or a subclass's). (zero_grad is plain
    Python, inlined: its .grad stores are replayed.)"""
    return (getattr(fn, "__name__", "") == "step"
            and (getattr(fn, "__module__", None) or "").startswith("kiln.optim"))


def _is_kiln_function(fn) -> bool:
    """A kiln op (a pybind11 function, or a Python-level op of kiln, kiln.nn.functional...)
    recorded as one graph node rather than inlined."""
    module = getattr(fn, "__module__", None) or ""
    if isinstance(fn, types.BuiltinFunctionType) and (module.startswith("kiln") or module == ""):
        self_obj = getattr(fn, "__self__", None)
        if type(self_obj).__name__ == "PyCapsule":  # a pybind11 function of kiln._C
            return True
        return self_obj is None or isinstance(self_obj, types.ModuleType) and (
            self_obj.__name__.startswith("kiln")
        )
    return isinstance(fn, types.FunctionType) and module.startswith("kiln.") and not (
        _inlined_kiln(fn))


def _inlined_kiln(fn) -> bool:
    """A Python function of kiln's that the capture inlines (its ops are recorded one by one)."""
    module = getattr(fn, "__module__", None) or ""
    name = getattr(fn, "__name__", "")
    if (module, name) == ("kiln.optim.optimizer", "zero_grad"):  # its .grad stores are replayed
        return True
    return module.startswith(_INLINED_KILN_MODULES) and name not in _KEPT_WHOLE.get(module, ())


def _truthy_arg(args, kwargs, name: str, default) -> bool:
    """The first positional or the `name` keyword argument as a Python truth value (True when
    it is not a constant: the caller then records the call as it is)."""
    v = args[0] if args else kwargs.get(name, V.ConstVar(default))
    return not isinstance(v, V.ConstVar) or bool(v.value)


_RUN_INT_OPS = (operator.add, operator.sub, operator.mul, operator.iadd, operator.isub,
                operator.imul)



def _is_data(v: V.VT) -> bool:
    """A constant, or a list/tuple of constants (a tensor constructor's data or sizes)."""
    if isinstance(v, (V.ListVar, V.TupleVar)):
        return all(_is_data(i) for i in v.items)
    return isinstance(v, V.ConstVar)


def _as_sequence(v: V.VT) -> V.VT:
    """A constant tuple or list as the sequence variable of its items (other values as they
    are)."""
    if isinstance(v, V.ConstVar) and type(v.value) in (tuple, list):
        items = [V.ConstVar(x) for x in v.value]
        return V.TupleVar(items) if type(v.value) is tuple else V.ListVar(items)
    return v


def top_offset(frame) -> int:
    """The offset of the top frame's instruction running now (a call that inlines `frame`)."""
    while frame.parent is not None:
        frame = frame.parent
    return frame.insts[frame.ip - 1].offset


class CallMixin(KilnCallMixin, SymbolicMixin):
    def get_item(self, obj: V.VT, index: V.VT) -> V.VT:
        # `List[int]`, `Optional[Tensor]`: typing forms built as values (kiln.jit.annotate's
        # first argument) are constants of the capture.
        if isinstance(obj, V.ObjectVar) and type(obj.value).__module__ == "typing":
            try:
                return V.ObjectVar(obj.value[_type_arg(index)])
            except TypeError as e:
                raise V.Unsupported(f"typing subscript raised TypeError: {e}") from None
        return super().get_item(obj, index)

    # -- truth and identity -------------------------------------------------------------
    def truth(self, value: V.VT) -> bool:
        if isinstance(value, V.TensorVar):
            raise V.Unsupported(
                "data-dependent branch: a Python `if`/`while`/`and`/`or` on a tensor",
                "use kiln.where(cond, a, b) instead of a Python if on a tensor",
            )
        if isinstance(value, V.SymIntVar):
            return self.concrete_int(value) != 0
        if isinstance(value, (V.ListVar, V.TupleVar, V.DictVar)):
            return len(value.items) > 0
        if isinstance(value, V.ConstVar):
            return bool(value.value)
        if isinstance(value, V.ModuleVar):
            return bool(value.module) if hasattr(type(value.module), "__len__") else True
        if isinstance(value, V.NewObjectVar):
            return calls_object.truth(self, value)
        if isinstance(value, V.ObjectVar):
            t = type(value.value)
            if hasattr(t, "__bool__") or hasattr(t, "__len__"):
                if t.__module__ == "builtins" or isinstance(value.value, type):
                    return bool(value.value)
                raise V.Unsupported(f"truth value of a {t.__name__} object")
            return True
        return True

    def is_none(self, value: V.VT) -> bool:
        return isinstance(value, V.ConstVar) and value.value is None

    def identical(self, a: V.VT, b: V.VT) -> bool:
        if isinstance(a, V.ConstVar) and isinstance(b, V.ConstVar):
            return a.value is b.value
        if isinstance(a, V.ConstVar) or isinstance(b, V.ConstVar):
            const = a if isinstance(a, V.ConstVar) else b
            other = b if const is a else a
            if const.value is None:
                return False if not isinstance(other, V.ObjectVar) else other.value is None
            if isinstance(other, V.ObjectVar):
                return other.value is const.value
            return False
        for cls, key in ((V.ObjectVar, "value"), (V.ModuleVar, "module"), (V.FunctionVar, "fn")):
            if isinstance(a, cls) and isinstance(b, cls):
                return getattr(a, key) is getattr(b, key)
        if isinstance(a, V.TensorVar) and isinstance(b, V.TensorVar):
            return a.node is b.node
        return a is b

    def contains(self, container: V.VT, item: V.VT) -> bool:
        if isinstance(container, V.ConstVar) and item.is_const():
            return item.const() in container.value  # "ab" in "xaby" is a substring test
        if isinstance(container, V.DictVar):
            return dict_key(item) in container.items
        if isinstance(container, V.NewObjectVar) and container.mapping is not None and (
                calls_object.class_attr(container.cls, "__contains__") is calls_object.mapping_base(
                    container.cls).__contains__):
            return item.const() in container.mapping.items
        if isinstance(container, V.ModuleVar) and isinstance(item, V.ConstVar):
            return item.value in container.module
        items = self.unpack_iterable(container)
        if isinstance(item, V.TensorVar):
            raise V.Unsupported("`in` with a tensor compares data")
        return any(
            (i.const() == item.const()) if i.is_const() else self.identical(i, item) for i in items
        )

    # -- iteration -----------------------------------------------------------------------
    def unpack_iterable(self, value: V.VT) -> list:
        if isinstance(value, (V.ListVar, V.TupleVar)):
            return list(value.items)
        if isinstance(value, V.IteratorVar):
            items = value.items[value.pos:]
            value.pos = len(value.items)
            return items
        if isinstance(value, V.DictVar):
            return [V.ConstVar(k) for k in value.items]
        if isinstance(value, V.NewObjectVar) and value.mapping is not None and (
                calls_object.class_attr(value.cls, "__iter__") is dict.__iter__ or
                calls_object.class_attr(value.cls, "__iter__") is calls_object.mapping_base(
                    value.cls).__iter__):
            return [V.ConstVar(k) for k in value.mapping.items]
        if isinstance(value, V.ConstVar) and isinstance(value.value, (range, str, tuple, list,
                                                                      frozenset, set, bytes)):
            return [V.ConstVar(v) for v in value.value]
        if isinstance(value, V.TensorVar) and value.numpy:
            return calls_numpy.iterate(self, value)
        if isinstance(value, V.TensorVar):
            if value.example.dim() == 0:
                raise V.Unsupported("iteration over a 0-d tensor")
            size = self.ctx.size_of(value, 0)  # a break for a data-dependent size
            if not isinstance(size, V.ConstVar):
                raise V.Unsupported("iteration over a tensor with symbolic sizes")
            n = size.value
            return [ops.record(self.ctx, operator.getitem, [value, V.ConstVar(i)], {},
                               "getitem") for i in range(n)]
        if isinstance(value, V.ModuleVar):
            mod = value.module
            names = list(mod._modules) if len(mod._modules) == len(mod) else range(len(mod))
            return [self.ctx.wrap(m, None, f"{value.label}.{k}")
                    for k, m in zip(names, mod, strict=True)]
        if isinstance(value, V.SymIntVar):
            raise V.Unsupported("iteration over an int")
        raise V.Unsupported(f"iteration over {type(value).__name__}")

    # -- attributes ----------------------------------------------------------------------
    def run_int_arithmetic(self, op, a: V.VT, b: V.VT) -> V.VT:
        """`it + 1` of an int only the run knows (the index a loop node stopped at): another
        such int, computed by the entry; comparisons and anything else break the graph there."""
        if op not in _RUN_INT_OPS or not all(
                isinstance(v, V.RunIntVar) or isinstance(v, V.ConstVar) and type(v.value) is int
                for v in (a, b)):
            raise V.Unsupported(f"operator {op.__name__} on an int only the run knows (the "
                                "index a loop stopped at)", "the code after it runs eagerly")
        args = tuple(v.node if isinstance(v, V.RunIntVar) else v.value for v in (a, b))
        return V.RunIntVar(self.ctx.graph.call(op, args, {}, 0, loc=self.ctx.loc))

    def binary(self, op, a: V.VT, b: V.VT) -> V.VT:
        if calls_numpy.is_array(a) or calls_numpy.is_array(b):
            return calls_numpy.binary(self, op, a, b)
        if isinstance(a, V.TensorVar) or isinstance(b, V.TensorVar):
            return ops.record(self.ctx, op, [a, b], {}, op.__name__)
        if op is operator.mul and isinstance(a, (V.ListVar, V.TupleVar)) and isinstance(
                b, V.SymIntVar):  # YOLO's `[t] * bs`: as many items as the size is now
            return type(a)(a.items * self.concrete_int(b))
        if isinstance(a, V.SymIntVar) or isinstance(b, V.SymIntVar):
            return self.sym_binary(op, a, b)
        if isinstance(a, V.RunIntVar) or isinstance(b, V.RunIntVar):
            return self.run_int_arithmetic(op, a, b)
        if isinstance(a, (V.ListVar, V.TupleVar)) or isinstance(b, (V.ListVar, V.TupleVar)):
            a, b = _as_sequence(a), _as_sequence(b)  # `() + (h,)`: a constant tuple's items
        if op in (operator.eq, operator.ne) and isinstance(a, V.TupleVar) and isinstance(
            b, V.TupleVar
        ):  # shapes compared (`g.shape[:2] != x.shape[:2]`), sizes symbolic or not
            same = len(a.items) == len(b.items) and all(
                self.truth(self.binary(operator.eq, x, y))
                for x, y in zip(a.items, b.items, strict=True))
            return V.ConstVar(same if op is operator.eq else not same)
        if isinstance(a, (V.ListVar, V.TupleVar)) and op in (operator.add, operator.iadd):
            if isinstance(b, (V.ListVar, V.TupleVar)):
                if op is operator.iadd and isinstance(a, V.ListVar):
                    side_effects.will_mutate(self.ctx, a, "+=")
                    a.items.extend(b.items)
                    return a
                return type(a)(a.items + b.items)
        if isinstance(a, (V.ListVar, V.TupleVar)) and op is operator.mul:
            return type(a)(a.items * b.const())
        if op in (operator.eq, operator.ne) and all(
                isinstance(v, V.ObjectVar) and type(v.value) is type for v in (a, b)):
            # `type(m) == nn.Conv2d`: classes (of the plain metaclass) compare by identity
            return V.ConstVar(op(a.value, b.value))
        if op in (operator.eq, operator.ne) and calls_numpy.is_dtype_comparison(a, b):
            return V.ConstVar(op(calls_numpy.known(a), calls_numpy.known(b)))
        if a.is_const() and b.is_const():
            try:
                return V.ConstVar(op(a.const(), b.const()))
            except Exception as e:
                raise V.Unsupported(f"{op.__name__} raised {type(e).__name__}: {e}") from None
        raise V.Unsupported(f"operator {op.__name__} on {type(a).__name__}, {type(b).__name__}")

    def unary(self, op, a: V.VT) -> V.VT:
        if calls_numpy.is_array(a):
            return calls_numpy.unary(self, op, a)
        if isinstance(a, V.TensorVar):
            return ops.record(self.ctx, op, [a], {}, op.__name__)
        if isinstance(a, V.SymIntVar):
            hint = op(a.hint)
            node = self.ctx.graph.call(op, (a.node,), {}, hint, loc=self.ctx.loc)
            return V.SymIntVar(node, hint)
        return V.ConstVar(op(a.const()))

    # -- calls ---------------------------------------------------------------------------
    def call(self, fn: V.VT, args: list, kwargs: dict) -> V.VT:
        if isinstance(fn, V.BoundMethodVar) and isinstance(fn.self_var, V.ModuleVar) and (
                isinstance(fn.fn, V.FunctionVar) and fn.fn.fn in _module_iterators()):
            return self.module_iterator(fn.self_var, fn.fn.fn, args, kwargs)
        if isinstance(fn, V.BoundMethodVar) and isinstance(fn.self_var, V.ModuleVar) and (
                isinstance(fn.fn, V.FunctionVar) and fn.fn.fn in _module_modes()):
            return self.module_mode(fn.self_var, fn.fn.fn, args, kwargs)
        if isinstance(fn, V.BoundMethodVar) and calls_autograd.is_function_apply(fn):
            # a custom autograd.Function: one node that runs eagerly, its own forward and
            # backward, between compiled parts (autograd chains through it)
            cls = fn.self_var.value
            return ops.record(self.ctx, calls_autograd.eager_apply(cls), list(args), dict(kwargs),
                              f"{cls.__name__}.apply")
        if isinstance(fn, V.BoundMethodVar) and calls_autograd.is_grad_mode_clone(fn):
            # the fresh mode object a @no_grad / @inference_mode wrapper enters per call
            return V.GradModeVar(calls_autograd.grad_mode_of(fn.self_var.value))
        if isinstance(fn, V.BoundMethodVar):
            return self.call(fn.fn, [fn.self_var] + list(args), kwargs)
        if isinstance(fn, V.PartialVar):
            return self.call(fn.fn, fn.args + list(args), {**fn.kwargs, **kwargs})
        if isinstance(fn, calls_numpy.NumpyCallVar):
            return calls_numpy.call_method(self, fn, args, kwargs)
        if isinstance(fn, V.FunctionVar) and _numpy_loaded() and (
                fn.fn is calls_numpy._knp().as_array or fn.fn is calls_numpy._knp().as_tensor):
            return calls_numpy.reflag(args[0], array=fn.fn is calls_numpy._knp().as_array)
        if isinstance(fn, V.FunctionVar) and _numpy_loaded() and _knp_is_numpy(fn.fn):
            return calls_numpy.call_function(self, fn.fn, args, kwargs)
        if calls_numpy.is_fold(fn):
            return calls_numpy.fold_call(self, fn, args, kwargs)
        if isinstance(fn, V.FunctionVar) and hasattr(fn.fn, "_kiln_original"):
            # a kiln.compile'd function called from compiled code: its code is captured here
            return self.call(self.ctx.wrap(fn.fn._kiln_original, None), args, kwargs)
        if isinstance(fn, V.FunctionVar) and hasattr(fn.fn, _CAPTURE_VALUE):
            return V.ConstVar(getattr(fn.fn, _CAPTURE_VALUE))
        if isinstance(fn, V.FunctionVar) and getattr(fn.fn, _FOLD_CONSTANT_ARGS, False) and all(
                isinstance(a, (V.ConstVar, V.ObjectVar)) for a in [*args, *kwargs.values()]):
            # a lookup on constants (a registry keyed by types): run now, its result a constant
            return self.ctx.wrap(fn.fn(*[a.value for a in args],
                                       **{k: v.value for k, v in kwargs.items()}), None)
        if isinstance(fn, V.FunctionVar) and (runner := ops.allowed_in_graph(fn.fn)):
            return ops.record(self.ctx, runner, list(args), dict(kwargs))
        if isinstance(fn, V.FunctionVar) and _is_optimizer_step(fn.fn) and args and isinstance(
                args[0], V.ObjectVar):
            return optimizer_step.capture_step(self, args[0], list(args[1:]), kwargs)
        if isinstance(fn, V.FunctionVar) and (
                (opt := optimizer_step.scheduled(self, fn)) is not None):
            return optimizer_step.capture_step(self, opt, list(args), kwargs)
        if isinstance(fn, V.FunctionVar) and _is_optimizer_step(fn.fn):
            raise V.Unsupported(f"{fn.fn.__qualname__}() is not captured here",
                                "call optimizer.step() on the optimizer object")
        if isinstance(fn, V.FunctionVar) and hasattr(fn.fn, _EAGER_REASON):
            raise V.Unsupported(f"{fn.fn.__qualname__}() {getattr(fn.fn, _EAGER_REASON)}",
                                "it runs eagerly at this break, once, with its effect")
        if isinstance(fn, V.FunctionVar) and getattr(fn.fn, "_kiln_disabled", False):
            raise V.Unsupported(f"call to {fn.fn.__qualname__}(), which kiln.compiler.disable "
                                "keeps eager", "this is intended: the call runs eagerly")
        if isinstance(fn, (V.FunctionVar, V.NestedFunctionVar)):
            if isinstance(fn, V.FunctionVar) and _is_kiln_function(fn.fn) and not _has_callables(
                args, kwargs
            ):
                return self.call_kiln(fn.fn, args, kwargs)
            return self.inline(fn, args, kwargs)
        if isinstance(fn, V.TensorAttrVar):
            return self.call_tensor_method(fn.tensor, fn.name, args, kwargs)
        if isinstance(fn, V.ModuleVar):
            return self.call_module(fn, args, kwargs)
        if isinstance(fn, (_ContainerMethod, calls_object.ObjectInitVar, calls_object.RawSetattr)):
            return fn.call(self, args, kwargs)
        if isinstance(fn, V.NewObjectVar):
            return calls_object.call(self, fn, args, kwargs)
        if isinstance(fn, V.ObjectVar) and calls_object.user_class(fn.value) and (
            calls_object.why_not_plain(fn.value) is None
        ):
            return calls_object.construct(self, fn, args, kwargs)
        if isinstance(fn, V.GradModeExitVar):
            self.ctx.grad_enabled = fn.previous
            return V.ConstVar(None)
        if isinstance(fn, V.AutocastExitVar):
            autocast_region(self.ctx, fn.device, *fn.previous)
            return V.ConstVar(None)
        if isinstance(fn, V.ObjectVar) and (call := calls_object.python_call(fn.value)):
            # an existing callable object (a hook object, a loss or transform class that is not
            # a Module): its class's __call__ inlined with the object as self. One with no path
            # from the frame (a hook taken from a module's hook dict) is held by the entry, so
            # what __call__ reads of it is guarded either way.
            if fn.source is None or not fn.source.guardable():
                fn = V.ObjectVar(fn.value, HeldSource(fn.value, f"<{type(fn.value).__name__} "
                                                                f"at 0x{id(fn.value):x}>"))
            return self.inline(V.FunctionVar(call), [fn, *args], kwargs)
        if isinstance(fn, (V.ObjectVar, V.ConstVar)):
            return self.call_object(fn.value if isinstance(fn, V.ObjectVar) else fn.value,
                                    args, kwargs)
        raise V.Unsupported(f"call of a {type(fn).__name__}")

    def module_iterator(self, mv: V.ModuleVar, method, args, kwargs) -> V.VT:
        """`m.parameters()`, `m.named_modules()`, ...: the module tree is baked (its version is
        guarded), so the items are listed now, each wrapped as an attribute read of it is."""
        try:
            args = [_const_arg(a) for a in args]
            kwargs = {k: _const_arg(v) for k, v in kwargs.items()}
        except V.Unsupported:
            raise V.Unsupported(f"Module.{method.__name__}() with run-time arguments") from None
        named = method.__name__.startswith("named_")
        items = list(method(mv.module, *args, **kwargs))
        for m in mv.module.modules():  # a parameter reassigned in any of them recaptures
            self.ctx.watch_module(m)
        out = []
        for item in items:
            name, value = item if named else (None, item)
            label = f"{mv.label}.{name}" if name else f"{mv.label}.<{type(value).__name__}>"
            if isinstance(value, kiln.nn.Module):
                self.ctx.watch_module(value)
            var = self.ctx.wrap(value, None, label)
            out.append(V.TupleVar([V.ConstVar(name), var]) if named else var)
        return V.IteratorVar(out, types.GeneratorType)

    def module_mode(self, mv: V.ModuleVar, method, args, kwargs) -> V.VT:
        """`m.train()` / `m.eval()`: nothing to do when every submodule is already in that mode
        (their versions are guarded, so a later change recaptures); a change of mode is an
        attribute write, which runs eagerly at a break."""
        try:
            mode = True if method is kiln.nn.Module.train else False
            if method is kiln.nn.Module.train and (args or kwargs):
                mode = bool(_const_arg(args[0] if args else kwargs["mode"]))
        except (V.Unsupported, KeyError):
            raise V.Unsupported(f"Module.{method.__name__}() with a run-time mode") from None
        modules = list(mv.module.modules())
        if any(m.training != mode for m in modules):
            raise V.Unsupported(f"Module.{method.__name__}() changes the modules' mode (an "
                                "attribute write): it runs eagerly at this break",
                                "set the mode outside the compiled function")
        for m in modules:
            self.ctx.watch_module(m)
        return mv

    def call_module(self, mv: V.ModuleVar, args, kwargs) -> V.VT:
        mod = mv.module
        if isinstance(mod, _optimized_module()):  # kiln.compile(m) inside compiled code: m
            return self.call(self.module_attr(mv, "_orig_mod"), args, kwargs)
        if mod.__dict__.get("_forward_hooks") or mod.__dict__.get("_forward_pre_hooks"):
            # the hooks run as eager's __call__ runs them: inlined with the forward
            call_impl = inspect.getattr_static(kiln.nn.Module, "_call_impl")
            return self.inline(V.FunctionVar(call_impl), [mv] + list(args), kwargs)
        forward = inspect.getattr_static(type(mod), "forward")
        if "forward" in mod.__dict__:
            return self.call(self.ctx.wrap(mod.__dict__["forward"], None), args, kwargs)
        return self.inline(V.FunctionVar(forward), [mv] + list(args), kwargs)

    def call_tensor_method(self, t: V.TensorVar, name: str, args, kwargs) -> V.VT:
        ex = t.example
        if name in ops.DATA_DEPENDENT_METHODS:
            reason = ops.DATA_DEPENDENT_METHODS[name] or f"Tensor.{name}()"
            raise V.Unsupported(reason, "" if name == "backward" else
                                "keep values as tensors inside compiled code")
        if name == "size":
            if args or "dim" in kwargs:
                d = (args[0] if args else kwargs["dim"]).const()
                return self.ctx.size_of(t, d % max(ex.dim(), 1))
            return self.tensor_attr(t, "shape")
        if name == "dim" or name == "ndimension":
            return V.ConstVar(ex.dim())
        if name == "requires_grad_" and not ex.requires_grad and not _truthy_arg(
                args, kwargs, "requires_grad", True):
            return t  # already off (a guarded input's flag, or a graph value's): nothing to do
        if name in ("numel", "nelement"):
            check_size_read(t.node, f"Tensor.{name}()")
            if self.ctx.has_symbols:
                sizes = [self.ctx.size_of(t, d) for d in range(ex.dim())]
                total = V.ConstVar(1)
                for s in sizes:
                    total = self.binary(operator.mul, total, s)
                return total
            return V.ConstVar(ex.numel())
        if name in ("is_floating_point", "is_complex", "element_size", "get_device",
                    "is_contiguous", "stride", "storage_offset", "is_signed"):
            if name in ("stride", "is_contiguous", "storage_offset"):
                self.ctx.keep_layout(t)  # the code sees the caller's layout
                if self.ctx.has_symbols:
                    raise V.RestartStatic()
            ex_args = [ops.to_example(a) for a in args]
            return V.ConstVar(getattr(ex, name)(*ex_args))
        if name == "type" and not args and not kwargs:
            return V.ConstVar(ex.type())
        if name in ("unflatten", "unbind"):
            parts = self.view_parts(name, [t] + list(args), kwargs)
            if parts is not None:
                return parts
        method = getattr(_TENSOR, name)
        if isinstance(method, types.FunctionType) and _inlined_kiln(method):
            return self.inline(V.FunctionVar(method), [t] + list(args), kwargs)  # a composite
        return ops.record(self.ctx, method, [t] + list(args), kwargs, name)

    def view_parts(self, name: str, args: list, kwargs: dict) -> V.VT | None:
        """`unflatten` as the `view` and `unbind` as the `select`s they are (so the compiler
        sees ops it has), or None to record the call as it is: arguments eager would reject,
        or an unbind along a symbolic dim (its number of results varies)."""
        sig = _UNFLATTEN if name == "unflatten" else _UNBIND
        try:
            bound = sig.bind(*args, **kwargs)
        except TypeError:
            return None
        bound.apply_defaults()
        t, dim = bound.arguments["input"], bound.arguments["dim"]
        if not isinstance(t, V.TensorVar) or not isinstance(dim, V.ConstVar) or (
            type(dim.value) is not int
        ):
            return None
        ex = t.example
        try:
            (ex.unflatten(dim.value, ops.to_example(bound.arguments["sizes"]))
             if name == "unflatten" else ex.unbind(dim.value))
        except Exception:  # noqa: BLE001 - recorded as is, the op's own error breaks the graph
            return None
        d = dim.value % ex.dim()
        if name == "unbind":
            n = self.ctx.size_of(t, d)
            if not isinstance(n, V.ConstVar):
                return None
            return V.TupleVar([ops.record(self.ctx, _TENSOR.select, [t, dim, V.ConstVar(i)], {},
                                          "select") for i in range(n.value)])
        inner = self.unpack_iterable(bound.arguments["sizes"])
        shape = [self.ctx.size_of(t, i) for i in range(d)] + inner + [
            self.ctx.size_of(t, i) for i in range(d + 1, ex.dim())]
        return ops.record(self.ctx, _TENSOR.view, [t] + shape, {}, "view")

    def zero_arg_super(self) -> V.VT:
        """`super()` in a method: the `__class__` cell and the first argument of this frame."""
        cell = self.locals.get("__class__")
        cls = cell.contents if isinstance(cell, V.CellVar) else None
        first = self.locals.get(self.code.co_varnames[0]) if self.code.co_argcount else None
        if isinstance(first, V.CellVar):
            first = first.contents
        if not isinstance(cls, V.ObjectVar) or not isinstance(
            first, (V.ModuleVar, V.ObjectVar, V.NewObjectVar)
        ):
            raise V.Unsupported("super() outside of a method")
        return _SuperVar(cls.value, first)

    def call_object(self, fn, args, kwargs) -> V.VT:
        from kiln._capture import builtins_impl

        handler = builtins_impl.HANDLERS.get(fn) if _hashable(fn) else None
        if handler is not None:
            return handler(self, args, kwargs)
        if _hashable(fn) and fn in DTYPE_FACTS:
            return dtype_fact(fn, args, kwargs)
        if isinstance(fn, type) and issubclass(fn, kiln.nn.Module):
            module = calls_object.stateless_module(fn, args, kwargs)
            if module is None:
                raise V.Unsupported(f"creating a {fn.__name__} module with parameters, buffers or "
                                    "run-time arguments inside compiled code",
                                    "create it in __init__")
            return V.ModuleVar(module, None, fn.__name__)
        if fn in (kiln.no_grad, kiln.enable_grad):
            return V.GradModeVar(fn is kiln.enable_grad)
        if isinstance(fn, type) and getattr(fn, _NOOP_CONTEXT, False):
            return V.GradModeVar(self.ctx.grad_enabled)  # keeps the grad mode: changes nothing
        if fn is kiln.set_grad_enabled:
            return V.GradModeVar(bool(args[0].const()))
        if fn is kiln.inference_mode:  # no grad inside (kiln has no inference tensors)
            mode = args[0].const() if args else kwargs["mode"].const() if kwargs else True
            if not isinstance(mode, bool):
                raise V.Unsupported("inference_mode used as a bare decorator inside compiled code")
            return V.GradModeVar(not mode)
        if fn is kiln.autocast:  # built now: its arguments are constants of the code
            try:
                return V.ObjectVar(fn(*[_const_arg(a) for a in args],
                                      **{k: _const_arg(v) for k, v in kwargs.items()}))
            except (TypeError, ValueError, RuntimeError) as e:
                raise V.Unsupported(f"autocast(): {e}") from None
        if fn is kiln.Tensor and (sized := self.legacy_of_size(fn, args, kwargs)) is not None:
            return sized
        if _is_kiln_function(fn):
            return self.call_kiln(fn, args, kwargs)
        if isinstance(fn, type) and issubclass(fn, tuple) and hasattr(fn, "_fields"):
            bound = inspect.signature(fn).bind(*args, **kwargs)
            bound.apply_defaults()
            return V.TupleVar(list(bound.arguments.values()), None, fn)
        if fn is kiln.Size:
            return V.TupleVar(self.unpack_iterable(args[0]) if args else [], None, kiln.Size)
        if fn is kiln.Tensor and not kwargs and all(_is_data(a) for a in args):
            # the legacy constructor (NeRF's `torch.Tensor([1e10])`): data in the default dtype
            # as the graph's constant, sizes as zeros (what it gives), else the typed
            # constructor recorded as the op it is
            dtype = V.ConstVar(kiln.get_default_dtype())
            if len(args) == 1 and isinstance(args[0], (V.ListVar, V.TupleVar)):
                literal = self.literal_tensor(kiln.tensor, list(args), {"dtype": dtype})
                if literal is not None:
                    return literal
            elif args and all(type(a.value) is int for a in args):
                return ops.record(self.ctx, kiln.zeros, list(args), {"dtype": dtype}, "zeros")
            legacy = kiln._legacy_tensors.CONSTRUCTORS[
                {kiln.float64: "DoubleTensor"}.get(kiln.get_default_dtype(), "FloatTensor")]
            return self.call_kiln(legacy, args, kwargs)
        module = getattr(fn, "__module__", None) or ""
        if fn is abs and len(args) == 1 and isinstance(args[0], V.TensorVar):
            return self.unary(operator.abs, args[0])
        if module == "math" and not kwargs and args and any(
                isinstance(a, V.SymIntVar) for a in args) and all(
                isinstance(a, V.SymIntVar) or a.is_const() for a in args):
            # a schedule's math.cos(math.pi * t) of a run-time number (a float argument, a step
            # counter): a Python-number node of the graph, computed on every call
            hint = fn(*[a.hint if isinstance(a, V.SymIntVar) else a.const() for a in args])
            node = self.ctx.graph.call(fn, tuple(a.node if isinstance(a, V.SymIntVar)
                                                 else a.const() for a in args), {}, hint,
                                       loc=self.ctx.loc)
            return V.SymIntVar(node, hint)
        if _numpy_loaded() and _knp_is_numpy(fn):
            return calls_numpy.call_function(self, fn, args, kwargs)
        if module in ("operator", "_operator") and not kwargs and calls_numpy.any_array(args):
            return calls_numpy.call_operator(self, fn, args)
        if fn is super and not args and not kwargs:
            return self.zero_arg_super()
        if fn is super and len(args) == 2 and not kwargs and isinstance(args[0], V.ObjectVar) \
                and isinstance(args[0].value, type):  # super(Cls, self), the older spelling
            return _SuperVar(args[0].value, args[1])
        if isinstance(fn, types.BuiltinFunctionType) and module in _PURE_MODULES or (
            _hashable(fn) and fn in _SIMPLE_BUILTINS or _is_const_method(fn)
        ):
            if all(a.is_const() for a in args) and all(v.is_const() for v in kwargs.values()):
                try:
                    return V.ConstVar(fn(*[a.const() for a in args],
                                         **{k: v.const() for k, v in kwargs.items()}))
                except Exception as e:
                    raise V.Unsupported(f"{fn.__name__} raised {type(e).__name__}") from None
            if module in _PURE_MODULES and any(isinstance(a, V.TensorVar) for a in args):
                return ops.record(self.ctx, fn, list(args), kwargs, fn.__name__)
            if any(isinstance(a, V.SymIntVar) for a in args) and fn in (int, abs):
                return args[0]
        if fn is print:
            raise V.Unsupported("print() is a side effect", "remove print() from compiled code "
                                "or move it outside")
        name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", repr(fn))
        if isinstance(fn, type) and issubclass(fn, BaseException):  # the code raises here
            text = args[0].value if args and isinstance(args[0], V.ConstVar) else ""
            raise V.Unsupported(f"the code raises {name}" + (f": {text}" if text else ""),
                                "it raises when run: the graph breaks there")
        if calls_object.user_class(fn):
            raise V.Unsupported(f"creating a {name} object: {calls_object.why_not_plain(fn)}",
                                "create the object outside the compiled function, or make its "
                                "class a plain one (no __new__, metaclass or attribute hooks)")
        raise V.Unsupported(f"call to {name} ({type(fn).__name__}) is not supported",
                            "move this call outside the compiled function, or wrap it in a "
                            "kiln op")

    # -- inlining -----------------------------------------------------------------------
    def inline(self, fn: V.VT, args, kwargs) -> V.VT:
        from kiln._capture.symbolic import MAX_INLINE_DEPTH, Frame

        if self.depth >= MAX_INLINE_DEPTH:
            raise V.Unsupported("call depth too large to inline")
        if isinstance(fn, V.FunctionVar):
            f = fn.fn
            code, globals_ = f.__code__, f.__globals__
            # Defaults and closure contents are read (and guarded) through the function.
            src = fn.source if fn.source is not None and fn.source.guardable() else None

            def part(attr, key, leaf=None):
                if src is None:
                    return None
                s = ItemSource(AttrSource(src, attr), key)
                return AttrSource(s, leaf) if leaf else s

            defaults = [self.ctx.wrap(d, part("__defaults__", i))
                        for i, d in enumerate(f.__defaults__ or ())]
            kwdefaults = {k: self.ctx.wrap(v, part("__kwdefaults__", k))
                          for k, v in (f.__kwdefaults__ or {}).items()}
            closure = None
            if f.__closure__:
                closure = []
                for i, cell in enumerate(f.__closure__):
                    try:
                        value = cell.cell_contents
                    except ValueError:
                        contents = None
                    else:
                        path = part("__closure__", i, "cell_contents") or held_container_source(
                            value, cell, "closure cell", None)
                        contents = self.ctx.wrap(value, path)
                    closure.append(V.CellVar(contents, source=("outer", i)))
            module = f.__module__ or ""
            # kiln's own functions (the capture API included: kiln.compile() inside compiled
            # code is refused by call_kiln) are ops, except the modules' Python code.
            if module.split(".")[0] == "kiln" and not _inlined_kiln(f) and (
                not _has_callables(args, kwargs)
            ):
                return self.call_kiln(f, args, kwargs)
            if _is_library_code(code):
                from kiln._capture import builtins_impl

                handler = builtins_impl.HANDLERS.get(f)  # dataclasses.fields and the like
                if handler is not None:
                    return handler(self, args, kwargs)
                raise V.Unsupported(f"call into library function {f.__qualname__}")
        else:
            code, globals_ = fn.code, fn.globals
            defaults = fn.defaults.items if isinstance(fn.defaults, V.TupleVar) else [
                V.ConstVar(d) for d in (fn.defaults.const() if fn.defaults is not None else ())
            ]  # LOAD_CONST pushes an all-constant defaults tuple as one ConstVar
            kwdefaults = dict(fn.kwdefaults.items) if fn.kwdefaults is not None else {}
            closure = fn.closure
        locals_ = _bind_arguments(code, args, kwargs, defaults, kwdefaults)
        child = Frame(self.ctx, code, globals_, locals_, parent=self, closure=closure)
        try:
            return self._run_child(child, code)
        except V.Unsupported as e:  # where, inside the inlined calls, the break comes from
            e.__dict__.setdefault("frames", []).append((code.co_filename, child.lineno))
            raise

    def _run_child(self, child, code) -> V.VT:
        if code.co_flags & (inspect.CO_GENERATOR):
            child.yields = []
            child.run()
            it = V.IteratorVar(child.yields, types.GeneratorType)
            it.made_at = top_offset(self)  # the top frame's call that made it
            return it
        if code.co_flags & (inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR):
            raise V.Unsupported("coroutines are not captured")
        return child.run()


def _type_arg(v: V.VT):
    if isinstance(v, V.TupleVar):
        return tuple(_type_arg(i) for i in v.items)
    if isinstance(v, (V.ObjectVar, V.ConstVar)):
        return v.value
    raise V.Unsupported(f"a typing subscript with a {type(v).__name__}")


def _const_arg(v: V.VT):
    if isinstance(v, V.ConstVar):
        return v.value
    if isinstance(v, V.ObjectVar) and isinstance(v.value, kiln.dtype):
        return v.value
    raise V.Unsupported(f"autocast() with a {type(v).__name__} argument")


def autocast_region(ctx, device: str, enabled: bool, dtype) -> None:
    """Sets `device`'s autocast region for the rest of the capture: in `ctx.autocast` (which
    casts ops.record inserts) and in the C++ state (which the examples are computed under, as
    eager runs them)."""
    kiln._C._autograd._set_autocast_region(device, enabled, dtype)
    if enabled:
        ctx.autocast[device] = dtype
    else:
        ctx.autocast.pop(device, None)


def _numpy_loaded() -> bool:
    import sys

    return "numpy" in sys.modules


def _knp_is_numpy(fn) -> bool:
    from kiln import _numpy

    return _numpy.is_numpy_callable(fn)


def _is_const_method(fn) -> bool:
    """A method of an immutable builtin value (`"a_b".replace`, `(1, 2).index`): pure."""
    return isinstance(fn, types.BuiltinMethodType) and type(getattr(fn, "__self__", None)) in (
        str, bytes, int, float, bool, complex, tuple, frozenset, range)


def _has_callables(args, kwargs) -> bool:
    """Kiln helpers that take a module or function are inlined, not recorded as one op."""
    kinds = (V.ModuleVar, V.FunctionVar, V.NestedFunctionVar, V.BoundMethodVar)
    return any(isinstance(a, kinds) for a in list(args) + list(kwargs.values()))


def _hashable(x) -> bool:
    try:
        hash(x)
        return True
    except TypeError:
        return False


@functools.cache
def library_dirs() -> tuple:
    """The standard library and site-packages folders: code there is library code."""
    import sysconfig

    paths = sysconfig.get_paths()
    return (paths["stdlib"], paths["purelib"], paths["platlib"])


def _is_library_code(code) -> bool:
    filename = code.co_filename
    return filename.startswith(library_dirs()) and "/kiln/" not in filename


def _bind_arguments(code, args, kwargs, defaults, kwdefaults) -> dict:
    """Maps call arguments to the callee's parameters (CPython's rules, for inlining)."""
    names = code.co_varnames
    npos = code.co_argcount
    nkw = code.co_kwonlyargcount
    flags = code.co_flags
    locals_: dict = {}
    args = list(args)
    for i, name in enumerate(names[:npos]):
        if i < len(args):
            locals_[name] = args[i]
    extra = args[npos:]
    if flags & inspect.CO_VARARGS:
        locals_[names[npos + nkw]] = V.TupleVar(extra)
    elif extra:
        raise V.Unsupported(f"{code.co_name}() takes {npos} positional arguments "
                            f"but {len(args)} were given")
    varkw = {}
    posonly = names[: code.co_posonlyargcount]
    for key, value in kwargs.items():
        if key in names[:npos + nkw] and key not in posonly:
            if key in locals_:
                raise V.Unsupported(f"{code.co_name}() got multiple values for {key!r}")
            locals_[key] = value
        else:
            varkw[key] = value
    if flags & inspect.CO_VARKEYWORDS:
        index = npos + nkw + (1 if flags & inspect.CO_VARARGS else 0)
        locals_[names[index]] = V.DictVar(varkw)
    elif varkw:
        raise V.Unsupported(f"{code.co_name}() got an unexpected keyword argument "
                            f"{next(iter(varkw))!r}")
    first_default = npos - len(defaults)
    for i, name in enumerate(names[:npos]):
        if name not in locals_:
            if i >= first_default:
                locals_[name] = defaults[i - first_default]
            else:
                raise V.Unsupported(f"{code.co_name}() missing argument {name!r}")
    for name in names[npos: npos + nkw]:
        if name not in locals_:
            if name in kwdefaults:
                locals_[name] = kwdefaults[name]
            else:
                raise V.Unsupported(f"{code.co_name}() missing keyword argument {name!r}")
    return locals_
