"""Which ops.def op each call target is, and how its Python arguments become operands and
attributes.

Most ops come from the op table itself (op_table.py: ops.def's KILN_SPELLING rows name each op's
schema and spellings). The lowerings here are for calls whose arguments need more than binding
to a schema: casts (``to``, ``float()``), ``var``'s legacy positional ``unbiased``,
``Tensor.where``'s argument order, views and indexing (lowerings_shape.py), and the model
zoo's ops (lowerings_nn.py). Each `@lowering(signature, *targets)` names the Python
signature the arguments are bound to (torch's, so defaults apply) and the targets, and builds
the node through the `GraphWriter`; these take precedence over the table's rows. Attributes take
ops.def's (torch's) names, values equal to the default are left out so every spelling prints the
same, and negative dims stay as given. A lowering raises `Decline` for arguments its op cannot
express (``out=``, a device move); the writer then adds a generic ``call``.
"""

from __future__ import annotations

import importlib
import inspect

import kiln
from kiln._capture.graph_build import Decline, dtype_short

_REGISTRY: list[tuple[inspect.Signature, tuple[str, ...], object]] = []
_TABLE: dict[int, tuple[inspect.Signature, object]] = {}


def lowering(sig, *targets):
    """Registers a lowering for `targets` (dotted paths) whose arguments bind to `sig`."""

    def register(fn):
        _REGISTRY.append((inspect.signature(sig), targets, fn))
        return fn

    return register


def _resolve(path: str):
    module, _, rest = path.partition(".")
    obj = importlib.import_module(module)
    for part in rest.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            obj = importlib.import_module(f"{obj.__name__}.{part}")
    return obj


def _table() -> dict:
    if not _TABLE:
        import kiln._capture.decompositions_loss  # noqa: F401 - registers the losses
        import kiln._capture.decompositions_nn  # noqa: F401 - registers the layers
        import kiln._capture.decompositions_tensor  # noqa: F401 - registers tensor functions
        import kiln._capture.lowerings_compose  # noqa: F401 - registers the compositions
        import kiln._capture.lowerings_einsum  # noqa: F401 - registers einsum
        import kiln._capture.lowerings_nn  # noqa: F401 - registers the model-zoo ops
        import kiln._capture.lowerings_random  # noqa: F401 - registers dropout and rand
        import kiln._capture.lowerings_shape  # noqa: F401 - registers the second half
        from kiln._capture import op_table

        for sig, targets, fn in _REGISTRY:
            for path in targets:
                try:
                    _TABLE.setdefault(id(_resolve(path)), []).append((sig, fn))
                except (AttributeError, ImportError):
                    continue
        for spelling in op_table.spellings():
            try:
                target = _resolve(spelling.path)
            except (AttributeError, ImportError):
                UNRESOLVED.append(spelling.path)
                continue
            _TABLE.setdefault(id(target), []).append((spelling.signature, spelling.lower))
    return _TABLE


UNRESOLVED: list[str] = []  # table spellings naming no callable (a test keeps this empty)


def lowers(target) -> bool:
    """Whether calls of `target` have a lowering here or in the op table (a lowering may still
    decline a particular call)."""
    return id(target) in _table()


def lower(w, node) -> bool:
    """Builds `node` as its ops.def op; False when there is none (the caller adds ``call``).
    A target may have several signatures (`max(x)` is amax, `max(x, y)` maximum): the first
    the arguments bind to is used, custom lowerings before the table's rows."""
    for sig, fn in _table().get(id(node.target), ()):
        try:
            bound = sig.bind(*node.args, **node.kwargs)
        except TypeError:
            continue
        bound.apply_defaults()
        state = w.checkpoint()
        try:
            fn(w, node, bound.arguments)
        except Decline as e:
            w.rollback(state)
            w.values.pop(id(node), None)
            node.meta["decline"] = str(e)  # why the call stays opaque (for reports and logs)
            return False
        return True
    return False


# --- Arguments -----------------------------------------------------------------------------------


def _dims(w, dim) -> list[int] | None:
    """A `dim` argument as a list (None or an empty list: every dim)."""
    if dim is None:
        return None
    dims = w.ints(dim)
    return dims or None


def emit_into(w, node, a, inplace: bool, op: str, operands, attrs) -> None:
    """`op` as the node's value; in place, also written into the input (``copy_``) unless no
    one else can see the write."""
    from kiln._capture.op_table import unobserved

    if not inplace or unobserved(node, a["input"]):
        w.emit_node(node, op, operands, attrs)
        return
    (result,) = w.emit(op, operands, attrs, node.meta.get("loc"))
    w.emit_node(node, "copy_", [w.tensor(a["input"]), result], {})


