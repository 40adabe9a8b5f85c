"""ExportedProgram.save and kiln.load_exported: the files on disk, atomic saves, and every way
a corrupt program or weights file is rejected (with file and position), never executed."""

import json
import os
import re
import struct

import pytest

import kiln
import kiln._export.atomic as atomic
import kiln.nn as knn
from kiln._export.out_spec import OutSpecError
from kiln._export.safetensors import SafetensorsError, load_file, save_file


class Net(knn.Module):
    def __init__(self):
        super().__init__()
        self.fc = knn.Linear(4, 3)
        self.register_buffer("shift", kiln.tensor([0.5, -0.5, 1.0]))

    def forward(self, x):
        return self.fc(x).relu() + self.shift, None


@pytest.fixture()
def saved(tmp_path):
    kiln.manual_seed(0)
    net = Net().eval()
    p = kiln.export(net, (kiln.randn(3, 4),), dynamic_shapes={"x": {0: kiln.Dim("n")}})
    p.save(tmp_path / "net")
    return net, p, tmp_path


def test_files_on_disk(saved):
    net, p, folder = saved
    assert sorted(os.listdir(folder)) == ["net.kir", "net.safetensors"]
    assert (folder / "net.kir").read_text() == p.graph_text
    tensors, meta = load_file(folder / "net.safetensors")
    assert meta == {"format": "kiln", "kiln.program": "net"}
    assert sorted(tensors) == ["fc.bias", "fc.weight", "shift"]
    for key, t in tensors.items():
        assert bool((t == p.weights[key]).all())


def test_load_runs_like_the_module(saved):
    net, p, folder = saved
    loaded = kiln.load_exported(folder / "net")
    assert loaded.name == "net" and loaded.out_spec == "(%0, None)"
    assert loaded.range_constraints == {"n": (2, None)}
    for n in (2, 100):
        x = kiln.randn(n, 4)
        got, none = loaded.module()(x)
        assert none is None
        assert bool(kiln.allclose(got, net(x)[0], atol=1e-6))


def edit_kir(folder, old, new, count=1):
    path = folder / "net.kir"
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, count))
    return path


def test_malformed_kir_names_file_line_and_column(saved):
    _, _, folder = saved
    path = edit_kir(folder, "linear(", "linear((")
    line = next(i for i, ln in enumerate(path.read_text().splitlines(), 1) if "linear((" in ln)
    with pytest.raises(ValueError, match=re.escape(f"{path}:{line}:") + r"[0-9]+: error: "):
        kiln.load_exported(path)


def test_kir_that_fails_the_verifier(saved):
    _, _, folder = saved
    path = edit_kir(folder, "%x: f32[n, 4]", "%x: f32[n, 5]")
    with pytest.raises(ValueError, match=re.escape(str(path)) + r":[0-9]+:[0-9]+: error: "):
        kiln.load_exported(path)


def test_out_spec_is_never_evaluated(saved, tmp_path):
    _, _, folder = saved
    marker = tmp_path / "pwned"
    edit_kir(folder, 'out_spec = "(%0, None)"',
             f"out_spec = \"__import__('os').system('touch {marker}')\"")
    with pytest.raises(OutSpecError, match="Call is not allowed"):
        kiln.load_exported(folder / "net")
    assert not marker.exists()


def test_out_spec_naming_a_missing_output(saved):
    _, _, folder = saved
    edit_kir(folder, 'out_spec = "(%0, None)"', 'out_spec = "(%0, %3)"')
    with pytest.raises(OutSpecError, match=r"names output %3, but the program has 1 outputs"):
        kiln.load_exported(folder / "net")


def test_two_graphs_and_bad_utf8(saved):
    _, _, folder = saved
    text = (folder / "net.kir").read_text()
    (folder / "net.kir").write_text(text + "\n" + text.replace("@Net", "@Other"))
    with pytest.raises(ValueError, match="exactly one graph, found 2"):
        kiln.load_exported(folder / "net")
    (folder / "net.kir").write_bytes(b"graph @x() {\xff}")
    with pytest.raises(ValueError, match=r"net.kir: byte 12: the program is not valid UTF-8"):
        kiln.load_exported(folder / "net")


