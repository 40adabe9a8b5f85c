"""Calls that are a few graph ops together (lowerings.py explains the mechanism): conv1d as a
conv2d over a height of one, addmm / baddbmm / addmv as a matmul with its scaled addend,
outer products as a broadcast multiply, addcmul / addcdiv as their multiply and add,
F.normalize as a division by the clamped norm, sort and topk, cummax / cummin, kthvalue, median
and mode as the positions (an extern) and a gather of the values at them, group_norm as a
grouped view normalized over its groups, interpolate as an upsample extern, F.unfold / F.fold as
the im2col / col2im externs. Each node carries the call's source line; the node after the last
one must type as eager's result (emit_node checks)."""

from __future__ import annotations

import math

import kiln
from kiln._capture.graph import Node
from kiln._capture.graph_build import Decline
from kiln._capture.lowerings import _no, emit_into, lowering
from kiln._capture.lowerings_shape import _named_padding
from kiln.nn import _bicubic as _bicubic_impl


def _s_conv1d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1): ...


def _one(w, v, name: str) -> int:
    values = w.ints(v)
    if len(values) != 1:
        raise Decline(f"{name} of {len(values)} values")
    return values[0]


@lowering(_s_conv1d, "kiln.conv1d", "kiln.nn.functional.conv1d")
def _conv1d(w, node, a):
    """(N, C, L) as (N, C, 1, L) through conv2d's extern, then the height dropped; padding by
    name as conv2d's."""
    x, weight = w.tensor(a["input"]), w.tensor(a["weight"])
    if len(x.type.sizes) != 3 or len(weight.type.sizes) != 3:
        raise Decline("conv1d of an unbatched input")
    loc = node.meta.get("loc")
    attrs = {}
    if isinstance(a["padding"], str):
        x, padding = _named_padding(w, x, weight, a, 1, loc)
        if padding is not None and padding[0]:
            attrs["padding"] = [0, padding[0]]
    elif (p := _one(w, a["padding"], "padding")) != 0:
        attrs["padding"] = [0, p]
    (x2,) = w.emit("unsqueeze", [x], {"dim": 2}, loc)
    (w2,) = w.emit("unsqueeze", [weight], {"dim": 2}, loc)
    ops = [x2, w2] + ([w.tensor(a["bias"])] if a["bias"] is not None else [])
    for name, default in (("stride", 1), ("dilation", 1)):
        if (v := _one(w, a[name], name)) != default:
            attrs[name] = [1, v]
    if (g := w.int_(a["groups"])) != 1:
        attrs["groups"] = g
    (y,) = w.emit("conv2d", ops, attrs, loc)
    w.emit_node(node, "squeeze", [y], {"dim": [2]})


def _s_max_pool1d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
                  return_indices=False): ...  # fmt: skip
def _s_avg_pool1d(input, kernel_size, stride=None, padding=0, ceil_mode=False,
                  count_include_pad=True): ...  # fmt: skip
def _s_adaptive_pool1d(input, output_size): ...


def _pool1d(w, node, x, op: str, attrs: dict) -> None:
    """A pool of (N, C, L) as the 2-d pool of (N, C, 1, L), then the height dropped."""
    if len(x.type.sizes) != 3:
        raise Decline(f"{op} of an unbatched input")
    loc = node.meta.get("loc")
    (x2,) = w.emit("unsqueeze", [x], {"dim": 2}, loc)
    (y,) = w.emit(op, [x2], attrs, loc)
    w.emit_node(node, "squeeze", [y], {"dim": [2]})


def _window1d(w, a) -> dict:
    """The 2-d window attributes of a 1-d pool: height 1, no padding or stride along it."""
    kernel = _one(w, a["kernel_size"], "kernel_size")
    attrs = {"kernel_size": [1, kernel]}
    stride = a["stride"]
    if stride is not None and not (isinstance(stride, (tuple, list)) and not stride):
        if (s := _one(w, stride, "stride")) != kernel:
            attrs["stride"] = [1, s]
    if (p := _one(w, a["padding"], "padding")) != 0:
        attrs["padding"] = [0, p]
    if a["ceil_mode"]:
        attrs["ceil_mode"] = True
    return attrs


