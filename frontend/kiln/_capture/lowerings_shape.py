"""Lowerings of views, indexing, cat, library calls, composites, in-place ops and sizes (the
second half of the table in lowerings.py)."""

from __future__ import annotations

import kiln
from kiln._capture.graph import Node, target_name
from kiln._capture.graph_build import Decline
from kiln._capture.lowerings import _no, lowering

# --- Views ---------------------------------------------------------------------------------------


def _s_varargs(input, *sizes): ...
def _s_reshape(input, shape): ...
def _s_permute(input, dims): ...
def _s_transpose(input, dim0, dim1): ...
def _s_one(input): ...
def _s_flatten(input, start_dim=0, end_dim=-1): ...
def _s_dim(input, dim): ...
def _s_squeeze(input, dim=None): ...
def _s_select(input, dim, index): ...
def _s_narrow(input, dim, start, length): ...
def _s_other(input, other): ...
def _s_broadcast_to(input, size): ...
def _s_movedim(input, source, destination): ...


def _shape_list(sizes):
    """``view(2, 3)`` and ``view((2, 3))`` alike."""
    if len(sizes) == 1 and isinstance(sizes[0], (tuple, list)):
        return list(sizes[0])
    return list(sizes)


def _syms(w, values) -> list[str]:
    return w.syms(values) if values else []


def _view(op: str, attr: str, varargs: bool):
    def lower_view(w, node, a):
        sizes = _shape_list(a["sizes"]) if varargs else a[attr]  # view(dtype) declines in syms
        w.emit_node(node, op, [w.tensor(a["input"])], {attr: _syms(w, list(sizes))})

    return lower_view


lowering(_s_varargs, "kiln.Tensor.view")(_view("view", "shape", True))
lowering(_s_varargs, "kiln.Tensor.reshape")(_view("reshape", "shape", True))
lowering(_s_reshape, "kiln.reshape")(_view("reshape", "shape", False))
lowering(_s_varargs, "kiln.Tensor.expand")(_view("expand", "size", True))


def _s_shape_kw(input, *, shape): ...
def _s_size_kw(input, *, size): ...


# The keyword spellings: x.reshape(shape=...) (an MAE's patchify), x.view(size=...).
lowering(_s_shape_kw, "kiln.Tensor.reshape")(_view("reshape", "shape", False))


@lowering(_s_size_kw, "kiln.Tensor.view", "kiln.Tensor.expand")
def _view_size_kw(w, node, a):
    op = "view" if node.target is kiln.Tensor.view else "expand"
    w.emit_node(node, op, [w.tensor(a["input"])],
                {"shape" if op == "view" else "size": _syms(w, list(a["size"]))})


@lowering(_s_broadcast_to, "kiln.broadcast_to", "kiln.Tensor.broadcast_to")
def _broadcast_to(w, node, a):
    w.emit_node(node, "expand", [w.tensor(a["input"])], {"size": _syms(w, list(a["size"]))})


@lowering(_s_other, "kiln.Tensor.expand_as")
def _expand_as(w, node, a):
    sizes = w.tensor(a["other"]).type.sizes
    w.emit_node(node, "expand", [w.tensor(a["input"])], {"size": list(sizes)})


def _s_tensors(*tensors): ...
def _s_meshgrid(*tensors, indexing=None): ...


def _tensor_args(w, tensors) -> list:
    """``f(a, b)`` and ``f([a, b])`` alike."""
    if len(tensors) == 1 and isinstance(tensors[0], (tuple, list)):
        tensors = tensors[0]
    return [w.tensor(t) for t in tensors]


def _broadcast_sizes(shapes: list[list[str]]) -> list[str]:
    """The broadcast of symbolic sizes: per dim aligned from the right, the one size other than
    1. Two different symbols decline: that they agree holds only for the example's values."""
    rank = max(len(s) for s in shapes)
    out = []
    for d in range(rank):
        sizes = {s[d - rank + len(s)] for s in shapes if d - rank + len(s) >= 0} - {"1"}
        if len(sizes) > 1:
            raise Decline(f"sizes {', '.join(sorted(sizes))} that broadcast for some values only")
        out.append(sizes.pop() if sizes else "1")
    return out


@lowering(_s_tensors, "kiln.broadcast_tensors")
def _broadcast_tensors(w, node, a):
    """One ``expand`` per tensor whose sizes are not already the broadcast ones."""
    xs = _tensor_args(w, a["tensors"])
    sizes = _broadcast_sizes([list(x.type.sizes) for x in xs]) if xs else []
    loc = node.meta.get("loc")
    w.values[id(node)] = tuple(x if list(x.type.sizes) == sizes
                               else w.emit("expand", [x], {"size": sizes}, loc)[0]
                               for x in xs)  # fmt: skip


