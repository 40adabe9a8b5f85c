"""kiln.nn.Module: the base class of every layer, with torch.nn.Module's interface.

Attribute assignment registers Parameters, buffers and submodules (in that order of checks, as
torch does), so ``named_parameters()``, ``state_dict()`` and ``repr()`` come out with the same
names, order and text as the same architecture written for torch.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict

import kiln
from kiln.nn.modules._hooks import RemovableHandle
from kiln.nn.modules._module_state import StateDictMixin
from kiln.nn.parameter import Buffer, Parameter

__all__ = ["Module"]


def _typename(obj) -> str:
    """torch.typename's spelling: the qualified class name (builtins unqualified)."""
    if isinstance(obj, kiln.Tensor):
        return f"kiln.Tensor[{obj.dtype}]"
    cls = type(obj)
    module = cls.__module__
    return cls.__qualname__ if module == "builtins" else f"{module}.{cls.__qualname__}"


def _addindent(text: str, spaces: int) -> str:
    lines = text.split("\n")
    if len(lines) == 1:
        return text
    first = lines.pop(0)
    rest = [(spaces * " ") + line if line.strip() else "" for line in lines]
    return first + "\n" + "\n".join(rest)


def _forward_unimplemented(self, *args, **kwargs):
    raise NotImplementedError(
        f'Module [{type(self).__name__}] is missing the required "forward" function'
    )


_version_counter = itertools.count(1)
_MISSING = object()


_PLAIN = (int, float, bool, str, type(None), kiln.dtype, kiln.device)


def _equal_plain(a, b) -> bool:
    """Whether an attribute store changes nothing compiled code can have read: the same value
    of an immutable plain type (`self.input_dtype = h.dtype`, `self.last_shape =
    tuple(x.shape)` on every call), so the module's version stays."""
    if type(a) is not type(b):
        return False
    if isinstance(a, tuple):
        return len(a) == len(b) and all(_equal_plain(x, y) for x, y in zip(a, b, strict=True))
    return isinstance(a, _PLAIN) and a == b


def note_attr_read(module, name: str) -> None:
    """Records that compiled code read plain attribute `name` of `module` (and guards it by the
    module's version): from now on a store to it bumps the version."""
    module.__dict__.setdefault("_kiln_read_attrs", set()).add(name)


def _unread_plain_attr(module, name: str, current) -> bool:
    """Whether `name` is an existing plain attribute no compiled code has read: storing another
    value there (ESPnet's `self.attn = softmax(...)` kept for plotting, on every call) changes
    nothing a capture relied on, so the version stays."""
    d = module.__dict__
    if current is _MISSING or name not in d or name in d.get("_kiln_read_attrs", ()):
        return False
    return not isinstance(current, Module)


def _bump_version(module) -> None:
    """Marks the module's attributes as changed. kiln.compile bakes a module's parameters,
    submodules and Python attributes into compiled code and guards on this version (one
    integer read per module on each call), so any change here triggers a new capture.

    The version's lowest bit is the training flag, so train() / eval() switch between two
    versions of the same attributes: an epoch loop that alternates them reuses the code
    captured for each mode instead of capturing again every epoch."""
    d = module.__dict__
    d["_kiln_attrs"] = next(_version_counter)
    d["_kiln_version"] = d["_kiln_attrs"] * 2 + bool(d.get("training", True))


def _set_training(module, mode: bool) -> None:
    d = module.__dict__
    d["training"] = mode
    d["_kiln_version"] = d.get("_kiln_attrs", 0) * 2 + bool(mode)


def _check_member_name(kind: str, name, obj: Module) -> None:
    """Validates a parameter/buffer name the way torch's register_* functions do."""
    if not isinstance(name, str):
        raise TypeError(f"{kind} name should be a string. Got {_typename(name)}")
    if "." in name:
        raise KeyError(f'{kind} name can\'t contain "."')
    if name == "":
        raise KeyError(f'{kind} name can\'t be empty string ""')


