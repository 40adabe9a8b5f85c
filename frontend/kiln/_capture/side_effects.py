"""Changes to objects that exist outside the capture, replayed by the entry.

Code under capture may change a list or dict the caller can see: a list argument written item by
item (YOLO's `x[i] = self.m[i](x[i])`), a result list the caller passed in (`out.append(y)`), a
cache kept in a module attribute (`self.grid[i] = make_grid(...)`). The capture changes the
container's variable as it does a local one (reads later in the capture see the change, a
rollback undoes it through the capture's undo log); the entry then writes the final contents
into the real object after the graph has run, before it returns or resumes at a break.
Attribute assignments to a module (`self.mask = triu(...)` made once) or to a plain object the
entry can reach (a cache object's `self._seen_tokens += n`) are kept the same way and replayed
with setattr.

A container reached through a module attribute is baked into the compiled code (the module's
version guards it), as are the module's attributes, so the entry also bumps that module's
version: the next call captures again and sees the new contents. A cache filled once settles
with that capture; a module changed on every call would be captured again on every call, so
after `_MAX_REPLAY_BUMPS` captures in a row that change it, its changes break the graph instead.
"""

from __future__ import annotations

import weakref

import kiln
from kiln._capture import variables as V
from kiln.nn.modules.module import _equal_plain, _unread_plain_attr

_MAX_REPLAY_BUMPS = 3
_replay_bumps: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # module -> count


def from_outside(v: V.VT) -> bool:
    """A list or dict that exists outside the capture (read from an argument, a global, a module
    attribute...), as opposed to one made by the captured code."""
    return v.source is not None or getattr(v, "origin", None) is not None


def will_mutate(ctx, obj: V.VT, what: str) -> None:
    """Called before `obj`'s items change: records the undo entry, or raises Unsupported when the
    change could not be replayed on the real object."""
    if from_outside(obj):
        _check_replayable(ctx, obj, what)
    ctx.undo.append((obj, "items", obj.items.copy()))


def _check_replayable(ctx, obj: V.VT, what: str) -> None:
    if obj.source is not None:
        if obj.source.expr(ctx.state_labels) is None:
            raise V.Unsupported(f"{what} on a {_kind(obj)} the compiled code cannot reach again")
        return
    owner = getattr(obj, "owner", None)
    if owner is None:
        raise V.Unsupported(f"{what} on a {_kind(obj)} from outside the graph (not an argument, "
                            "a global or a module attribute)")
    if _replay_bumps.get(owner, 0) >= _MAX_REPLAY_BUMPS:
        raise V.Unsupported(
            f"{what} on a {_kind(obj)} attribute of {type(owner).__name__} that changes on every "
            "call (each change would capture the code again)",
            "keep per-call state out of module attributes, or pass it in and return it")


def _kind(obj: V.VT) -> str:
    return "list" if isinstance(obj, V.ListVar) else "dict"


class AttrStores:
    """Attribute assignments the captured code made to one outside object: a module
    (`self.cache = k`) or a plain object reached through a source (a cache object's
    `self._seen_tokens += n`). Later reads in the capture see them; the entry replays them
    with setattr, which for a module registers buffers and submodules as eager's assignment does
    and bumps its version. A plain object's attributes are guarded where read, so the next call
    sees the new values (an int that keeps changing goes symbolic)."""

    def __init__(self, obj, source=None) -> None:
        self.obj, self.source = obj, source
        self.items: dict = {}
        self.bumps = False  # a module attribute the compiled code baked changed: capture again


def record_store(ctx, obj, source, name: str, value: V.VT, bumps: bool = False) -> None:
    stores = ctx.__dict__.setdefault("attr_stores", {})
    entry = stores.setdefault(id(obj), AttrStores(obj, source))
    ctx.undo.append((entry, "items", dict(entry.items)))
    entry.items[name] = value
    entry.bumps |= bumps


def store_module_attr(ctx, module, name: str, value: V.VT) -> None:
    from kiln.nn import Module

    what = f"assignment to attribute {name!r} of {type(module).__name__}"
    if type(module).__setattr__ is not Module.__setattr__:
        raise V.Unsupported(f"{what}: the class defines its own __setattr__")
    example = getattr(value, "example", None)
    current = module._current_attr(name)
    constant = _constant_of(value)
    same_constant = constant is not _NOT_CONSTANT and _equal_plain(current, constant)
    # (an in-place op's result is its target: `self.n_averaged += 1` stores the buffer itself)
    held = getattr(value, "input_object", None)
    same_tensor = example is not None and (
        example is current or (held is not None and held is current))
    if (same_tensor or same_constant) and stored_attr(ctx, module, name) is None:
        # `self.cache = self.cache.to(x)` (the same tensor), `self.mask = ... else None` when
        # it is None: what eager's setattr stores is there already
        return
    if name in module.__dict__.get("_parameters", {}):
        raise V.Unsupported(f"{what}: it replaces a parameter")
    if type(current) is int and _int_valued(value):
        counters = module.__dict__.get("_kiln_counters", set())
        if name in counters:  # read on every call: the store is replayed without a new capture
            record_store(ctx, module, None, name, value)
            return
        if _replay_bumps.get(module, 0) >= 1:
            # an int changed by the last capture too (RWKV's `self.step += 1`): from the next
            # capture on it is a run-time int, read and written on every call
            module.__dict__["_kiln_counters"] = counters | {name}
    if _unread_plain_attr(module, name, current):  # no compiled code baked the old value
        record_store(ctx, module, None, name, value)
        return
    if _replay_bumps.get(module, 0) >= _MAX_REPLAY_BUMPS:
        raise V.Unsupported(f"{what}, which changes on every call (each change would capture "
                            "the code again)",
                            "keep per-call state out of module attributes, or pass it in and "
                            "return it")
    record_store(ctx, module, None, name, value, bumps=True)


