"""The Python safetensors reader/writer: round trips for every dtype, byte-exact layout against
hand-built files (torch tensors' raw bytes), and every malformed-file check with its offset."""

import json
import struct

import numpy as np
import pytest
import torch

import kiln
from kiln._export.safetensors import SafetensorsError, load_file, save_file

DTYPES = {
    "bool": ("BOOL", torch.bool), "uint8": ("U8", torch.uint8), "int8": ("I8", torch.int8),
    "int16": ("I16", torch.int16), "int32": ("I32", torch.int32), "int64": ("I64", torch.int64),
    "float16": ("F16", torch.float16), "bfloat16": ("BF16", torch.bfloat16),
    "float32": ("F32", torch.float32), "float64": ("F64", torch.float64),
}  # fmt: skip


def torch_bytes(t: torch.Tensor) -> bytes:
    """The little-endian row-major bytes of a torch tensor (bfloat16 through int16 bits)."""
    t = t.contiguous()
    if t.dtype == torch.bfloat16:
        t = t.view(torch.int16)
    return t.numpy().tobytes()


def build_file(tensors: dict, metadata=None, pad=0) -> bytes:
    """A safetensors file built by hand from torch tensors, in dict order."""
    header, data, pos = {}, b"", 0
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, t in tensors.items():
        raw = torch_bytes(t)
        header[name] = {"dtype": DTYPES[str(t.dtype).replace("torch.", "")][0],
                        "shape": list(t.shape), "data_offsets": [pos, pos + len(raw)]}
        data += raw
        pos += len(raw)
    text = json.dumps(header).encode() + b" " * pad
    return struct.pack("<Q", len(text)) + text + data


def sample(dtype: str, shape=(2, 3)) -> torch.Tensor:
    g = torch.Generator().manual_seed(len(dtype))
    if dtype == "bool":
        return torch.rand(shape, generator=g) > 0.5
    td = DTYPES[dtype][1]
    if td.is_floating_point:
        return (torch.randn(shape, generator=g) * 100).to(td)
    lo = 0 if dtype == "uint8" else -100
    return torch.randint(lo, 100, shape, generator=g).to(td)


def as_torch(t: kiln.Tensor) -> torch.Tensor:
    if t.dtype == kiln.bfloat16:
        return torch.from_numpy(t.view(kiln.int16).numpy().copy()).view(torch.bfloat16)
    return torch.from_numpy(np.array(t.numpy(), copy=True))


def as_kiln(t: torch.Tensor) -> kiln.Tensor:
    if t.dtype == torch.bfloat16:
        return kiln.from_numpy(t.view(torch.int16).numpy().copy()).view(kiln.bfloat16)
    return kiln.from_numpy(t.numpy().copy())


@pytest.mark.parametrize("dtype", list(DTYPES))
def test_reads_hand_built_file_of_each_dtype(tmp_path, dtype):
    t = sample(dtype)
    path = tmp_path / "w.safetensors"
    path.write_bytes(build_file({"a": t, "scalar": sample(dtype, ())}, {"k": "v"}))
    tensors, meta = load_file(path)
    assert meta == {"k": "v"}
    assert list(tensors) == ["a", "scalar"]
    assert tensors["a"].dtype.name == dtype and tuple(tensors["a"].shape) == (2, 3)
    assert torch.equal(as_torch(tensors["a"]), t)
    assert tuple(tensors["scalar"].shape) == ()


@pytest.mark.parametrize("dtype", list(DTYPES))
def test_written_bytes_are_the_tensor_bytes(tmp_path, dtype):
    t = sample(dtype, (3, 4))
    path = tmp_path / "w.safetensors"
    save_file({"w": as_kiln(t).t()}, path, {"format": "kiln"})  # a transposed (strided) view
    blob = path.read_bytes()
    (n,) = struct.unpack("<Q", blob[:8])
    assert n % 8 == 0
    header = json.loads(blob[8 : 8 + n])
    assert header == {"__metadata__": {"format": "kiln"},
                      "w": {"dtype": DTYPES[dtype][0], "shape": [4, 3],
                            "data_offsets": [0, len(torch_bytes(t))]}}
    assert blob[8 + n :] == torch_bytes(t.t())