class Module(StateDictMixin):
    """Base class for all neural network modules (torch.nn.Module).

    Subclasses call ``super().__init__()`` first, then assign Parameters, buffers and
    submodules as attributes, and define ``forward``; calling the module runs the forward
    pre-hooks, ``forward`` and the forward hooks.
    """

    training: bool
    forward = _forward_unimplemented
    call_super_init: bool = False

    def __init__(self, *args, **kwargs) -> None:
        if not self.call_super_init and (args or kwargs):
            raise TypeError(
                f"{type(self).__name__}.__init__() got unexpected arguments: args={args}, "
                f"kwargs={kwargs}"
            )
        setter = object.__setattr__
        setter(self, "_kiln_attrs", 0)
        setter(self, "_kiln_version", 1)  # _kiln_attrs * 2 + training
        setter(self, "training", True)
        setter(self, "_parameters", OrderedDict())
        setter(self, "_buffers", OrderedDict())
        setter(self, "_non_persistent_buffers_set", set())
        setter(self, "_modules", OrderedDict())
        setter(self, "_forward_hooks", OrderedDict())
        setter(self, "_forward_hooks_with_kwargs", OrderedDict())
        setter(self, "_forward_hooks_always_called", OrderedDict())
        setter(self, "_forward_pre_hooks", OrderedDict())
        setter(self, "_forward_pre_hooks_with_kwargs", OrderedDict())
        setter(self, "_state_dict_hooks", OrderedDict())
        setter(self, "_load_state_dict_pre_hooks", OrderedDict())
        setter(self, "_load_state_dict_post_hooks", OrderedDict())
        if self.call_super_init:
            super().__init__(*args, **kwargs)

    # ----------------------------------------------------------------------------- registration

    def register_buffer(self, name: str, tensor, persistent: bool = True) -> None:
        """Adds a buffer: module state that is not a parameter (e.g. BatchNorm's running_mean).

        Persistent buffers are part of ``state_dict()``; ``tensor=None`` registers a name whose
        value is None (skipped by state_dict).
        """
        _bump_version(self)
        if "_buffers" not in self.__dict__:
            raise AttributeError("cannot assign buffer before Module.__init__() call")
        _check_member_name("buffer", name, self)
        if hasattr(self, name) and name not in self._buffers:
            raise KeyError(f"attribute '{name}' already exists")
        if tensor is not None and not isinstance(tensor, kiln.Tensor):
            raise TypeError(
                f"cannot assign '{_typename(tensor)}' object to buffer '{name}' "
                "(kiln Tensor or None required)"
            )
        self._buffers[name] = tensor
        if persistent:
            self._non_persistent_buffers_set.discard(name)
        else:
            self._non_persistent_buffers_set.add(name)

    def register_parameter(self, name: str, param) -> None:
        """Adds a parameter (a kiln.nn.Parameter, or None to reserve the name)."""
        _bump_version(self)
        if "_parameters" not in self.__dict__:
            raise AttributeError("cannot assign parameter before Module.__init__() call")
        _check_member_name("parameter", name, self)
        if hasattr(self, name) and name not in self._parameters:
            raise KeyError(f"attribute '{name}' already exists")
        if param is not None and not isinstance(param, Parameter):
            raise TypeError(
                f"cannot assign '{_typename(param)}' object to parameter '{name}' "
                "(kiln.nn.Parameter or None required)"
            )
        self._parameters[name] = param

    def add_module(self, name: str, module) -> None:
        """Adds a child module, reachable as the attribute ``name``."""
        _bump_version(self)
        if not isinstance(module, Module) and module is not None:
            raise TypeError(f"{_typename(module)} is not a Module subclass")
        if not isinstance(name, str):
            raise TypeError(f"module name should be a string. Got {_typename(name)}")
        if hasattr(self, name) and name not in self._modules:
            raise KeyError(f"attribute '{name}' already exists")
        if "." in name:
            raise KeyError(f'module name can\'t contain ".", got: {name}')
        if name == "":
            raise KeyError('module name can\'t be empty string ""')
        self._modules[name] = module

    def register_module(self, name: str, module) -> None:
        """Alias for add_module."""
        self.add_module(name, module)

    def _get_by_path(self, target: str, kind: str, table: str, expected):
        module_path, _, name = target.rpartition(".")
        mod = self.get_submodule(module_path)
        if not hasattr(mod, name):
            raise AttributeError(f"{mod._get_name()} has no attribute `{name}`")
        value = getattr(mod, name)
        if name not in getattr(mod, table) or not isinstance(value, expected):
            raise AttributeError(f"`{name}` is not {kind}")
        return value

    def get_submodule(self, target: str) -> Module:
        """The submodule at dotted path ``target`` ("" is this module)."""
        if target == "":
            return self
        mod = self
        for item in target.split("."):
            if not hasattr(mod, item):
                raise AttributeError(f"{mod._get_name()} has no attribute `{item}`")
            mod = getattr(mod, item)
            if not isinstance(mod, Module):
                raise AttributeError(f"`{item}` is not an nn.Module")  # noqa: TRY004
        return mod

    def get_parameter(self, target: str) -> Parameter:
        """The parameter at dotted path ``target`` (e.g. ``"encoder.0.weight"``)."""
        return self._get_by_path(target, "an nn.Parameter", "_parameters", Parameter)

    def get_buffer(self, target: str):
        """The buffer at dotted path ``target``."""
        return self._get_by_path(target, "a buffer", "_buffers", kiln.Tensor)

    # ----------------------------------------------------------------------- attribute protocol

    def __getattr__(self, name: str):
        # Only reached when normal lookup fails; __dict__ access avoids recursion while the
        # object is half-built (copy/pickle create it without calling __init__).
        d = self.__dict__
        for table in ("_parameters", "_buffers", "_modules"):
            members = d.get(table)
            if members is not None and name in members:
                return members[name]
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __setattr__(self, name: str, value) -> None:
        if name == "training" and type(value) is bool and "training" in self.__dict__:
            _set_training(self, value)
            return
        current = self._current_attr(name)
        if current is not value and not _equal_plain(current, value) and not (
                type(value) is int and type(current) is int
                and name in self.__dict__.get("_kiln_counters", ())) and not (
                _unread_plain_attr(self, name, current)):
            _bump_version(self)  # (a counter compiled code reads on every call: no new capture)
        self._set_attr(name, value)

    def _current_attr(self, name: str):
        d = self.__dict__
        for table in ("_parameters", "_buffers", "_modules"):
            entries = d.get(table)
            if entries is not None and name in entries:
                return entries[name]
        return d.get(name, _MISSING)

    def _set_attr(self, name: str, value) -> None:
        def remove_from(*tables):
            for t in tables:
                if name in t:
                    if isinstance(t, dict):
                        del t[name]
                    else:
                        t.discard(name)

        params = self.__dict__.get("_parameters")
        if isinstance(value, Parameter):
            if params is None:
                raise AttributeError("cannot assign parameters before Module.__init__() call")
            remove_from(
                self.__dict__, self._buffers, self._modules, self._non_persistent_buffers_set
            )
            self.register_parameter(name, value)
            return
        if params is not None and name in params:
            if value is not None:
                raise TypeError(
                    f"cannot assign '{_typename(value)}' as parameter '{name}' "
                    "(kiln.nn.Parameter or None expected)"
                )
            self.register_parameter(name, value)
            return
        modules = self.__dict__.get("_modules")
        if isinstance(value, Module):
            if modules is None:
                raise AttributeError("cannot assign module before Module.__init__() call")
            remove_from(
                self.__dict__, self._parameters, self._buffers, self._non_persistent_buffers_set
            )
            modules[name] = value
            return
        if modules is not None and name in modules:
            if value is not None:
                raise TypeError(
                    f"cannot assign '{_typename(value)}' as child module '{name}' "
                    "(kiln.nn.Module or None expected)"
                )
            modules[name] = value
            return
        buffers = self.__dict__.get("_buffers")
        if isinstance(value, Buffer) or (buffers is not None and name in buffers):
            if value is not None and not isinstance(value, kiln.Tensor):
                raise TypeError(
                    f"cannot assign '{_typename(value)}' as buffer '{name}' "
                    "(kiln.nn.Buffer, kiln.Tensor or None expected)"
                )
            if isinstance(value, Buffer):
                persistent = value.persistent
            else:
                persistent = name not in self._non_persistent_buffers_set
            if buffers is None:
                raise AttributeError("cannot assign buffer before Module.__init__() call")
            if buffers.get(name) is value and not isinstance(value, Buffer):
                return  # `self.count += 1` on a buffer: the in-place op stored it already
            remove_from(self.__dict__, self._parameters, self._modules)
            self.register_buffer(name, value, persistent)
            return
        object.__setattr__(self, name, value)

    def __delattr__(self, name: str) -> None:
        _bump_version(self)
        if name in self._parameters:
            del self._parameters[name]
        elif name in self._buffers:
            del self._buffers[name]
            self._non_persistent_buffers_set.discard(name)
        elif name in self._modules:
            del self._modules[name]
        else:
            object.__delattr__(self, name)

    def __dir__(self):
        keys = (
            dir(self.__class__)
            + list(self.__dict__)
            + list(self._parameters)
            + list(self._modules)
            + list(self._buffers)
        )
        return sorted(k for k in keys if not k[0].isdigit())

    # -------------------------------------------------------------------------------- iteration

    def _named_members(self, get_members, prefix="", recurse=True, remove_duplicate=True):
        memo = set()
        modules = (
            self.named_modules(prefix=prefix, remove_duplicate=remove_duplicate)
            if recurse
            else [(prefix, self)]
        )
        for module_prefix, module in modules:
            for k, v in get_members(module):
                if v is None or id(v) in memo:
                    continue
                if remove_duplicate:
                    memo.add(id(v))
                yield (module_prefix + ("." if module_prefix else "") + k, v)

    def parameters(self, recurse: bool = True):
        """Iterates this module's parameters (and its submodules' when recurse)."""
        for _, p in self.named_parameters(recurse=recurse):
            yield p

    def named_parameters(
        self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True
    ):
        """Iterates (dotted name, parameter) pairs; a shared parameter is yielded once."""
        return self._named_members(
            lambda m: m._parameters.items(), prefix, recurse, remove_duplicate
        )

    def buffers(self, recurse: bool = True):
        """Iterates this module's buffers (and its submodules' when recurse)."""
        for _, b in self.named_buffers(recurse=recurse):
            yield b

    def named_buffers(self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True):
        """Iterates (dotted name, buffer) pairs."""
        return self._named_members(lambda m: m._buffers.items(), prefix, recurse, remove_duplicate)

    def children(self):
        """Iterates the immediate child modules."""
        for _, m in self.named_children():
            yield m

    def named_children(self):
        """Iterates (name, child) for the immediate children, each child once."""
        memo = set()
        for name, module in self._modules.items():
            if module is not None and id(module) not in memo:
                memo.add(id(module))
                yield name, module

    def modules(self, remove_duplicate: bool = True):
        """Iterates every module of the tree, this one first (pre-order)."""
        for _, m in self.named_modules(remove_duplicate=remove_duplicate):
            yield m

    def named_modules(self, memo=None, prefix: str = "", remove_duplicate: bool = True):
        """Iterates (dotted name, module) over the tree in pre-order, this module as ``prefix``."""
        if memo is None:
            memo = set()
        if id(self) in memo:
            return
        if remove_duplicate:
            memo.add(id(self))
        yield prefix, self
        for name, module in self._modules.items():
            if module is None:
                continue
            sub_prefix = prefix + ("." if prefix else "") + name
            yield from module.named_modules(memo, sub_prefix, remove_duplicate)

    # ----------------------------------------------------------------------------- mode & grads

    def train(self, mode: bool = True) -> Module:
        """Sets training mode on this module and all submodules (Dropout, BatchNorm use it)."""
        if not isinstance(mode, bool):
            raise ValueError("training mode is expected to be boolean")  # noqa: TRY004
        self.training = mode
        for module in self.children():
            module.train(mode)
        return self

    def eval(self) -> Module:
        """Same as ``train(False)``."""
        return self.train(False)

    def requires_grad_(self, requires_grad: bool = True) -> Module:
        """Sets requires_grad on every parameter."""
        for p in self.parameters():
            p.requires_grad_(requires_grad)
        return self

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Clears parameter gradients: drops them (``set_to_none``) or zeroes them in place."""
        for p in self.parameters():
            if p.grad is None:
                continue
            if set_to_none:
                p.grad = None
            else:
                with kiln.no_grad():
                    p.grad.zero_()

    def apply(self, fn) -> Module:
        """Calls ``fn`` on every submodule (children first) and then on this module."""
        for module in self.children():
            module.apply(fn)
        fn(self)
        return self

    # ------------------------------------------------------------------------------------ hooks

    def register_forward_pre_hook(self, hook, *, prepend: bool = False, with_kwargs: bool = False):
        """Registers ``hook(module, args)`` (or ``hook(module, args, kwargs)``) run before forward.

        A non-None result replaces the positional args (or is an ``(args, kwargs)`` pair with
        ``with_kwargs=True``).
        """
        _bump_version(self)
        handle = RemovableHandle(
            self._forward_pre_hooks, extra_dict=self._forward_pre_hooks_with_kwargs
        )
        self._forward_pre_hooks[handle.id] = hook
        if with_kwargs:
            self._forward_pre_hooks_with_kwargs[handle.id] = True
        if prepend:
            self._forward_pre_hooks.move_to_end(handle.id, last=False)
        return handle

    def register_forward_hook(
        self, hook, *, prepend: bool = False, with_kwargs: bool = False, always_call: bool = False
    ):
        """Registers ``hook(module, args, output)`` run after forward; a non-None result replaces
        the output. ``always_call`` runs it even when forward raises."""
        _bump_version(self)
        handle = RemovableHandle(
            self._forward_hooks,
            extra_dict=[self._forward_hooks_with_kwargs, self._forward_hooks_always_called],
        )
        self._forward_hooks[handle.id] = hook
        if with_kwargs:
            self._forward_hooks_with_kwargs[handle.id] = True
        if always_call:
            self._forward_hooks_always_called[handle.id] = True
        if prepend:
            self._forward_hooks.move_to_end(handle.id, last=False)
        return handle

    def _run_pre_hooks(self, args, kwargs):
        for hook_id, hook in list(self._forward_pre_hooks.items()):
            if hook_id in self._forward_pre_hooks_with_kwargs:
                result = hook(self, args, kwargs)
                if result is not None:
                    if not (isinstance(result, tuple) and len(result) == 2):
                        raise RuntimeError(
                            "forward pre-hook must return None or a tuple of "
                            f"(new_args, new_kwargs), but got {result}."
                        )
                    args, kwargs = result
            else:
                result = hook(self, args)
                if result is not None:
                    args = result if isinstance(result, tuple) else (result,)
        return args, kwargs

    def _run_forward_hooks(self, args, kwargs, result, only_always_called=False):
        for hook_id, hook in list(self._forward_hooks.items()):
            if only_always_called and hook_id not in self._forward_hooks_always_called:
                continue
            if hook_id in self._forward_hooks_with_kwargs:
                out = hook(self, args, kwargs, result)
            else:
                out = hook(self, args, result)
            if out is not None:
                result = out
        return result

    def __call__(self, *args, **kwargs):
        compiled = self.__dict__.get("_compiled_call_impl")
        if compiled is not None:  # after Module.compile()
            return compiled(*args, **kwargs)
        if not (self._forward_hooks or self._forward_pre_hooks):  # the common case, inline
            return self.forward(*args, **kwargs)
        return self._call_impl(*args, **kwargs)

    def compile(self, *args, **kwargs):
        """torch's Module.compile: calls of this module run kiln.compile(its call) from now on
        (the module itself is not replaced; arguments as kiln.compile's)."""
        import kiln

        object.__setattr__(self, "_compiled_call_impl",
                           kiln.compile(self._call_impl, *args, **kwargs))

    def _call_impl(self, *args, **kwargs):
        if not (self._forward_hooks or self._forward_pre_hooks):
            return self.forward(*args, **kwargs)
        args, kwargs = self._run_pre_hooks(args, kwargs)
        try:
            result = self.forward(*args, **kwargs)
        except Exception:
            if self._forward_hooks_always_called:
                self._run_forward_hooks(args, kwargs, None, only_always_called=True)
            raise
        return self._run_forward_hooks(args, kwargs, result)

    # ------------------------------------------------------------------------------------- repr

    def _get_name(self) -> str:
        return type(self).__name__

    def extra_repr(self) -> str:
        """The module's own settings for ``repr`` (one or several lines); "" by default."""
        return ""

    def __repr__(self) -> str:
        extra = self.extra_repr()
        extra_lines = extra.split("\n") if extra else []
        child_lines = [
            "(" + key + "): " + _addindent(repr(module), 2) for key, module in self._modules.items()
        ]
        lines = extra_lines + child_lines
        main = self._get_name() + "("
        if lines:
            if len(extra_lines) == 1 and not child_lines:
                main += extra_lines[0]
            else:
                main += "\n  " + "\n  ".join(lines) + "\n"
        return main + ")"

    def __setstate__(self, state):
        self.__dict__.update(state)
        for name in (
            "_forward_hooks_with_kwargs",
            "_forward_hooks_always_called",
            "_forward_pre_hooks_with_kwargs",
            "_state_dict_hooks",
            "_load_state_dict_pre_hooks",
            "_load_state_dict_post_hooks",
        ):
            if name not in self.__dict__:
                object.__setattr__(self, name, OrderedDict())