@lowering(_s_meshgrid, "kiln.meshgrid")
def _meshgrid(w, node, a):
    """Each 0-d or 1-D input reshaped to lie along its own dim, then expanded to the grid;
    indexing='xy' swaps the first two dims (the eager example has checked the arguments)."""
    xs = _tensor_args(w, a["tensors"])
    if not xs or any(len(x.type.sizes) > 1 for x in xs):
        raise Decline("meshgrid of tensors that are not 0-d or 1-D")
    lengths = [x.type.sizes[0] if x.type.sizes else "1" for x in xs]
    dim_of = list(range(len(xs)))  # the grid dim input i lies along
    if a["indexing"] == "xy" and len(xs) >= 2:
        dim_of[0], dim_of[1] = 1, 0
    grid = [lengths[dim_of.index(d)] for d in range(len(xs))]
    loc, vals = node.meta.get("loc"), []
    for i, x in enumerate(xs):
        shape = ["1"] * len(xs)
        shape[dim_of[i]] = lengths[i]
        (line,) = w.emit("reshape", [x], {"shape": shape}, loc)
        vals.append(w.emit("expand", [line], {"size": grid}, loc)[0])
    w.values[id(node)] = tuple(vals)


@lowering(_s_flatten, "kiln.flatten", "kiln.Tensor.flatten")
def _flatten(w, node, a):
    """A reshape that merges dims start_dim..end_dim into their product."""
    x = w.tensor(a["input"])
    sizes = x.type.sizes
    if not sizes:
        w.emit_node(node, "reshape", [x], {"shape": [1]})
        return
    start, end = w.int_(a["start_dim"]) % len(sizes), w.int_(a["end_dim"]) % len(sizes)
    if start > end:
        raise Decline("flatten with start_dim after end_dim")
    merged = w.canonical("*".join(f"({s})" for s in sizes[start:end + 1]))
    w.emit_node(node, "reshape", [x], {"shape": sizes[:start] + [merged] + sizes[end + 1:]})


@lowering(_s_varargs, "kiln.Tensor.permute")
def _permute_method(w, node, a):
    dims = _shape_list(a["sizes"])
    w.emit_node(node, "permute", [w.tensor(a["input"])], {"dims": w.ints(dims)})


@lowering(_s_permute, "kiln.permute")
def _permute(w, node, a):
    w.emit_node(node, "permute", [w.tensor(a["input"])], {"dims": w.ints(a["dims"])})


@lowering(_s_movedim, "kiln.movedim", "kiln.moveaxis", "kiln.Tensor.movedim",
          "kiln.Tensor.moveaxis")
def _movedim(w, node, a):
    """A permute: the moved dims at their destinations, the others in order around them."""
    x = w.tensor(a["input"])
    rank = len(x.type.sizes)
    src, dst = a["source"], a["destination"]
    src = w.ints(src) if isinstance(src, (list, tuple)) else [w.int_(src)]
    dst = w.ints(dst) if isinstance(dst, (list, tuple)) else [w.int_(dst)]
    if len(src) != len(dst) or rank == 0:
        raise Decline("movedim: source and destination of different lengths (eager raises)")
    src, dst = [d % rank for d in src], [d % rank for d in dst]
    if len(set(src)) != len(src) or len(set(dst)) != len(dst):
        raise Decline("movedim: repeated dims (eager raises)")
    perm = [-1] * rank
    for s_, d_ in zip(src, dst, strict=True):
        perm[d_] = s_
    rest = iter(d for d in range(rank) if d not in src)
    w.emit_node(node, "permute", [x], {"dims": [p if p >= 0 else next(rest) for p in perm]})


_TRANSPOSES = [f"kiln.{n}" for n in ("transpose", "swapaxes", "swapdims")]


@lowering(_s_transpose, *_TRANSPOSES, *(p.replace("kiln.", "kiln.Tensor.") for p in _TRANSPOSES))
def _transpose(w, node, a):
    attrs = {"dim0": w.int_(a["dim0"]), "dim1": w.int_(a["dim1"])}
    w.emit_node(node, "transpose", [w.tensor(a["input"])], attrs)


