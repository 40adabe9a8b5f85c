"""Lowerings of the random ops whose numbers kernels draw themselves: dropout, ``rand``,
``randn``, ``rand_like``, ``randn_like``, the in-place samplers ``uniform_``, ``normal_`` and
``exponential_`` (``nn.init``'s fills are inlined into them), ``randint``/``randint_like`` and
``Tensor.random_(from, to)`` (a range of at most 2^32), the channel dropouts
(``dropout1d/2d/3d``, ``feature_dropout``: a ``bernoulli`` node with one draw per channel) and
the alpha dropouts (a ``bernoulli`` keep-mask and SELU's affine map), ``multinomial`` (keys or
running sums over eager's uniforms, an argmin, top-k or count) and ``randperm`` (an extern running
eager's Fisher-Yates). Each becomes a
``philox_state`` node, which reserves the counters eager's op would reserve from the default
generator when the program runs, and the op over that state, which computes eager's values
from (seed, offset + element index). So a compiled dropout's mask is the mask eager draws for
the same generator state, and the generator ends where eager's ends. A call with an explicit
``generator=`` stays eager."""

from __future__ import annotations

import struct

import kiln
from kiln._capture.decompose import Builder
from kiln._capture.graph_build import Decline, dtype_short
from kiln._capture.lowerings import _no, emit_into, lowering
from kiln._capture.lowerings_nn import _size_args


def _s_f_dropout(input, p=0.5, training=True, inplace=False): ...
def _s_dropout(input, p=0.5, training=True, inplace=False, *, train=None, generator=None): ...
def _s_feature_dropout(input, p=0.5, train=True, inplace=False, *, training=None,
                       generator=None): ...  # fmt: skip
def _s_alpha_dropout(input, p=0.5, train=False, inplace=False, *, training=None,
                     generator=None): ...  # fmt: skip
def _s_bernoulli_(input, p=0.5, *, generator=None): ...
def _s_rand(*size, generator=None, out=None, dtype=None, layout=None, device=None,
            requires_grad=False, pin_memory=False): ...  # fmt: skip
def _s_rand_like(input, *, dtype=None, layout=None, device=None, requires_grad=False,
                 memory_format=None, generator=None): ...  # fmt: skip


TARGETS: set[str] = set()  # the calls lowered here: the random ops the partitioner compiles


def _register(signature, *targets):
    TARGETS.update(targets)
    return lowering(signature, *targets)


def numel_sym(w, sizes: list[str]) -> str:
    """The number of elements of a tensor of `sizes` (SymInt texts) as SymInt text."""
    return w.canonical("*".join(f"({s})" for s in sizes)) if sizes else "1"


def _state(w, node, sizes: list[str]):
    """A ``philox_state`` node reserving one counter per element of `sizes`."""
    (state,) = w.emit("philox_state", [], {"count": numel_sym(w, sizes)}, node.meta.get("loc"))
    return state


def _no_generator(a, op: str) -> None:
    if a.get("generator") is not None:
        raise Decline(f"{op} with an explicit generator (compiled draws use the default one)")


def _dropping(w, node, a, training: str, override: str | None):
    """A dropout call's (input value, p) when it draws (training and p > 0); otherwise the node
    becomes its input and the result is None. `override` names the keyword-only spelling of
    the training flag (torch.dropout's `train`), which wins when given."""
    flag = a[training] if override is None or a[override] is None else a[override]
    p = a["p"]
    if type(flag) is not bool or type(p) not in (int, float):
        raise Decline("dropout with run-time arguments")
    x = w.tensor(a["input"])
    if not flag or p == 0:
        w.values[id(node)] = x
        return None
    _no_generator(a, "dropout")
    return x, p


def _dropout(training: str, override: str | None):
    """F.dropout / kiln.dropout: the kernel draws the mask."""

    def lower(w, node, a):
        if (drawn := _dropping(w, node, a, training, override)) is None:
            return
        x, p = drawn
        emit_into(w, node, a, a["inplace"], "dropout", [x, _state(w, node, x.type.sizes)],
                   {"p": float(p)})

    return lower


_register(_s_f_dropout, "kiln.nn.functional.dropout")(_dropout("training", None))
_register(_s_dropout, "kiln.dropout")(_dropout("training", "train"))


def _s_bernoulli(input, p=None, *, generator=None): ...


def _draws(w, p, sizes: list[str], dtype: str):
    """A bernoulli node's operands after the state and its attributes, for a number p or a
    probability tensor p (broadcast to `sizes`)."""
    attrs = {"size": sizes, "dtype": dtype}
    if type(p) in (int, float):
        return [], {**attrs, "p": float(p)}
    return [w.tensor(p)], attrs  # a graph value (a number computed at run time declines)


