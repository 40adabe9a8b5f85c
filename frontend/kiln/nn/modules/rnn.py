"""Recurrent layers (torch.nn.RNN, LSTM, GRU and their cells), with torch's parameters, names,
initialization, shapes and gate maths, so a torch state_dict loads and outputs match.

A layer projects the whole input sequence through ``weight_ih`` in one matmul and then steps
through time with the hidden projection only: the recurrence is inherently sequential, the input
half of each gate is not. The steps are ordinary differentiable ops, so training needs nothing
more.

A PackedSequence runs the same way over its time-major rows: step ``t`` advances only the first
``batch_sizes[t]`` (still running) sequences, so each sequence's final state is the one at its own
last step, and the reverse direction starts each sequence at its own end.
"""

from __future__ import annotations

import math
import numbers
import warnings

import kiln
from kiln.nn import functional as F
from kiln.nn import init
from kiln.nn.modules.module import Module
from kiln.nn.parameter import Parameter
from kiln.nn.utils.rnn import PackedSequence

__all__ = ["GRU", "GRUCell", "LSTM", "LSTMCell", "RNN", "RNNBase", "RNNCell", "RNNCellBase"]

_GATES = {"LSTM": 4, "GRU": 3, "RNN_TANH": 1, "RNN_RELU": 1}


# ---- one step of each cell kind ------------------------------------------------------------------
# `gi` is the input projection x @ W_ih^T + b_ih (already computed for the whole sequence).


def _rnn_step(activation):
    def step(gi, state, w_hh, b_hh, w_hr):
        return activation(gi + F.linear(state, w_hh, b_hh))

    return step


def _lstm_step(gi, state, w_hh, b_hh, w_hr):
    h, c = state
    i, f, g, o = (gi + F.linear(h, w_hh, b_hh)).chunk(4, -1)
    c = f.sigmoid() * c + i.sigmoid() * g.tanh()
    h = o.sigmoid() * c.tanh()
    if w_hr is not None:
        h = F.linear(h, w_hr)
    return h, c


def _gru_step(gi, h, w_hh, b_hh, w_hr):
    gh = F.linear(h, w_hh, b_hh)
    i_r, i_z, i_n = gi.chunk(3, -1)
    h_r, h_z, h_n = gh.chunk(3, -1)
    r = (i_r + h_r).sigmoid()
    z = (i_z + h_z).sigmoid()
    n = (i_n + r * h_n).tanh()
    return n + z * (h - n)  # (1 - z) * n + z * h


def _step_of(mode):
    if mode == "LSTM":
        return _lstm_step
    if mode == "GRU":
        return _gru_step
    return _rnn_step(kiln.tanh if mode == "RNN_TANH" else kiln.relu)


def _hidden_of(state, mode):
    return state[0] if mode == "LSTM" else state


# A state is one tensor or an LSTM's (h, c); these act on its batch rows either way.


def _rows(state, start, stop):
    if isinstance(state, tuple):
        return tuple(s[start:stop] for s in state)
    return state[start:stop]


def _cat_rows(states):
    if isinstance(states[0], tuple):
        return tuple(kiln.cat(parts, 0) for parts in zip(*states, strict=True))
    return kiln.cat(states, 0)


def _select_batch(state, indices):
    if indices is None:
        return state
    if isinstance(state, tuple):
        return tuple(s.index_select(1, indices) for s in state)
    return state.index_select(1, indices)


def _packed_forward(step, gi, state, sizes, weights, mode):
    """Outputs and final state of one forward direction over packed rows ``gi``."""
    finished, hs, start, rows = [], [], 0, sizes[0]
    for n in sizes:
        if n < rows:  # sequences n..rows-1 ended at the previous step: keep their state
            finished.append(_rows(state, n, rows))
            state, rows = _rows(state, 0, n), n
        state = step(gi[start : start + n], state, *weights)
        hs.append(_hidden_of(state, mode))
        start += n
    # Later-finishing sequences have lower indices, so the pieces go back in reverse.
    return kiln.cat(hs, 0), (_cat_rows([state, *reversed(finished)]) if finished else state)


