"""Lowerings of the ops the model zoo's networks add (the third part of the table in
lowerings.py): ``arange``, ``split``/``chunk`` as slices, ``contiguous``,
``batch_norm`` (inference, and training as ops plus the running statistics' in-place update)
and the 2-d pools."""

from __future__ import annotations

import math
import re

import numpy as np

import kiln
from kiln._capture.decompose import Builder
from kiln._capture.graph_build import Decline, dtype_short
from kiln._capture.lowerings import _no, lowering
from kiln._capture.lowerings_shape import per_dim

# --- Factories -----------------------------------------------------------------------------------


def _s_arange(start=None, end=None, step=1, *, dtype=None, device=None, requires_grad=False,
              layout=None, pin_memory=False, out=None): ...  # fmt: skip


@lowering(_s_arange, "kiln.arange")
def _arange(w, node, a):
    _no(a["requires_grad"], a["layout"], a["pin_memory"], a["out"])
    if a["device"] is not None and kiln.device(a["device"]) != node.meta["example"].device:
        raise Decline("a device other than its example's")
    start, end, step = a["start"], a["end"], a["step"]
    if end is None:
        start, end = 0, start
    if a["dtype"] is kiln.bool:
        raise Decline("arange of bool")
    if any(type(v) is float for v in (start, end, step)):
        return _float_arange(w, node, start, end, step)
    if type(start) is not int:  # a run-time start (HF: arange(past, past + seq))
        return _arange_from(w, node, start, end, w.int_(step), a["dtype"])
    attrs = {"end": w.sym(end)}
    if start != 0:
        attrs["start"] = start
    if w.int_(step) != 1:
        attrs["step"] = w.int_(step)
    if a["dtype"] is not None and a["dtype"] != kiln.int64:
        attrs["dtype"] = dtype_short(a["dtype"])
    w.emit_node(node, "arange", [], attrs)


def _arange_from(w, node, start, end, step, dtype):
    """arange whose start is a run-time int: `start + step * arange(n)` for the n that eager's
    range has, computed in i64 and cast to the result's dtype."""
    if step == 0:
        raise Decline("a zero step (eager raises)")
    span = f"({w.sym(end)}) - ({w.sym(start)})"
    n = f"max(({span} + {step - 1}) floordiv {step}, 0)" if step > 0 else \
        f"max(({span} + {step + 1}) floordiv {step}, 0)"
    loc = node.meta.get("loc")
    (i,) = w.emit("arange", [], {"end": n}, loc)
    if step != 1:
        (i,) = w.emit("mul", [i, w.constant(step)], {}, loc)
    result = dtype_short(node.meta["example"].dtype)
    if result == "i64":
        w.emit_node(node, "add", [i, w.operand(start)], {})
        return
    (i,) = w.emit("add", [i, w.operand(start)], {}, loc)
    w.emit_node(node, "cast", [i], {"dtype": result})


def _float_arange(w, node, start, end, step):
    """arange with a float bound or step: eager's length (ceil in double) of constant bounds, and
    its values `start + i * step` computed in float64, then rounded to the result's dtype."""
    if not all(type(v) in (int, float) for v in (start, end, step)):
        raise Decline("a float range with a symbolic bound (its length depends on rounding)")
    dtype = node.meta["example"].dtype
    if not dtype.is_floating_point:
        raise Decline("a float range of integers")
    if step == 0 or not all(math.isfinite(v) for v in (start, end)):
        raise Decline("an invalid range (eager raises)")
    n = max(0, math.ceil((end - start) / step))
    loc = node.meta.get("loc")
    (i,) = w.emit("arange", [], {"end": n}, loc)
    (x,) = w.emit("cast", [i], {"dtype": "f64"}, loc)
    if step != 1:
        (x,) = w.emit("mul", [x, w.constant(float(step))], {}, loc)
    if start != 0:
        (x,) = w.emit("add", [x, w.constant(float(start))], {}, loc)
    w.emit_node(node, "cast", [x], {"dtype": dtype_short(dtype)})


def _s_linspace(start, end, steps, *, dtype=None, device=None, requires_grad=False, layout=None,
                pin_memory=False, out=None): ...  # fmt: skip


