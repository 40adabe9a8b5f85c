"""Instances of plain Python classes created while capturing (`Plain(2.5).apply(x)`).

Calling a plain class makes a `NewObjectVar` and inlines its `__init__`; attribute writes go
into the variable (undone like list mutations when the top frame breaks), reads see them, and
methods, properties and `__call__` are inlined with `self` bound. No real object exists during
the capture: one that outlives it is built by the entry (codegen.py: object.__new__, then the
final attributes). A class deriving from dict or OrderedDict (HF's ModelOutput dataclasses)
keeps its items in a `DictVar` beside the attributes; the dict's methods and `super()` calls into
them act on it, and its own `__setitem__`/`__getitem__`/`__setattr__` written in Python are
inlined. Classes whose instances need more than that (their own `__new__`, a metaclass,
`__getattribute__`, `__del__`) break the graph at the call with the reason.
"""

from __future__ import annotations

import collections
import sys
import types

import kiln
from kiln._capture import variables as V

_MISSING = object()
# Hooks that would run on the real object but not on its symbolic stand-in.
_HOOKS = ("__setattr__", "__getattribute__", "__delattr__")


def user_class(cls) -> bool:
    """A class of user code: not a builtin, kiln's own, the standard library's or an installed
    package's (their calls keep breaking as unsupported calls), not a module class."""
    from kiln._capture.calls import library_dirs

    if not isinstance(cls, type) or issubclass(cls, kiln.nn.Module):
        return False
    module = getattr(cls, "__module__", None) or ""
    top = module.split(".")[0]
    if module.startswith("kiln.distributions."):  # written in kiln ops, as user code is
        return True
    if module == "builtins" or top == "kiln" or top in sys.stdlib_module_names:
        return False
    filename = getattr(sys.modules.get(module), "__file__", None) or ""
    return not filename.startswith(library_dirs())


_MAPPINGS = (collections.OrderedDict, dict)
_HEAP_TYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE: a class written in Python


def mapping_base(cls):
    """OrderedDict or dict when `cls` derives from it and otherwise only from Python classes."""
    builtin = [k for k in cls.__mro__ if k is not object and not k.__flags__ & _HEAP_TYPE]
    if builtin and all(k in _MAPPINGS for k in builtin):
        return builtin[0]
    return None


def why_not_plain(cls) -> str | None:
    """None when instances of `cls` can be created symbolically, else why not."""
    if type(cls) is not type:
        return f"its metaclass {type(cls).__name__} may customize creation"
    mapping = mapping_base(cls)
    if cls.__new__ is not object.__new__ and not (mapping and cls.__new__ is mapping.__new__):
        return "it defines its own __new__ (or derives from a builtin type)"
    for hook in _HOOKS:
        if getattr(cls, hook) in (getattr(object, hook), getattr(mapping or object, hook)):
            continue
        if hook == "__setattr__" and isinstance(class_attr(cls, hook), types.FunctionType):
            continue  # written in Python: inlined at every attribute write
        return f"it defines {hook}"
    if getattr(cls, "__del__", None) is not None:
        return "it defines __del__"
    init = class_attr(cls, "__init__")
    if init is not object.__init__ and not isinstance(init, types.FunctionType):
        return "its __init__ is not a Python function"
    return None


def python_call(obj):
    """The `__call__` written in Python of an existing instance of a plain class (a user class,
    or kiln's own hook objects: spectral norm's), which the capture inlines; None for anything
    else (functions, classes, modules, builtins, objects whose attribute access is customized)."""
    cls = type(obj)
    if isinstance(obj, (type, types.FunctionType, types.MethodType, types.BuiltinFunctionType,
                        types.ModuleType, kiln.nn.Module, kiln.Tensor)):
        return None
    call = class_attr(cls, "__call__", None)
    if not isinstance(call, types.FunctionType):
        return None
    module = getattr(cls, "__module__", None) or ""
    if not (user_class(cls) or module.startswith("kiln.nn.")):
        return None
    if type(cls) is not type or any(getattr(cls, h) is not getattr(object, h) for h in _HOOKS):
        return None
    return call


def construct(frame, cls_var: V.ObjectVar, args, kwargs) -> V.VT:
    """`cls(*args, **kwargs)` for a plain class: a new object with `__init__` inlined."""
    cls = cls_var.value
    obj = V.NewObjectVar(cls_var)
    mapping = mapping_base(cls)
    if mapping is not None:
        obj.mapping = V.DictVar({}, None, mapping)
    init = class_attr(cls, "__init__")
    if mapping is not None and init is mapping.__init__:  # dict(**kwargs) or dict(other)
        if len(args) > 1 or (args and not isinstance(args[0], V.DictVar)):
            raise V.Unsupported(f"{cls.__name__}() from other than keywords or one dict")
        obj.mapping.items.update(args[0].items if args else {})
        obj.mapping.items.update(kwargs)
        return obj
    if init is object.__init__:
        if args or kwargs:
            raise V.Unsupported(f"{cls.__name__}() takes no arguments (raises at run time)")
        return obj
    result = frame.inline(V.FunctionVar(init), [obj] + list(args), kwargs)
    if not frame.is_none(result):
        raise V.Unsupported(f"{cls.__name__}.__init__() returned a value (raises at run time)")
    return obj