def _no(*values) -> None:
    """Declines unless every value is None/False (``out=``, ``inplace=True``, ...)."""
    if any(v is not None and v is not False for v in values):
        raise Decline("an argument the op cannot express")


# --- Elementwise ---------------------------------------------------------------------------------


def _s_tensor_where(input, condition, other): ...


@lowering(_s_tensor_where, "kiln.Tensor.where")
def _tensor_where(w, node, a):
    ops = [w.tensor(a["condition"]), w.tensor(a["input"]), w.operand(a["other"])]
    w.emit_node(node, "where", ops, {})


def _s_div(input, other, *, rounding_mode=None): ...


@lowering(_s_div, "kiln.div", "kiln.divide", "kiln.Tensor.div", "kiln.Tensor.divide")
def _div(w, node, a):
    """``div(rounding_mode=...)``: "floor" is floor_divide; "trunc" truncates the true quotient
    of floats, and for integers subtracts fmod's remainder first so the floor division is exact
    (C's quotient, as eager computes it)."""
    mode = a["rounding_mode"]
    x, y = w.operand(a["input"]), w.operand(a["other"])
    if mode is None:
        w.emit_node(node, "div", [x, y], {})
        return
    if mode == "floor":
        w.emit_node(node, "floor_divide", [x, y], {})
        return
    if mode != "trunc":
        raise Decline(f"rounding_mode={mode!r}")
    out = w.value_type(node.meta.get("example"), node.meta.get("sym_sizes"))
    if out is None or not x.is_tensor:
        raise Decline("a trunc division of Python numbers")
    loc = node.meta.get("loc")
    if out.dtype in ("f16", "bf16", "f32", "f64"):
        (q,) = w.emit("div", [x, y], {}, loc)
        w.emit_node(node, "trunc", [q], {})
        return
    (r,) = w.emit("fmod", [x, y], {}, loc)
    (d,) = w.emit("sub", [x, r], {}, loc)
    w.emit_node(node, "floor_divide", [d, y], {})


# --- Casts ---------------------------------------------------------------------------------------


def _s_to(input, *args, **kwargs): ...
def _s_cast_method(input, memory_format=None): ...
def _s_type_as(input, other): ...


def _cast(w, node, x, dt) -> None:
    w.emit_node(node, "cast", [w.tensor(x)], {"dtype": dtype_short(dt)})


@lowering(_s_to, "kiln.Tensor.to")
def _to(w, node, a):
    kwargs = dict(a["kwargs"])
    dt, dev = kwargs.pop("dtype", None), kwargs.pop("device", None)
    kwargs.pop("copy", None)
    kwargs.pop("non_blocking", None)
    if kwargs:
        raise Decline("to() options")
    for v in a["args"]:
        if isinstance(v, kiln.dtype):
            dt = v
        elif isinstance(v, (str, kiln.device)):
            dev = v
        elif isinstance(getattr(v, "meta", {}).get("example"), kiln.Tensor):  # to(other)
            other = v.meta["example"]
            dt, dev = other.dtype, other.device
        elif v is not None:
            raise Decline("to() of an unknown argument")
    x = w.tensor(a["input"])
    if dev is not None and (kiln.device(dev).type != "cpu" or x.type.device not in (None,
                                                                                    "cpu")):
        raise Decline("a device move")
    if dt is None or dtype_short(dt) == x.type.dtype:  # nothing moves: the tensor itself
        _same(w, node, x)
        return
    _cast(w, node, a["input"], dt)


def _same(w, node, x) -> None:
    """A call that returns its input unchanged (`t.to(t.device)`, `t.cpu()` of a CPU tensor):
    a view of all of it, as eager returns the tensor itself (a whole slice, which writes
    through it functionalize into)."""
    if x.type.sizes:
        w.emit_node(node, "slice", [x], {"dim": 0})
    else:
        w.emit_node(node, "view", [x], {"shape": []})


def _s_cpu(input, memory_format=None): ...


@lowering(_s_cpu, "kiln.Tensor.cpu")
def _cpu(w, node, a):
    _no(a["memory_format"])
    x = w.tensor(a["input"])
    if x.type.device not in (None, "cpu"):
        raise Decline("a device move")
    _same(w, node, x)


def _cast_to(dt):
    def lower_cast(w, node, a):
        _no(a["memory_format"])
        _cast(w, node, a["input"], dt)

    return lower_cast


