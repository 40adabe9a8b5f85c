"""Attribute and item access on symbolic values (mixed into `Frame` through CallMixin).

Reads a tensor's metadata as constants (or symbolic sizes), a module's parameters and
submodules behind its version guard, an object's attributes by their static definition
(properties and methods inlined, data read with a source), items of containers and tensors; a
mutation of something that exists outside the capture breaks the graph.
"""

from __future__ import annotations

import inspect
import operator
import types

import kiln
from kiln._capture import calls_numpy, calls_object, ops, side_effects
from kiln._capture import variables as V
from kiln._capture.sources import AttrSource, HeldSource
from kiln.nn.modules.module import note_attr_read

_TENSOR = kiln.Tensor
_METADATA_ATTRS = {"dtype", "device", "ndim", "requires_grad", "is_cuda", "layout", "is_leaf",
                   "_device_str"}


class AccessMixin:
    def get_attr(self, obj: V.VT, name: str) -> V.VT:
        if calls_numpy.is_array(obj):
            return calls_numpy.get_attr(self, obj, name)
        if isinstance(obj, V.TensorVar):
            return self.tensor_attr(obj, name)
        if isinstance(obj, V.ModuleVar):
            return self.module_attr(obj, name)
        if isinstance(obj, V.ConstVar):
            value = getattr(obj.value, name)
            if callable(value):
                return V.ObjectVar(value)
            return V.ConstVar(value)
        if isinstance(obj, V.TupleVar) and hasattr(obj.tuple_type, "_fields"):
            if name in obj.tuple_type._fields:
                return obj.items[obj.tuple_type._fields.index(name)]
        if isinstance(obj, (V.ListVar, V.DictVar, V.TupleVar)):
            return _ContainerMethod(obj, name)
        if isinstance(obj, V.ObjectVar):
            return self.object_attr(obj, name)
        if isinstance(obj, V.NewObjectVar):
            return calls_object.get_attr(self, obj, name)
        if isinstance(obj, _SuperVar):
            return obj.get_attr(name)
        if isinstance(obj, V.FunctionVar) and name in ("__name__", "__qualname__", "__doc__",
                                                       "__module__"):
            return V.ConstVar(getattr(obj.fn, name))
        if isinstance(obj, V.SymIntVar):
            raise V.Unsupported(f"attribute {name!r} of a symbolic int")
        raise V.Unsupported(f"attribute {name!r} of {type(obj).__name__}")

    def tensor_attr(self, t: V.TensorVar, name: str) -> V.VT:
        ex = t.example
        if name in ("shape",):
            return V.TupleVar([self.ctx.size_of(t, d) for d in range(ex.dim())], None, kiln.Size)
        if name in _METADATA_ATTRS:
            return V.ConstVar(getattr(ex, name))
        # The transposing properties are recorded as the views they are, so they compile; the
        # ranks where torch warns or refuses keep the attribute read (eager's message).
        if name == "real":  # kiln's dtypes are real: the tensor itself
            return t
        if (name == "T" and ex.dim() <= 2) or (name == "H" and ex.dim() in (0, 2)):
            dims = V.ConstVar(tuple(reversed(range(ex.dim()))))
            return ops.record(self.ctx, _TENSOR.permute, [t, dims], {})
        if name in ("mT", "mH") and ex.dim() >= 2:
            return ops.record(self.ctx, _TENSOR.transpose, [t, V.ConstVar(-2), V.ConstVar(-1)], {})
        if name in ("T", "mT", "mH", "H", "data", "real"):
            fn = {"data": _TENSOR.detach}.get(name)
            if fn is not None:
                return ops.record(self.ctx, fn, [t], {}, name)
            return ops.record(self.ctx, _attr_getter(name), [t], {}, name)
        if name == "grad":
            return self.tensor_grad(t)
        if name == "grad_fn" and (leaf := self._leaf_input(t)) is not None and (
                leaf[0].is_leaf or not leaf[0].requires_grad):
            return V.ConstVar(None)  # its requires_grad is guarded, so this holds on every call
        if name in ("grad_fn", "_version"):
            raise V.Unsupported(f"Tensor.{name} is autograd state")
        if not hasattr(_TENSOR, name):
            raise V.Unsupported(f"Tensor has no attribute {name!r}")
        return V.TensorAttrVar(t, name)

    def _leaf_input(self, t: V.TensorVar):
        """(the caller's tensor, the source that re-reads it on every call) for a graph input
        (a baked parameter's source is the entry's reference to it); None for a value computed
        in the graph or an input the entry made contiguous."""
        obj = t.input_object
        if obj is None or t.source is None:
            return None
        if t.source.expr(self.ctx.state_labels) is None:
            return obj, HeldSource(obj, t.source.name())
        return obj, t.source

    def _grad_owner(self, t: V.TensorVar, what: str):
        """(the caller's leaf tensor, its source) whose `.grad` `what` reads or writes."""
        leaf = self._leaf_input(t)
        if leaf is None or not leaf[0].is_leaf:
            raise V.Unsupported(f"{what} of a tensor computed in the graph (autograd state)")
        return leaf

    def tensor_grad(self, t: V.TensorVar) -> V.VT:
        """`p.grad` of a graph input (a parameter after an eager backward): read on every call
        as a graph input of its own, guarded by its metadata (None-ness included); an in-place
        change of it is written back as for any input, an assignment replayed with setattr."""
        obj, source = self._grad_owner(t, "Tensor.grad")
        stored = side_effects.stored_attr(self.ctx, obj, "grad")
        if stored is not None:
            return stored
        return self.ctx.wrap(obj.grad, AttrSource(source, "grad"))

    def set_tensor_grad(self, t: V.TensorVar, value: V.VT) -> None:
        obj, source = self._grad_owner(t, "assignment to .grad")
        if not (isinstance(value, V.TensorVar) or
                isinstance(value, V.ConstVar) and value.value is None):
            raise V.Unsupported(f"assignment of a {type(value).__name__} to Tensor.grad")
        side_effects.record_store(self.ctx, obj, source, "grad", value)

    def module_attr(self, mv: V.ModuleVar, name: str) -> V.VT:
        mod = mv.module
        stored = side_effects.stored_attr(self.ctx, mod, name)
        if stored is not None:
            return stored
        d = mod.__dict__
        for table in ("_parameters", "_buffers", "_modules"):
            entries = d.get(table)
            if entries is not None and name in entries:
                value = entries[name]
                if value is None:
                    return V.ConstVar(None)
                return self.ctx.wrap(value, None, f"{mv.label}.{name}")
        if name in d and type(d[name]) is int and name in d.get("_kiln_counters", ()):
            # a counter (`self.step += 1` on every call): read on every call, a run-time int
            return self.ctx._wrap_sym_int(d[name], AttrSource(HeldSource(mod, mv.label), name))
        if name in d:
            note_attr_read(mod, name)  # its value is baked: a store to it captures again
            var = self.ctx.wrap(d[name], None, f"{mv.label}.{name}")
            if isinstance(var, (V.ListVar, V.DictVar)) and var.source is None:
                var.owner = mod  # changes to it are replayed (side_effects.py)
            return var
        cls_attr = inspect.getattr_static(type(mod), name, None)
        if isinstance(cls_attr, types.FunctionType):
            return V.BoundMethodVar(V.FunctionVar(cls_attr), mv)
        if isinstance(cls_attr, property):
            return self.inline(V.FunctionVar(cls_attr.fget), [mv], {})
        if isinstance(cls_attr, (staticmethod,)):
            return self.ctx.wrap(cls_attr.__func__, None)
        if isinstance(cls_attr, classmethod):
            return V.BoundMethodVar(V.FunctionVar(cls_attr.__func__), V.ObjectVar(type(mod)))
        if cls_attr is not None:
            return self.ctx.wrap(getattr(mod, name), None)
        raise V.Unsupported(f"{type(mod).__name__} has no attribute {name!r}")

    def object_attr(self, ov: V.ObjectVar, name: str) -> V.VT:
        obj = ov.value
        stored = side_effects.stored_attr(self.ctx, obj, name)
        if stored is not None:  # assigned earlier in this capture
            return stored
        source = AttrSource(ov.source, name) if ov.source is not None else None
        if type(obj).__name__ in ("iinfo", "finfo") and type(obj).__module__ == "numpy":
            return V.ConstVar(getattr(obj, name))  # a dtype's fixed limits (np.iinfo(t).max)
        if isinstance(obj, types.ModuleType):
            if not hasattr(obj, name):
                raise V.Unsupported(f"module {obj.__name__!r} has no attribute {name!r}")
            value = getattr(obj, name)
            trusted = obj.__name__.split(".")[0] in ("kiln", "math", "operator", "functools",
                                                      "builtins", "typing", "collections",
                                                      "numpy")
            return self.ctx.wrap(value, None if trusted else source)
        if isinstance(obj, type):
            attr = inspect.getattr_static(obj, name)
            if isinstance(attr, staticmethod):
                return self.ctx.wrap(attr.__func__, None)
            if isinstance(attr, classmethod):
                return V.BoundMethodVar(self.ctx.wrap(attr.__func__, None), ov)
            return self.ctx.wrap(getattr(obj, name), source)
        try:
            static = inspect.getattr_static(obj, name)
        except AttributeError:
            raise V.Unsupported(f"{type(obj).__name__} object has no attribute {name!r}") from None
        inst_dict = getattr(obj, "__dict__", None)
        if inst_dict is not None and name in inst_dict:
            return self.ctx.wrap(inst_dict[name], source)
        if isinstance(static, types.FunctionType):
            return V.BoundMethodVar(V.FunctionVar(static), ov)
        if isinstance(static, property) and isinstance(static.fget, types.FunctionType):
            return self.inline(V.FunctionVar(static.fget), [ov], {})
        if isinstance(static, (staticmethod, classmethod)):
            return self.ctx.wrap(getattr(obj, name), None)
        value = getattr(obj, name)
        return self.ctx.wrap(value, source)

    def set_attr(self, obj: V.VT, name: str, value: V.VT) -> None:
        if isinstance(obj, V.NewObjectVar):  # made in this capture: nobody else sees it yet
            calls_object.set_attr(self, obj, name, value)
            return
        if isinstance(obj, V.ModuleVar):
            side_effects.store_module_attr(self.ctx, obj.module, name, value)
            return
        if isinstance(obj, V.ObjectVar):
            side_effects.store_object_attr(self.ctx, obj, name, value)
            return
        if isinstance(obj, V.TensorVar) and name == "grad":
            self.set_tensor_grad(obj, value)
            return
        if isinstance(obj, V.TensorVar) and name == "data" and isinstance(value, V.TensorVar) and (
                value.input_object is None and value.example.shape == obj.example.shape and
                value.example.dtype == obj.example.dtype):
            # `p.data = p.data - lr * g`, a manual update: written as a copy into p, so p's
            # storage is not shared with the new value as eager's is (a value computed here,
            # seen by no one else unless it is returned)
            self.call_tensor_method(self.tensor_attr(obj, "data"), "copy_", [value], {})
            return
        raise V.Unsupported(f"assignment to attribute {name!r} of {type(obj).__name__}",
                            "keep state in local variables inside compiled code")

    # -- items ---------------------------------------------------------------------------
    def get_item(self, obj: V.VT, index: V.VT) -> V.VT:
        if calls_numpy.is_array(obj):
            return calls_numpy.get_item(self, obj, index)
        if isinstance(obj, V.TensorVar):
            return ops.record(self.ctx, operator.getitem, [obj, index], {}, "getitem")
        if isinstance(obj, V.NewObjectVar):
            return calls_object.item(self, obj, index)
        if isinstance(obj, (V.ListVar, V.TupleVar)):
            key = self.const_index(index)
            if isinstance(key, slice):
                items = obj.items[key]
                return V.ListVar(items) if isinstance(obj, V.ListVar) else V.TupleVar(items)
            try:
                return obj.items[key]
            except IndexError:
                raise V.Unsupported("index out of range (raises at run time)") from None
        if isinstance(obj, V.DictVar):
            key = dict_key(index)
            if key not in obj.items:
                raise V.Unsupported(f"KeyError {key!r} (raises at run time)")
            return obj.items[key]
        if isinstance(obj, V.ModuleVar):
            key = self.const_index(index)
            return self.ctx.wrap(obj.module[key], None, f"{obj.label}.{key}")
        if isinstance(obj, V.ConstVar):
            return V.ConstVar(obj.value[self.const_index(index)])
        if isinstance(obj, V.ObjectVar) and isinstance(obj.value, type):
            return V.ObjectVar(obj.value[index.const()])
        if isinstance(obj, V.ObjectVar) and calls_numpy.is_index_grid(obj.value):
            return self.index_grid(obj.value, index)
        raise V.Unsupported(f"indexing a {type(obj).__name__}")

    def index_grid(self, grid, index: V.VT) -> V.VT:
        """`np.mgrid[0:n, 0:m]` / `np.ogrid[...]`: one `np.arange` per slice, then the dense
        grids stacked (mgrid: `np.stack(np.meshgrid(..., indexing="ij"))`) or the open ones
        (ogrid: each range shaped along its own dim). A complex step (`0:1:5j`, a point count)
        is not captured."""
        import numpy as np

        single = isinstance(index, V.SliceVar)
        slices = [index] if single else list(index.items) if isinstance(index, V.TupleVar) else []
        if not slices or not all(isinstance(s, V.SliceVar) for s in slices):
            raise V.Unsupported("np.mgrid/np.ogrid indexed by something other than slices")
        ranges = []
        for s in slices:
            if s.step.is_const() and isinstance(s.step.const(), complex):
                raise V.Unsupported("np.mgrid/np.ogrid with a complex step (a point count)")
            start = V.ConstVar(0) if s.start.is_const() and s.start.const() is None else s.start
            step = V.ConstVar(1) if s.step.is_const() and s.step.const() is None else s.step
            ranges.append(self.call(self.ctx.wrap(np.arange, None), [start, s.stop, step], {}))
        if single:
            return ranges[0]
        if grid is np.ogrid:
            shaped = []
            for d, r in enumerate(ranges):
                shape = [V.ConstVar(1)] * len(ranges)
                shape[d] = V.ConstVar(-1)
                shaped.append(self.call(self.ctx.wrap(np.reshape, None), [r, V.TupleVar(shape)],
                                        {}))
            return V.TupleVar(shaped)
        grids = self.call(self.ctx.wrap(np.meshgrid, None), ranges,
                          {"indexing": V.ConstVar("ij")})
        return self.call(self.ctx.wrap(np.stack, None), [grids], {})

    def const_index(self, index: V.VT):
        if isinstance(index, V.SymIntVar):
            return self.concrete_int(index)
        if isinstance(index, V.SliceVar):
            parts = [self.const_index(p) for p in (index.start, index.stop, index.step)]
            return slice(*parts)
        return index.const()

    def set_item(self, obj: V.VT, index: V.VT, value: V.VT) -> None:
        if calls_numpy.is_array(obj):
            calls_numpy.set_item(self, obj, index, value)
            return
        if isinstance(obj, V.TensorVar):
            ops.record(self.ctx, operator.setitem, [obj, index, value], {}, "setitem")
            return
        if isinstance(obj, V.NewObjectVar):
            calls_object.item(self, obj, index, value)
            return
        if isinstance(obj, (V.ListVar, V.DictVar)):
            key = dict_key(index) if isinstance(obj, V.DictVar) else self.const_index(index)
            side_effects.will_mutate(self.ctx, obj, "item assignment")
            obj.items[key] = value
            return
        raise V.Unsupported(f"item assignment into a {obj.python_type().__name__}")

    # -- operators -----------------------------------------------------------------------