def rewrite_weights(folder, change):
    tensors, meta = load_file(folder / "net.safetensors")
    change(tensors)
    save_file(tensors, folder / "net.safetensors", meta)


def test_missing_weight(saved):
    _, _, folder = saved
    rewrite_weights(folder, lambda t: t.pop("fc.bias"))
    with pytest.raises(SafetensorsError, match=r"net.safetensors: byte 8: no tensor 'fc.bias', "
                                               r"which the program .*net.kir reads"):
        kiln.load_exported(folder / "net")


def test_weight_of_wrong_dtype_or_shape(saved):
    _, _, folder = saved
    rewrite_weights(folder, lambda t: t.update({"shift": t["shift"].double()}))
    with pytest.raises(SafetensorsError, match=r"tensor 'shift' is float64\[3\], the program "
                                               r".*expects float32\[3\]"):
        kiln.load_exported(folder / "net")
    rewrite_weights(folder, lambda t: t.update({"shift": kiln.zeros(4)}))
    with pytest.raises(SafetensorsError, match=r"tensor 'shift' is float32\[4\]"):
        kiln.load_exported(folder / "net")


def test_corrupt_weights_files(saved):
    _, _, folder = saved
    path = folder / "net.safetensors"
    blob = path.read_bytes()
    path.write_bytes(blob[:-3])
    with pytest.raises(SafetensorsError, match=r"net.safetensors: byte \d+: the data section is "
                                               "truncated"):
        kiln.load_exported(folder / "net")
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8 : 8 + n])
    header["fc.weight"]["data_offsets"][0] -= 4
    header["fc.weight"]["data_offsets"][1] -= 4
    text = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(text)) + text + blob[8 + n :])
    with pytest.raises(SafetensorsError, match=r"byte \d+: tensor 'fc.weight' overlaps"):
        kiln.load_exported(folder / "net")
    path.write_bytes(blob[:8] + b"{{" + blob[10:])
    with pytest.raises(SafetensorsError, match="byte 9: the header is not valid JSON"):
        kiln.load_exported(folder / "net")


def test_missing_files(saved):
    _, _, folder = saved
    os.unlink(folder / "net.safetensors")
    with pytest.raises(FileNotFoundError):
        kiln.load_exported(folder / "net")
    with pytest.raises(FileNotFoundError):
        kiln.load_exported(folder / "other.kir")


@pytest.mark.parametrize("fail_at", [1, 2])
def test_failed_save_leaves_old_files(saved, monkeypatch, fail_at):
    _, _, folder = saved
    old = {f: (folder / f).read_bytes() for f in os.listdir(folder)}
    other = kiln.export(lambda x: x * 3, (kiln.randn(2, 2),))
    calls = []
    real_fsync = os.fsync

    def failing_fsync(fd):
        calls.append(fd)
        if len(calls) == fail_at:  # 1: while writing the weights, 2: the program
            raise OSError("disk full")
        real_fsync(fd)

    monkeypatch.setattr(atomic.os, "fsync", failing_fsync)
    with pytest.raises(OSError, match="disk full"):
        other.save(folder / "net.kir")
    monkeypatch.undo()
    assert {f: (folder / f).read_bytes() for f in os.listdir(folder)} == old  # no temp files
    kiln.load_exported(folder / "net")
    other.save(folder / "net.kir")
    assert kiln.load_exported(folder / "net").graph_text == other.graph_text


def test_save_path_forms(tmp_path):
    p = kiln.export(lambda x: x + 1, (kiln.randn(2),))
    with pytest.raises(ValueError, match="does not name a program"):
        p.save(str(tmp_path) + os.sep)
    p.save(str(tmp_path / "a.kir"))
    assert sorted(os.listdir(tmp_path)) == ["a.kir", "a.safetensors"]
    assert kiln.load_exported(str(tmp_path / "a")).name == "a"
