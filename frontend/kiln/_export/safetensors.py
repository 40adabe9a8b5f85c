"""The safetensors file format, read and written without the `safetensors` package.

Layout (https://github.com/huggingface/safetensors): an 8-byte little-endian header size N, N
bytes of UTF-8 JSON mapping each tensor name to ``{"dtype", "shape", "data_offsets": [begin,
end]}`` (offsets relative to the data section, which follows the header) plus an optional
``"__metadata__"`` dict of str to str, then the data: each tensor's bytes, row-major, little
endian. The reader accepts only files that are exactly this: every byte of the data section
belongs to exactly one tensor (no holes, no overlaps), each size matches its dtype and shape.
Errors are `SafetensorsError` (a ValueError) naming the file and the byte offset of the problem.

Bytes move through NumPy in bulk (bfloat16, which NumPy lacks, as int16 bit patterns), never
element by element.
"""

from __future__ import annotations

import json
import math
import os
import struct

import numpy as np

import kiln
from kiln._export.atomic import atomic_write

__all__ = ["DTYPE_NAMES", "SafetensorsError", "file_writer", "load_file", "save_file"]

# kiln dtype name -> (safetensors dtype, NumPy dtype of the raw bytes)
_FORMATS = {
    "bool": ("BOOL", "|b1"), "uint8": ("U8", "|u1"), "int8": ("I8", "|i1"),
    "int16": ("I16", "<i2"), "int32": ("I32", "<i4"), "int64": ("I64", "<i8"),
    "float16": ("F16", "<f2"), "bfloat16": ("BF16", "<i2"), "float32": ("F32", "<f4"),
    "float64": ("F64", "<f8"),
}  # fmt: skip
DTYPE_NAMES = {st: name for name, (st, _) in _FORMATS.items()}  # "F32" -> "float32"
_MAX_HEADER = 100 * 1024 * 1024  # the reference implementation's limit


class SafetensorsError(ValueError):
    """A malformed safetensors file: the message names the file and the byte offset."""


def _raw(t: kiln.Tensor) -> np.ndarray:
    """The tensor's bytes as a contiguous NumPy array (a view when `t` is contiguous)."""
    t = t.detach().contiguous()
    if t.dtype == kiln.bfloat16:
        t = t.view(kiln.int16)
    return np.ascontiguousarray(t.numpy())


def save_file(tensors: dict, path, metadata: dict | None = None) -> None:
    """Writes `tensors` (str -> kiln.Tensor) to `path` atomically, in key order.

    `metadata` (str -> str) becomes the header's ``__metadata__``. The header is padded with
    spaces to a multiple of 8 bytes so every tensor starts 8-byte aligned when sizes allow.
    """
    atomic_write(path, file_writer(tensors, metadata))


def file_writer(tensors: dict, metadata: dict | None = None):
    """Checks `tensors` and returns `write(f)`, which writes them as a safetensors file."""
    header: dict = {}
    if metadata is not None:
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
            raise TypeError("safetensors metadata must map str to str")
        header["__metadata__"] = dict(metadata)
    arrays = []
    offset = 0
    for name in sorted(tensors):
        t = tensors[name]
        if not isinstance(name, str) or name == "__metadata__":
            raise ValueError(f"safetensors: invalid tensor name {name!r}")
        if not isinstance(t, kiln.Tensor):
            raise TypeError(f"safetensors: {name!r} is a {type(t).__name__}, not a kiln.Tensor")
        if t.dtype.name not in _FORMATS:
            raise TypeError(f"safetensors: {name!r} has unsupported dtype {t.dtype}")
        arr = _raw(t)
        header[name] = {"dtype": _FORMATS[t.dtype.name][0], "shape": list(t.shape),
                        "data_offsets": [offset, offset + arr.nbytes]}
        arrays.append(arr)
        offset += arr.nbytes
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)

    def write(f) -> None:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for arr in arrays:
            if arr.nbytes:
                f.write(memoryview(arr.reshape(-1)).cast("B"))

    return write


def _fail(path, offset: int, message: str):
    raise SafetensorsError(f"{path}: byte {offset}: {message}")