@lowering(_s_max_pool1d, "kiln.max_pool1d", "kiln.nn.functional.max_pool1d")
def _max_pool1d(w, node, a):
    _no(a["return_indices"])
    attrs = _window1d(w, a)
    if (d := _one(w, a["dilation"], "dilation")) != 1:
        attrs["dilation"] = [1, d]
    _pool1d(w, node, w.tensor(a["input"]), "max_pool2d", attrs)


@lowering(_s_avg_pool1d, "kiln.avg_pool1d", "kiln.nn.functional.avg_pool1d")
def _avg_pool1d(w, node, a):
    attrs = _window1d(w, a)
    if not a["count_include_pad"]:
        attrs["count_include_pad"] = False
    _pool1d(w, node, w.tensor(a["input"]), "avg_pool2d", attrs)


@lowering(_s_adaptive_pool1d, "kiln.adaptive_avg_pool1d",
          "kiln.nn.functional.adaptive_avg_pool1d")  # fmt: skip
def _adaptive_avg_pool1d(w, node, a):
    size = a["output_size"]
    size = size[0] if isinstance(size, (tuple, list)) and len(size) == 1 else size
    if size is None or isinstance(size, (tuple, list)):
        raise Decline("adaptive_avg_pool1d output_size of other than one int")
    _pool1d(w, node, w.tensor(a["input"]), "adaptive_avg_pool2d",
            {"output_size": [1, w.int_(size)]})


def _s_addmm(input, mat1, mat2, *, beta=1, alpha=1, out=None): ...
def _s_addmv(input, mat, vec, *, beta=1, alpha=1, out=None): ...
def _s_baddbmm(input, batch1, batch2, *, beta=1, alpha=1, out=None): ...


def _scaled(w, v, factor, loc):
    if factor == 1:
        return v
    (out,) = w.emit("mul", [v, w.constant(factor)], {}, loc)
    return out


def _matmul_plus(first: str, second: str):
    def lower(w, node, a):
        """beta * input + alpha * (a @ b); beta = 0 drops input (NaN in it too, as eager)."""
        _no(a["out"])
        beta, alpha = a["beta"], a["alpha"]
        if not all(type(v) in (int, float) for v in (beta, alpha)):
            raise Decline("beta or alpha computed at run time")
        loc = node.meta.get("loc")
        operands = [w.tensor(a[first]), w.tensor(a[second])]
        if beta == 0 and alpha == 1:
            w.emit_node(node, "matmul", operands, {})
            return
        (prod,) = w.emit("matmul", operands, {}, loc)
        if beta == 0:
            w.emit_node(node, "mul", [prod, w.constant(alpha)], {})
            return
        prod = _scaled(w, prod, alpha, loc)
        w.emit_node(node, "add", [_scaled(w, w.tensor(a["input"]), beta, loc), prod], {})

    return lower


lowering(_s_addmm, "kiln.addmm", "kiln.Tensor.addmm")(_matmul_plus("mat1", "mat2"))
lowering(_s_addmv, "kiln.addmv", "kiln.Tensor.addmv")(_matmul_plus("mat", "vec"))
lowering(_s_baddbmm, "kiln.baddbmm", "kiln.Tensor.baddbmm")(_matmul_plus("batch1", "batch2"))


def _s_outer(input, vec2): ...


@lowering(_s_outer, "kiln.outer", "kiln.ger", "kiln.Tensor.outer", "kiln.Tensor.ger")
def _outer(w, node, a):
    x, y = w.tensor(a["input"]), w.tensor(a["vec2"])
    if len(x.type.sizes) != 1 or len(y.type.sizes) != 1:
        raise Decline("outer of tensors that are not vectors")
    (col,) = w.emit("unsqueeze", [x], {"dim": 1}, node.meta.get("loc"))
    w.emit_node(node, "mul", [col, y], {})


def _s_normalize(input, p=2.0, dim=1, eps=1e-12, out=None): ...