@_register(_s_bernoulli_, "kiln.Tensor.bernoulli_")
def _bernoulli_(w, node, a):
    """``x.bernoulli_(p)`` (DropPath's ``x.new_empty(shape).bernoulli_(keep)``): 1 with
    probability p (a number, or a tensor of them broadcast to x), else 0, drawn as eager draws
    them, written into x."""
    _no_generator(a, "bernoulli_")
    x = w.tensor(a["input"])
    sizes = list(x.type.sizes)
    probs, attrs = _draws(w, a["p"], sizes, x.type.dtype)
    emit_into(w, node, a, True, "bernoulli", [_state(w, node, sizes), *probs], attrs)


@_register(_s_bernoulli, "kiln.bernoulli", "kiln.Tensor.bernoulli")
def _bernoulli(w, node, a):
    """``kiln.bernoulli(probs)``: 1 with each element's probability, else 0, in probs' dtype;
    ``bernoulli(x, p)`` draws with the number p in x's shape and dtype."""
    _no_generator(a, "bernoulli")
    x = w.tensor(a["input"])
    sizes = list(x.type.sizes)
    p = a["input"] if a["p"] is None else a["p"]
    probs, attrs = _draws(w, p, sizes, x.type.dtype)
    w.emit_node(node, "bernoulli", [_state(w, node, sizes), *probs], attrs)


def _channel_dropout(batched, training: str, override: str | None):
    """F.dropout1d/2d/3d and kiln.feature_dropout: one Bernoulli draw per channel of
    (N, C, ...) input (per channel of (C, ...) when unbatched), as eager draws its noise
    tensor of shape (N, C, 1, ...), then input * noise / (1 - p)."""

    def lower(w, node, a):
        if (drawn := _dropping(w, node, a, training, override)) is None:
            return
        x, p = drawn
        sizes = x.type.sizes
        rank = len(sizes)
        is_batched = batched(rank)
        if is_batched is None or rank < (2 if is_batched else 1):
            raise Decline("channel dropout of this rank (eager raises)")
        lead = 2 if is_batched else 1
        noise_sizes = sizes[:lead] + ["1"] * (rank - lead)
        loc = node.meta.get("loc")
        state = _state(w, node, noise_sizes)
        (noise,) = w.emit("bernoulli", [state], {"p": 1.0 - p, "size": noise_sizes,
                                                 "dtype": x.type.dtype}, loc)  # fmt: skip
        if p != 1:
            (noise,) = w.emit("mul", [noise, w.constant(1.0 / (1.0 - p))], {}, loc)
        emit_into(w, node, a, a["inplace"], "mul", [x, noise], {})

    return lower


_register(_s_f_dropout, "kiln.nn.functional.dropout1d")(
    _channel_dropout(lambda rank: {2: False, 3: True}.get(rank), "training", None))
_register(_s_f_dropout, "kiln.nn.functional.dropout2d")(
    _channel_dropout(lambda rank: True, "training", None))
_register(_s_f_dropout, "kiln.nn.functional.dropout3d")(
    _channel_dropout(lambda rank: rank == 5, "training", None))
_register(_s_feature_dropout, "kiln.feature_dropout")(
    _channel_dropout(lambda rank: True, "train", "training"))


_SELU_SATURATION = 1.7580993408473766  # -scale * alpha of SELU, where dropped units go


def _alpha_dropout(feature: bool, training: str, override: str | None):
    """kiln.alpha_dropout / feature_alpha_dropout (F's forms call them): dropped units go to
    SELU's saturation value, then the affine map (a, b) that keeps zero mean and unit variance,
    computed op by op as eager computes it, over the keep-mask eager draws (one draw per element,
    or per channel of (N, C, ...) input)."""

    def lower(w, node, a):
        if (drawn := _dropping(w, node, a, training, override)) is None:
            return
        x, p = drawn
        if x.type.dtype not in ("f16", "bf16", "f32", "f64"):
            raise Decline("alpha dropout of a non-floating input (eager raises)")
        loc = node.meta.get("loc")
        if p == 1:  # eager: input * 0 (the affine map is undefined)
            emit_into(w, node, a, a["inplace"], "mul", [x, w.constant(0.0)], {})
            return
        sizes = x.type.sizes
        if feature:
            if len(sizes) < 2:
                raise Decline("feature alpha dropout of fewer than 2 dims (eager raises)")
            sizes = sizes[:2] + ["1"] * (len(sizes) - 2)
        state = _state(w, node, sizes)
        (noise,) = w.emit("bernoulli", [state], {"p": 1.0 - p, "size": sizes,
                                                 "dtype": x.type.dtype}, loc)  # fmt: skip
        scale = 1.0 / ((_SELU_SATURATION * _SELU_SATURATION * p + 1) * (1 - p)) ** 0.5
        (dropped,) = w.emit("sub", [noise, w.constant(1.0)], {}, loc)
        (shift,) = w.emit("mul", [dropped, w.constant(_SELU_SATURATION * scale)], {}, loc)
        (shift,) = w.emit("add", [shift, w.constant(_SELU_SATURATION * scale * p)], {}, loc)
        (kept,) = w.emit("mul", [noise, w.constant(scale)], {}, loc)
        (scaled,) = w.emit("mul", [x, kept], {}, loc)
        emit_into(w, node, a, a["inplace"], "add", [scaled, shift], {})

    return lower