for _name, _dt in [
    ("float", kiln.float32), ("double", kiln.float64), ("half", kiln.float16),
    ("bfloat16", kiln.bfloat16), ("long", kiln.int64), ("int", kiln.int32), ("short", kiln.int16),
    ("char", kiln.int8), ("byte", kiln.uint8), ("bool", kiln.bool),
]:  # fmt: skip
    lowering(_s_cast_method, f"kiln.Tensor.{_name}")(_cast_to(_dt))


@lowering(_s_type_as, "kiln.Tensor.type_as")
def _type_as(w, node, a):
    other = a["other"].meta.get("example") if hasattr(a["other"], "meta") else None
    if not isinstance(other, kiln.Tensor):
        raise Decline("type_as needs a tensor")
    _cast(w, node, a["input"], other.dtype)


# --- Reductions ----------------------------------------------------------------------------------


def _s_var(input, dim=None, unbiased=None, keepdim=False, *, correction=None): ...


def _variance(op: str):
    def lower_variance(w, node, a):
        dim, unbiased, correction = a["dim"], a["unbiased"], a["correction"]
        if type(dim) is bool:  # var(x, False): the legacy `unbiased` position
            dim, unbiased = None, dim
        if correction is None:
            correction = 0 if unbiased is False else 1
        attrs = {}
        if correction != 1:
            attrs["correction"] = correction if type(correction) is float else w.int_(correction)
        if (dims := _dims(w, dim)) is not None:
            attrs["dim"] = dims
        if a["keepdim"]:
            attrs["keepdim"] = True
        w.emit_node(node, op, [w.tensor(a["input"])], attrs)

    return lower_variance


for _op in ("var", "std"):
    lowering(_s_var, f"kiln.{_op}", f"kiln.Tensor.{_op}")(_variance(_op))


def _s_max_dim(input, dim, keepdim=False): ...


def _extreme_along(kind: str):
    """``max(x, dim)`` / ``min(x, dim)``: the (values, indices) pair as amax and argmax nodes,
    or, when the values are differentiated, the values gathered at the argmax (the first
    extreme, NaN counting as the largest, as eager); ``max(x, y)`` binds here too and is the
    elementwise maximum."""

    def lower_extreme(w, node, a):
        x, dim = w.tensor(a["input"]), a["dim"]
        if isinstance(dim, kiln.Tensor) or (hasattr(dim, "meta") and isinstance(
                dim.meta.get("example"), kiln.Tensor)):  # fmt: skip
            w.emit_node(node, "maximum" if kind == "max" else "minimum",
                        [x, w.tensor(dim)], {})  # fmt: skip
            return
        pair = node.meta.get("example")
        if not isinstance(pair, tuple) or len(pair) != 2:
            raise Decline("an extreme without its indices")
        d, keep = w.int_(dim), bool(a["keepdim"])
        loc = node.meta.get("loc")
        if not pair[0].requires_grad:  # an amax fuses with its neighbours (NumPy's np.max)
            (values,) = w.emit("amax" if kind == "max" else "amin", [x],
                               {"dim": [d], **({"keepdim": True} if keep else {})}, loc)
            (indices,) = w.emit("argmax" if kind == "max" else "argmin", [x],
                                {"dim": d, **({"keepdim": True} if keep else {})}, loc)
        else:
            # Differentiated, the values are gathered at the indices, not an amax: the
            # gradient then goes to the one returned index, as eager's and torch's (amax splits
            # it over tied values).
            (at,) = w.emit("argmax" if kind == "max" else "argmin", [x],
                           {"dim": d, "keepdim": True}, loc)
            (values,) = w.emit("gather", [x, at], {"dim": d % max(len(x.type.sizes), 1)}, loc)
            indices = at
            if not keep:
                (values,) = w.emit("squeeze", [values], {"dim": [d]}, loc)
                (indices,) = w.emit("squeeze", [at], {"dim": [d]}, loc)
        for val, example in zip((values, indices), pair, strict=True):
            if not isinstance(example, kiln.Tensor) or val.type.dtype != dtype_short(
                    example.dtype) or len(val.type.sizes) != example.dim():  # fmt: skip
                raise Decline("an extreme whose rule disagrees with eager")
        w.values[id(node)] = (values, indices)

    return lower_extreme


for _kind in ("max", "min"):
    lowering(_s_max_dim, f"kiln.{_kind}", f"kiln.Tensor.{_kind}")(_extreme_along(_kind))