def _attr_getter(name):
    return operator.attrgetter(name)


def dict_key(v: V.VT):
    """A dict key as the real dict holds it: a constant, a module (keyed by identity), a class,
    or a tuple of these (a registry keyed by type pairs)."""
    if isinstance(v, V.ModuleVar):
        return v.module
    if isinstance(v, V.ObjectVar) and isinstance(v.value, type):
        return v.value
    if isinstance(v, V.TupleVar) and v.tuple_type is tuple:
        return tuple(dict_key(i) for i in v.items)
    return v.const()


class _SuperVar(V.VT):
    """`super()` bound to a method's class and `self`: attributes come from the classes after
    `cls` in the MRO of `self`'s type; methods are bound to `self` and inlined."""

    def __init__(self, cls, self_var: V.VT) -> None:
        self.cls = cls
        self.self_var = self_var

    def get_attr(self, name: str) -> V.VT:
        owner = self.self_var.python_type()
        first = getattr(self.self_var, "value", None)
        if isinstance(first, type) and issubclass(first, self.cls):  # __new__, a classmethod
            owner = first
        mro = owner.__mro__
        if self.cls not in mro:
            raise V.Unsupported(f"super() of a {owner.__name__} in a method of "
                                f"{self.cls.__name__} (raises at run time)")
        mapping = getattr(self.self_var, "mapping", None)
        for klass in mro[mro.index(self.cls) + 1:]:
            if name in klass.__dict__:
                attr = klass.__dict__[name]
                if isinstance(attr, types.FunctionType):
                    return V.BoundMethodVar(V.FunctionVar(attr), self.self_var)
                if mapping is not None and klass in calls_object._MAPPINGS and (
                        name in calls_object._MAPPING_METHODS):
                    return _ContainerMethod(mapping, name)  # the dict's own items
                if klass is object and name == "__setattr__" and isinstance(
                        self.self_var, V.NewObjectVar):
                    return calls_object.RawSetattr(self.self_var)
                if klass is object and name == "__init__":
                    return calls_object.ObjectInitVar()
                if isinstance(attr, staticmethod):  # __new__ of a Python base
                    return V.FunctionVar(attr.__func__)
                if name == "__new__" and isinstance(attr, types.BuiltinFunctionType):
                    return V.ObjectVar(attr)  # object.__new__: a call that breaks, rebuildable
                break
        raise V.Unsupported(f"super().{name} is not a plain method")