def _s_f_alpha_dropout(input, p=0.5, training=False, inplace=False): ...


_register(_s_alpha_dropout, "kiln.alpha_dropout")(_alpha_dropout(False, "train", "training"))
_register(_s_alpha_dropout, "kiln.feature_alpha_dropout")(
    _alpha_dropout(True, "train", "training"))
_register(_s_f_alpha_dropout, "kiln.nn.functional.alpha_dropout")(
    _alpha_dropout(False, "training", None))
_register(_s_f_alpha_dropout, "kiln.nn.functional.feature_alpha_dropout")(
    _alpha_dropout(True, "training", None))


def _emit_sample(op: str, w, node, a, sizes: list[str]) -> None:
    _no(a["requires_grad"], a["layout"], a.get("pin_memory"), a.get("out"))
    _no_generator(a, op)
    example = node.meta.get("example")
    if not isinstance(example, kiln.Tensor) or example._device_str != "cpu":
        raise Decline("a factory on a device")
    state = _state(w, node, sizes)
    w.emit_node(node, op, [state], {"size": sizes, "dtype": dtype_short(example.dtype)})


def _sample(op: str):
    def lower(w, node, a):
        _emit_sample(op, w, node, a, w.syms(_size_args(a["size"])))

    return lower


def _sample_like(op: str):
    def lower(w, node, a):
        _no(a["memory_format"])
        _emit_sample(op, w, node, a, list(w.tensor(a["input"]).type.sizes))

    return lower


for _op in ("rand", "randn"):
    _register(_s_rand, f"kiln.{_op}")(_sample(_op))
    _register(_s_rand_like, f"kiln.{_op}_like")(_sample_like(_op))


# --- In-place samplers: uniform_, normal_, exponential_ ---------------------------------------


def _s_in_place_sampler(input, *args, generator=None, **kwargs): ...


_ACC = {"f16": "f32", "bf16": "f32", "f32": "f32", "f64": "f64"}  # eager's SampleAcc


def _sampler_numbers(a, names: tuple[str, ...], defaults: tuple[float, ...]) -> list[float]:
    """The sampler's number arguments, positional or by name (``from`` is a Python keyword)."""
    given = list(a["args"])
    if len(given) > len(names) or any(k not in names for k in a["kwargs"]):
        raise Decline("sampler arguments the compiled draw does not take")
    values = []
    for k, (name, default) in enumerate(zip(names, defaults, strict=True)):
        v = given[k] if k < len(given) else a["kwargs"].get(name, default)
        if type(v) not in (int, float):
            raise Decline(f"a run-time {name} (compiled draws take numbers)")
        values.append(float(v))
    return values


def _in_place_draw(draw):
    """``x.sampler_(...)``: the draw computed as eager's kernel computes it (in eager's
    accumulation type: float32 for the narrow floats), rounded to x's dtype, written into x."""

    def lower(w, node, a):
        _no_generator(a, target_name_of(node))
        x = w.tensor(a["input"])
        if x.type.dtype not in _ACC:
            raise Decline("a sampler of a non-floating tensor (eager raises)")
        acc = _ACC[x.type.dtype]
        loc = node.meta.get("loc")

        def emit(op, *operands, **attrs):
            ops = [v if hasattr(v, "handle") else w.constant(v) for v in operands]
            return w.emit(op, ops, attrs, loc)[0]

        value = draw(a, emit, _state(w, node, list(x.type.sizes)), list(x.type.sizes),
                     x.type.dtype, acc)
        if acc != x.type.dtype:
            value = emit("cast", value, dtype=x.type.dtype)
        w.emit_node(node, "copy_", [x, value], {})

    return lower


def target_name_of(node) -> str:
    return getattr(node.target, "__name__", "sampler")