def _packed_reverse(step, gi, initial, sizes, weights, mode):
    """The reverse direction: each sequence joins, from ``initial``, at its own last step."""
    ends = [0]
    for n in sizes:
        ends.append(ends[-1] + n)
    hs, state, rows = [], None, 0
    for t in range(len(sizes) - 1, -1, -1):
        n = sizes[t]
        if n > rows:
            fresh = _rows(initial, rows, n)
            state, rows = (fresh if state is None else _cat_rows([state, fresh])), n
        state = step(gi[ends[t] : ends[t + 1]], state, *weights)
        hs.append(_hidden_of(state, mode))
    hs.reverse()
    return kiln.cat(hs, 0), state


def _padded_direction(step, gi, state, reverse, weights, mode):
    """Outputs and final state of one direction over a padded ``(T, B, ...)`` ``gi``."""
    # One unbind, not gi[t] per step: its backward stacks the steps' gradients once, where each
    # select's would add a zero-padded full-size gradient (quadratic in the length).
    inputs = gi.unbind(0)
    steps = range(gi.shape[0] - 1, -1, -1) if reverse else range(gi.shape[0])
    hs = []
    for t in steps:
        state = step(inputs[t], state, *weights)
        hs.append(_hidden_of(state, mode))
    if reverse:
        hs.reverse()
    return kiln.stack(hs, 0), state


# ---- the multi-layer modules ---------------------------------------------------------------------