@lowering(_s_normalize, "kiln.nn.functional.normalize")
def _normalize(w, node, a):
    """x / max(||x||_p over dim, eps), the norm kept as a dim of one."""
    _no(a["out"])
    p, eps = a["p"], a["eps"]
    if type(p) not in (int, float) or type(eps) not in (int, float):
        raise Decline("p or eps computed at run time")
    x = w.tensor(a["input"])
    if not x.type.dtype.startswith(("f", "bf")):
        raise Decline("normalize of an integer tensor")
    loc = node.meta.get("loc")
    attrs = {"dim": [w.int_(a["dim"])], "keepdim": True}
    if float(p) != 2.0:
        attrs["p"] = float(p)
    (norm,) = w.emit("norm", [x], attrs, loc)
    (clamped,) = w.emit("clamp", [norm], {"min": float(eps)}, loc)
    w.emit_node(node, "div", [x, clamped], {})




def _s_sort(input, dim=-1, descending=False, stable=False, *, out=None): ...
def _s_topk(input, k, dim=-1, largest=True, sorted=True, *, out=None): ...


def _values_and_indices(w, node, x, op: str, attrs: dict) -> None:
    """(values, indices): the positions from `op` (an extern), the values a gather at them."""
    pair = node.meta.get("example")
    if not isinstance(pair, tuple) or len(pair) != 2 or len(x.type.sizes) == 0:
        raise Decline(f"{op} of a 0-d tensor")
    loc = node.meta.get("loc")
    (indices,) = w.emit(op, [x], attrs, loc)
    (values,) = w.emit("gather", [x, indices], {"dim": attrs.get("dim", -1)}, loc)
    w.values[id(node)] = (values, indices)


@lowering(_s_sort, "kiln.sort", "kiln.Tensor.sort")
def _sort(w, node, a):
    _no(a["out"])
    attrs = {"dim": w.int_(a["dim"])}
    for flag in ("descending", "stable"):
        if a[flag]:
            attrs[flag] = True
    _values_and_indices(w, node, w.tensor(a["input"]), "argsort", attrs)


@lowering(_s_topk, "kiln.topk", "kiln.Tensor.topk")
def _topk(w, node, a):
    _no(a["out"])
    attrs = {"k": w.int_(a["k"]), "dim": w.int_(a["dim"])}
    for flag in ("largest", "sorted"):
        if not a[flag]:
            attrs[flag] = False
    _values_and_indices(w, node, w.tensor(a["input"]), "topk_indices", attrs)


def _s_group_norm(input, num_groups, weight=None, bias=None, eps=1e-05): ...