@lowering(_s_one, "kiln.t", "kiln.Tensor.t")
def _t(w, node, a):
    x = w.tensor(a["input"])
    if len(x.type.sizes) != 2:
        raise Decline("t() of a tensor that is not 2-d returns it unchanged")
    w.emit_node(node, "transpose", [x], {"dim0": 0, "dim1": 1})


@lowering(_s_dim, "kiln.unsqueeze", "kiln.Tensor.unsqueeze")
def _unsqueeze(w, node, a):
    w.emit_node(node, "unsqueeze", [w.tensor(a["input"])], {"dim": w.int_(a["dim"])})


@lowering(_s_squeeze, "kiln.squeeze", "kiln.Tensor.squeeze")
def _squeeze(w, node, a):
    attrs = {} if a["dim"] is None else {"dim": w.ints(a["dim"])}
    w.emit_node(node, "squeeze", [w.tensor(a["input"])], attrs)


@lowering(_s_select, "kiln.select", "kiln.Tensor.select")
def _select(w, node, a):
    attrs = {"dim": w.int_(a["dim"]), "index": w.sym(a["index"])}
    w.emit_node(node, "select", [w.tensor(a["input"])], attrs)


@lowering(_s_narrow, "kiln.narrow", "kiln.Tensor.narrow")
def _narrow(w, node, a):
    start = w.sym(a["start"])
    if start.startswith("-"):
        raise Decline("narrow from a negative start")
    attrs = {"end": w.canonical(f"({start}) + ({w.sym(a['length'])})")}
    if start != "0":
        attrs["start"] = start
    if w.int_(a["dim"]) != 0:
        attrs["dim"] = w.int_(a["dim"])
    w.emit_node(node, "slice", [w.tensor(a["input"])], attrs)


# --- Layout copies (ops.def's table rows; these are the spellings a schema cannot bind) -----------


def _s_stack(tensors, dim=0): ...


@lowering(_s_varargs, "kiln.Tensor.flip")
def _flip_method(w, node, a):
    dims = w.ints(_shape_list(a["sizes"]))
    w.emit_node(node, "flip", [w.tensor(a["input"])], {"dims": dims} if dims else {})


@lowering(_s_varargs, "kiln.Tensor.repeat")
def _repeat_method(w, node, a):
    given = _shape_list(a["sizes"])
    x = w.tensor(a["input"])
    if all(type(r) is int for r in given):
        w.emit_node(node, "repeat", [x], {"repeats": w.ints(given)})
        return
    # a run-time count (DETR's query_embed.repeat(1, bs, 1)): every dim viewed as [1, size],
    # expanded to [count, size] and merged, which is what repeat computes
    repeats = w.syms(given)
    sizes = ["1"] * (len(repeats) - len(x.type.sizes)) + list(x.type.sizes)
    if len(sizes) != len(repeats):
        raise Decline("repeat with fewer counts than dims (eager raises)")
    loc = node.meta.get("loc")
    pairs = [d for size in sizes for d in ("1", size)]
    (v,) = w.emit("reshape", [x], {"shape": pairs}, loc)
    counted = [d for r, size in zip(repeats, sizes, strict=True) for d in (r, size)]
    (v,) = w.emit("expand", [v], {"size": counted}, loc)
    merged = [f"({r})*({size})" for r, size in zip(repeats, sizes, strict=True)]
    w.emit_node(node, "reshape", [v], {"shape": merged})


@lowering(_s_stack, "kiln.stack")
def _stack(w, node, a):
    if not isinstance(a["tensors"], (tuple, list)) or not a["tensors"]:
        raise Decline("stack of a non-sequence")
    dim = w.int_(a["dim"])
    attrs = {"dim": dim} if dim != 0 else {}
    w.emit_node(node, "stack", [w.tensor(t) for t in a["tensors"]], attrs)


# --- Indexing ------------------------------------------------------------------------------------


def _s_getitem(input, index): ...


def _index_step(w, item, j):
    """The (op, attrs) of one index item at output dim `j`, or None for a full slice."""
    if item is None:
        return "unsqueeze", {"dim": j}
    if isinstance(item, slice):
        attrs = {}
        if item.step is not None and w.int_(item.step) != 1:
            attrs["step"] = w.int_(item.step)
        if item.start is not None:
            attrs["start"] = w.sym(item.start)
        if item.stop is not None:
            attrs["end"] = w.sym(item.stop)
        if not attrs:
            return None
        if j != 0:
            attrs["dim"] = j
        return "slice", attrs
    return "select", {"dim": j, "index": w.sym(item)}


