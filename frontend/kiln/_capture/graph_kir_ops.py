"""Which ops.def op each call target is, and how its Python arguments become operands and
attributes.

One table: each `@lowering(signature, *targets)` names the Python signature the arguments are
bound to (torch's, so defaults apply) and every spelling of the op (the ``kiln`` function, the
``kiln.Tensor`` method, the ``operator`` function, the ``nn.functional`` one), and writes the
node through the `KirWriter`. Attributes take ops.def's (torch's) names, values equal to the
default are left out so every spelling prints the same, and negative dims stay as given. A
lowering raises `Decline` for arguments its op cannot express (``alpha=2``, ``out=``, a device
move); the writer then emits a generic ``call``.
"""

from __future__ import annotations

import importlib
import inspect

import kiln
from kiln._capture.graph_kir import Decline, dtype_short, format_float, quote

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
        import kiln._capture.graph_kir_ops_nn  # noqa: F401 - registers the model-zoo ops
        import kiln._capture.graph_kir_ops_shape  # noqa: F401 - registers the second half

        for sig, targets, fn in _REGISTRY:
            for path in targets:
                try:
                    _TABLE.setdefault(id(_resolve(path)), (sig, fn))
                except (AttributeError, ImportError):
                    continue
    return _TABLE


def lower(w, node) -> bool:
    """Writes `node` as its ops.def op; False when there is none (the caller emits ``call``)."""
    entry = _table().get(id(node.target))
    if entry is None:
        return False
    sig, fn = entry
    try:
        bound = sig.bind(*node.args, **node.kwargs)
    except TypeError:
        return False
    bound.apply_defaults()
    state = w.checkpoint()
    try:
        fn(w, node, bound.arguments)
    except Decline:
        w.rollback(state)
        w.values.pop(id(node), None)
        return False
    return True


# --- Attribute text ------------------------------------------------------------------------------


def _ints(values) -> str:
    return "[" + ", ".join(str(v) for v in values) + "]"


def _bool(v) -> str:
    return "true" if v else "false"


def _dims(w, dim) -> list[int] | None:
    """A `dim` argument as a list (None or an empty list: every dim)."""
    if dim is None:
        return None
    dims = w.ints(dim)
    return dims or None


def _no(*values) -> None:
    """Declines unless every value is None/False (``out=``, ``inplace=True``, ...)."""
    if any(v is not None and v is not False for v in values):
        raise Decline("an argument the op cannot express")


# --- Elementwise ---------------------------------------------------------------------------------


def _s_binary(input, other, *, alpha=1, out=None, rounding_mode=None): ...
def _s_unary(input, *, out=None): ...


def _binary(op: str, swap: bool = False):
    def lower_binary(w, node, a):
        _no(a["out"], a["rounding_mode"])
        if a["alpha"] != 1:
            raise Decline("alpha")
        x, y = (a["other"], a["input"]) if swap else (a["input"], a["other"])
        w.emit_node(node, op, [w.operand(x), w.operand(y)], {})

    return lower_binary


def _spellings(name: str, *aliases: str, op_fn=None, dunder=None) -> list[str]:
    paths = [f"kiln.{n}" for n in (name, *aliases)] + [f"kiln.Tensor.{n}" for n in (name, *aliases)]
    if op_fn:
        paths.append(f"operator.{op_fn}")
    if dunder:
        paths.append(f"kiln.Tensor.__{dunder}__")
    return paths


for _op, _names, _opfn, _dunder in [
    ("add", ("add",), "add", "add"),
    ("sub", ("sub", "subtract"), "sub", "sub"),
    ("mul", ("mul", "multiply"), "mul", "mul"),
    ("div", ("div", "divide", "true_divide"), "truediv", "truediv"),
    ("pow", ("pow",), "pow", "pow"),
    ("maximum", ("maximum",), None, None),
    ("minimum", ("minimum",), None, None),
    ("eq", ("eq",), "eq", "eq"),
    ("ne", ("ne", "not_equal"), "ne", "ne"),
    ("lt", ("lt", "less"), "lt", "lt"),
    ("le", ("le", "less_equal"), "le", "le"),
    ("gt", ("gt", "greater"), "gt", "gt"),
    ("ge", ("ge", "greater_equal"), "ge", "ge"),
]:
    lowering(_s_binary, *_spellings(*_names, op_fn=_opfn, dunder=_dunder))(_binary(_op))
    if _op in ("add", "sub", "mul", "div", "pow"):
        lowering(_s_binary, f"kiln.Tensor.__r{_dunder}__")(_binary(_op, swap=True))


def _unary(op: str, attr_defaults=None):
    def lower_unary(w, node, a):
        _no(a.get("out"), a.get("inplace"))
        attrs = {}
        for name, default in (attr_defaults or {}).items():
            if a[name] != default:
                attrs[name] = quote(a[name])
        w.emit_node(node, op, [w.tensor(a["input"])], attrs)

    return lower_unary