class _ContainerMethod(V.VT):
    """`lst.append`, `d.items`, `t.index`... on a container variable."""

    def __init__(self, obj: V.VT, name: str) -> None:
        self.obj = obj
        self.name = name

    def call(self, frame, args, kwargs) -> V.VT:
        obj, name = self.obj, self.name
        if isinstance(obj, V.TupleVar) and obj.tuple_type is kiln.Size and name == "numel" and (
                not args and not kwargs):  # `x.shape.numel()` (distributions' sample shapes)
            total = V.ConstVar(1)
            for size in obj.items:
                total = frame.binary(operator.mul, total, size)
            return total
        if isinstance(obj, V.ListVar):
            if name in ("append", "extend", "insert", "pop", "clear", "reverse", "remove"):
                if name == "remove":
                    raise V.Unsupported("list.remove")
                side_effects.will_mutate(frame.ctx, obj, f"list.{name}")
                if name == "append":
                    obj.items.append(args[0])
                elif name == "extend":
                    obj.items.extend(frame.unpack_iterable(args[0]))
                elif name == "insert":
                    obj.items.insert(args[0].const(), args[1])
                elif name == "pop":
                    return obj.items.pop(args[0].const() if args else -1)
                elif name == "clear":
                    obj.items.clear()
                else:
                    obj.items.reverse()
                return V.ConstVar(None)
            if name == "copy":
                return V.ListVar(obj.items)
        if isinstance(obj, V.DictVar):
            def key_var(k):  # a module key is the module (wrapped as modules read from code)
                return frame.ctx.wrap(k, None) if isinstance(k, kiln.nn.Module) else V.ConstVar(k)

            if name == "items":
                return V.ListVar([V.TupleVar([key_var(k), v]) for k, v in obj.items.items()])
            if name == "keys":
                return V.ListVar([key_var(k) for k in obj.items])
            if name == "values":
                return V.ListVar(list(obj.items.values()))
            if name == "get":
                key = dict_key(args[0])
                default = args[1] if len(args) > 1 else V.ConstVar(None)
                return obj.items.get(key, default)
            if name == "__getitem__":
                key = dict_key(args[0])
                if key not in obj.items:
                    raise V.Unsupported(f"KeyError: {key!r} (raises at run time)")
                return obj.items[key]
            if name == "__contains__":
                return V.ConstVar(dict_key(args[0]) in obj.items)
            if name == "__len__":
                return V.ConstVar(len(obj.items))
            if name == "__setitem__":
                side_effects.will_mutate(frame.ctx, obj, "item assignment")
                obj.items[dict_key(args[0])] = args[1]
                return V.ConstVar(None)
            if name in ("update", "pop", "setdefault"):
                side_effects.will_mutate(frame.ctx, obj, f"dict.{name}")
                if name == "update":
                    obj.items.update(args[0].items if args else {})
                    obj.items.update(kwargs)
                    return V.ConstVar(None)
                if name == "pop":
                    return obj.items.pop(dict_key(args[0]), *(args[1:2]))
                if name == "setdefault":
                    return obj.items.setdefault(dict_key(args[0]), args[1])
            if name == "copy":
                return V.DictVar(obj.items)
        if name in ("index", "count") and obj.is_const():
            return V.ConstVar(getattr(obj.const(), name)(*[a.const() for a in args]))
        raise V.Unsupported(f"{obj.python_type().__name__}.{name}()")