@lowering(_s_getitem, "operator.getitem", "kiln.Tensor.__getitem__")
def _getitem(w, node, a):
    src, index = a["input"], a["index"]
    val = w.value_of(src)
    if isinstance(val, tuple):  # one result of a multi-result call
        if type(index) is not int or not -len(val) <= index < len(val) or val[index] is None:
            raise Decline("a tuple index")
        w.values[id(node)] = val[index]
        return
    x = w.tensor(src)
    items = list(index) if type(index) is tuple else [index]
    if any(_is_int_list(i) for i in items):
        return _getitem_list(w, node, src, items)
    for item in items:
        if type(item) is bool or isinstance(item, (list, tuple)):
            raise Decline("advanced indexing")
    tensor_at, indices = _tensor_indices(items)
    consumed = sum(1 for i in items if i is not None and i is not Ellipsis)
    rank = len(x.type.sizes)
    if consumed > rank or sum(1 for i in items if i is Ellipsis) > 1:
        raise Decline("too many indices")
    out = node.meta.get("example")
    steps, i, j = [], 0, 0  # i: input dims consumed, j: output dims produced
    tensor_dims = []  # the output dims of the basic index that the index tensors replace
    for k, item in enumerate(items):
        if item is Ellipsis:
            i, j = i + rank - consumed, j + rank - consumed
            continue
        if k in tensor_at:
            tensor_dims.append(j)
        step = _index_step(w, item, j)
        i += item is not None
        j += item is None or isinstance(item, slice)
        if step is not None:
            steps.append(step)
    index_rank = max((n.meta["example"].dim() for n in indices), default=0) - len(indices)
    if not hasattr(out, "dim") or out.dim() != j + rank - i + index_rank:
        raise Decline("an index result of unexpected rank")
    if indices:
        loc = node.meta.get("loc")
        cur = x
        for op, attrs in steps:
            (cur,) = w.emit(op, [cur], attrs, loc)
        index_dim = tensor_dims[0]
        if tensor_dims != list(range(index_dim, index_dim + len(tensor_dims))):
            # Separated by a slice, None or Ellipsis (ints are selects first, so they do not
            # separate): torch puts the index dims first, as indexing `cur` with those dims
            # moved to the front does.
            rest = [d for d in range(len(cur.type.sizes)) if d not in tensor_dims]
            (cur,) = w.emit("permute", [cur], {"dims": tensor_dims + rest}, loc)
            index_dim = 0
        if len(indices) == 1:
            w.emit_node(node, "index", [cur, w.tensor(indices[0])], {"dim": index_dim})
            return
        position = _flat_position(w, cur, index_dim, indices, loc)
        flat = _merged(w, cur, index_dim, len(indices), loc)
        w.emit_node(node, "index", [flat, position], {"dim": index_dim})
        return
    if not steps:
        w.values[id(node)] = x
        return
    cur = x
    for op, attrs in steps[:-1]:
        (cur,) = w.emit(op, [cur], attrs, node.meta.get("loc"))
    w.emit_node(node, steps[-1][0], [cur], steps[-1][1])


# --- Concatenation and library calls -------------------------------------------------------------


def _s_cat(tensors, dim=0): ...
def _s_mm(input, mat2): ...
def _s_linear(input, weight, bias=None): ...
def _s_conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1): ...
def _s_sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
            enable_gqa=False): ...  # fmt: skip
def _s_embedding(input, weight, padding_idx=None, max_norm=None, norm_type=2.0,
                 scale_grad_by_freq=False, sparse=False): ...  # fmt: skip


@lowering(_s_cat, "kiln.cat", "kiln.concat", "kiln.concatenate")
def _cat(w, node, a):
    if not isinstance(a["tensors"], (tuple, list)) or not a["tensors"]:
        raise Decline("cat of a non-sequence")
    dim = w.int_(a["dim"])
    attrs = {"dim": dim} if dim != 0 else {}
    w.emit_node(node, "cat", [w.tensor(t) for t in a["tensors"]], attrs)


# matmul and `@` are the op table's Matmul row; mm and bmm name their second operand mat2.
@lowering(_s_mm, "kiln.mm", "kiln.bmm", "kiln.Tensor.mm", "kiln.Tensor.bmm")
def _mm(w, node, a):
    w.emit_node(node, "matmul", [w.tensor(a["input"]), w.tensor(a["mat2"])], {})


@lowering(_s_linear, "kiln.nn.functional.linear")
def _linear(w, node, a):
    ops = [w.tensor(a["input"]), w.tensor(a["weight"])]
    if a["bias"] is not None:
        ops.append(w.tensor(a["bias"]))
    w.emit_node(node, "linear", ops, {})