for _op, _names, _opfn, _dunder in [
    ("neg", ("neg", "negative"), "neg", "neg"),
    ("abs", ("abs", "absolute"), "abs", "abs"),
    ("exp", ("exp",), None, None),
    ("log", ("log",), None, None),
    ("sqrt", ("sqrt",), None, None),
    ("rsqrt", ("rsqrt",), None, None),
    ("tanh", ("tanh",), None, None),
    ("sigmoid", ("sigmoid",), None, None),
    ("erf", ("erf",), None, None),
]:
    lowering(_s_unary, *_spellings(*_names, op_fn=_opfn, dunder=_dunder))(_unary(_op))
lowering(_s_unary, "builtins.abs")(_unary("abs"))


def _s_gelu(input, approximate="none"): ...


lowering(_s_gelu, "kiln.gelu", "kiln.nn.functional.gelu")(_unary("gelu", {"approximate": "none"}))


def _s_where(condition, input=None, other=None, *, out=None): ...
def _s_tensor_where(input, condition, other): ...


@lowering(_s_where, "kiln.where")
def _where(w, node, a):
    _no(a["out"])
    if a["input"] is None or a["other"] is None:
        raise Decline("where(condition) is nonzero")
    ops = [w.tensor(a["condition"]), w.operand(a["input"]), w.operand(a["other"])]
    w.emit_node(node, "where", ops, {})


@lowering(_s_tensor_where, "kiln.Tensor.where")
def _tensor_where(w, node, a):
    ops = [w.tensor(a["condition"]), w.tensor(a["input"]), w.operand(a["other"])]
    w.emit_node(node, "where", ops, {})


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
        elif v is not None:
            raise Decline("to(other)")
    if dt is None or (dev is not None and kiln.device(dev).type != "cpu"):
        raise Decline("a device move")
    _cast(w, node, a["input"], dt)


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


# --- Reductions and softmax ----------------------------------------------------------------------


def _s_sum(input, dim=None, keepdim=False, *, dtype=None): ...
def _s_amax(input, dim=(), keepdim=False): ...
def _s_argmax(input, dim=None, keepdim=False): ...
def _s_var(input, dim=None, unbiased=None, keepdim=False, *, correction=None): ...
def _s_logsumexp(input, dim, keepdim=False): ...
def _s_softmax(input, dim, dtype=None): ...
def _s_f_softmax(input, dim=None, _stacklevel=3, dtype=None): ...


def _reduction(op: str):
    def lower_reduction(w, node, a):
        attrs = {}
        dims = _dims(w, a["dim"])
        if op == "argmax":
            dims = None
            if a["dim"] is not None:
                attrs["dim"] = str(w.int_(a["dim"]))
        if dims is not None:
            attrs["dim"] = _ints(dims)
        if a["keepdim"]:
            attrs["keepdim"] = _bool(True)
        if a.get("dtype") is not None:
            attrs["dtype"] = dtype_short(a["dtype"])
        w.emit_node(node, op, [w.tensor(a["input"])], attrs)

    return lower_reduction


lowering(_s_sum, "kiln.sum", "kiln.Tensor.sum")(_reduction("sum"))
lowering(_s_sum, "kiln.mean", "kiln.Tensor.mean")(_reduction("mean"))
lowering(_s_amax, "kiln.amax", "kiln.Tensor.amax")(_reduction("amax"))
lowering(_s_amax, "kiln.amin", "kiln.Tensor.amin")(_reduction("amin"))
lowering(_s_argmax, "kiln.argmax", "kiln.Tensor.argmax")(_reduction("argmax"))


@lowering(_s_logsumexp, "kiln.logsumexp", "kiln.Tensor.logsumexp")
def _logsumexp(w, node, a):
    attrs = {"dim": _ints(w.ints(a["dim"]))}
    if a["keepdim"]:
        attrs["keepdim"] = _bool(True)
    w.emit_node(node, "logsumexp", [w.tensor(a["input"])], attrs)


@lowering(_s_var, "kiln.var", "kiln.Tensor.var")
def _var(w, node, a):
    dim, unbiased, correction = a["dim"], a["unbiased"], a["correction"]
    if type(dim) is bool:  # var(x, False): the legacy `unbiased` position
        dim, unbiased = None, dim
    if correction is None:
        correction = 0 if unbiased is False else 1
    attrs = {}
    if correction != 1:
        attrs["correction"] = (
            format_float(correction) if type(correction) is float else str(w.int_(correction))
        )
    if (dims := _dims(w, dim)) is not None:
        attrs["dim"] = _ints(dims)
    if a["keepdim"]:
        attrs["keepdim"] = _bool(True)
    w.emit_node(node, "var", [w.tensor(a["input"])], attrs)


def _softmax(op: str):
    def lower_softmax(w, node, a):
        if a["dim"] is None:
            raise Decline("softmax without dim")
        attrs = {"dim": str(w.int_(a["dim"]))}
        if a["dtype"] is not None:
            attrs["dtype"] = dtype_short(a["dtype"])
        w.emit_node(node, op, [w.tensor(a["input"])], attrs)

    return lower_softmax


for _op in ("softmax", "log_softmax"):
    lowering(_s_softmax, f"kiln.{_op}", f"kiln.Tensor.{_op}")(_softmax(_op))
    lowering(_s_f_softmax, f"kiln.nn.functional.{_op}")(_softmax(_op))