class RNNBase(Module):
    """The parameters and the layer/direction loop shared by RNN, LSTM and GRU."""

    def __init__(
        self,
        mode,
        input_size,
        hidden_size,
        num_layers=1,
        bias=True,
        batch_first=False,
        dropout=0.0,
        bidirectional=False,
        proj_size=0,
        device=None,
        dtype=None,
    ) -> None:
        super().__init__()
        _check_options(mode, hidden_size, num_layers, dropout, proj_size)
        self.mode = mode
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.num_layers = num_layers
        self.bias = bias
        self.batch_first = batch_first
        self.dropout = float(dropout)
        self.bidirectional = bidirectional
        self.proj_size = proj_size
        directions = 2 if bidirectional else 1
        real_hidden = proj_size if proj_size > 0 else hidden_size
        gate_size = _GATES[mode] * hidden_size
        fk = {"device": device, "dtype": dtype}
        self._flat_weights_names = []
        for layer in range(num_layers):
            for direction in range(directions):
                layer_input = input_size if layer == 0 else real_hidden * directions
                suffix = f"_l{layer}" + ("_reverse" if direction == 1 else "")
                shapes = [
                    ("weight_ih", (gate_size, layer_input)),
                    ("weight_hh", (gate_size, real_hidden)),
                ]
                if bias:
                    shapes += [("bias_ih", (gate_size,)), ("bias_hh", (gate_size,))]
                if proj_size > 0:
                    shapes.append(("weight_hr", (proj_size, hidden_size)))
                for name, shape in shapes:
                    setattr(self, name + suffix, Parameter(kiln.empty(shape, **fk)))
                    self._flat_weights_names.append(name + suffix)
        self.reset_parameters()

    @property
    def _flat_weights(self):
        return [getattr(self, n) for n in self._flat_weights_names]

    @property
    def all_weights(self):
        """Per layer and direction, its parameters in registration order (as torch)."""
        per = len(self._flat_weights_names) // (self.num_layers * (2 if self.bidirectional else 1))
        w = self._flat_weights
        return [w[i : i + per] for i in range(0, len(w), per)]

    def reset_parameters(self) -> None:
        """Every weight and bias from U(-1/sqrt(hidden_size), 1/sqrt(hidden_size)), as torch."""
        stdv = 1.0 / math.sqrt(self.hidden_size) if self.hidden_size > 0 else 0
        for weight in self.parameters():
            init.uniform_(weight, -stdv, stdv)

    def flatten_parameters(self) -> None:
        """Accepted for torch compatibility: kiln's weights need no packing."""

    def _weights(self, layer, direction):
        suffix = f"_l{layer}" + ("_reverse" if direction == 1 else "")

        def get(name):
            return getattr(self, name + suffix, None)

        return get("weight_ih"), get("bias_ih"), get("weight_hh"), get("bias_hh"), get("weight_hr")

    def _initial_state(self, input, hx, batch, batched):
        directions = 2 if self.bidirectional else 1
        out_size = self.proj_size if self.proj_size > 0 else self.hidden_size
        h_shape = (self.num_layers * directions, batch, out_size)
        c_shape = (self.num_layers * directions, batch, self.hidden_size)
        fk = {"dtype": input.dtype, "device": input.device}
        if hx is None:
            h = kiln.zeros(h_shape, **fk)
            return (h, kiln.zeros(c_shape, **fk)) if self.mode == "LSTM" else h
        states = hx if self.mode == "LSTM" else (hx,)
        if self.mode == "LSTM" and (not isinstance(hx, (tuple, list)) or len(hx) != 2):
            raise RuntimeError("LSTM: hx must be a tuple (h_0, c_0)")
        checked = []
        for s, shape in zip(states, (h_shape, c_shape), strict=False):
            if not batched:
                if s.dim() != 2:
                    raise RuntimeError(
                        f"For unbatched 2-D input, hx should also be 2-D but got {s.dim()}-D tensor"
                    )
                s = s.unsqueeze(1)
            elif s.dim() != 3:
                raise RuntimeError(
                    f"For batched 3-D input, hx should also be 3-D but got {s.dim()}-D tensor"
                )
            if tuple(s.shape) != shape:
                raise RuntimeError(f"Expected hidden size {shape}, got {list(s.shape)}")
            checked.append(s)
        return tuple(checked) if self.mode == "LSTM" else checked[0]

    def forward(self, input, hx=None):
        """``(output, h_n)`` (LSTM: ``(output, (h_n, c_n))``), shaped as torch's."""
        if isinstance(input, PackedSequence):
            return self._forward_packed(input, hx)
        if not isinstance(input, kiln.Tensor):
            raise TypeError(
                f"{type(self).__name__}: expected a kiln.Tensor or PackedSequence input, "
                f"got {type(input).__name__}"
            )
        if input.dim() not in (2, 3):
            raise ValueError(
                f"{type(self).__name__}: Expected input to be 2D or 3D, got {input.dim()}D instead"
            )
        if input.shape[-1] != self.input_size:
            raise RuntimeError(
                f"input.size(-1) must be equal to input_size. Expected {self.input_size}, "
                f"got {input.shape[-1]}"
            )
        batched = input.dim() == 3
        x = input if batched else input.unsqueeze(1)
        if batched and self.batch_first:
            x = x.transpose(0, 1)
        state = self._initial_state(input, hx, x.shape[1], batched)
        output, final = self._run_layers(x, state)
        if batched and self.batch_first:
            output = output.transpose(0, 1)
        if not batched:
            output = output.squeeze(1)
            final = tuple(s.squeeze(1) for s in final) if self.mode == "LSTM" else final.squeeze(1)
        return output, final

    def _forward_packed(self, packed, hx):
        """As torch: hx is given in the caller's batch order and h_n comes back in it."""
        data, batch_sizes, sorted_indices, unsorted_indices = packed
        if data.dim() != 2:
            raise RuntimeError(f"input must have 2 dimensions, got {data.dim()}")
        if data.shape[-1] != self.input_size:
            raise RuntimeError(
                f"input.size(-1) must be equal to input_size. Expected {self.input_size}, "
                f"got {data.shape[-1]}"
            )
        sizes = [int(n) for n in batch_sizes.tolist()]
        state = self._initial_state(data, hx, sizes[0], True)
        if hx is not None:
            state = _select_batch(state, sorted_indices)
        output, final = self._run_layers(data, state, sizes)
        output = PackedSequence(output, batch_sizes, sorted_indices, unsorted_indices)
        return output, _select_batch(final, unsorted_indices)

    def _run_layers(self, x, state, sizes=None):
        """Every layer and direction over padded ``x``, or over packed rows given ``sizes``."""
        step = _step_of(self.mode)
        lstm = self.mode == "LSTM"
        directions = 2 if self.bidirectional else 1
        finals = []
        for layer in range(self.num_layers):
            outs = []
            for direction in range(directions):
                k = layer * directions + direction
                s = (state[0][k], state[1][k]) if lstm else state[k]
                w_ih, b_ih, *weights = self._weights(layer, direction)
                gi = F.linear(x, w_ih, b_ih)  # every time step's input half at once
                if sizes is None:
                    out, s = _padded_direction(step, gi, s, direction == 1, weights, self.mode)
                else:
                    run = _packed_reverse if direction == 1 else _packed_forward
                    out, s = run(step, gi, s, sizes, weights, self.mode)
                outs.append(out)
                finals.append(s)
            x = outs[0] if directions == 1 else kiln.cat(outs, -1)
            if self.dropout > 0 and self.training and layer < self.num_layers - 1:
                x = F.dropout(x, self.dropout, True)
        if lstm:
            return x, (kiln.stack([h for h, _ in finals], 0), kiln.stack([c for _, c in finals], 0))
        return x, kiln.stack(finals, 0)

    def extra_repr(self) -> str:
        s = f"{self.input_size}, {self.hidden_size}"
        if self.proj_size != 0:
            s += f", proj_size={self.proj_size}"
        if self.num_layers != 1:
            s += f", num_layers={self.num_layers}"
        if self.bias is not True:
            s += f", bias={self.bias}"
        if self.batch_first is not False:
            s += f", batch_first={self.batch_first}"
        if self.dropout != 0:
            s += f", dropout={self.dropout}"
        if self.bidirectional is not False:
            s += f", bidirectional={self.bidirectional}"
        return s