_NOT_CONSTANT = object()


def _constant_of(v: V.VT):
    """The Python value of a constant (a ConstVar, or a tuple of them: `tuple(x.shape)` of a
    static shape), else _NOT_CONSTANT."""
    if isinstance(v, V.ConstVar):
        return v.value
    if isinstance(v, V.TupleVar) and v.tuple_type in (tuple, kiln.Size):
        items = [_constant_of(i) for i in v.items]
        if any(i is _NOT_CONSTANT for i in items):
            return _NOT_CONSTANT
        return v.tuple_type(items)
    return _NOT_CONSTANT


def _int_valued(v: V.VT) -> bool:
    return isinstance(v, V.SymIntVar) and type(v.hint) is int or (
        isinstance(v, V.ConstVar) and type(v.value) is int)


def store_object_attr(ctx, ov: V.ObjectVar, name: str, value: V.VT) -> None:
    """An attribute of a plain object the entry can reach (an argument, a global, an attribute
    of one): replayed with setattr. Objects whose class hooks attribute access keep breaking."""
    import inspect

    obj = ov.value
    what = f"assignment to attribute {name!r} of a {type(obj).__name__} object"
    cls = type(obj)
    if ov.source is None or ov.source.expr(ctx.state_labels) is None:
        raise V.Unsupported(f"{what} the compiled code cannot reach again",
                            "keep state in local variables inside compiled code")
    if isinstance(obj, type) or cls.__setattr__ is not object.__setattr__ or getattr(
            cls, "__getattr__", None) is not None or (
            cls.__getattribute__ not in (object.__getattribute__, dict.__getattribute__)):
        raise V.Unsupported(f"{what}: its class hooks attribute access")
    static = inspect.getattr_static(cls, name, None)
    if static is not None and (hasattr(static, "__set__") or hasattr(static, "__delete__")):
        raise V.Unsupported(f"{what}: a property or slot of its class")
    if not hasattr(obj, "__dict__"):
        raise V.Unsupported(f"{what}: the object has no __dict__")
    record_store(ctx, obj, ov.source, name, value)


def stored_attr(ctx, obj, name: str):
    """The value the captured code assigned to `obj.name`, or None."""
    entry = ctx.__dict__.get("attr_stores", {}).get(id(obj))
    return None if entry is None else entry.items.get(name)


def _attr_stores(ctx) -> list:
    return [e for e in ctx.__dict__.get("attr_stores", {}).values() if e.items]


def replayed_values(ctx) -> list:
    """Everything the entry writes into outside objects (its tensors are graph outputs)."""
    return mutated_outside(ctx) + [v for e in _attr_stores(ctx) for v in e.items.values()]


def mutated_outside(ctx) -> list:
    """The outside containers the capture changed (and did not roll back), in first-change
    order."""
    seen: dict = {}
    for obj, attr, _ in ctx.undo:
        if attr == "items" and isinstance(obj, (V.ListVar, V.DictVar)) and from_outside(obj):
            seen.setdefault(id(obj), obj)
    return list(seen.values())


def replay_lines(builder, ctx) -> list:
    """Entry lines that write each changed container's final contents into the real object."""
    lines = []
    owners = set()
    for obj in mutated_outside(ctx):
        target = (obj.source.expr(builder.arg_names) if obj.source is not None
                  else builder.const(obj.origin))
        if isinstance(obj, V.ListVar):
            items = ", ".join(builder.expr(i) for i in obj.items)
            lines.append(f"    {target}[:] = [{items}]")
        else:
            items = ", ".join(f"{builder.const(k)}: {builder.expr(v)}"
                              for k, v in obj.items.items())
            lines.append(f"    _replace_items({target}, {{{items}}})")
        owner = getattr(obj, "owner", None)
        if owner is not None and obj.source is None:
            lines.append(f"    _bump_after_replay({builder.const(owner)})")
            owners.add(id(owner))
    for entry in _attr_stores(ctx):
        target = (entry.source.expr(builder.arg_names) if entry.source is not None
                  else builder.const(entry.obj))
        for name, value in entry.items.items():
            lines.append(f"    setattr({target}, {name!r}, {builder.expr(value)})")
        if entry.bumps:  # a module whose baked attributes changed
            lines.append(f"    _bump_after_replay({target})")
            owners.add(id(entry.obj))
    for module in ctx.modules_seen.values():  # read and left alone: its state has settled
        if id(module) not in owners:
            _replay_bumps.pop(module, None)
    return lines


def _replace_items(d: dict, items: dict) -> None:
    d.clear()
    d.update(items)


def _bump_after_replay(module) -> None:
    from kiln.nn.modules.module import _bump_version

    _replay_bumps[module] = _replay_bumps.get(module, 0) + 1
    _bump_version(module)


def forget_replays() -> None:
    """kiln.compiler.reset(): modules start over."""
    _replay_bumps.clear()


ENTRY_NAMESPACE = {"_replace_items": _replace_items, "_bump_after_replay": _bump_after_replay}
