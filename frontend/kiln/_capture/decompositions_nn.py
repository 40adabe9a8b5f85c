"""Layers whose eager forms are kernels or Python the capture does not inline, decomposed into
graph ops for compiled code (decompose.py explains the mechanism): glu, softmin, prelu,
instance_norm without running statistics, adaptive max pooling (windows that vary as gathered
windows, eager's pick and gradient), 3-d average pooling whose input divides into the output,
bilinear, layer_norm / rms_norm whose parameters are wider than the input (autocast: float32
parameters, a bfloat16 input), attention with dropout, and max_unpool (a scatter into zeros)."""

from __future__ import annotations

import math

from kiln._capture.decompose import Builder, Decline, decomposition
from kiln._capture.graph_build import check_type
from kiln._capture.lowerings_nn import eager_max_pick
from kiln._capture.lowerings_random import _state as _philox_state
from kiln.nn._functional_conv import unpool_size

_F = "kiln.nn.functional."


def _const(size: str, what: str) -> int:
    """A size that must be known at compile time (a window, a halved dim)."""
    if not size.isdigit():
        raise Decline(f"{what} of a symbolic size")
    return int(size)


def _s_glu(input, dim=-1): ...


@decomposition(_s_glu, _F + "glu", "kiln.glu")
def _glu(b, input, dim):
    """The first half times the sigmoid of the second, along `dim`."""
    x = b.float_tensor(input)
    d = b.dim(b.int_(dim), b.rank(x))
    n = _const(b.sizes(x)[d], "glu")
    if n % 2:
        raise Decline("glu of an odd size (eager reports it)")
    first = b.slice(x, dim=d, start=0, end=n // 2)
    second = b.slice(x, dim=d, start=n // 2, end=n)
    return b.mul(first, b.sigmoid(second))


def _s_softmin(input, dim=None, _stacklevel=3, dtype=None): ...


@decomposition(_s_softmin, _F + "softmin")
def _softmin(b, input, dim, _stacklevel, dtype):
    if dim is None:
        raise Decline("softmin with an implicit dim")
    x = b.tensor(input)
    if dtype is not None:
        x = b.cast(x, dtype)
    return b.softmax(b.neg(x), dim=b.int_(dim))


def _s_prelu(input, weight): ...


@decomposition(_s_prelu, _F + "prelu", "kiln.prelu")
def _prelu(b, input, weight):
    """x where x > 0, else weight * x, the weight per channel (dim 1) or one for all."""
    x, w = b.float_tensor(input), b.tensor(weight)
    if b.dtype(w) != b.dtype(x) or b.rank(w) > 1:
        raise Decline("prelu's weight (eager reports it)")
    rank = b.rank(x)
    channels = b.sizes(w)[0] if b.rank(w) else "1"
    if channels != "1":
        if rank < 2 or b.sizes(x)[1] != channels:
            raise Decline("prelu's weight does not match the channels (eager reports it)")
        w = b.reshape(w, shape=["1", channels] + ["1"] * (rank - 2))
    elif rank == 0:
        w = b.reshape(w, shape=[])
    return b.where(b.gt(x, 0.0), x, b.mul(w, x))


def _s_instance_norm(input, running_mean=None, running_var=None, weight=None, bias=None,
                     use_input_stats=True, momentum=0.1, eps=1e-5): ...  # fmt: skip


@decomposition(_s_instance_norm, _F + "instance_norm")
def _instance_norm(b, input, running_mean, running_var, weight, bias, use_input_stats,
                   momentum, eps):  # fmt: skip
    """(x - mean) / sqrt(var + eps) over each sample's and channel's spatial dims, then the
    per-channel affine. Running statistics (an update or their use) stay eager."""
    if running_mean is not None or running_var is not None or use_input_stats is not True:
        raise Decline("instance_norm with running statistics")
    x = b.float_tensor(input)
    rank = b.rank(x)
    if rank < 3:
        raise Decline("instance_norm of an input without spatial dims")
    dims = list(range(2, rank))
    mean = b.mean(x, dim=dims, keepdim=True)
    var = b.var(x, dim=dims, keepdim=True, correction=0)
    out = b.mul(b.sub(x, mean), b.rsqrt(b.add(var, float(b.number(eps, "eps")))))
    per_channel = ["1", b.sizes(x)[1]] + ["1"] * (rank - 2)
    if weight is not None:
        out = b.mul(out, b.reshape(b.tensor(weight), shape=per_channel))
    if bias is not None:
        out = b.add(out, b.reshape(b.tensor(bias), shape=per_channel))
    return out


def _windows(b, x, output_size, spatial: int, name: str) -> list[int]:
    """The window of each of the last `spatial` dims for an adaptive pool whose input divides
    into `output_size` (windows that neither overlap nor vary); Decline otherwise."""
    sizes = b.sizes(x)[-spatial:]
    many = isinstance(output_size, (tuple, list))
    wanted = list(output_size) if many else [output_size] * spatial
    if len(wanted) != spatial:
        raise Decline(f"{name}'s output size")
    windows = []
    for size, out in zip(sizes, wanted, strict=True):
        n = _const(size, name)
        out = n if out is None else b.int_(out)
        if out <= 0 or n % out:
            raise Decline(f"{name} of {n} into {out}: windows of different sizes")
        windows.append(n // out)
    return windows


def _s_adaptive_max(input, output_size, return_indices=False): ...


def _window_rows(b, size: int, out: int):
    """Adaptive windows along a dim of `size` into `out`: [out * width] input positions, window
    i covering floor(i * size / out) .. ceil((i + 1) * size / out) - 1, each padded to the widest
    window by repeating its last position (which leaves a max unchanged). Returns the positions
    (a graph value) and the width."""
    width = max(-(-(i + 1) * size // out) - i * size // out for i in range(out))
    i = b.unsqueeze(b.arange(end=out, dtype="i64"), dim=1)  # [out, 1]
    start = b.floor_divide(b.mul(i, size), out)
    last = b.sub(b.floor_divide(b.add(b.mul(b.add(i, 1), size), out - 1), out), 1)
    k = b.unsqueeze(b.arange(end=width, dtype="i64"), dim=0)  # [1, width]
    return b.reshape(b.minimum(b.add(start, k), last), shape=[out * width]), width


def _adaptive_max_unequal(b, x, output_size, name: str):
    """adaptive_max_pool2d whose windows vary (7 into 3: windows of 3, 3 and 3 starting at 0, 2
    and 4): the windows gathered as [N, C, OH, OW, kh * kw] (two index_selects), the pick of each
    the first maximum (with a NaN, the last NaN, as eager), its value a gather, so the gradient
    reaches the picked element only, as eager's."""
    sizes = b.sizes(x)
    many = isinstance(output_size, (tuple, list))
    wanted = list(output_size) if many else [output_size] * 2
    outs = []
    for size, out in zip(sizes[-2:], wanted, strict=True):
        n = _const(size, name)
        outs.append(n if out is None else b.int_(out))
    if any(o <= 0 for o in outs):
        raise Decline(f"{name}'s output size")
    (oh, ow), (h, w) = outs, [int(s) for s in sizes[-2:]]
    rows, kh = _window_rows(b, h, oh)
    cols, kw = _window_rows(b, w, ow)
    n, c = sizes[0], sizes[1]
    windows = b.index_select(b.index_select(x, rows, dim=2), cols, dim=3)  # [N, C, OH*kh, OW*kw]
    windows = b.reshape(windows, shape=[n, c, oh, kh, ow, kw])
    windows = b.reshape(b.permute(windows, dims=[0, 1, 2, 4, 3, 5]), shape=[n, c, oh, ow, kh * kw])
    pick = eager_max_pick(b, windows, 4, kh * kw, keepdim=True)
    return b.squeeze(b.gather(windows, pick, dim=4), dim=[4])


def _adaptive_max(b, input, output_size, return_indices, spatial: int):
    """The max over each window of an input that divides into `output_size`: max_pool2d, a
    1-d input as a height of one. Windows that vary: _adaptive_max_unequal."""
    name = f"adaptive_max_pool{spatial}d"
    if return_indices:
        raise Decline(f"{name} with indices")
    x = b.tensor(input)
    if b.rank(x) != spatial + 2:
        raise Decline(f"{name} of an unbatched input")
    try:
        k = _windows(b, x, output_size, spatial, name)
    except Decline:
        if spatial != 2:
            raise
        return _adaptive_max_unequal(b, x, output_size, name)
    if spatial == 2:
        return b.max_pool2d(x, kernel_size=k, stride=k)
    y = b.max_pool2d(b.unsqueeze(x, dim=2), kernel_size=[1, *k], stride=[1, *k])
    return b.squeeze(y, dim=[2])


@decomposition(_s_adaptive_max, _F + "adaptive_max_pool2d")
def _adaptive_max_pool2d(b, input, output_size, return_indices):
    return _adaptive_max(b, input, output_size, return_indices, 2)


@decomposition(_s_adaptive_max, _F + "adaptive_max_pool1d", "kiln.adaptive_max_pool1d")
def _adaptive_max_pool1d(b, input, output_size, return_indices):
    return _adaptive_max(b, input, output_size, return_indices, 1)


def _s_adaptive_avg(input, output_size): ...


@decomposition(_s_adaptive_avg, _F + "adaptive_avg_pool3d")
def _adaptive_avg_pool3d(b, input, output_size):
    """Each window's mean: the input viewed as (N, C, D', kD, H', kH, W', kW), the window
    dims averaged."""
    x = b.float_tensor(input)
    if b.rank(x) != 5:
        raise Decline("adaptive_avg_pool3d of an unbatched input")
    k = _windows(b, x, output_size, 3, "adaptive_avg_pool3d")
    n, c, *spatial = b.sizes(x)
    shape = [n, c]
    for size, window in zip(spatial, k, strict=True):
        shape += [str(int(size) // window), str(window)]
    return b.mean(b.reshape(x, shape=shape), dim=[3, 5, 7])


def _s_bilinear(input1, input2, weight, bias=None, *, out=None): ...


@decomposition(_s_bilinear, _F + "bilinear", "kiln.bilinear")
def _bilinear(b, input1, input2, weight, bias, out):
    """y[n, o] = sum_ij x1[n, i] W[o, i, j] x2[n, j] + bias[o]: one GEMM of x1 with W laid out
    as (I, O * J), then a multiply by x2 and a sum over j."""
    if out is not None:
        raise Decline("bilinear with out=")
    x1, x2, w = b.float_tensor(input1), b.float_tensor(input2), b.float_tensor(weight)
    if b.rank(x1) != 2 or b.rank(x2) != 2 or b.rank(w) != 3:
        raise Decline("bilinear of inputs that are not matrices")
    n = b.sizes(x1)[0]
    o, i, j = b.sizes(w)
    if not (o.isdigit() and j.isdigit()):
        raise Decline("bilinear with a symbolic weight")
    flat = b.reshape(b.permute(w, dims=[1, 0, 2]), shape=[i, str(int(o) * int(j))])
    t = b.reshape(b.matmul(x1, flat), shape=[n, o, j])
    y = b.sum(b.mul(t, b.unsqueeze(x2, dim=1)), dim=[2])
    return y if bias is None else b.add(y, b.tensor(bias))


def _s_layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5,
                  cudnn_enable=True): ...  # fmt: skip
def _s_rms_norm(input, normalized_shape, weight=None, eps=None): ...


def _normalized(b, op: str, input, params: list, attrs: dict):
    """The op itself, or, for parameters of a wider dtype than the input (float32 weights of a
    bfloat16 input under autocast), the op on the input widened, then narrowed back: eager's
    kernel computes in float32 and gives the input's dtype."""
    x = b.float_tensor(input)
    params = [b.tensor(p) for p in params]
    wide = {b.dtype(p) for p in params} - {b.dtype(x)}
    if not wide:
        return getattr(b, op)(x, *params, **attrs)
    if len(wide) > 1 or any(b.dtype(p) != next(iter(wide)) for p in params):
        raise Decline(f"{op} with parameters of two dtypes")
    y = getattr(b, op)(b.cast(x, wide.pop()), *params, **attrs)
    return b.cast(y, b.dtype(x))


@decomposition(_s_layer_norm, _F + "layer_norm", "kiln.layer_norm")
def _layer_norm(b, input, normalized_shape, weight, bias, eps, cudnn_enable):
    if weight is None and bias is not None:
        raise Decline("layer_norm with a bias and no weight")
    attrs = {"normalized_shape": b.syms(normalized_shape)}
    if float(b.number(eps, "eps")) != 1e-5:
        attrs["eps"] = float(eps)
    return _normalized(b, "layer_norm", input, [p for p in (weight, bias) if p is not None],
                       attrs)


@decomposition(_s_rms_norm, _F + "rms_norm", "kiln.rms_norm")
def _rms_norm(b, input, normalized_shape, weight, eps):
    attrs = {"normalized_shape": b.syms(normalized_shape)}
    if eps is not None:
        attrs["eps"] = float(b.number(eps, "eps"))
    return _normalized(b, "rms_norm", input, [] if weight is None else [weight], attrs)


def _repeat_heads(b, t, heads: int):
    """Key or value heads [.., Hkv, S, E] repeated to `heads` as enable_gqa pairs them: query
    head h reads key head h // (heads / Hkv)."""
    sizes = b.sizes(t)
    kv = _const(sizes[-3], "grouped-query attention")
    if heads % kv:
        raise Decline("query heads not a multiple of key heads (eager reports it)")
    lead = sizes[:-3]
    spread = b.view(t, shape=[*lead, str(kv), "1", *sizes[-2:]])
    spread = b.expand(spread, size=[*lead, str(kv), str(heads // kv), *sizes[-2:]])
    return b.reshape(spread, shape=[*lead, str(heads), *sizes[-2:]])


def attention_decomposed(w, node, a):
    """scaled_dot_product_attention with attention dropout (what nn.MultiheadAttention and
    nn.TransformerEncoderLayer call while training) or grouped-query heads (enable_gqa), as
    eager's kernel computes it: the scores in float32 (float64 for float64 inputs), the mask or
    the causal triangle as -inf, softmax (zeros for a row whose keys are all masked), the
    probabilities dropped by a dropout op (one
    counter-based draw per probability in row-major order, the draws eager's dropout of the
    same tensor makes), times v, cast back to the input type. Called by the attention lowering
    (lowerings_shape.py), which keeps the library call for attention without either."""
    b = Builder(w, node)
    p = b.number(a["dropout_p"], "dropout_p")
    if a["attn_mask"] is not None and a["is_causal"]:
        raise Decline("attn_mask with is_causal (eager reports it)")
    q, k, v = (b.float_tensor(a[name]) for name in ("query", "key", "value"))
    dtype = b.dtype(q)
    if b.dtype(k) != dtype or b.dtype(v) != dtype:
        raise Decline("attention operands of different dtypes (eager reports it)")
    compute = "f64" if dtype == "f64" else "f32"
    q, k, v = (b.cast(t, compute) for t in (q, k, v))
    if a["enable_gqa"] and b.rank(q) >= 3:
        heads = _const(b.sizes(q)[-3], "grouped-query attention")
        k, v = _repeat_heads(b, k, heads), _repeat_heads(b, v, heads)
    L, E, S = b.sizes(q)[-2], b.sizes(q)[-1], b.sizes(k)[-2]
    scale = a["scale"] if a["scale"] is not None else 1.0 / math.sqrt(_const(E, "attention"))
    rank = b.rank(k)
    scores = b.mul(b.matmul(q, b.transpose(k, dim0=rank - 2, dim1=rank - 1)),
                   float(b.number(scale, "scale")))
    if a["is_causal"]:
        above = b.triu(b.full(size=[L, S], dtype="b8", value=True), diagonal=1)
        scores = b.masked_fill(scores, above, float("-inf"))
    elif a["attn_mask"] is not None:
        mask = b.tensor(a["attn_mask"])
        if b.dtype(mask) == "b8":
            scores = b.masked_fill(scores, b.logical_not(mask), float("-inf"))
        else:
            scores = b.add(scores, b.cast(mask, compute))
    last = b.rank(scores) - 1
    probs = b.softmax(scores, dim=last)
    if a["attn_mask"] is not None:  # a row with every key masked attends to nothing, as eager's
        fully = b.eq(b.amax(scores, dim=[last], keepdim=True), float("-inf"))
        probs = b.masked_fill(probs, fully, 0.0)
    if p:
        probs = b.dropout(probs, _philox_state(w, node, b.sizes(probs)), p=float(p))
    out = b.cast(b.matmul(probs, v), dtype)
    check_type(out, node.meta.get("example"), "scaled_dot_product_attention")
    w.values[id(node)] = out


def _s_max_unpool(input, indices, kernel_size, stride=None, padding=0, output_size=None): ...


def _max_unpool(b, input, indices, kernel_size, stride, padding, output_size, nd: int):
    """F.max_unpool{1,2}d: zeros of the output planes with the values scattered to their
    indices (positions in each plane), as eager's composite does; sizes known at compile time."""
    name = f"max_unpool{nd}d"
    x, idx = b.tensor(input), b.tensor(indices)
    sizes = b.sizes(x)
    if b.sizes(idx) != sizes or b.rank(x) not in (nd + 1, nd + 2):
        raise Decline(f"{name} arguments eager rejects")

    def ints(v):
        return v if v is None else b.ints(v)

    spatial = [_const(s, name) for s in sizes[-nd:]]
    try:
        out = unpool_size(nd, spatial, ints(kernel_size), ints(stride), ints(padding),
                          ints(output_size))  # fmt: skip
    except (TypeError, ValueError) as e:
        raise Decline(f"{name} arguments eager rejects: {e}") from None
    batched = len(sizes) == nd + 2
    if not batched:  # one image
        x, idx, sizes = b.unsqueeze(x, dim=0), b.unsqueeze(idx, dim=0), ["1", *sizes]
    n, c = sizes[0], sizes[1]
    plane = [n, c, math.prod(spatial)]
    zeros = b.full(size=[n, c, str(math.prod(out))], dtype=b.dtype(x), value=0)
    result = b.scatter(zeros, b.reshape(idx, shape=plane), b.reshape(x, shape=plane), dim=2)
    result = b.reshape(result, shape=[n, c, *out])
    return result if batched else b.squeeze(result, dim=[0])


@decomposition(_s_max_unpool, _F + "max_unpool2d")
def _max_unpool2d(b, input, indices, kernel_size, stride, padding, output_size):
    return _max_unpool(b, input, indices, kernel_size, stride, padding, output_size, 2)


@decomposition(_s_max_unpool, _F + "max_unpool1d")
def _max_unpool1d(b, input, indices, kernel_size, stride, padding, output_size):
    return _max_unpool(b, input, indices, kernel_size, stride, padding, output_size, 1)