@lowering(_s_group_norm, "kiln.nn.functional.group_norm")
def _group_norm(w, node, a):
    """(N, C, *) viewed as (N, G, C/G, *): mean and biased variance over all but the first two
    dims, (x - mean) * rsqrt(var + eps), viewed back, then the per-channel affine."""
    x = w.tensor(a["input"])
    sizes = list(x.type.sizes)
    groups, eps = w.int_(a["num_groups"]), a["eps"]
    if type(eps) not in (int, float):
        raise Decline("eps computed at run time")
    if len(sizes) >= 2 and not sizes[1].isdigit() and a["weight"] is not None:
        sizes[1] = w.tensor(a["weight"]).type.sizes[0]  # a module's channels are its weight's
    if len(sizes) < 2 or not sizes[1].isdigit() or groups <= 0 or int(sizes[1]) % groups:
        raise Decline("group_norm whose channels are not a constant multiple of the groups")
    if not x.type.dtype.startswith(("f", "bf")):
        raise Decline("group_norm of an integer tensor")
    loc = node.meta.get("loc")
    # Parameters wider than the input (autocast's float32 weights of a bfloat16 input): eager
    # normalizes in float32 and gives the input's dtype, so the input is widened, and the
    # result narrowed at the end.
    wide = {w.tensor(a[k]).type.dtype for k in ("weight", "bias") if a[k] is not None}
    wide -= {x.type.dtype}
    narrow = None
    if wide:
        if len(wide) > 1:
            raise Decline("group_norm with parameters of two dtypes")
        narrow = x.type.dtype
        (x,) = w.emit("cast", [x], {"dtype": wide.pop()}, loc)
    channels = int(sizes[1])
    grouped = [sizes[0], str(groups), str(channels // groups), *sizes[2:]]
    (g,) = w.emit("reshape", [x], {"shape": grouped}, loc)
    dims = list(range(2, len(grouped)))
    (mean,) = w.emit("mean", [g], {"dim": dims, "keepdim": True}, loc)
    (var,) = w.emit("var", [g], {"dim": dims, "keepdim": True, "correction": 0}, loc)
    (centered,) = w.emit("sub", [g, mean], {}, loc)
    (shifted,) = w.emit("add", [var, w.constant(float(eps))], {}, loc)
    (scale,) = w.emit("rsqrt", [shifted], {}, loc)
    (normed,) = w.emit("mul", [centered, scale], {}, loc)
    affine = [a[k] for k in ("weight", "bias") if a[k] is not None]
    if not affine:
        w.emit_node(node, "reshape", [normed], {"shape": sizes})
        return
    (y,) = w.emit("reshape", [normed], {"shape": sizes}, loc)
    per_channel = {"shape": [str(channels)] + ["1"] * (len(sizes) - 2)}
    steps = [("mul", a["weight"]), ("add", a["bias"])]
    steps = [(op, v) for op, v in steps if v is not None]
    for k, (op, v) in enumerate(steps):
        (p,) = w.emit("reshape", [w.tensor(v)], per_channel, loc)
        if k == len(steps) - 1 and narrow is None:
            w.emit_node(node, op, [y, p], {})
            return
        (y,) = w.emit(op, [y, p], {}, loc)
    w.emit_node(node, "cast", [y], {"dtype": narrow})


def _s_interpolate(input, size=None, scale_factor=None, mode="nearest", align_corners=None,
                   recompute_scale_factor=None, antialias=False): ...  # fmt: skip


@lowering(_s_interpolate, "kiln.nn.functional.interpolate", "kiln.nn.functional.upsample")
def _interpolate(w, node, a):
    """nearest, nearest-exact and the linear modes as an upsample extern of the output sizes
    eager computed, bicubic as eager's composition, area as adaptive average pooling. For the
    upsample externs a scale_factor is dropped only when it is exactly output / input (then
    eager's source coordinates are the same); other scale factors stay eager."""
    mode, antialias = a["mode"], a["antialias"]
    if antialias or mode not in ("nearest", "nearest-exact", "linear", "bilinear", "trilinear",
                                 "bicubic", "area"):
        raise Decline(f"interpolate mode {mode!r}")
    example = node.meta.get("example")
    x = w.tensor(a["input"])
    if not isinstance(example, kiln.Tensor) or not 3 <= len(x.type.sizes) <= 5:
        raise Decline("interpolate of a tensor that is not 3-d to 5-d")
    if any(isinstance(v, Node) for v in (a["size"] if isinstance(a["size"], (tuple, list))
                                         else [a["size"]])):  # fmt: skip
        raise Decline("interpolate to sizes computed at run time")
    scale = a["scale_factor"]
    if not all(s.isdigit() for s in x.type.sizes[2:]):
        return _symbolic_upsample(w, node, x, a)
    out = [int(s) for s in example.shape[2:]]
    if mode == "bicubic":
        return _bicubic(w, node, x, out, a)
    if mode == "area":  # eager's adaptive average pooling to the output size
        if len(x.type.sizes) != 4:
            raise Decline("area interpolate of a tensor that is not 4-d")
        w.emit_node(node, "adaptive_avg_pool2d", [x], {"output_size": out})
        return
    if scale is not None and not a["recompute_scale_factor"]:
        ins = [int(s) for s in a["input"].meta["example"].shape[2:]]
        scales = list(scale) if isinstance(scale, (tuple, list)) else [scale] * len(ins)
        if any(type(s) not in (int, float) or i * s != o for i, s, o in zip(ins, scales, out,
                                                                             strict=True)):
            raise Decline("a scale_factor that is not exactly output / input")
    _emit_upsample(w, node, x, out, a)


def _emit_upsample(w, node, x, out, a) -> None:
    """The upsample extern of `out` (ints or SymInt texts) for the nearest and linear modes."""
    mode = a["mode"]
    if mode.startswith("nearest"):
        attrs = {"output_size": out, **({"exact": True} if mode == "nearest-exact" else {})}
        w.emit_node(node, "upsample_nearest", [x], attrs)
        return
    attrs = {"output_size": out, **({"align_corners": True} if a["align_corners"] else {})}
    w.emit_node(node, "upsample_linear", [x], attrs)


def _symbolic_upsample(w, node, x, a):
    """nearest or linear interpolation of symbolic spatial sizes: to constant sizes, or by whole
    scale factors (each output size is the input's times the factor, and eager's source
    coordinates, which use 1 / factor, are those of output / input)."""
    mode, dims = a["mode"], len(x.type.sizes) - 2
    if mode in ("bicubic", "area"):
        raise Decline(f"{mode} interpolate of symbolic spatial sizes")
    if a["size"] is not None:
        size = a["size"]
        out = [str(int(s)) for s in (size if isinstance(size, (tuple, list)) else [size] * dims)]
    else:
        scale = a["scale_factor"]
        scales = list(scale) if isinstance(scale, (tuple, list)) else [scale] * dims
        if any(type(s) not in (int, float) or s <= 0 or float(s) != int(s) for s in scales):
            raise Decline("interpolate of symbolic spatial sizes by a fractional scale_factor")
        out = [w.canonical(f"({s})*{int(f)}") for s, f in zip(x.type.sizes[2:], scales,
                                                               strict=True)]  # fmt: skip
    _emit_upsample(w, node, x, out, a)


def _bicubic(w, node, x, out, a):
    """The bicubic composition eager runs (kiln/nn/_bicubic.py), written as graph nodes."""
    if len(x.type.sizes) != 4:
        raise Decline("bicubic interpolate of a tensor that is not 4-d")
    scale = a["scale_factor"]
    scales = None
    if scale is not None and not a["recompute_scale_factor"]:
        scales = [float(s) for s in (scale if isinstance(scale, (tuple, list)) else [scale] * 2)]
    ins = [int(s) for s in x.type.sizes[2:]]
    b = _GraphOps(w, node.meta.get("loc"), x.type.dtype)
    y = _bicubic_impl.upsample_bicubic2d(b, x, ins, out, bool(a["align_corners"]), scales)
    w.emit_node(node, "cast", [y], {"dtype": x.type.dtype})


class _GraphOps:
    """kiln/nn/_bicubic.py's op interface as graph nodes (Python numbers become constants)."""

    def __init__(self, w, loc, dtype: str):
        self.w, self.loc, self.dtype = w, loc, dtype
        self.opmath = "f64" if dtype == "f64" else "f32"

    def _emit(self, op, operands, attrs=None):
        values = [self.w.constant(v) if type(v) in (int, float) else v for v in operands]
        return self.w.emit(op, values, attrs or {}, self.loc)[0]

    def start(self, x):
        return x if x.type.dtype == self.opmath else self._emit("cast", [x], {"dtype": self.opmath})

    def finish(self, y):
        return y  # the caller's cast node is the graph node of the call

    def arange(self, n):
        return self._emit("arange", [], {"end": n, "dtype": self.opmath})

    def add(self, a, b):
        return self._emit("add", [a, b])

    def sub(self, a, b):
        return self._emit("sub", [a, b])

    def rsub(self, a, b):
        return self._emit("sub", [b, a])

    def mul(self, a, b):
        return self._emit("mul", [a, b])

    def floor(self, a):
        return self._emit("floor", [a])

    def clamp(self, a, lo, hi):
        return self._emit("clamp", [a], {k: v for k, v in (("min", lo), ("max", hi))
                                         if v is not None})  # fmt: skip

    def to_index(self, a):
        return self._emit("cast", [a], {"dtype": "i64"})

    def index_select(self, x, dim, index):
        return self._emit("index_select", [x, index], {"dim": dim})

    def along(self, c, dim):
        return c if dim == 3 else self._emit("unsqueeze", [c], {"dim": 1})


def _s_cum_extreme(input, dim): ...
def _s_kthvalue(input, k, dim=-1, keepdim=False): ...
def _s_median_dim(input, dim, keepdim=False): ...
def _s_mode(input, dim=-1, keepdim=False): ...


def _selected(kind: str, reduces: bool):
    """(values, indices) of a selection along dim: the positions from `selection_indices` (an
    extern), the values a gather there (the dim restored for the gather when it is reduced)."""

    def lower(w, node, a):
        pair = node.meta.get("example")
        x = w.tensor(a["input"])
        if not isinstance(pair, tuple) or len(pair) != 2 or len(x.type.sizes) == 0:
            raise Decline(f"{kind} of a 0-d tensor")
        dim = w.int_(a["dim"]) % len(x.type.sizes)
        keep = bool(a.get("keepdim", False))
        attrs = {"kind": kind, "dim": dim}
        if "k" in a:
            attrs["k"] = w.int_(a["k"])
        if keep:
            attrs["keepdim"] = True
        loc = node.meta.get("loc")
        (indices,) = w.emit("selection_indices", [x], attrs, loc)
        at = indices
        if reduces and not keep:
            (at,) = w.emit("unsqueeze", [indices], {"dim": dim}, loc)
        (values,) = w.emit("gather", [x, at], {"dim": dim}, loc)
        if reduces and not keep:
            (values,) = w.emit("squeeze", [values], {"dim": [dim]}, loc)
        w.values[id(node)] = (values, indices)

    return lower


for _kind in ("cummax", "cummin"):
    lowering(_s_cum_extreme, f"kiln.{_kind}", f"kiln.Tensor.{_kind}")(_selected(_kind, False))
lowering(_s_kthvalue, "kiln.kthvalue", "kiln.Tensor.kthvalue")(_selected("kthvalue", True))
lowering(_s_mode, "kiln.mode", "kiln.Tensor.mode")(_selected("mode", True))
for _kind in ("median", "nanmedian"):
    lowering(_s_median_dim, f"kiln.{_kind}", f"kiln.Tensor.{_kind}")(_selected(_kind, True))


def _s_median_all(input): ...


def _median_all(kind: str):
    """median() / nanmedian() of every element: the selection along the flattened tensor."""

    def lower(w, node, a):
        x = w.tensor(a["input"])
        sizes = list(x.type.sizes)
        loc = node.meta.get("loc")
        flat = x
        if len(sizes) != 1:
            if all(s.isdigit() for s in sizes):
                numel = str(math.prod(int(s) for s in sizes))
            else:
                numel = "*".join(f"({s})" for s in sizes)
            (flat,) = w.emit("reshape", [x], {"shape": [numel]}, loc)
        (at,) = w.emit("selection_indices", [flat], {"kind": kind, "dim": 0, "keepdim": True},
                       loc)  # fmt: skip
        (value,) = w.emit("gather", [flat, at], {"dim": 0}, loc)
        w.emit_node(node, "reshape", [value], {"shape": []})

    return lower


for _kind in ("median", "nanmedian"):
    lowering(_s_median_all, f"kiln.{_kind}", f"kiln.Tensor.{_kind}")(_median_all(_kind))


def _s_unfold(input, kernel_size, dilation=1, padding=0, stride=1): ...
def _s_fold(input, output_size, kernel_size, dilation=1, padding=0, stride=1): ...


def _two(w, v) -> list[int]:
    values = w.ints(v)
    return values * 2 if len(values) == 1 else values


@lowering(_s_unfold, "kiln.nn.functional.unfold")
def _unfold(w, node, a):
    attrs = {k: _two(w, a[k]) for k in ("kernel_size", "dilation", "padding", "stride")}
    w.emit_node(node, "unfold", [w.tensor(a["input"])], attrs)


@lowering(_s_fold, "kiln.nn.functional.fold")
def _fold(w, node, a):
    attrs = {k: _two(w, a[k]) for k in ("output_size", "kernel_size", "dilation", "padding",
                                        "stride")}  # fmt: skip
    w.emit_node(node, "fold", [w.tensor(a["input"])], attrs)


def _s_conv_transpose(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1,
                      dilation=1): ...  # fmt: skip


def _conv_transpose(spatial: int):
    op = f"conv_transpose{spatial}d"

    def lower(w, node, a):
        """A conv_transpose extern (eager's kernel, bias included); an unbatched input gets a
        batch dim of 1 around it, as eager's op does."""
        x = w.tensor(a["input"])
        ops = [x, w.tensor(a["weight"])]
        rank = len(x.type.sizes)
        if rank not in (spatial + 1, spatial + 2):
            raise Decline(f"{op} of a {rank}-d input")
        if a["bias"] is not None:
            ops.append(w.tensor(a["bias"]))
        attrs = {}
        for k in ("stride", "padding", "output_padding", "dilation"):
            values = w.ints(a[k])
            attrs[k] = values * spatial if len(values) == 1 else values
        if (g := w.int_(a["groups"])) != 1:
            attrs["groups"] = g
        if rank == spatial + 2:
            w.emit_node(node, op, ops, attrs)
            return
        loc = node.meta.get("loc")
        (ops[0],) = w.emit("unsqueeze", [x], {"dim": 0}, loc)
        (y,) = w.emit(op, ops, attrs, loc)
        w.emit_node(node, "squeeze", [y], {"dim": [0]})

    return lower


for _spatial in (1, 2, 3):
    lowering(_s_conv_transpose, f"kiln.conv_transpose{_spatial}d",
             f"kiln.nn.functional.conv_transpose{_spatial}d")(_conv_transpose(_spatial))


def _s_addc(input, tensor1, tensor2, *, value=1): ...


def _addc(op: str, inplace: bool):
    def lower(w, node, a):
        """input + value * tensor1 (*|/) tensor2, as eager's kernel orders it."""
        value, example = a["value"], node.meta.get("example")
        if type(value) not in (int, float):
            raise Decline("a value computed at run time")
        if not isinstance(example, kiln.Tensor) or not example.is_floating_point():
            raise Decline(f"{op} of integers (the value is cast to their type)")
        loc = node.meta.get("loc")
        x = w.tensor(a["input"])
        (scaled,) = w.emit("mul", [w.tensor(a["tensor1"]), w.constant(value)], {}, loc)
        (term,) = w.emit("mul" if op == "addcmul" else "div", [scaled, w.tensor(a["tensor2"])],
                         {}, loc)  # fmt: skip
        emit_into(w, node, a, inplace, "add", [x, term], {})

    return lower


for _op in ("addcmul", "addcdiv"):
    lowering(_s_addc, f"kiln.{_op}", f"kiln.Tensor.{_op}")(_addc(_op, False))
    lowering(_s_addc, f"kiln.Tensor.{_op}_")(_addc(_op, True))


def _s_scatter_reduce(input, dim, index, src, reduce, *, include_self=True): ...


def _scatter_reduce(inplace: bool):
    def lower(w, node, a):
        """sum as scatter_add, prod as scatter with reduce='multiply', mean (floats) as their
        sum over the count of what landed; include_self=False first overwrites the landing
        positions with the reduction's identity. amax/amin are the scatter_reduce node (eager's
        kernel as an extern)."""
        reduce, example = a["reduce"], _example(node)
        if reduce not in ("sum", "prod", "mean", "amax", "amin") or (
                reduce == "mean" and not example.is_floating_point()):
            raise Decline(f"scatter_reduce '{reduce}' of {example.dtype}")
        if a["include_self"] not in (True, False):
            raise Decline("include_self computed at run time")
        loc, dim = node.meta.get("loc"), w.int_(a["dim"])
        x, index, src = w.tensor(a["input"]), w.tensor(a["index"]), w.tensor(a["src"])
        if reduce in ("amax", "amin"):
            attrs = {"dim": dim, "reduce": reduce}
            if not a["include_self"]:
                attrs["include_self"] = False
            return emit_into(w, node, a, inplace, "scatter_reduce", [x, index, src], attrs)

        def filled(like, value):
            (out,) = w.emit("full", [], {"size": list(like.type.sizes), "value": value,
                                         "dtype": like.type.dtype}, loc)  # fmt: skip
            return out

        def landing(base, value):  # base with the positions index reaches set to value
            (out,) = w.emit("scatter", [base, index, filled(src, value)], {"dim": dim}, loc)
            return out

        identity = 1 if reduce == "prod" else 0
        base = x if a["include_self"] else landing(x, identity)
        if reduce == "prod":
            return emit_into(w, node, a, inplace, "scatter", [base, index, src],
                             {"dim": dim, "reduce": "multiply"})
        if reduce == "sum":
            return emit_into(w, node, a, inplace, "scatter_add", [base, index, src], {"dim": dim})
        (total,) = w.emit("scatter_add", [base, index, src], {"dim": dim}, loc)
        start = filled(x, 1 if a["include_self"] else 0)
        (count,) = w.emit("scatter_add", [start, index, filled(src, 1)], {"dim": dim}, loc)
        (count,) = w.emit("maximum", [count, w.constant(1)], {}, loc)
        emit_into(w, node, a, inplace, "div", [total, count], {})

    return lower


lowering(_s_scatter_reduce, "kiln.scatter_reduce", "kiln.Tensor.scatter_reduce")(
    _scatter_reduce(False))
lowering(_s_scatter_reduce, "kiln.Tensor.scatter_reduce_")(_scatter_reduce(True))


def _s_scatter(input, dim, index, src=None, *, value=None, reduce=None): ...


def _scatter(inplace: bool):
    def lower(w, node, a):
        """scatter of a tensor `src` (the table's row), or of a number: a tensor of it shaped
        like the index (the one-hot idiom `zeros(n, k).scatter_(1, y[:, None], 1.0)`)."""
        src = a["src"] if a["src"] is not None else a["value"]
        x, index = w.tensor(a["input"]), w.tensor(a["index"])
        if not hasattr(src, "meta"):  # a Python number
            if type(src) not in (int, float, bool):
                raise Decline("a scatter value computed at run time")
            (src,) = w.emit("full", [], {"size": list(index.type.sizes), "value": src,
                                         "dtype": x.type.dtype}, node.meta.get("loc"))  # fmt: skip
        else:
            src = w.tensor(src)
        attrs = {"dim": w.int_(a["dim"])}
        if a["reduce"] is not None:
            attrs["reduce"] = a["reduce"]
        emit_into(w, node, a, inplace, "scatter", [x, index, src], attrs)

    return lower


lowering(_s_scatter, "kiln.scatter", "kiln.Tensor.scatter")(_scatter(False))
lowering(_s_scatter, "kiln.Tensor.scatter_")(_scatter(True))


# --- Elementwise ops the table spells without a node kind (KILN_EAGER_SPELLING rows) ------------


def _s_unary(input): ...
def _s_rsub(input, other, *, alpha=1): ...
def _s_float_power(input, exponent): ...


def _example(node):
    example = node.meta.get("example")
    if not isinstance(example, kiln.Tensor):
        raise Decline("a result that is not a tensor")
    return example


def _square(inplace: bool):
    def lower(w, node, a):
        """x * x: torch's square is pow(x, 2), which rounds as the product does."""
        if _example(node).dtype == kiln.bool:
            raise Decline("square of bool (an integer result)")
        x = w.tensor(a["input"])
        emit_into(w, node, a, inplace, "mul", [x, x], {})

    return lower


lowering(_s_unary, "kiln.square", "kiln.Tensor.square")(_square(False))
lowering(_s_unary, "kiln.square_", "kiln.Tensor.square_")(_square(True))


@lowering(_s_unary, "kiln.positive", "kiln.Tensor.positive", "kiln.Tensor.__pos__", "operator.pos")
def _positive(w, node, a):
    """The input itself (torch returns self)."""
    if _example(node).dtype == kiln.bool:
        raise Decline("positive of bool (torch's error)")
    w.values[id(node)] = w.tensor(a["input"])


@lowering(_s_rsub, "kiln.rsub")
def _rsub(w, node, a):
    """other - alpha * input."""
    alpha = a["alpha"]
    if type(alpha) not in (int, float):
        raise Decline("alpha computed at run time")
    x = w.operand(a["input"])
    if alpha != 1:
        (x,) = w.emit("mul", [x, w.constant(alpha)], {}, node.meta.get("loc"))
    w.emit_node(node, "sub", [w.operand(a["other"]), x], {})


@lowering(_s_float_power, "kiln.float_power", "kiln.Tensor.float_power")
def _float_power(w, node, a):
    """pow in float64, whatever the operands' dtypes (torch's float_power)."""
    loc = node.meta.get("loc")
    operands = []
    for v in (a["input"], a["exponent"]):
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            operands.append(w.constant(float(v)))
            continue
        (cast,) = w.emit("cast", [w.tensor(v)], {"dtype": "f64"}, loc)
        operands.append(cast)
    w.emit_node(node, "pow", operands, {})