@lowering(_s_linspace, "kiln.linspace")
def _linspace(w, node, a):
    """linspace with constant bounds in float32 or float64, in eager's arithmetic to one ulp (the
    kernel may fuse a multiply-add): the step (end - start) / (steps - 1) in the result dtype,
    the first half counted up from start and the second down from end (so end is exact)."""
    _no(a["requires_grad"], a["layout"], a["pin_memory"], a["out"])
    start, end, steps = a["start"], a["end"], a["steps"]
    dtype = node.meta["example"].dtype
    if dtype not in (kiln.float32, kiln.float64) or node.meta["example"].device.type != "cpu":
        raise Decline("linspace of a dtype that rounds every step (or not on the CPU)")
    if not all(type(v) in (int, float) for v in (start, end)) or type(steps) is not int:
        raise Decline("linspace with bounds computed at run time")
    if steps < 2:
        raise Decline("linspace of fewer than two steps")
    short, loc = dtype_short(dtype), node.meta.get("loc")
    np_float = {"f32": np.float32, "f64": float}[short]
    s, e = np_float(start), np_float(end)
    step = float(np_float(np_float(e - s) / np_float(steps - 1)))
    (i,) = w.emit("arange", [], {"end": steps}, loc)
    (x,) = w.emit("cast", [i], {"dtype": short}, loc)
    (up,) = w.emit("mul", [x, w.constant(step)], {}, loc)
    (up,) = w.emit("add", [up, w.constant(float(s))], {}, loc)
    (back,) = w.emit("sub", [w.constant(float(steps - 1)), x], {}, loc)
    (back,) = w.emit("mul", [back, w.constant(step)], {}, loc)
    (back,) = w.emit("sub", [w.constant(float(e)), back], {}, loc)
    (first,) = w.emit("lt", [i, w.constant(steps // 2)], {}, loc)
    w.emit_node(node, "where", [first, up, back], {})


# --- Identities and layout -----------------------------------------------------------------------


def _s_contiguous(input, memory_format=None): ...


@lowering(_s_contiguous, "kiln.Tensor.contiguous")
def _contiguous(w, node, a):
    if a["memory_format"] not in (None, getattr(kiln, "contiguous_format", None)):
        raise Decline("a memory format other than contiguous")
    x = w.tensor(a["input"])
    if x.type.contiguous:  # eager returns the tensor itself
        w.values[id(node)] = x
        return
    w.emit_node(node, "contiguous", [x], {})


def _s_clone(input, *, memory_format=None): ...


@lowering(_s_clone, "kiln.clone", "kiln.Tensor.clone")
def _clone(w, node, a):
    """A copy: a new value in the graph (never the input), which functionalization needs for
    the in-place writes that usually follow. Only a dense input: eager keeps its strides."""
    if a["memory_format"] not in (None, getattr(kiln, "contiguous_format", None),
                                  getattr(kiln, "preserve_format", None)):  # fmt: skip
        raise Decline("a memory format other than contiguous")
    x = w.tensor(a["input"])
    if not x.type.contiguous:
        # An expanded input (a stride-0 dim: HF's causal_mask.expand(B, 1, -1, -1).clone())
        # overlaps itself, so eager's clone is dense, as torch's: the contiguous copy. A dense
        # permuted one keeps its strides in eager: that call stays.
        expanded = any(str(st) == "0" and str(sz) != "1"
                       for st, sz in zip(x.type.strides, x.type.sizes, strict=True))
        example = node.meta.get("example")
        if not (expanded and isinstance(example, kiln.Tensor) and example.is_contiguous()):
            raise Decline("a clone of a strided tensor (eager keeps its strides)")
        w.emit_node(node, "contiguous", [x], {})
        return
    w.emit_node(node, "contiguous", [x], {})


# --- Factories -----------------------------------------------------------------------------------


def _s_full(size, fill_value, *, dtype=None, layout=None, device=None, pin_memory=False,
            requires_grad=False, out=None): ...  # fmt: skip
def _s_filled(*size, dtype=None, layout=None, device=None, pin_memory=False,
              requires_grad=False, out=None): ...  # fmt: skip
def _s_full_like(input, fill_value, *, dtype=None, layout=None, device=None, pin_memory=False,
                 requires_grad=False, memory_format=None): ...  # fmt: skip
def _s_filled_like(input, *, dtype=None, layout=None, device=None, pin_memory=False,
                   requires_grad=False, memory_format=None): ...  # fmt: skip
def _s_new_full(input, size, fill_value, *, dtype=None, layout=None, device=None,
                pin_memory=False, requires_grad=False): ...  # fmt: skip
def _s_new_filled(input, *size, dtype=None, layout=None, device=None, pin_memory=False,
                  requires_grad=False): ...  # fmt: skip


def _emit_full(w, node, a, sizes, value) -> None:
    """A ``full`` node of the example's dtype (eager's choice from the value and defaults);
    `sizes`: SymInt texts."""
    _no(a["requires_grad"], a["layout"], a["pin_memory"], a.get("out"))
    example = node.meta.get("example")
    if not isinstance(example, kiln.Tensor) or example._device_str != "cpu":
        raise Decline("a factory on a device")
    if isinstance(value, kiln.Tensor):
        raise Decline("a tensor as the fill value")
    dtype = dtype_short(example.dtype)
    if hasattr(value, "meta"):  # a number computed at run time (a sampler's step count)
        loc = node.meta.get("loc")
        (zeros,) = w.emit("full", [], {"size": sizes, "value": 0, "dtype": dtype}, loc)
        (filled,) = w.emit("add", [zeros, w.operand(value)], {}, loc)
        w.emit_node(node, "cast", [filled], {"dtype": dtype})
        return
    w.emit_node(node, "full", [], {"size": sizes, "value": value, "dtype": dtype})


def _size_args(size):
    """`zeros(2, 3)`, `zeros((2, 3))` and `zeros(x.shape)` as one list."""
    if len(size) == 1 and isinstance(size[0], (tuple, list, kiln.Size)):
        return list(size[0])
    return list(size)


@lowering(_s_full, "kiln.full")
def _full(w, node, a):
    _emit_full(w, node, a, w.syms(list(a["size"])), a["fill_value"])


def _filled(value):
    def lower_filled(w, node, a):
        _emit_full(w, node, a, w.syms(_size_args(a["size"])), value)

    return lower_filled


def _filled_like(value):
    def lower_filled_like(w, node, a):
        _no(a["memory_format"])
        sizes = w.tensor(a["input"]).type.sizes
        _emit_full(w, node, a, list(sizes), a["fill_value"] if value is None else value)

    return lower_filled_like


def _new_filled(value):
    def lower_new_filled(w, node, a):
        w.tensor(a["input"])
        sizes = w.syms(list(a["size"]) if value is None else _size_args(a["size"]))
        _emit_full(w, node, a, sizes, a["fill_value"] if value is None else value)

    return lower_new_filled


lowering(_s_filled, "kiln.zeros")(_filled(0))
lowering(_s_filled, "kiln.ones")(_filled(1))
lowering(_s_full_like, "kiln.full_like")(_filled_like(None))
lowering(_s_filled_like, "kiln.zeros_like")(_filled_like(0))
lowering(_s_filled_like, "kiln.ones_like")(_filled_like(1))
lowering(_s_new_full, "kiln.Tensor.new_full")(_new_filled(None))
lowering(_s_new_filled, "kiln.Tensor.new_zeros")(_new_filled(0))
lowering(_s_new_filled, "kiln.Tensor.new_ones")(_new_filled(1))
# An empty tensor's contents are unspecified: zeros are one choice (the writes that follow,
# an in-place sampler or a copy, are what the program reads).
lowering(_s_filled, "kiln.empty")(_filled(0))
lowering(_s_filled_like, "kiln.empty_like")(_filled_like(0))
lowering(_s_new_filled, "kiln.Tensor.new_empty")(_new_filled(0))


# --- Splitting -----------------------------------------------------------------------------------


def _s_split(tensor, split_size_or_sections, dim=0): ...
def _s_split_method(input, split_size, dim=0): ...
def _s_chunk(input, chunks, dim=0): ...


def _slices(w, node, x, dim: int) -> None:
    """One ``slice`` per piece of a split along `dim`, as long as the pieces the capture saw; the
    last ends at the input's size, which may be symbolic (the capture guards the piece count)."""
    pieces = node.meta.get("example")
    if not isinstance(pieces, (tuple, list)) or not all(isinstance(p, kiln.Tensor) for p in pieces):
        raise Decline("split results that are not tensors")
    rank = len(x.type.sizes)
    if not -rank <= dim < rank:
        raise Decline("a dim out of range")
    dim %= rank
    size = x.type.sizes[dim]
    vals, start = [], 0
    for k, p in enumerate(pieces):
        length = int(p.shape[dim])
        attrs = {"end": size if k == len(pieces) - 1 else start + length}
        if start:
            attrs["start"] = start
        if dim:
            attrs["dim"] = dim
        (val,) = w.emit("slice", [x], attrs, node.meta.get("loc"))
        vals.append(val)
        start += length
    if size.isdigit() and start != int(size):
        raise Decline("pieces that do not cover the input")
    w.values[id(node)] = tuple(vals)


@lowering(_s_split, "kiln.split")
def _split(w, node, a):
    _slices(w, node, w.tensor(a["tensor"]), w.int_(a["dim"]))


@lowering(_s_split_method, "kiln.Tensor.split")
def _split_method(w, node, a):
    _slices(w, node, w.tensor(a["input"]), w.int_(a["dim"]))


@lowering(_s_chunk, "kiln.chunk", "kiln.Tensor.chunk")
def _chunk(w, node, a):
    _slices(w, node, w.tensor(a["input"]), w.int_(a["dim"]))


def _s_tensor_split(input, indices_or_sections, dim=0): ...


@lowering(_s_tensor_split, "kiln.tensor_split", "kiln.Tensor.tensor_split")
def _tensor_split(w, node, a):
    """Slices at the example's boundaries: given indices are constants; a section count splits
    a symbolic size at positions that depend on it, so only a constant size is sliced."""
    x, dim = w.tensor(a["input"]), w.int_(a["dim"])
    sections = a["indices_or_sections"]
    if isinstance(sections, kiln.Tensor) or hasattr(sections, "meta"):
        raise Decline("split positions computed at run time")
    if isinstance(sections, int) and not x.type.sizes[dim % len(x.type.sizes)].isdigit():
        raise Decline("sections of a symbolic size")
    _slices(w, node, x, dim)


# --- Normalization and pools ---------------------------------------------------------------------


def _s_batch_norm(input, running_mean, running_var, weight=None, bias=None, training=False,
                  momentum=0.1, eps=1e-05): ...  # fmt: skip


@lowering(_s_batch_norm, "kiln.nn.functional.batch_norm")
def _batch_norm(w, node, a):
    if a["training"] is True:
        return _batch_norm_training(w, node, a)
    if a["training"] is not False:
        raise Decline("batch_norm with a run-time training flag")
    if a["running_mean"] is None or a["running_var"] is None:
        raise Decline("batch_norm without running statistics")
    if a["weight"] is None and a["bias"] is not None:
        raise Decline("batch_norm bias without weight")
    ops = [w.tensor(a[k]) for k in ("input", "running_mean", "running_var")]
    ops += [w.tensor(a[k]) for k in ("weight", "bias") if a[k] is not None]
    attrs = {}
    if float(a["eps"]) != 1e-05:
        attrs["eps"] = float(a["eps"])
    w.emit_node(node, "batch_norm", ops, attrs)


def _batch_norm_training(w, node, a):
    """Training-mode batch_norm from the batch's statistics (biased variance), with the running
    statistics updated in place as eager does (unbiased variance, `momentum`): ops the joint
    graph differentiates, and `copy_` into the running buffers, written back once."""
    x, loc, eps, momentum = w.tensor(a["input"]), node.meta.get("loc"), a["eps"], a["momentum"]
    if type(eps) not in (int, float) or (momentum is not None
                                         and type(momentum) not in (int, float)):
        raise Decline("batch_norm with run-time eps or momentum")
    stats = (a["running_mean"], a["running_var"])
    if (stats[0] is None) != (stats[1] is None) or (momentum is None and stats[0] is not None):
        raise Decline("batch_norm training with a cumulative running average (momentum=None)")
    if a["weight"] is None and a["bias"] is not None:
        raise Decline("batch_norm bias without weight")
    if x.type.dtype not in ("f32", "f64", "bf16", "f16") or len(x.type.sizes) < 2:
        raise Decline("batch_norm training of a floating (N, C, ...) input only")
    digits = [re.fullmatch(r"[0-9]+", s) is not None for s in x.type.sizes]
    if not all(digits[1:]):
        raise Decline("batch_norm training with symbolic channels or spatial sizes")
    rank, channels = len(x.type.sizes), int(x.type.sizes[1])
    plane = math.prod(int(s) for s in x.type.sizes[2:])
    # A symbolic batch (a DataLoader's short last batch) keeps the node if every channel sees
    # at least two values whatever the batch is: the count is then a run-time number.
    count = int(x.type.sizes[0]) * plane if digits[0] else None
    if (count if count is not None else plane) <= 1:
        raise Decline("batch_norm training needs more than one value per channel")
    dims, shape = [0, *range(2, rank)], [1, channels] + [1] * (rank - 2)

    def op(name, *operands, **attrs):
        return w.emit(name, list(operands), attrs, loc)[0]

    narrow = x.type.dtype if x.type.dtype in ("bf16", "f16") else None
    if narrow:  # statistics and the affine map in float32, the result in the input's dtype
        x = op("cast", x, dtype="f32")
    mean = op("mean", x, dim=dims, keepdim=True)
    centered = op("sub", x, mean)
    var = op("mean", op("mul", centered, centered), dim=dims, keepdim=True)
    rstd = op("rsqrt", op("add", var, w.constant(float(eps))))
    if stats[0] is not None:
        m = float(momentum)
        if count is not None:
            unbiased = w.constant(m * count / (count - 1))
        else:  # m * n / (n - 1) for the run-time n = batch * plane
            n = op("sum", op("full", size=[x.type.sizes[0]], value=float(plane), dtype="f32"))
            unbiased = op("div", op("mul", n, w.constant(m)), op("sub", n, w.constant(1.0)))
        for buf, stat, factor in ((stats[0], mean, w.constant(m)), (stats[1], var, unbiased)):
            running = w.tensor(buf)
            kept = op("mul", running, w.constant(1.0 - m))
            moved = op("mul", op("reshape", stat, shape=[channels]), factor)
            op("copy_", running, op("add", kept, moved))
    def result(name, operands):
        if narrow:
            w.emit_node(node, "cast", [op(name, *operands)], {"dtype": narrow})
        else:
            w.emit_node(node, name, operands, {})

    if a["weight"] is None:
        return result("mul", [centered, rstd])
    scaled = op("mul", centered, rstd)
    weight = op("reshape", w.tensor(a["weight"]), shape=shape)
    if a["bias"] is None:
        return result("mul", [scaled, weight])
    bias = op("reshape", w.tensor(a["bias"]), shape=shape)
    result("add", [op("mul", scaled, weight), bias])


def _s_max_pool2d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
                  return_indices=False): ...  # fmt: skip
def _s_avg_pool2d(input, kernel_size, stride=None, padding=0, ceil_mode=False,
                  count_include_pad=True, divisor_override=None): ...  # fmt: skip
def _s_adaptive(input, output_size): ...


def _two(w, v) -> list[int]:
    values = w.ints(v)
    if len(values) == 1:
        values = values * 2
    if len(values) != 2:
        raise Decline("pool sizes need one or two values")
    return values


def _window(w, a) -> dict:
    """kernel_size, stride (left out when it is the kernel size), padding and ceil_mode."""
    attrs = {"kernel_size": _two(w, a["kernel_size"])}
    stride = a["stride"]
    if stride is not None and not (isinstance(stride, (tuple, list)) and not stride):
        if (values := _two(w, stride)) != _two(w, a["kernel_size"]):
            attrs["stride"] = values
    if (padding := _two(w, a["padding"])) != [0, 0]:
        attrs["padding"] = padding
    if a["ceil_mode"]:
        attrs["ceil_mode"] = True
    return attrs


@lowering(_s_max_pool2d, "kiln.max_pool2d", "kiln.nn.functional.max_pool2d")
def _max_pool2d(w, node, a):
    attrs = _window(w, a)
    if (dilation := _two(w, a["dilation"])) != [1, 1]:
        attrs["dilation"] = dilation
    if a["return_indices"] is True:
        return _max_pool2d_with_indices(w, node, a, attrs)
    _no(a["return_indices"])
    w.emit_node(node, "max_pool2d", [w.tensor(a["input"])], attrs)


def _s_max_pool2d_with_indices(input, kernel_size, stride=None, padding=0, dilation=1,
                               ceil_mode=False, return_indices=True): ...  # fmt: skip


@lowering(_s_max_pool2d_with_indices, "kiln.nn.functional.max_pool2d_with_indices")
def _max_pool2d_indices_spelling(w, node, a):
    _max_pool2d(w, node, {**a, "return_indices": True})


def eager_max_pick(b, windows, dim: int, points: int, keepdim: bool):
    """The position along `dim` (of `points` window points) that eager's max pools pick: the
    first maximum, or with a NaN in the window the last NaN."""
    first = b.argmax(windows, dim=dim, keepdim=keepdim)
    nan = b.isnan(windows)
    reversed_nan = b.cast(b.flip(nan, dims=[dim]), dtype="i32")
    last_nan = b.sub(points - 1, b.argmax(reversed_nan, dim=dim, keepdim=keepdim))
    return b.where(b.any(nan, dim=[dim], keepdim=keepdim), last_nan, first)


def _max_pool2d_with_indices(w, node, a, attrs) -> None:
    """``max_pool2d(..., return_indices=True)`` (SegNet's pooling before ``max_unpool2d``): the
    values are the max_pool2d node; the indices (positions in each input plane, ``h * W + w``)
    come from the windows as columns: the input padded with -inf, ``unfold`` into [N, C, kh*kw,
    L], the first maximum of each column (eager's pick; with a NaN in the window, the last NaN)
    and its window position turned into the input position. Constant spatial sizes only; a
    ceil_mode window past the edge stays eager."""
    b = Builder(w, node)
    x = w.tensor(a["input"])
    sizes = list(x.type.sizes)
    if len(sizes) not in (3, 4) or not all(s.isdigit() for s in sizes[-2:]):
        raise Decline("max_pool2d indices of symbolic planes")
    unbatched = len(sizes) == 3
    if unbatched:
        x = b.unsqueeze(x, dim=0)
        sizes = ["1", *sizes]
    (kh, kw), (dh, dw) = attrs["kernel_size"], attrs.get("dilation", [1, 1])
    sh, sw = attrs.get("stride", [kh, kw])
    ph, pw = attrs.get("padding", [0, 0])
    height, width = int(sizes[2]), int(sizes[3])
    oh = (height + 2 * ph - dh * (kh - 1) - 1) // sh + 1
    ow = (width + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    values = b.max_pool2d(x, **attrs)
    if [int(s) for s in values.type.sizes[2:]] != [oh, ow]:
        raise Decline("max_pool2d indices of a ceil_mode window past the edge")
    padded = x
    if ph or pw:
        padded = b.pad(x, pad=[pw, pw, ph, ph], mode="constant", value=float("-inf"))
    cols = b.unfold(padded, kernel_size=[kh, kw], dilation=[dh, dw], padding=[0, 0],
                    stride=[sh, sw])  # fmt: skip
    cols = b.reshape(cols, shape=[sizes[0], sizes[1], kh * kw, oh * ow])
    pick = eager_max_pick(b, cols, 2, kh * kw, keepdim=False)  # [N, C, L]
    position = b.arange(end=oh * ow, dtype="i64")
    row = b.add(b.mul(b.floor_divide(position, ow), sh), -ph)
    col = b.add(b.mul(b.remainder(position, ow), sw), -pw)
    row = b.add(row, b.mul(b.floor_divide(pick, kw), dh))
    col = b.add(col, b.mul(b.remainder(pick, kw), dw))
    indices = b.reshape(b.add(b.mul(row, width), col),
                        shape=[sizes[0], sizes[1], str(oh), str(ow)])  # fmt: skip
    if unbatched:
        values, indices = b.squeeze(values, dim=[0]), b.squeeze(indices, dim=[0])
    w.values[id(node)] = (values, indices)


@lowering(_s_avg_pool2d, "kiln.nn.functional.avg_pool2d")
def _avg_pool2d(w, node, a):
    attrs = _window(w, a)
    if not a["count_include_pad"]:
        attrs["count_include_pad"] = False
    if a["divisor_override"] is not None:
        attrs["divisor_override"] = w.int_(a["divisor_override"])
    w.emit_node(node, "avg_pool2d", [w.tensor(a["input"])], attrs)


def _s_max_pool3d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
                  return_indices=False): ...  # fmt: skip
def _s_avg_pool3d(input, kernel_size, stride=None, padding=0, ceil_mode=False,
                  count_include_pad=True, divisor_override=None): ...  # fmt: skip


def _three(w, v, name: str) -> list[int]:
    return per_dim(w, v, 3, name)


def _pool3d(w, node, a, op: str, dilation: list[int], extra: dict) -> None:
    """A 3-d pool of (N, C, D, H, W) as two 2-d pools, which a max or an average over a box
    separates into: over (H, W) of (N, C*D, H, W), then over D of (N, C, D, H'*W'). Padding,
    ceil_mode and count_include_pad act per dim, so each stage's divisor is its dims' share of
    eager's; a max keeps eager's first maximum (depth first, then rows, then columns)."""
    x = w.tensor(a["input"])
    if len(x.type.sizes) != 5:
        raise Decline(f"{op[:3]}_pool3d of an unbatched input")
    kernel = _three(w, a["kernel_size"], "kernel_size")
    stride = a["stride"]
    stride = kernel if stride is None or (isinstance(stride, (tuple, list)) and not stride) else (
        _three(w, stride, "stride"))
    padding = _three(w, a["padding"], "padding")
    loc = node.meta.get("loc")
    n, c, d, h, wd = x.type.sizes

    def stage(value, k: int, axes: slice, flat: list[str]):
        (shaped,) = w.emit("reshape", [value], {"shape": flat}, loc)
        attrs = dict(extra)

        def pick(v, one):
            return list(v[axes]) if k == 2 else [v[0], one]

        attrs["kernel_size"] = pick(kernel, 1)
        attrs["stride"] = pick(stride, 1)
        if any(pick(padding, 0)):
            attrs["padding"] = pick(padding, 0)
        if any(v != 1 for v in pick(dilation, 1)):
            attrs["dilation"] = pick(dilation, 1)
        if a["ceil_mode"]:
            attrs["ceil_mode"] = True
        (pooled,) = w.emit(op, [shaped], attrs, loc)
        return pooled

    def times(*sizes: str) -> str:
        return w.canonical("*".join(f"({s})" for s in sizes))

    rows = stage(x, 2, slice(1, 3), [n, times(c, d), h, wd])
    h2, w2 = rows.type.sizes[2:]
    depth = stage(rows, 1, slice(0, 1), [n, c, d, times(h2, w2)])
    w.emit_node(node, "reshape", [depth], {"shape": [n, c, depth.type.sizes[2], h2, w2]})


@lowering(_s_max_pool3d, "kiln.max_pool3d", "kiln.nn.functional.max_pool3d")
def _max_pool3d(w, node, a):
    _no(a["return_indices"])
    _pool3d(w, node, a, "max_pool2d", _three(w, a["dilation"], "dilation"), {})


@lowering(_s_avg_pool3d, "kiln.avg_pool3d", "kiln.nn.functional.avg_pool3d")
def _avg_pool3d(w, node, a):
    if a["divisor_override"] is not None:
        raise Decline("avg_pool3d with divisor_override (not one divisor per stage)")
    extra = {} if a["count_include_pad"] else {"count_include_pad": False}
    _pool3d(w, node, a, "avg_pool2d", [1, 1, 1], extra)


@lowering(_s_adaptive, "kiln.nn.functional.adaptive_avg_pool2d")
def _adaptive_avg_pool2d(w, node, a):
    x = w.tensor(a["input"])
    size = a["output_size"]
    size = list(size) if isinstance(size, (tuple, list)) else [size, size]
    if len(size) != 2:
        raise Decline("output_size needs two values")
    for k, s in enumerate(size):
        if s is None:  # torch's None keeps the input's size
            s = x.type.sizes[len(x.type.sizes) - 2 + k]
            if not s.isdigit():
                raise Decline("output_size None of a symbolic dim")
            size[k] = int(s)
    w.emit_node(node, "adaptive_avg_pool2d", [x], {"output_size": w.ints(size)})