def _uniform(a, emit, state, sizes, dtype, acc):
    """lo + (to - from) * u, u the dtype's uniform (exact in it), rounded once to `acc` as
    eager's fused multiply-add rounds it: the product of two float32s is exact in float64."""
    lo, hi = _sampler_numbers(a, ("from", "to"), (0.0, 1.0))
    u = emit("rand", state, size=sizes, dtype=dtype)
    if (lo, hi) == (0.0, 1.0):
        return emit("cast", u, dtype=acc) if acc != dtype else u
    wide = emit("cast", u, dtype="f64") if dtype != "f64" else u
    if acc == "f32":  # eager's float32 constants
        lo, width = _float32(lo), _float32(hi - lo)
    else:
        width = hi - lo
    value = emit("add", emit("mul", wide, width), lo)
    return emit("cast", value, dtype=acc) if acc != "f64" else value


def _float32(v: float) -> float:
    return struct.unpack("f", struct.pack("f", v))[0]


def _normal(a, emit, state, sizes, dtype, acc):
    """mean + std * z, z eager's Box-Muller normal in `acc`."""
    mean, std = _sampler_numbers(a, ("mean", "std"), (0.0, 1.0))
    if std < 0:
        raise Decline("a negative std (eager raises)")
    z = emit("randn", state, size=sizes, dtype=acc)
    if (mean, std) == (0.0, 1.0):
        return z
    return emit("add", emit("mul", z, std), mean)


def _exponential(a, emit, state, sizes, dtype, acc):
    """-log(1 - u) / lambd, u the dtype's uniform widened to `acc` (1 - u is in (0, 1])."""
    (rate,) = _sampler_numbers(a, ("lambd",), (1.0,))
    if not rate > 0:
        raise Decline("a rate that is not positive (eager raises)")
    u = emit("rand", state, size=sizes, dtype=dtype)
    if acc != dtype:
        u = emit("cast", u, dtype=acc)
    return emit("div", emit("neg", emit("log", emit("sub", 1.0, u))), rate)


_register(_s_in_place_sampler, "kiln.Tensor.uniform_")(_in_place_draw(_uniform))
_register(_s_in_place_sampler, "kiln.Tensor.normal_")(_in_place_draw(_normal))
_register(_s_in_place_sampler, "kiln.Tensor.exponential_")(_in_place_draw(_exponential))


# --- randint ------------------------------------------------------------------------------------


def _s_randint(low=None, high=None, size=None, *, generator=None, dtype=None, device=None,
               requires_grad=False, out=None, layout=None, pin_memory=False): ...  # fmt: skip
def _s_randint_like(input, low=None, high=None, *, dtype=None, layout=None, device=None,
                    requires_grad=False, memory_format=None, generator=None): ...  # fmt: skip


def _emit_randint(w, node, a, low, high, sizes) -> None:
    if low is None:  # randint(high, size)
        low, high = 0, high
    if type(low) is not int or type(high) is not int:
        raise Decline("randint bounds computed at run time")
    _no(a["requires_grad"], a.get("out"), a.get("layout"), a.get("pin_memory"))
    _no_generator(a, "randint")
    example = node.meta.get("example")
    if not isinstance(example, kiln.Tensor) or example._device_str != "cpu":
        raise Decline("a factory on a device")
    w.emit_node(node, "randint", [_state(w, node, sizes)],
                {"size": sizes, "dtype": dtype_short(example.dtype), "low": low, "high": high})


@_register(_s_randint, "kiln.randint")
def _randint(w, node, a):
    """randint(high, size) or randint(low, high, size): the draws eager's random_ makes."""
    low, high, size = a["low"], a["high"], a["size"]
    if size is None:
        low, high, size = None, low, high
    _emit_randint(w, node, a, low, high, w.syms(_size_args(size)))


@_register(_s_randint_like, "kiln.randint_like")
def _randint_like(w, node, a):
    _no(a["memory_format"])
    low, high = (None, a["low"]) if a["high"] is None else (a["low"], a["high"])
    _emit_randint(w, node, a, low, high, list(w.tensor(a["input"]).type.sizes))


def _s_random_(input, *args, generator=None, **kwargs): ...


