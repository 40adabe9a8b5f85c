"""Lowerings of the random ops whose numbers kernels draw themselves: dropout, ``rand``,
``randn``, ``rand_like``, ``randn_like`` and the channel dropouts (``dropout1d/2d/3d``,
``feature_dropout``: a ``bernoulli`` node with one draw per channel). Each becomes a
``philox_state`` node, which reserves the counters eager's op would reserve from the default
generator when the program runs, and the op over that state, which computes eager's values
from (seed, offset + element index). So a compiled dropout's mask is the mask eager draws for
the same generator state, and the generator ends where eager's ends. A call with an explicit
``generator=`` stays eager."""

from __future__ import annotations

import kiln
from kiln._capture.graph_build import Decline, dtype_short
from kiln._capture.lowerings import _no, lowering
from kiln._capture.lowerings_nn import _size_args
from kiln._capture.op_table import unobserved


def _s_f_dropout(input, p=0.5, training=True, inplace=False): ...
def _s_dropout(input, p=0.5, training=True, inplace=False, *, train=None, generator=None): ...
def _s_rand(*size, generator=None, out=None, dtype=None, layout=None, device=None,
            requires_grad=False, pin_memory=False): ...  # fmt: skip
def _s_rand_like(input, *, dtype=None, layout=None, device=None, requires_grad=False,
                 memory_format=None, generator=None): ...  # fmt: skip


def numel_sym(w, sizes: list[str]) -> str:
    """The number of elements of a tensor of `sizes` (SymInt texts) as SymInt text."""
    return w.canonical("*".join(f"({s})" for s in sizes)) if sizes else "1"


def _state(w, node, sizes: list[str]):
    """A ``philox_state`` node reserving one counter per element of `sizes`."""
    (state,) = w.emit("philox_state", [], {"count": numel_sym(w, sizes)}, node.meta.get("loc"))
    return state


def _dropout(w, node, a):
    """Dropout that keeps every element (evaluation, or p == 0) is its input; in training the
    kernel draws the mask."""
    training = a["training"] if a.get("train") is None else a["train"]
    p = a["p"]
    if type(training) is not bool or type(p) not in (int, float):
        raise Decline("dropout with run-time arguments")
    x = w.tensor(a["input"])
    if not training or p == 0:
        w.values[id(node)] = x
        return
    if a.get("generator") is not None:
        raise Decline("dropout with an explicit generator (compiled draws use the default one)")
    state = _state(w, node, x.type.sizes)
    if not a["inplace"] or unobserved(node, a["input"]):
        w.emit_node(node, "dropout", [x, state], {"p": float(p)})
        return
    (dropped,) = w.emit("dropout", [x, state], {"p": float(p)}, node.meta.get("loc"))
    w.emit_node(node, "copy_", [x, dropped], {})


def _s_bernoulli_(input, p=0.5, *, generator=None): ...


@lowering(_s_bernoulli_, "kiln.Tensor.bernoulli_")
def _bernoulli_(w, node, a):
    """``x.bernoulli_(p)`` of a number p (DropPath's ``x.new_empty(shape).bernoulli_(keep)``):
    1 with probability p, else 0, drawn as eager draws them, written into x."""
    p = a["p"]
    if type(p) not in (int, float) or a["generator"] is not None:
        raise Decline("bernoulli_ of a tensor p, a run-time p or an explicit generator")
    x = w.tensor(a["input"])
    state = _state(w, node, x.type.sizes)
    attrs = {"p": float(p), "size": list(x.type.sizes), "dtype": x.type.dtype}
    if unobserved(node, a["input"]):
        w.emit_node(node, "bernoulli", [state], attrs)
        return
    (drawn,) = w.emit("bernoulli", [state], attrs, node.meta.get("loc"))
    w.emit_node(node, "copy_", [x, drawn], {})


lowering(_s_f_dropout, "kiln.nn.functional.dropout")(_dropout)
lowering(_s_dropout, "kiln.dropout")(_dropout)


def _s_feature_dropout(input, p=0.5, train=True, inplace=False, *, training=None,
                       generator=None): ...  # fmt: skip


def _channel_dropout(batched):
    """F.dropout1d/2d/3d and kiln.feature_dropout: one Bernoulli draw per channel of
    (N, C, ...) input (per channel of (C, ...) when unbatched), as eager draws its noise
    tensor of shape (N, C, 1, ...), then input * noise / (1 - p)."""

    def lower(w, node, a):
        if "train" in a:  # kiln.feature_dropout(input, p, train, inplace, *, training=None)
            training = a["train"] if a["training"] is None else a["training"]
        else:
            training = a["training"]
        p = a["p"]
        if type(training) is not bool or type(p) not in (int, float):
            raise Decline("dropout with run-time arguments")
        x = w.tensor(a["input"])
        if not training or p == 0:
            w.values[id(node)] = x
            return
        if a.get("generator") is not None:
            raise Decline("dropout with an explicit generator (compiled draws use the default)")
        sizes = x.type.sizes
        rank = len(sizes)
        is_batched = batched(rank)
        if is_batched is None or rank < (2 if is_batched else 1):
            raise Decline("channel dropout of this rank (eager raises)")
        noise_sizes = (sizes[:2] + ["1"] * (rank - 2)) if is_batched else (
            sizes[:1] + ["1"] * (rank - 1))
        loc = node.meta.get("loc")
        state = _state(w, node, noise_sizes)
        (noise,) = w.emit("bernoulli", [state], {"p": 1.0 - p, "size": noise_sizes,
                                                 "dtype": x.type.dtype}, loc)  # fmt: skip
        if p != 1:
            (noise,) = w.emit("mul", [noise, w.constant(1.0 / (1.0 - p))], {}, loc)
        if not a["inplace"] or unobserved(node, a["input"]):
            w.emit_node(node, "mul", [x, noise], {})
            return
        (dropped,) = w.emit("mul", [x, noise], {}, loc)
        w.emit_node(node, "copy_", [x, dropped], {})

    return lower


lowering(_s_f_dropout, "kiln.nn.functional.dropout1d")(
    _channel_dropout(lambda rank: {2: False, 3: True}.get(rank)))
lowering(_s_f_dropout, "kiln.nn.functional.dropout2d")(_channel_dropout(lambda rank: True))
lowering(_s_f_dropout, "kiln.nn.functional.dropout3d")(_channel_dropout(lambda rank: rank == 5))
lowering(_s_feature_dropout, "kiln.feature_dropout")(_channel_dropout(lambda rank: True))


def _emit_sample(op: str, w, node, a, sizes: list[str]) -> None:
    _no(a["requires_grad"], a["layout"], a.get("pin_memory"), a.get("out"))
    if a["generator"] is not None:
        raise Decline(f"{op} with an explicit generator (compiled draws use the default one)")
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
    lowering(_s_rand, f"kiln.{_op}")(_sample(_op))
    lowering(_s_rand_like, f"kiln.{_op}_like")(_sample_like(_op))
