"""kilnc on hand-written exported programs: the library's numerics against NumPy, the C API's
checks (dtype, rank, ranges, weights) as status codes, --emit stages, CLI errors, and that a
failed build leaves nothing behind."""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

import numpy as np
import pytest
from aot_util import DTYPE, INCOMPATIBLE, OK, SHAPE, WEIGHTS, build_runner, kilnc, run_model

KIR = """\
graph @mlp(%x: f32[batch, 8] loc("mlp.py":3), %scale: f32[]) {
  sym_constrain_range() {max = 64, min = 2, symbol = "batch"}
  %w = weight() {name = "fc.weight"} : f32[16, 8]
  %b = weight() {name = "fc.bias"} : f32[16]
  %g = weight() {name = "gain"} : f32[16]
  %0 = linear(%x, %w, %b) : f32[batch, 16] loc("mlp.py":5)
  %1 = gelu(%0) {approximate = "tanh"} : f32[batch, 16] loc("mlp.py":6)
  %2 = mul(%1, %g) : f32[batch, 16]
  %3 = mul(%2, %scale) : f32[batch, 16]
  %4 = sum(%3) {dim = [-1], keepdim = true} : f32[batch, 1]
  %5 = softmax(%3) {dim = -1} : f32[batch, 16]
  return %5, %4 {out_spec = "(%0, %1)"}
}
"""


