"""Writes the safetensors seed corpus of the fuzz targets (tests/fuzz/corpus/safetensors).

Files named `bad_*` are near-misses the reader must reject; every other file must be accepted.
The files are committed; rerun this script only to change them.
"""

import json
import struct
from pathlib import Path

OUT = Path(__file__).parent / "corpus" / "safetensors"


def build(entries, metadata=None, pad=True, trailing=b""):
    """A file from (name, dtype, shape, data bytes) entries laid out back to back."""
    header, data = {}, b""
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape, raw in entries:
        offsets = [len(data), len(data) + len(raw)]
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": offsets}
        data += raw
    text = json.dumps(header, separators=(",", ":")).encode()
    if pad:
        text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + data + trailing


def raw_header(text, data=b""):
    """A file with the header text exactly as given."""
    return struct.pack("<Q", len(text)) + text + data


def main():
    """Writes every seed."""
    OUT.mkdir(parents=True, exist_ok=True)
    every_dtype = [
        ("f64", "F64", [2], struct.pack("<2d", 1.5, -2.0)),
        ("i64", "I64", [], struct.pack("<q", -7)),
        ("f32", "F32", [2, 2], struct.pack("<4f", 1, 2, 3, 4)),
        ("i32", "I32", [1, 1], struct.pack("<i", 123456)),
        ("f16", "F16", [2], struct.pack("<2H", 0x3800, 0xC000)),
        ("bf16", "BF16", [1], struct.pack("<H", 0x3F80)),
        ("i16", "I16", [3], struct.pack("<3h", -1, 0, 1)),
        ("u8", "U8", [2], bytes([0, 255])),
        ("i8", "I8", [2], bytes([0x80, 0x7F])),
        ("b", "BOOL", [3], bytes([1, 0, 1])),
        ("empty", "F32", [0, 5], b""),
    ]
    seeds = {
        "every_dtype": build(every_dtype, {"format": "pt", "note": "seed"}),
        "empty": build([]),
        "metadata_only": build([], {"k": "v"}, pad=False),
        "unaligned": build(
            [("a", "U8", [1], b"\x09"), ("b", "F32", [2], struct.pack("<2f", 1.5, -7.25))],
            pad=False,
        ),
        "bad_overlap": raw_header(
            b'{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},'
            b'"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}',
            bytes(12),
        ),
        "bad_hole": raw_header(b'{"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}', bytes(2)),
        "bad_trailing": build([("a", "U8", [1], b"\x01")], trailing=b"xx"),
        "bad_dtype": build([("a", "F8_E4M3", [1], b"\x01")]),
        "bad_shape": raw_header(b'{"a":{"dtype":"U8","shape":[-1],"data_offsets":[0,1]}}', b"\x00"),
        "bad_size": raw_header(b'{"a":{"dtype":"I32","shape":[2],"data_offsets":[0,4]}}', bytes(4)),
        "bad_header_size": struct.pack("<Q", 1 << 40) + b"{}",
        "bad_json": raw_header(b'{"a": {"dtype": "U8",', b""),
        "bad_duplicate": raw_header(
            b'{"a":{"dtype":"U8","shape":[0],"data_offsets":[0,0]},'
            b'"a":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}}'
        ),
        "bad_bool": build([("m", "BOOL", [2], b"\x01\x02")]),
        "bad_metadata": build([], {"n": 3}),
        "bad_short": b"\x02\x00\x00",
    }
    for name, data in seeds.items():
        (OUT / f"{name}.safetensors").write_bytes(data)


if __name__ == "__main__":
    main()