def _check_options(mode, hidden_size, num_layers, dropout, proj_size):
    if (
        not isinstance(dropout, numbers.Number)
        or isinstance(dropout, bool)
        or not 0 <= dropout <= 1
    ):
        raise ValueError(
            "dropout should be a number in range [0, 1] representing the probability of an "
            "element being zeroed"
        )
    if dropout > 0 and num_layers == 1:
        warnings.warn(
            "dropout option adds dropout after all but last recurrent layer, so non-zero dropout "
            f"expects num_layers greater than 1, but got dropout={dropout} and "
            f"num_layers={num_layers}",
            stacklevel=3,
        )
    if not isinstance(hidden_size, int) or isinstance(hidden_size, bool):
        raise TypeError(f"hidden_size should be of type int, got: {type(hidden_size).__name__}")
    if hidden_size <= 0:
        raise ValueError("hidden_size must be greater than zero")
    if num_layers <= 0:
        raise ValueError("num_layers must be greater than zero")
    if proj_size < 0:
        raise ValueError("proj_size should be a positive integer or zero to disable projections")
    if proj_size >= hidden_size:
        raise ValueError("proj_size has to be smaller than hidden_size")
    if proj_size > 0 and mode != "LSTM":
        raise ValueError("proj_size argument is only supported for LSTM, not RNN or GRU")


class RNN(RNNBase):
    """Elman RNN: h_t = tanh(x_t W_ih^T + b_ih + h_{t-1} W_hh^T + b_hh) (or relu)."""

    def __init__(self, *args, nonlinearity="tanh", **kwargs) -> None:
        # torch's positional order: input_size, hidden_size, num_layers, nonlinearity, bias, ...
        if len(args) > 3:
            nonlinearity, args = args[3], args[:3] + args[4:]
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(
                f"Unknown nonlinearity '{nonlinearity}'. Select from 'tanh' or 'relu'."
            )
        self.nonlinearity = nonlinearity
        super().__init__("RNN_TANH" if nonlinearity == "tanh" else "RNN_RELU", *args, **kwargs)