def class_attr(cls, name: str, default=_MISSING):
    """`name` as instances of `cls` see it on their class: its MRO only (inspect.getattr_static
    on a class also finds the metaclass's attributes, such as type.__call__)."""
    for klass in cls.__mro__:
        if name in klass.__dict__:
            return klass.__dict__[name]
    return default


def _is_data_descriptor(attr) -> bool:
    t = type(attr)
    return hasattr(t, "__set__") or hasattr(t, "__delete__")


def get_attr(frame, obj: V.NewObjectVar, name: str) -> V.VT:
    """`obj.name` in Python's order: data descriptors of the class, the instance's attributes,
    then the class (methods bound to `obj`, plain class attributes read through the class)."""
    cls = obj.cls
    if name == "__class__":
        return obj.cls_var
    if name == "__dict__":  # read as a snapshot (`name in self.__dict__`)
        return V.DictVar(dict(obj.attrs), None, dict)
    static = class_attr(cls, name)
    if static is not _MISSING and _is_data_descriptor(static):
        if isinstance(static, property):
            if not isinstance(static.fget, types.FunctionType):
                raise V.Unsupported(f"property {cls.__name__}.{name} has no Python getter")
            return frame.inline(V.FunctionVar(static.fget), [obj], {})
        if isinstance(static, types.MemberDescriptorType) and name in obj.attrs:  # __slots__
            return obj.attrs[name]
        raise V.Unsupported(f"attribute {name!r} of a {cls.__name__} object "
                            f"(a {type(static).__name__}) is not captured")
    if name in obj.attrs:
        return obj.attrs[name]
    if static is _MISSING:
        if class_attr(cls, "__getattr__") is not _MISSING:
            raise V.Unsupported(f"{cls.__name__}.__getattr__ is not captured")
        raise V.Unsupported(f"{cls.__name__} object has no attribute {name!r} "
                            "(raises at run time)")
    if isinstance(static, types.FunctionType):
        return V.BoundMethodVar(V.FunctionVar(static), obj)
    if obj.mapping is not None and name in _MAPPING_METHODS and static is getattr(
            mapping_base(cls), name, None):
        from kiln._capture.calls_access import _ContainerMethod

        return _ContainerMethod(obj.mapping, name)
    if isinstance(static, staticmethod):
        return frame.ctx.wrap(static.__func__, None)
    if isinstance(static, classmethod):
        return V.BoundMethodVar(frame.ctx.wrap(static.__func__, None), obj.cls_var)
    getter = getattr(type(static), "__get__", None)
    if isinstance(getter, types.FunctionType):  # a descriptor written in Python (lazy_property)
        # the descriptor as the class holds it (the class is guarded by identity)
        return frame.inline(V.FunctionVar(getter), [frame.ctx.wrap(static, None), obj,
                                                    obj.cls_var], {})  # fmt: skip
    if getter is not None:
        raise V.Unsupported(f"attribute {name!r} of a {cls.__name__} object "
                            f"(a {type(static).__name__}) is not captured")
    return frame.object_attr(obj.cls_var, name)  # guarded where the class was read


def has_attr(obj: V.NewObjectVar, name: str) -> bool:
    if name in obj.attrs:
        return True
    if class_attr(obj.cls, "__getattr__") is not _MISSING:
        raise V.Unsupported(f"{obj.cls.__name__}.__getattr__ is not captured")
    static = class_attr(obj.cls, name)
    return static is not _MISSING and not isinstance(static, types.MemberDescriptorType)


_MAPPING_METHODS = ("keys", "items", "values", "get", "update", "pop", "setdefault",
                    "__setitem__", "__getitem__", "__contains__", "__len__")