def save_safetensors(path: Path, tensors: dict) -> None:
    header, blobs, offset = {}, [], 0
    for name, array in tensors.items():
        data = np.ascontiguousarray(array).tobytes()
        header[name] = {"dtype": {"float32": "F32", "float64": "F64", "int64": "I64"}[
            str(array.dtype)], "shape": list(array.shape), "data_offsets": [offset,
                                                                            offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    path.write_bytes(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def reference(x, scale, w):
    h = x @ w["fc.weight"].T + w["fc.bias"]
    h = 0.5 * h * (1 + np.tanh(np.sqrt(2 / np.pi) * (h + 0.044715 * h**3)))
    h = h * w["gain"] * scale
    e = np.exp(h - h.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True), h.sum(-1, keepdims=True)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("kilnc")
    rng = np.random.default_rng(0)
    weights = {"fc.weight": rng.standard_normal((16, 8)).astype(np.float32),
               "fc.bias": rng.standard_normal(16).astype(np.float32),
               "gain": rng.standard_normal(16).astype(np.float32)}
    (root / "mlp.kir").write_text(KIR)
    save_safetensors(root / "mlp.safetensors", weights)
    kilnc(root / "mlp.kir", "-o", root / "out")
    kilnc(root / "mlp.kir", "-o", root / "embed", "--weights", "embed", "--name", "mlp_e")
    return root, weights, build_runner(root)


@pytest.mark.parametrize("batch", [2, 7, 64])
def test_library_matches_numpy_for_every_batch_size(built, batch):
    root, weights, runner = built
    rng = np.random.default_rng(batch)
    x = rng.standard_normal((batch, 8)).astype(np.float32)
    scale = np.array(0.5, dtype=np.float32)
    rc, log, outs = run_model(runner, root / "out" / "libmlp.so", "mlp", [x, scale],
                              root / f"run{batch}")
    assert rc == OK, log
    want = reference(x.astype(np.float64), 0.5, weights)
    np.testing.assert_allclose(outs[0], want[0], rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(outs[1], want[1], rtol=1e-4, atol=1e-4)


def test_embedded_weights_need_no_file(built, tmp_path):
    root, weights, runner = built
    lib = tmp_path / "libmlp_e.so"
    for f in ("libmlp_e.so", "libkiln_aot.so"):  # moved away from every weights file
        (tmp_path / f).write_bytes((root / "embed" / f).read_bytes())
    assert not (root / "embed" / "mlp_e.safetensors").exists()
    x = np.ones((3, 8), np.float32)
    rc, log, outs = run_model(runner, lib, "mlp_e", [x, np.array(1.0, np.float32)],
                              tmp_path / "run")
    assert rc == OK, log
    np.testing.assert_allclose(outs[0], reference(x, 1.0, weights)[0], rtol=1e-4, atol=1e-6)


def test_concurrent_runs_on_one_model_agree(built):
    root, _, runner = built
    x = np.random.default_rng(1).standard_normal((33, 8)).astype(np.float32)
    rc, log, _ = run_model(runner, root / "out" / "libmlp.so", "mlp",
                           [x, np.array(2.0, np.float32)], root / "threads", "--threads", "4",
                           "--repeat", "20")
    assert rc == OK, log


@pytest.mark.parametrize("inputs, status, message", [
    (lambda: [np.ones((3, 8), np.float64), np.array(1.0, np.float32)], DTYPE,
     "input x must be float32, got float64"),
    (lambda: [np.ones((3, 8, 1), np.float32), np.array(1.0, np.float32)], SHAPE,
     "input x must have rank 2 ([batch, 8]), got rank 3"),
    (lambda: [np.ones((3, 9), np.float32), np.array(1.0, np.float32)], SHAPE,
     "input x has shape [3, 9], the graph expects size 8"),
    (lambda: [np.ones((65, 8), np.float32), np.array(1.0, np.float32)], SHAPE,
     "size batch = 65 is outside its range [2, 64]"),
    (lambda: [np.ones((1, 8), np.float32), np.array(1.0, np.float32)], SHAPE,
     "size batch = 1 is outside its range [2, 64]"),
])  # fmt: skip
def test_bad_inputs_are_status_codes_with_messages(built, inputs, status, message):
    root, _, runner = built
    rc, log, outs = run_model(runner, root / "out" / "libmlp.so", "mlp", inputs(),
                              root / "bad")
    assert rc == status and message in log, log
    assert outs == []


def test_weights_problems_fail_create(built, tmp_path):
    root, weights, runner = built
    x = [np.ones((3, 8), np.float32), np.array(1.0, np.float32)]
    lib = root / "out" / "libmlp.so"
    rc, log, _ = run_model(runner, lib, "mlp", x, tmp_path / "a", "--weights",
                           tmp_path / "missing.safetensors")
    assert rc == WEIGHTS and "missing.safetensors" in log
    bad = dict(weights, gain=np.zeros(15, np.float32))
    save_safetensors(tmp_path / "w.safetensors", bad)
    rc, log, _ = run_model(runner, lib, "mlp", x, tmp_path / "b", "--weights",
                           tmp_path / "w.safetensors")
    assert rc == WEIGHTS and 'tensor "gain"' in log and "[15]" in log and "[16]" in log, log
    good = (root / "mlp.safetensors").read_bytes()
    (tmp_path / "t.safetensors").write_bytes(good[: len(good) - 10])
    rc, log, _ = run_model(runner, lib, "mlp", x, tmp_path / "c", "--weights",
                           tmp_path / "t.safetensors")
    assert rc == WEIGHTS and "t.safetensors" in log, log


def test_header_describes_the_model(built):
    root, _, _ = built
    header = (root / "out" / "mlp.h").read_text()
    assert "kiln_status mlp_create(const char *weights_path, kiln_model **model);" in header
    assert "0: x float32 [batch, 8]" in header and "2 <= batch <= 64" in header
    assert "#define mlp_NUM_OUTPUTS 2" in header
    assert sorted(p.name for p in (root / "out").iterdir()) == [
        "kiln_aot.h", "libkiln_aot.so", "libmlp.so", "mlp.h", "mlp.safetensors"]


@pytest.mark.parametrize("stage, marker", [
    ("kir", "graph @mlp("), ("loop", "kernel k0"), ("mlir", "func.func @"),
    ("llvm", "define void @"), ("asm", ".text"), ("cuda", "__global__")])  # fmt: skip
def test_emit_prints_each_stage(built, stage, marker):
    root, _, _ = built
    proc = kilnc(root / "mlp.kir", "--emit", stage)
    assert marker in proc.stdout


def test_malformed_kir_names_file_line_and_column(tmp_path):
    bad = KIR.replace("%1 = gelu(%0)", "%1 = gelu(%0,)")
    (tmp_path / "bad.kir").write_text(bad)
    proc = kilnc(tmp_path / "bad.kir", "-o", tmp_path / "out", check=False)
    assert proc.returncode == 1
    assert f"{tmp_path / 'bad.kir'}:7:" in proc.stderr and "error" in proc.stderr
    assert not (tmp_path / "out" / "libbad.so").exists()


def test_cli_errors(built, tmp_path):
    root, _, _ = built
    proc = kilnc(root / "mlp.kir", "--emit", "wat", check=False)
    assert proc.returncode == 2 and "--emit must be one of" in proc.stderr
    proc = kilnc(root / "mlp.kir", "--name", "9lives", "-o", tmp_path, check=False)
    assert proc.returncode == 1 and "must be a C identifier" in proc.stderr
    proc = kilnc(root / "mlp.kir", "--target", "tpu", "-o", tmp_path, check=False)
    assert proc.returncode == 2 and "--target must be cpu or cuda" in proc.stderr
    (tmp_path / "lone.kir").write_text(KIR)
    proc = kilnc(tmp_path / "lone.kir", "-o", tmp_path, check=False)
    assert proc.returncode == 1 and "lone.safetensors does not exist" in proc.stderr


def test_failed_build_leaves_nothing_behind(built, tmp_path):
    root, _, _ = built
    out = tmp_path / "out"
    out.mkdir()
    (out / "libmlp.so").write_bytes(b"previous library")
    env = dict(os.environ, CC="false")
    proc = kilnc(root / "mlp.kir", "-o", out, env=env, check=False)
    assert proc.returncode == 1 and "compiling the glue failed" in proc.stderr
    assert sorted(p.name for p in out.iterdir()) == ["libmlp.so"]
    assert (out / "libmlp.so").read_bytes() == b"previous library"


def test_emit_ptx_through_nvrtc(built):
    root, _, _ = built
    proc = kilnc(root / "mlp.kir", "--emit", "ptx", "--arch", "90", check=False)
    if "NVRTC is not available" in proc.stderr:
        pytest.skip("no libnvrtc on this machine")
    assert proc.returncode == 0, proc.stderr
    assert ".target sm_90" in proc.stdout and ".entry " in proc.stdout


def test_target_cuda_embeds_nvrtc_code_and_runs_where_a_gpu_is(built, tmp_path):
    """--target cuda builds without a GPU; creating the model needs one (else status 5)."""
    import kiln

    root, weights, runner = built
    proc = kilnc(root / "mlp.kir", "-o", tmp_path / "cuda", "--target", "cuda", "--arch", "80",
                 "--name", "mlp_cuda", check=False)
    if "NVRTC is not available" in proc.stderr:
        pytest.skip("no libnvrtc on this machine")
    assert proc.returncode == 0, proc.stderr
    lib = tmp_path / "cuda" / "libmlp_cuda.so"
    assert b".target sm_80" in lib.read_bytes()  # the PTX is embedded
    assert "for CUDA sm_80" in (tmp_path / "cuda" / "mlp_cuda.h").read_text()
    x = np.random.default_rng(3).standard_normal((6, 8)).astype(np.float32)
    rc, log, outs = run_model(runner, lib, "mlp_cuda", [x, np.array(0.5, np.float32)],
                              tmp_path / "run")
    if not kiln.cuda.is_available():
        assert rc == INCOMPATIBLE and "no CUDA device can be used here" in log, log
        return
    assert rc == OK, log
    want = reference(x.astype(np.float64), 0.5, weights)
    np.testing.assert_allclose(outs[0], want[0], rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("level, registers", [("x86-64", ()), ("x86-64-v3", ("ymm",))])
def test_cpu_level_for_older_machines(built, tmp_path, level, registers):
    """--cpu compiles for an x86-64 level instead of this CPU: the assembly uses only that
    level's vector registers, and the library still computes the same results."""
    root, weights, runner = built
    asm = kilnc(root / "mlp.kir", "--emit", "asm", "--cpu", level).stdout
    assert "zmm" not in asm and all(r in asm for r in registers)
    if not registers:
        assert "ymm" not in asm
    kilnc(root / "mlp.kir", "-o", tmp_path, "--cpu", level, "--name", "mlp_old")
    assert f"for {level} CPUs" in (tmp_path / "mlp_old.h").read_text()
    x = np.random.default_rng(5).standard_normal((9, 8)).astype(np.float32)
    rc, log, outs = run_model(runner, tmp_path / "libmlp_old.so", "mlp_old",
                              [x, np.array(1.5, np.float32)], tmp_path / "run")
    assert rc == OK, log
    np.testing.assert_allclose(outs[0], reference(x.astype(np.float64), 1.5, weights)[0],
                               rtol=1e-4, atol=1e-6)
    proc = kilnc(root / "mlp.kir", "--cpu", "pentium", "-o", tmp_path, check=False)
    assert proc.returncode == 1 and "kilnc: error: --cpu must be native, x86-64" in proc.stderr