def test_round_trip_many_tensors(tmp_path):
    ts = {f"layer.{i}": as_kiln(sample(d, (i + 1, 2))) for i, d in enumerate(DTYPES)}
    ts["empty"] = kiln.zeros(0, 5)
    save_file(ts, tmp_path / "m.safetensors")
    back, meta = load_file(tmp_path / "m.safetensors")
    assert meta == {}
    assert sorted(back) == sorted(ts)
    for k, t in ts.items():
        assert back[k].dtype == t.dtype and back[k].shape == t.shape
        assert torch.equal(as_torch(back[k]), as_torch(t))


def test_large_tensor_round_trip_is_fast(tmp_path):
    t = kiln.randn(1000, 1000)
    save_file({"big": t}, tmp_path / "big.safetensors")
    back, _ = load_file(tmp_path / "big.safetensors")
    assert bool((back["big"] == t).all())


def write(tmp_path, blob: bytes):
    path = tmp_path / "bad.safetensors"
    path.write_bytes(blob)
    return path


def header_blob(header: dict, data: bytes) -> bytes:
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + data


F32_2 = {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}


@pytest.mark.parametrize(
    "blob, pattern",
    [
        (b"\x01\x02", r"byte 0: file of 2 bytes is too short"),
        (struct.pack("<Q", 1000) + b"{}", r"byte 0: header size 1000 runs past the end"),
        (struct.pack("<Q", 2**40) + b"{}", r"byte 0: header size \d+ exceeds the limit"),
        (struct.pack("<Q", 5) + b'{"a":', r"byte 13: the header is not valid JSON"),
        (struct.pack("<Q", 2) + b"\xff\xfe", r"byte 8: the header is not valid UTF-8"),
        (struct.pack("<Q", 2) + b"[]", r"byte 8: the header must be a JSON object"),
        (header_blob({"a": F32_2}, b"\0" * 4), r"the data section is truncated"),
        (header_blob({"a": F32_2}, b"\0" * 12), r"4 trailing bytes belong to no tensor"),
        (header_blob({"a": F32_2, "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}},
                     b"\0" * 12), r"tensor 'b' overlaps the previous tensor"),
        (header_blob({"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}, b"\0" * 8),
         r"data bytes 0..4 belong to no tensor"),
        (header_blob({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}}, b"\0" * 8),
         r"tensor 'a': 8 bytes for a F32 tensor of shape \[3\], expected 12"),
        (header_blob({"a": {"dtype": "Q8", "shape": [2], "data_offsets": [0, 2]}}, b"\0" * 2),
         r"unsupported dtype 'Q8'"),
        (header_blob({"a": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 0]}}, b""),
         r"shape must be a list of non-negative ints"),
        (header_blob({"a": {"dtype": "F32", "shape": [2], "data_offsets": [8, 0]}}, b""),
         r"data_offsets must be \[begin, end\]"),
        (header_blob({"a": {"dtype": "F32", "shape": [2]}}, b""),
         r"expected exactly dtype, shape and data_offsets"),
        (header_blob({"__metadata__": {"a": 1}}, b""), r"__metadata__ must map str to str"),
    ],
)
def test_malformed_files_name_file_and_offset(tmp_path, blob, pattern):
    path = write(tmp_path, blob)
    with pytest.raises(SafetensorsError, match=pattern) as info:
        load_file(path)
    assert str(info.value).startswith(f"{path}: byte ")


def test_truncated_real_file(tmp_path):
    save_file({"w": kiln.randn(4, 4)}, tmp_path / "w.safetensors")
    blob = (tmp_path / "w.safetensors").read_bytes()
    for cut in (0, 7, 8, 20, len(blob) - 1):
        with pytest.raises(SafetensorsError):
            load_file(write(tmp_path, blob[:cut]))


def test_writer_rejects_bad_input(tmp_path):
    with pytest.raises(TypeError, match="not a kiln.Tensor"):
        save_file({"a": 1}, tmp_path / "x.safetensors")
    with pytest.raises(TypeError, match="metadata must map str to str"):
        save_file({}, tmp_path / "x.safetensors", {"a": 1})
    assert not (tmp_path / "x.safetensors").exists()
    assert list(tmp_path.iterdir()) == []  # no temporary file left behind