@_register(_s_random_, "kiln.Tensor.random_")
def _random_(w, node, a):
    """``x.random_(to)`` / ``x.random_(from, to)``: eager's integers of [from, to) in x's dtype
    (a range of at most 2^32), written into x; ``random_()`` over a dtype's whole range
    stays eager."""
    given = list(a["args"]) + [a["kwargs"][k] for k in ("from", "to") if k in a["kwargs"]]
    if len(given) == 1:
        low, high = 0, given[0]
    elif len(given) == 2:
        low, high = given
    else:
        raise Decline("random_() over the dtype's whole range")
    if type(low) is not int or type(high) is not int:
        raise Decline("random_ bounds computed at run time")
    _no_generator(a, "random_")
    x = w.tensor(a["input"])
    sizes = list(x.type.sizes)
    (drawn,) = w.emit("randint", [_state(w, node, sizes)],
                      {"size": sizes, "dtype": x.type.dtype, "low": low, "high": high},
                      node.meta.get("loc"))  # fmt: skip
    w.emit_node(node, "copy_", [x, drawn], {})


# --- multinomial ------------------------------------------------------------------------------


def _s_multinomial(input, num_samples, replacement=False, *, generator=None, out=None): ...


@_register(_s_multinomial, "kiln.multinomial", "kiln.Tensor.multinomial")
def _multinomial(w, node, a):
    """``kiln.multinomial(probs, k, replacement)`` as eager samples it (runtime/ops/
    random_multinomial.cc), from the same counters: without replacement, row r's category c
    gets the key Exp(1) / w[c] from counter r * n + c (a zero weight never wins) and the k
    smallest keys are the sample, first the smallest (k = 1, a language model's next token:
    one argmin); with replacement, sample j of row r is the first category whose running sum
    of the weights (in float64, in order) exceeds u * total, u from counter r * k + j, at most
    the last category of non-zero weight. Like eager's, the weights are taken in float64. The
    compiled draw does not check the weights (eager raises for a negative, infinite or NaN
    weight, a row summing to 0, or fewer non-zero weights than samples without replacement):
    such rows give some category of the row."""
    _no(a["out"])
    _no_generator(a, "multinomial")
    k, replacement = a["num_samples"], a["replacement"]
    if type(k) is not int or type(replacement) is not bool:
        raise Decline("multinomial with run-time arguments")
    probs = w.tensor(a["input"])
    sizes = list(probs.type.sizes)
    if probs.type.dtype not in _ACC or len(sizes) not in (1, 2) or k <= 0:
        raise Decline("multinomial arguments eager rejects")
    n = sizes[-1]
    if not replacement and k > 1 and not (n.isdigit() and k <= int(n)):
        raise Decline("multinomial without replacement of k > 1 from a run-time size")
    b = Builder(w, node)
    weights = probs if probs.type.dtype == "f64" else b.cast(probs, dtype="f64")
    positive = b.gt(weights, 0.0)
    if not replacement:
        u = b.rand(_state(w, node, sizes), size=sizes, dtype="f64")
        exponential = b.neg(b.log(b.sub(1.0, u)))
        keys = b.where(positive, b.div(exponential, weights), float("inf"))
        if k == 1:
            sample = b.argmin(keys, dim=-1, keepdim=True)
        else:
            sample = b.topk_indices(keys, k=k, dim=-1, largest=False, sorted=True)
    else:
        drawn = sizes[:-1] + [str(k)]
        u = b.rand(_state(w, node, drawn), size=drawn, dtype="f64")
        running = b.cumsum(weights, dim=-1)
        total = b.slice(running, dim=-1, start=w.canonical(f"{n} - 1"), end=n, step=1)
        target = b.unsqueeze(b.mul(u, total), dim=-1)  # [.., k, 1]
        below = b.le(b.unsqueeze(running, dim=-2), target)  # [.., k, n]
        first_above = b.sum(below, dim=[-1], keepdim=False, dtype="i64")
        positions = b.arange(end=n, dtype="i64")
        last = b.amax(b.where(positive, positions, -1), dim=[-1], keepdim=True)
        sample = b.minimum(first_above, last)
    w.values[id(node)] = sample


# --- randperm ---------------------------------------------------------------------------------


def _s_randperm(n, *, generator=None, out=None, dtype=None, layout=None, device=None,
                requires_grad=False, pin_memory=False): ...  # fmt: skip


@_register(_s_randperm, "kiln.randperm")
def _randperm(w, node, a):
    """``kiln.randperm(n)``: eager's permutation from the same n counters (Fisher-Yates is
    sequential, so a ``randperm`` extern computes it from the reserved state), in the dtype eager
    gives (int64 unless asked)."""
    _no(a["requires_grad"], a["layout"], a.get("pin_memory"), a.get("out"))
    _no_generator(a, "randperm")
    example = node.meta.get("example")
    if not isinstance(example, kiln.Tensor) or example._device_str != "cpu":
        raise Decline("a factory on a device")
    n = w.sym(a["n"])
    w.emit_node(node, "randperm", [_state(w, node, [n])],
                {"n": n, "dtype": dtype_short(example.dtype)})