def _parse_header(path, blob: bytes) -> tuple[dict, int]:
    """The JSON header of `blob` and where the data section starts."""
    if len(blob) < 8:
        _fail(path, 0, f"file of {len(blob)} bytes is too short for the 8-byte header size")
    (n,) = struct.unpack_from("<Q", blob, 0)
    if n > _MAX_HEADER:
        _fail(path, 0, f"header size {n} exceeds the limit of {_MAX_HEADER} bytes")
    if 8 + n > len(blob):
        _fail(path, 0, f"header size {n} runs past the end of the file ({len(blob)} bytes)")
    raw = blob[8 : 8 + n]
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        _fail(path, 8 + e.start, "the header is not valid UTF-8")
    try:
        header = json.loads(text)
    except json.JSONDecodeError as e:
        pos = len(text[: e.pos].encode("utf-8"))
        _fail(path, 8 + pos, f"the header is not valid JSON: {e.msg}")
    if not isinstance(header, dict):
        _fail(path, 8, "the header must be a JSON object")
    return header, 8 + n


def _check_entry(path, name: str, entry, data_start: int) -> tuple[str, list, int, int]:
    where = data_start  # the header's own problems are reported at the data section's start
    if not isinstance(entry, dict) or set(entry) != {"dtype", "shape", "data_offsets"}:
        _fail(path, 8, f"tensor {name!r}: expected exactly dtype, shape and data_offsets")
    dtype, shape, offs = entry["dtype"], entry["shape"], entry["data_offsets"]
    if dtype not in DTYPE_NAMES:
        _fail(path, 8, f"tensor {name!r}: unsupported dtype {dtype!r} (known: "
                       f"{', '.join(sorted(DTYPE_NAMES))})")
    if not isinstance(shape, list) or not all(type(s) is int and s >= 0 for s in shape):
        _fail(path, 8, f"tensor {name!r}: shape must be a list of non-negative ints, got {shape}")
    if (not isinstance(offs, list) or len(offs) != 2
            or not all(type(o) is int and o >= 0 for o in offs) or offs[0] > offs[1]):
        _fail(path, 8, f"tensor {name!r}: data_offsets must be [begin, end] with "
                       f"0 <= begin <= end, got {offs}")
    itemsize = np.dtype(_FORMATS[DTYPE_NAMES[dtype]][1]).itemsize
    want = math.prod(shape) * itemsize
    if offs[1] - offs[0] != want:
        _fail(path, where + offs[0], f"tensor {name!r}: {offs[1] - offs[0]} bytes for a "
                                     f"{dtype} tensor of shape {shape}, expected {want}")
    return dtype, shape, offs[0], offs[1]


def load_file(path) -> tuple[dict, dict]:
    """Reads a safetensors file: ({name: kiln.Tensor}, metadata dict (empty when absent)).

    Every check of the format is made before any tensor is built; a SafetensorsError names the
    file and byte offset of the first problem found.
    """
    path = os.fspath(path)
    with open(path, "rb") as f:
        blob = f.read()
    header, data_start = _parse_header(path, blob)
    metadata = header.pop("__metadata__", {})
    if not isinstance(metadata, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()
    ):
        _fail(path, 8, "__metadata__ must map str to str")
    data_len = len(blob) - data_start
    entries = sorted((_check_entry(path, name, e, data_start) + (name,))
                     for name, e in header.items())  # fmt: skip
    entries.sort(key=lambda e: (e[2], e[3]))
    pos = 0
    for _, _, begin, end, name in entries:
        if begin < pos:
            _fail(path, data_start + begin, f"tensor {name!r} overlaps the previous tensor "
                                            f"(which ends at data byte {pos})")
        if begin > pos:
            _fail(path, data_start + pos, f"data bytes {pos}..{begin} belong to no tensor")
        pos = end
    if pos > data_len:
        _fail(path, len(blob), f"the data section is truncated: tensors need {pos} bytes, the "
                               f"file has {data_len}")
    if pos < data_len:
        _fail(path, data_start + pos, f"{data_len - pos} trailing bytes belong to no tensor")
    tensors = {}
    for dtype, shape, begin, end, name in entries:
        kname = DTYPE_NAMES[dtype]
        np_dtype = np.dtype(_FORMATS[kname][1])
        count = (end - begin) // np_dtype.itemsize
        arr = np.frombuffer(blob, np_dtype, count, data_start + begin).copy().reshape(shape)
        t = kiln.from_numpy(arr)
        if kname == "bfloat16":
            t = t.view(kiln.bfloat16)
        tensors[name] = t
    return {k: tensors[k] for k in sorted(tensors)}, metadata