def set_attr(frame, obj: V.NewObjectVar, name: str, value: V.VT, raw: bool = False) -> None:
    """`obj.name = value`; `raw` is object.__setattr__ (a class's own __setattr__ calling up)."""
    cls = obj.cls
    hook = class_attr(cls, "__setattr__")
    if not raw and isinstance(hook, types.FunctionType):
        frame.inline(V.FunctionVar(hook), [obj, V.ConstVar(name), value], {})
        return
    static = class_attr(cls, name)
    if static is not _MISSING and _is_data_descriptor(static):
        if isinstance(static, property):
            if not isinstance(static.fset, types.FunctionType):
                raise V.Unsupported(f"property {cls.__name__}.{name} has no Python setter "
                                    "(raises at run time)")
            frame.inline(V.FunctionVar(static.fset), [obj, value], {})
            return
        if not isinstance(static, types.MemberDescriptorType):
            raise V.Unsupported(f"assignment to attribute {name!r} of a {cls.__name__} object "
                                f"(a {type(static).__name__})")
    elif cls.__dictoffset__ == 0:  # __slots__ without __dict__
        raise V.Unsupported(f"{cls.__name__} object has no attribute {name!r} to assign "
                            "(raises at run time)")
    frame.ctx.undo.append((obj, "attrs", dict(obj.attrs)))
    obj.attrs[name] = value


def call(frame, obj: V.NewObjectVar, args, kwargs) -> V.VT:
    """`obj(...)`: its class's `__call__`, inlined."""
    fn = class_attr(obj.cls, "__call__", None)
    if not isinstance(fn, types.FunctionType):
        raise V.Unsupported(f"{obj.cls.__name__} object is not callable (raises at run time)")
    return frame.inline(V.FunctionVar(fn), [obj] + list(args), kwargs)


def item(frame, obj: V.NewObjectVar, key: V.VT, value: V.VT | None = None) -> V.VT:
    """`obj[key]` (value None) or `obj[key] = value`: the class's own method written in Python,
    inlined, else the mapping's items."""
    name = "__getitem__" if value is None else "__setitem__"
    fn = class_attr(obj.cls, name, None)
    if isinstance(fn, types.FunctionType):
        return frame.inline(V.FunctionVar(fn), [obj, key] + ([] if value is None else [value]),
                            {})
    if obj.mapping is None:
        raise V.Unsupported(f"{name} of a {obj.cls.__name__} object")
    from kiln._capture.calls_access import _ContainerMethod

    return _ContainerMethod(obj.mapping, name).call(
        frame, [key] + ([] if value is None else [value]), {})


class RawSetattr(V.VT):
    """`super().__setattr__` that reaches object's: sets the attribute itself."""

    def __init__(self, obj: V.NewObjectVar) -> None:
        self.obj = obj

    def call(self, frame, args, kwargs) -> V.VT:
        set_attr(frame, self.obj, args[0].const(), args[1], raw=True)
        return V.ConstVar(None)


def truth(frame, obj: V.NewObjectVar) -> bool:
    for hook in ("__bool__", "__len__"):
        fn = class_attr(obj.cls, hook, None)
        if fn is None:
            continue
        if obj.mapping is not None and fn is getattr(mapping_base(obj.cls), hook, None):
            return bool(obj.mapping.items)
        if not isinstance(fn, types.FunctionType):
            raise V.Unsupported(f"truth value of a {obj.cls.__name__} object")
        return frame.truth(frame.inline(V.FunctionVar(fn), [obj], {}))
    return True


def length(frame, obj: V.NewObjectVar) -> V.VT:
    fn = class_attr(obj.cls, "__len__", None)
    if obj.mapping is not None and fn is mapping_base(obj.cls).__len__:
        return V.ConstVar(len(obj.mapping.items))
    if not isinstance(fn, types.FunctionType):
        raise V.Unsupported(f"len() of a {obj.cls.__name__} object (raises at run time)")
    return frame.inline(V.FunctionVar(fn), [obj], {})


class ObjectInitVar(V.VT):
    """`super().__init__` that reaches `object.__init__`: a call that does nothing."""

    def call(self, frame, args, kwargs) -> V.VT:
        if args or kwargs:
            raise V.Unsupported("object.__init__() takes no arguments (raises at run time)")
        return V.ConstVar(None)


def stateless_module(cls, args, kwargs):
    """An instance of module class `cls` made now from constant arguments, when it holds no
    parameters or buffers (HF heads' `loss_fct = CrossEntropyLoss()` in forward, `nn.Softmax(-1)
    (x)`): the same for every call, so the capture inlines its forward like any module's, with
    its attributes as constants; else None."""
    values = [a.value if isinstance(a, V.ConstVar) else _NOT_CONST for a in args]
    named = {k: v.value if isinstance(v, V.ConstVar) else _NOT_CONST for k, v in kwargs.items()}
    if any(v is _NOT_CONST for v in [*values, *named.values()]):
        return None
    try:
        module = cls(*values, **named)
    except Exception:  # noqa: BLE001 - its error is raised when eager runs the call
        return None
    if next(module.parameters(), None) is not None or next(module.buffers(), None) is not None:
        return None
    return module


_NOT_CONST = object()