def per_dim(w, v, spatial: int, name: str) -> list[int]:
    """A size argument of a convolution or pool (one int, or one per spatial dim) as one int
    per spatial dim."""
    values = w.ints(v)
    if len(values) == 1:
        values = values * spatial
    if len(values) != spatial:
        raise Decline(f"{name} of {len(values)} values (takes one or {spatial})")
    return values


def _sizes(w, v, default: int, spatial: int) -> list[int] | None:
    """A convolution's size argument per spatial dim; None when it is the default."""
    values = per_dim(w, v, spatial, f"conv{spatial}d sizes")
    return None if values == [default] * spatial else values


def _named_padding(w, x, weight, a, spatial: int, loc):
    """``padding='valid'`` (none) or ``'same'`` (stride 1: dilation * (k - 1) in all, the odd
    one on the high side, as torch pads): (input, symmetric padding)."""
    if a["padding"] == "valid":
        return x, None
    if a["padding"] != "same":
        raise Decline(f"padding={a['padding']!r}")
    if _sizes(w, a["stride"], 1, spatial) is not None:
        raise Decline("padding='same' with a stride (torch refuses it)")
    dilation = _sizes(w, a["dilation"], 1, spatial) or [1] * spatial
    kernel = weight.type.sizes[2:]
    if not all(k.isdigit() for k in kernel):
        raise Decline("padding='same' of a symbolic kernel size")
    total = [d * (int(k) - 1) for d, k in zip(dilation, kernel, strict=True)]
    if all(t % 2 == 0 for t in total):
        return x, [t // 2 for t in total]
    pad = []  # F.pad's order: the last dim first, (low, high) each
    for t in reversed(total):
        pad += [t // 2, t - t // 2]
    (x,) = w.emit("pad", [x], {"pad": pad}, loc)
    return x, None


def _convolution(spatial: int):
    op = f"conv{spatial}d"

    def lower(w, node, a):
        """A library convolution; padding by name as its sizes (or a pad in front)."""
        x, weight = w.tensor(a["input"]), w.tensor(a["weight"])
        attrs = {}
        if isinstance(a["padding"], str):
            x, padding = _named_padding(w, x, weight, a, spatial, node.meta.get("loc"))
            if padding is not None and any(padding):
                attrs["padding"] = padding
        elif (values := _sizes(w, a["padding"], 0, spatial)) is not None:
            attrs["padding"] = values
        ops = [x, weight] + ([w.tensor(a["bias"])] if a["bias"] is not None else [])
        for name, default in (("stride", 1), ("dilation", 1)):
            if (values := _sizes(w, a[name], default, spatial)) is not None:
                attrs[name] = values
        if w.int_(a["groups"]) != 1:
            attrs["groups"] = w.int_(a["groups"])
        w.emit_node(node, op, ops, attrs)

    return lower


lowering(_s_conv2d, "kiln.conv2d", "kiln.nn.functional.conv2d")(_convolution(2))
lowering(_s_conv2d, "kiln.conv3d", "kiln.nn.functional.conv3d")(_convolution(3))


@lowering(_s_sdpa, "kiln.nn.functional.scaled_dot_product_attention")
def _attention(w, node, a):
    if a["dropout_p"] != 0 or a["enable_gqa"]:  # the probabilities materialized, as eager does
        # (imported here: decompositions_nn reaches this module through lowerings_random)
        from kiln._capture.decompositions_nn import attention_decomposed

        attention_decomposed(w, node, a)
        return
    ops = [w.tensor(a["query"]), w.tensor(a["key"]), w.tensor(a["value"])]
    if a["attn_mask"] is not None:
        ops.append(w.tensor(a["attn_mask"]))
    attrs = {}
    if a["is_causal"]:
        attrs["is_causal"] = True
    if a["scale"] is not None:
        attrs["scale"] = float(a["scale"])
    w.emit_node(node, "scaled_dot_product_attention", ops, attrs)


@lowering(_s_embedding, "kiln.nn.functional.embedding")
def _embedding(w, node, a):
    _no(a["max_norm"])
    attrs = {} if a["padding_idx"] is None else {"padding_idx": w.int_(a["padding_idx"])}
    w.emit_node(node, "embedding", [w.tensor(a["input"]), w.tensor(a["weight"])], attrs)


# --- Mutation ------------------------------------------------------------------------------------


def _s_copy(input, src, non_blocking=False): ...


@lowering(_s_copy, "kiln.Tensor.copy_")
def _copy(w, node, a):
    w.emit_node(node, "copy_", [w.tensor(a["input"]), w.operand(a["src"])], {})


def _s_fill(input, value): ...


def _fill_with(w, node, x, value) -> None:
    """``copy_`` into `x` of `value`: a 0-d tensor (broadcast and cast as copy_ does) or a
    number (a ``full`` of x's sizes and dtype)."""
    if isinstance(value, Node):
        w.emit_node(node, "copy_", [x, w.tensor(value)], {})
        return
    (filled,) = w.emit("full", [], {"size": list(x.type.sizes), "value": value,
                                    "dtype": x.type.dtype}, node.meta.get("loc"))  # fmt: skip
    w.emit_node(node, "copy_", [x, filled], {})


@lowering(_s_fill, "kiln.fill_", "kiln.Tensor.fill_")
def _fill(w, node, a):
    _fill_with(w, node, w.tensor(a["input"]), a["value"])


@lowering(_s_one, "kiln.zero_", "kiln.Tensor.zero_")
def _zero(w, node, a):
    _fill_with(w, node, w.tensor(a["input"]), 0)


# --- Sizes ---------------------------------------------------------------------------------------


def _s_size(input, dim=None): ...


@lowering(_s_size, "kiln._capture.graph.sym_size", "kiln.Tensor.size")
def _sym_size(w, node, a):
    if a["dim"] is None:
        raise Decline("size() is a tuple")
    w.emit_node(node, "sym_size", [w.tensor(a["input"])], {"dim": w.int_(a["dim"])})


# --- Item assignment -----------------------------------------------------------------------------


def _s_setitem(input, index, value): ...


@lowering(_s_setitem, "operator.setitem")
def _setitem(w, node, a):
    """``x[index] = value`` as ``copy_`` into the view the basic index names (slices, ints,
    None, Ellipsis), or, for a bool mask over x's leading dims and a number or 0-d value, as
    masked_fill written back; functionalization then makes the part pure. Indexing by int
    tensors (a scatter) stays eager."""
    src, index, value = a["input"], a["index"], a["value"]
    if not isinstance(src, Node) or not _is_tensor_node(src):
        raise Decline("item assignment to something other than a tensor")
    x = w.tensor(src)
    items = list(index) if type(index) is tuple else [index]
    loc = node.meta.get("loc")
    masks = [i for i in items if isinstance(i, Node) and _is_tensor_node(i)]
    if masks:
        mask = masks[0]
        if mask.meta["example"].dtype != kiln.bool:
            return _setitem_by_tensor(w, node, x, items, value)
        k = items.index(mask)
        whole = all(i == slice(None) or i is Ellipsis for i in items[k + 1 :])
        if len(masks) > 1 or not whole or any(i != slice(None) for i in items[:k]):
            raise Decline("masked assignment with other indices than full slices")
        v = w.operand(value)
        if v.is_tensor and len(v.type.sizes) != 0:
            raise Decline("masked assignment of a tensor of values")
        m = w.tensor(mask)
        trailing = len(x.type.sizes) - k - len(m.type.sizes)  # dims after the ones it covers
        if trailing < 0:
            raise Decline("a mask of more dims than the tensor")
        for _ in range(trailing):
            (m,) = w.emit("unsqueeze", [m], {"dim": -1}, loc)
        (filled,) = w.emit("masked_fill", [x, m, v], {}, loc)
        w.emit("copy_", [x, filled], {}, loc)
        w.values[id(node)] = None
        return
    if any(type(i) is bool or isinstance(i, (list, tuple)) for i in items):
        raise Decline("advanced item assignment")
    rank = len(x.type.sizes)
    consumed = sum(1 for i in items if i is not None and i is not Ellipsis)
    if consumed > rank or sum(1 for i in items if i is Ellipsis) > 1:
        raise Decline("too many indices")
    if Ellipsis in items:
        k = items.index(Ellipsis)
        items = items[:k] + [slice(None)] * (rank - consumed) + items[k + 1 :]
    items = [i for i in items if i is not None]  # a new dim writes the same elements
    view = _basic_index(w, node, x, items) if items else x
    v = _assigned_value(w, value, view.type.sizes, x.type.dtype, loc)
    if len(v.type.sizes) > len(view.type.sizes):
        raise Decline("a value of more dims than the view it is assigned to")
    w.emit("copy_", [view, v], {}, loc)
    w.values[id(node)] = None


def _assigned_value(w, value, sizes, dtype, loc):
    """The tensor an item assignment writes: `value`, or a number as a `full` of `sizes`."""
    v = w.operand(value)
    if v.is_tensor:
        return v
    if isinstance(value, Node) or type(value) not in (int, float, bool):
        raise Decline("assignment of a number computed at run time")
    (v,) = w.emit("full", [], {"size": list(sizes), "value": value, "dtype": dtype}, loc)
    return v


def _setitem_by_tensor(w, node, x, items, value):
    """``x[..., idx, ...] = v`` with one int tensor: ``index_put`` on the view the other (basic)
    items name, written back through it."""
    if any(type(i) is bool or isinstance(i, (list, tuple)) for i in items):
        raise Decline("advanced item assignment")
    tensor_at, index = _one_tensor_index(items)
    rank = len(x.type.sizes)
    consumed = sum(1 for i in items if i is not None and i is not Ellipsis)
    if consumed > rank or sum(1 for i in items if i is Ellipsis) > 1 or None in items:
        raise Decline("item assignment with too many indices or new dims")
    if Ellipsis in items:
        k = items.index(Ellipsis)
        tensor_at += (rank - consumed - 1) if tensor_at > k else 0
        items = items[:k] + [slice(None)] * (rank - consumed) + items[k + 1 :]
    dim = sum(1 for i in items[:tensor_at] if isinstance(i, slice))  # the view's dim of idx
    loc = node.meta.get("loc")
    view = _basic_index(w, node, x, items)
    v = _assigned_value(w, value, [], x.type.dtype, loc)
    (updated,) = w.emit("index_put", [view, w.tensor(index), v], {"dim": dim}, loc)
    w.emit("copy_", [view, updated], {}, loc)
    w.values[id(node)] = None


def _s_index_put(input, indices, values, accumulate=False): ...


@lowering(_s_index_put, "kiln.Tensor.index_put", "kiln.Tensor.index_put_", "kiln.index_put",
          "kiln.index_put_")  # fmt: skip
def _index_put(w, node, a):
    """``index_put((idx,), values, accumulate)``: one int tensor indexing dim 0."""
    indices = a["indices"]
    if not isinstance(indices, (tuple, list)) or len(indices) != 1 or not (
            isinstance(indices[0], Node) and _is_tensor_node(indices[0])):  # fmt: skip
        raise Decline("index_put with other than one index tensor")
    index = indices[0]
    if index.meta["example"].dtype not in (kiln.int64, kiln.int32):
        raise Decline(_tensor_index_reason(index))
    x = w.tensor(a["input"])
    attrs = {"dim": 0}
    if a["accumulate"]:
        attrs["accumulate"] = True
    ops = [x, w.tensor(index), w.tensor(a["values"])]
    if target_name(node.target).endswith("_"):
        (updated,) = w.emit("index_put", ops, attrs, node.meta.get("loc"))
        w.emit_node(node, "copy_", [x, updated], {})
        return
    w.emit_node(node, "index_put", ops, attrs)


# --- Advanced indexing by a list of ints ---------------------------------------------------------


def _is_int_list(item) -> bool:
    return isinstance(item, list) and bool(item) and all(type(v) is int for v in item)


def _is_tensor_node(item) -> bool:
    return isinstance(item.meta.get("example"), kiln.Tensor)


def _tensor_index_reason(item) -> str:
    if item.meta["example"].dtype == kiln.bool:
        return "boolean-mask indexing: the result size depends on the mask's values"
    return f"indexing by a {item.meta['example'].dtype} tensor (int64 or int32 indices compile)"


def _tensor_indices(items):
    """(positions, nodes) of the int tensors among `items`, each replaced by a full slice (the
    index node then takes their dims); ([], []) without one. Masks decline. Ints index as
    selects first, in torch's way: unlike NumPy's, they never join the tensors."""
    tensors = [k for k, i in enumerate(items) if isinstance(i, Node) and _is_tensor_node(i)]
    if not tensors:
        return [], []
    nodes = [items[k] for k in tensors]
    for index in nodes:
        if index.meta["example"].dtype not in (kiln.int64, kiln.int32):
            raise Decline(_tensor_index_reason(index))
    for k in tensors:
        items[k] = slice(None)
    return tensors, nodes


def _one_tensor_index(items):
    """_tensor_indices for item assignment, which takes one tensor."""
    positions, nodes = _tensor_indices(items)
    if len(nodes) > 1:
        raise Decline("item assignment through several tensors")
    return (positions[0], nodes[0]) if nodes else (None, None)


_OUT_OF_RANGE = 1 << 62  # a flat position every indexed tensor is smaller than


def _flat_position(w, view, dim: int, nodes, loc):
    """The position, in `view` with dims dim..dim+len(nodes)-1 merged, that the index tensors
    name together (broadcast): sum of each wrapped index times the sizes after it. A tensor
    entry outside its own dim makes the position out of range, so the load raises and eager
    reports the entry (a merged dim alone would let it read a neighbouring row)."""
    sizes = []
    for k in range(len(nodes)):
        text = view.type.sizes[dim + k]
        if text.isdigit():
            sizes.append(w.constant(int(text)))
        else:
            (s,) = w.emit("sym_size", [view], {"dim": dim + k}, loc)
            sizes.append(s)
    position = valid = None
    for node, size in zip(nodes, sizes, strict=True):
        i = w.tensor(node)
        if i.type.dtype != "i64":
            (i,) = w.emit("cast", [i], {"dtype": "i64"}, loc)
        (shifted,) = w.emit("add", [i, size], {}, loc)
        (negative,) = w.emit("lt", [i, w.constant(0)], {}, loc)
        (wrapped,) = w.emit("where", [negative, shifted, i], {}, loc)
        (above,) = w.emit("ge", [shifted, w.constant(0)], {}, loc)
        (below,) = w.emit("lt", [i, size], {}, loc)
        (ok,) = w.emit("logical_and", [above, below], {}, loc)
        if position is None:
            position, valid = wrapped, ok
            continue
        (scaled,) = w.emit("mul", [position, size], {}, loc)
        (position,) = w.emit("add", [scaled, wrapped], {}, loc)
        (valid,) = w.emit("logical_and", [valid, ok], {}, loc)
    (flat,) = w.emit("where", [valid, position, w.constant(_OUT_OF_RANGE)], {}, loc)
    return flat


def _merged(w, view, dim: int, count: int, loc):
    """`view` with dims dim..dim+count-1 as one."""
    sizes = list(view.type.sizes)
    part = sizes[dim : dim + count]
    if all(s.isdigit() for s in part):
        size = 1
        for s in part:
            size *= int(s)
        merged = str(size)
    else:
        merged = "*".join(f"({s})" for s in part)
    (out,) = w.emit("reshape", [view], {"shape": sizes[:dim] + [merged] + sizes[dim + count :]},
                    loc)  # fmt: skip
    return out


def _getitem_list(w, node, src, items):
    """``x[:, [-1], :]``: one dim indexed by a constant int list (the others by basic indices).
    With a single advanced index the result keeps that dim in place, so it is the basic index
    with a full slice there, then the cat of one-element slices at the listed positions."""
    lists = [k for k, i in enumerate(items) if isinstance(i, list)]
    if len(lists) != 1 or any(i is Ellipsis or type(i) is bool or isinstance(i, (tuple, Node))
                              for i in items):  # fmt: skip
        raise Decline("advanced indexing other than one constant int list")
    k = lists[0]
    positions = items[k]
    basic = items[:k] + [slice(None)] + items[k + 1 :]
    if not isinstance(src, Node) or not hasattr(node.meta.get("example"), "dim"):
        raise Decline("an index of an unknown tensor")
    j = sum(1 for i in items[:k] if i is None or isinstance(i, slice))  # output dim of the list
    x = w.tensor(src)
    if len(items) - items.count(None) > len(x.type.sizes):
        raise Decline("too many indices")
    cur = x
    if any(not (isinstance(i, slice) and i == slice(None)) for i in basic):
        cur = _basic_index(w, node, x, basic)
    loc = node.meta.get("loc")
    parts = []
    for p in positions:
        attrs = {"start": p}
        if p != -1:
            attrs["end"] = p + 1
        if j != 0:
            attrs["dim"] = j
        if len(positions) == 1:
            w.emit_node(node, "slice", [cur], attrs)
            return
        (part,) = w.emit("slice", [cur], attrs, loc)
        parts.append(part)
    w.emit_node(node, "cat", parts, {"dim": j} if j else {})


def _basic_index(w, node, x, items):
    """The basic index `items` (slices, ints, None) of `x` as view nodes."""
    steps, j = [], 0
    for item in items:
        step = _index_step(w, item, j)
        j += item is None or isinstance(item, slice)
        if step is not None:
            steps.append(step)
    cur = x
    for op, attrs in steps:
        (cur,) = w.emit(op, [cur], attrs, node.meta.get("loc"))
    return cur