class LSTM(RNNBase):
    """Long short-term memory, gates (i, f, g, o) as torch; ``proj_size`` projects h."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__("LSTM", *args, **kwargs)


class GRU(RNNBase):
    """Gated recurrent unit, gates (r, z, n) as torch: n = tanh(W_in x + r * (W_hn h + b_hn))."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__("GRU", *args, **kwargs)


# ---- the single-step cells -----------------------------------------------------------------------


class RNNCellBase(Module):
    """weight_ih, weight_hh, bias_ih, bias_hh of one cell (no layers, no time loop)."""

    def __init__(self, input_size, hidden_size, bias, num_chunks, device=None, dtype=None):
        super().__init__()
        fk = {"device": device, "dtype": dtype}
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.bias = bias
        self.weight_ih = Parameter(kiln.empty((num_chunks * hidden_size, input_size), **fk))
        self.weight_hh = Parameter(kiln.empty((num_chunks * hidden_size, hidden_size), **fk))
        if bias:
            self.bias_ih = Parameter(kiln.empty(num_chunks * hidden_size, **fk))
            self.bias_hh = Parameter(kiln.empty(num_chunks * hidden_size, **fk))
        else:
            self.register_parameter("bias_ih", None)
            self.register_parameter("bias_hh", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        stdv = 1.0 / math.sqrt(self.hidden_size) if self.hidden_size > 0 else 0
        for weight in self.parameters():
            init.uniform_(weight, -stdv, stdv)

    def _run(self, mode, input, hx):
        if input.dim() not in (1, 2):
            raise ValueError(
                f"{type(self).__name__}: Expected input to be 1D or 2D, got {input.dim()}D instead"
            )
        batched = input.dim() == 2
        x = input if batched else input.unsqueeze(0)
        if x.shape[-1] != self.input_size:
            raise RuntimeError(
                f"input has inconsistent input_size: got {x.shape[-1]} expected {self.input_size}"
            )
        zeros = kiln.zeros((x.shape[0], self.hidden_size), dtype=x.dtype, device=x.device)
        if hx is None:
            state = (zeros, zeros) if mode == "LSTM" else zeros
        elif mode == "LSTM":
            state = tuple(s if batched else s.unsqueeze(0) for s in hx)
        else:
            state = hx if batched else hx.unsqueeze(0)
        gi = F.linear(x, self.weight_ih, self.bias_ih)
        out = _step_of(mode)(gi, state, self.weight_hh, self.bias_hh, None)
        if batched:
            return out
        return tuple(s.squeeze(0) for s in out) if mode == "LSTM" else out.squeeze(0)

    def extra_repr(self) -> str:
        s = f"{self.input_size}, {self.hidden_size}"
        if self.bias is not True:
            s += f", bias={self.bias}"
        if getattr(self, "nonlinearity", "tanh") != "tanh":
            s += f", nonlinearity={self.nonlinearity}"
        return s


class RNNCell(RNNCellBase):
    def __init__(
        self, input_size, hidden_size, bias=True, nonlinearity="tanh", device=None, dtype=None
    ) -> None:
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"Unknown nonlinearity: {nonlinearity}")
        self.nonlinearity = nonlinearity
        super().__init__(input_size, hidden_size, bias, 1, device, dtype)

    def forward(self, input, hx=None):
        return self._run("RNN_TANH" if self.nonlinearity == "tanh" else "RNN_RELU", input, hx)


class LSTMCell(RNNCellBase):
    def __init__(self, input_size, hidden_size, bias=True, device=None, dtype=None) -> None:
        super().__init__(input_size, hidden_size, bias, 4, device, dtype)

    def forward(self, input, hx=None):
        """``(h_1, c_1)``."""
        return self._run("LSTM", input, hx)


class GRUCell(RNNCellBase):
    def __init__(self, input_size, hidden_size, bias=True, device=None, dtype=None) -> None:
        super().__init__(input_size, hidden_size, bias, 3, device, dtype)

    def forward(self, input, hx=None):
        return self._run("GRU", input, hx)
