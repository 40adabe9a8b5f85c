"""torch.nn.utils.rnn: packing variable-length sequences for the recurrent layers.

Every pack/pad conversion is one ``index_select`` over a flattened tensor (with one extra row of
padding where padding is written), the index built on the host from the lengths. That keeps each
conversion a single differentiable op whose backward is a scatter-add, however many sequences
or time steps there are, instead of a slice and a copy per step.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

import numpy as np

import kiln

__all__ = [
    "PackedSequence",
    "invert_permutation",
    "pack_padded_sequence",
    "pad_packed_sequence",
    "pad_sequence",
    "unpad_sequence",
    "pack_sequence",
    "unpack_sequence",
]

# torch's scalar-type names, which its messages about `lengths` quote.
_TYPE_NAMES = {
    "float16": "Half",
    "bfloat16": "BFloat16",
    "float32": "Float",
    "float64": "Double",
    "int8": "Char",
    "uint8": "Byte",
    "int16": "Short",
    "int32": "Int",
    "int64": "Long",
    "bool": "Bool",
}


class PackedSequence_(NamedTuple):
    data: kiln.Tensor
    batch_sizes: kiln.Tensor
    sorted_indices: kiln.Tensor | None
    unsorted_indices: kiln.Tensor | None


def _bind(optional, fn):
    return None if optional is None else fn(optional)


class PackedSequence(PackedSequence_):
    """A batch of sequences laid out time step by time step, longest first.

    ``data`` holds, for each time step ``t``, the ``batch_sizes[t]`` sequences still running
    (in sorted order). ``batch_sizes`` is always an int64 CPU tensor, since it steers host-side
    loops; ``sorted_indices``/``unsorted_indices`` live with ``data`` and map between the
    caller's batch order and the sorted one. Build one with :func:`pack_padded_sequence` or
    :func:`pack_sequence` rather than by hand.
    """

    def __new__(cls, data, batch_sizes=None, sorted_indices=None, unsorted_indices=None):
        return super().__new__(
            cls, *_packed_sequence_init_args(data, batch_sizes, sorted_indices, unsorted_indices)
        )

    def _with_data(self, data):
        # The indices follow data's device; batch_sizes stays on the CPU (see the class note).
        if data is self.data:
            return self
        sorted_indices = _bind(self.sorted_indices, lambda t: t.to(data.device))
        unsorted_indices = _bind(self.unsorted_indices, lambda t: t.to(data.device))
        return type(self)(data, self.batch_sizes, sorted_indices, unsorted_indices)

    def to(self, *args, **kwargs):
        """``data.to(...)``; ``self`` when that changes nothing, as torch."""
        return self._with_data(self.data.to(*args, **kwargs))

    def cuda(self, *args, **kwargs):
        return self._with_data(self.data.cuda(*args, **kwargs))

    def cpu(self, *args, **kwargs):
        return self._with_data(self.data.cpu(*args, **kwargs))

    def pin_memory(self):
        return type(self)(
            self.data.pin_memory(),
            self.batch_sizes,
            _bind(self.sorted_indices, lambda t: t.pin_memory()),
            _bind(self.unsorted_indices, lambda t: t.pin_memory()),
        )

    def double(self):
        return self.to(dtype=kiln.float64)

    def float(self):
        return self.to(dtype=kiln.float32)

    def half(self):
        return self.to(dtype=kiln.float16)

    def long(self):
        return self.to(dtype=kiln.int64)

    def int(self):
        return self.to(dtype=kiln.int32)

    def short(self):
        return self.to(dtype=kiln.int16)

    def char(self):
        return self.to(dtype=kiln.int8)

    def byte(self):
        return self.to(dtype=kiln.uint8)

    @property
    def is_cuda(self) -> bool:
        return self.data.is_cuda

    def is_pinned(self) -> bool:
        return self.data.is_pinned()


def _packed_sequence_init_args(data, batch_sizes=None, sorted_indices=None, unsorted_indices=None):
    # unsorted_indices, when given, is trusted to invert sorted_indices, as torch does.
    if unsorted_indices is None:
        unsorted_indices = invert_permutation(sorted_indices)
    if batch_sizes is not None:
        if batch_sizes.device.type != "cpu":
            raise ValueError(
                "batch_sizes should always be on CPU. "
                "Instances of PackedSequence should never be created manually. "
                "They should be instantiated by functions like pack_sequence "
                "and pack_padded_sequences in nn.utils.rnn. "
                "https://pytorch.org/docs/stable/nn.html#torch.nn.utils.rnn.pack_sequence"
            )
        return data, batch_sizes, sorted_indices, unsorted_indices
    # The `PackedSequence((data, batch_sizes), sorted_indices=...)` spelling.
    if not (isinstance(data, (list, tuple)) and len(data) == 2):
        raise AssertionError("Expected data to be a list or tuple of length 2")
    return data[0], data[1], sorted_indices, unsorted_indices


def invert_permutation(permutation):
    """The inverse of a 1-D index permutation (``None`` for ``None``)."""
    if permutation is None:
        return None
    output = kiln.empty_like(permutation)
    output.scatter_(0, permutation, kiln.arange(0, permutation.numel(), device=permutation.device))
    return output


def _check_lengths_tensor(lengths):
    if lengths.dim() != 1 or lengths.device.type != "cpu" or lengths.dtype != kiln.int64:
        kind = _TYPE_NAMES.get(str(lengths.dtype).split(".")[-1], str(lengths.dtype))
        raise RuntimeError(
            "'lengths' argument should be a 1D CPU int64 tensor, but got "
            f"{lengths.dim()}D {lengths.device} {kind} tensor"
        )


def _index(rows, device):
    return kiln.as_tensor(np.ascontiguousarray(rows, dtype=np.int64), device=device)


def pack_padded_sequence(input, lengths, batch_first=False, enforce_sorted=True):
    """Pack a padded ``T x B x *`` (``B x T x *`` with ``batch_first``) batch.

    With ``enforce_sorted=False`` the batch is sorted by decreasing length first (stably, so
    equal lengths keep their order, as torch's sort does) and the permutation is recorded in
    the result. Time steps past each sequence's length are dropped.
    """
    if not isinstance(lengths, kiln.Tensor):
        lengths = kiln.as_tensor(lengths, dtype=kiln.int64, device="cpu")
    else:
        lengths = lengths.to(dtype=kiln.int64)
    sorted_indices = None
    if not enforce_sorted:
        lengths, sorted_indices = kiln.sort(lengths, descending=True, stable=True)
        sorted_indices = sorted_indices.to(input.device)
    _check_lengths_tensor(lengths)
    batch_size = input.size(0 if batch_first else 1)
    steps = input.size(1 if batch_first else 0)
    if input.numel() == 0:
        raise RuntimeError("Cannot pack empty tensors.")
    lens = np.asarray(lengths.tolist(), dtype=np.int64)
    if lens.shape[0] != batch_size:
        raise RuntimeError(
            "Expected `len(lengths)` to be equal to batch_size, but got "
            f"{lens.shape[0]} (batch_size={batch_size})"
        )
    if lens[-1] <= 0:
        raise RuntimeError(
            "Length of all samples has to be greater than 0, but found an element in 'lengths' "
            "that is <= 0"
        )
    if np.any(lens[1:] > lens[:-1]):
        raise RuntimeError(
            "`lengths` array must be sorted in decreasing order when `enforce_sorted` is True. "
            "You can pass `enforce_sorted=False` to pack_padded_sequence and/or pack_sequence to "
            "sidestep this requirement if you do not need ONNX exportability."
        )
    if lens[0] > steps:
        # torch reads past the end of the input here; refusing is the only sound answer.
        raise RuntimeError(
            f"Expected every length to be at most the padded length {steps}, but got {lens[0]}"
        )
    running = lens[None, :] > np.arange(lens[0])[:, None]  # (time, batch): still running
    t, b = np.nonzero(running)  # time-major, as packed
    if sorted_indices is not None:
        b = np.asarray(sorted_indices.tolist(), dtype=np.int64)[b]
    rows = b * steps + t if batch_first else t * batch_size + b
    flat = input.reshape(steps * batch_size, *input.shape[2:])
    data = flat.index_select(0, _index(rows, input.device))
    batch_sizes = kiln.as_tensor(running.sum(1).astype(np.int64))
    return PackedSequence(data, batch_sizes, sorted_indices, None)


def pad_packed_sequence(sequence, batch_first=False, padding_value=0.0, total_length=None):
    """Undo :func:`pack_padded_sequence`: ``(padded, lengths)`` in the caller's batch order."""
    _check_lengths_tensor(sequence.batch_sizes)
    sizes = np.asarray(sequence.batch_sizes.tolist(), dtype=np.int64)
    max_seq_length = sizes.shape[0]
    if total_length is not None:
        if total_length < max_seq_length:
            raise ValueError(
                "Expected total_length to be at least the length of the longest sequence in "
                f"input, but got total_length={total_length} and max sequence length being "
                f"{max_seq_length}"
            )
        max_seq_length = total_length
    data = sequence.data
    batch = int(sizes[0])
    lens = (sizes[None, :] > np.arange(batch)[:, None]).sum(1)  # per sorted sequence
    position = np.arange(batch)  # where each sorted sequence lands in the output
    if sequence.unsorted_indices is not None:
        unsorted = np.asarray(sequence.unsorted_indices.tolist(), dtype=np.int64)
        position = np.empty_like(unsorted)
        position[unsorted] = np.arange(batch)
        lens = lens[unsorted]
    t, b = np.nonzero(sizes[:, None] > np.arange(batch)[None, :])  # packed row order
    b = position[b]
    dest = b * max_seq_length + t if batch_first else t * batch + b
    rows = np.full(max_seq_length * batch, data.shape[0], dtype=np.int64)  # the padding row
    rows[dest] = np.arange(dest.shape[0])
    trailing = tuple(data.shape[1:])
    pad = kiln.full((1, *trailing), padding_value, dtype=data.dtype, device=data.device)
    padded = kiln.cat([data, pad], 0).index_select(0, _index(rows, data.device))
    shape = (batch, max_seq_length) if batch_first else (max_seq_length, batch)
    return padded.reshape(*shape, *trailing), kiln.as_tensor(lens.astype(np.int64))


def pad_sequence(sequences, batch_first=False, padding_value=0.0, padding_side="right"):
    """Stack ``L_i x *`` tensors into ``T x B x *`` (``B x T x *``), padding each to the longest.

    As torch, the first sequence fixes the dtype and trailing shape; the others are cast and
    broadcast to it.
    """
    if not isinstance(sequences, Iterable):
        raise RuntimeError(
            "pad_sequence: Expected iterable for input sequences, but got arg of type: "
            f"{type(sequences)}"
        )
    sequences = tuple(sequences)
    if not sequences:
        raise RuntimeError("received an empty list of sequences")
    if padding_side not in ("left", "right"):
        raise RuntimeError(
            f"Expected padding_side to be one of left or right, but got {padding_side}."
        )
    first = sequences[0]
    trailing = tuple(first.shape[1:])
    dtype, device = first.dtype, first.device
    lens = [s.size(0) for s in sequences]
    steps, batch = max(lens), len(sequences)
    parts, rows, start = [], [], 0
    for i, (s, n) in enumerate(zip(sequences, lens, strict=True)):
        if s.dtype != dtype:
            s = s.to(dtype)
        if tuple(s.shape[1:]) != trailing:
            s = s.expand(n, *trailing)
        parts.append(s)
        offset = steps - n if padding_side == "left" else 0
        t = np.arange(n) + offset
        rows.append((t, np.full(n, i), start + np.arange(n)))
        start += n
    src = np.full(steps * batch, start, dtype=np.int64)  # the padding row
    for t, b, r in rows:
        src[b * steps + t if batch_first else t * batch + b] = r
    pad = kiln.full((1, *trailing), padding_value, dtype=dtype, device=device)
    flat = kiln.cat([*parts, pad], 0).index_select(0, _index(src, device))
    shape = (batch, steps) if batch_first else (steps, batch)
    return flat.reshape(*shape, *trailing)


def unpad_sequence(padded_sequences, lengths, batch_first=False):
    """Split a padded batch back into its sequences, each cut to its length.

    torch transposes a time-major input in place as a side effect; kiln leaves it untouched.
    """
    if not batch_first:
        padded_sequences = padded_sequences.transpose(0, 1)
    return [seq[: int(n)] for seq, n in zip(padded_sequences, lengths, strict=True)]


def pack_sequence(sequences, enforce_sorted=True):
    """``pack_padded_sequence(pad_sequence(sequences), lengths)``."""
    lengths = kiln.as_tensor([v.size(0) for v in sequences], dtype=kiln.int64)
    return pack_padded_sequence(pad_sequence(sequences), lengths, enforce_sorted=enforce_sorted)


def unpack_sequence(packed_sequences):
    """The list of sequences a :class:`PackedSequence` holds, in the caller's order."""
    padded_sequences, lengths = pad_packed_sequence(packed_sequences, batch_first=True)
    return unpad_sequence(padded_sequences, lengths, batch_first=True)
