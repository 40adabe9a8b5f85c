"""The done-when flow of ahead-of-time compilation: kiln.export → save → kilnc → load from C++
→ run, for the GPT-style and ResNet-style models with a dynamic batch, against Python eager."""

from __future__ import annotations

import os
import shutil
import subprocess

import numpy as np
import pytest
from aot_util import DTYPE, OK, ROOT, SHAPE, build_runner, kilnc, read_kt, run_model, runtime_dir
from models import convnet, gpt

import kiln
import kiln.nn as knn
import kiln.nn.functional as kF


def build(builder, **config):
    kiln.manual_seed(0)
    return builder(kiln, knn, kF)(**config).eval()


def tokens(batch, seq, vocab):
    """The tokens examples/aot/gpt_main.cpp feeds: (b*131 + t*17 + 3) mod vocab."""
    b = np.arange(batch)[:, None]
    t = np.arange(seq)[None, :]
    return (b * 131 + t * 17 + 3) % vocab


@pytest.fixture(scope="module")
def gpt_library(tmp_path_factory):
    folder = tmp_path_factory.mktemp("gpt_aot")
    model = build(gpt.build, dropout=0.0)
    idx = kiln.randint(0, 50, (3, 8))
    batch = kiln.Dim("batch", min=2, max=32)
    kiln.export(model, (idx,), dynamic_shapes={"idx": {0: batch}}).save(folder / "gpt")
    kilnc(folder / "gpt.kir", "-o", folder / "lib")
    cxx = os.environ.get("CXX") or shutil.which("c++") or "g++"
    exe = folder / "gpt_main"
    subprocess.run([cxx, "-std=c++17", "-O1", "-I", str(folder / "lib"),
                    str(ROOT / "examples" / "aot" / "gpt_main.cpp"), "-o", str(exe),
                    "-L", str(folder / "lib"), "-lgpt", "-lkiln_aot",
                    f"-Wl,-rpath,{folder / 'lib'}"],
                   check=True)
    return model, folder, exe


@pytest.mark.parametrize("batch", [2, 5])
def test_gpt_from_cpp_equals_python_eager(gpt_library, batch):
    model, folder, exe = gpt_library
    out = folder / f"logits{batch}.kt"
    proc = subprocess.run([str(exe), str(batch), str(out)], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "input 0: idx int64 [batch, 8]" in proc.stdout
    assert "float input: status 2: gpt: input idx must be int64, got float32" in proc.stdout
    idx = tokens(batch, 8, 50)
    want, _ = model(kiln.tensor(idx.tolist(), dtype=kiln.int64))
    got = read_kt(out)
    assert got.shape == (batch, 8, 50)
    np.testing.assert_allclose(got, np.array(want.tolist(), dtype=np.float32), rtol=1e-4,
                               atol=1e-5)
    next_tokens = [int(line.split()[-1]) for line in proc.stdout.splitlines()
                   if line.startswith("row ")]
    assert next_tokens == [int(r) for r in want[:, -1].argmax(-1).tolist()]


@pytest.fixture(scope="module")
def convnet_library(tmp_path_factory):
    folder = tmp_path_factory.mktemp("convnet_aot")
    model = build(convnet.build)
    x = kiln.randn(4, 3, 16, 16)
    batch = kiln.Dim("batch", min=2, max=64)
    kiln.export(model, (x,), dynamic_shapes={"x": {0: batch}}).save(folder / "convnet")
    kilnc(folder / "convnet.kir", "-o", folder / "lib", "--weights", "embed")
    return model, folder, build_runner(folder)


@pytest.mark.parametrize("batch", [2, 7])
def test_convnet_from_cpp_equals_python_eager(convnet_library, batch):
    model, folder, runner = convnet_library
    x = np.random.default_rng(batch).standard_normal((batch, 3, 16, 16)).astype(np.float32)
    rc, log, outs = run_model(runner, folder / "lib" / "libconvnet.so", "convnet", [x],
                              folder / f"run{batch}", "--threads", "2")
    assert rc == OK, log
    want = model(kiln.tensor(x.tolist()))
    np.testing.assert_allclose(outs[0], np.array(want.tolist(), dtype=np.float32), rtol=1e-4,
                               atol=1e-5)


def test_convnet_bad_inputs_are_error_codes(convnet_library):
    _, folder, runner = convnet_library
    lib = folder / "lib" / "libconvnet.so"
    rc, log, _ = run_model(runner, lib, "convnet", [np.zeros((2, 3, 16, 16), np.float64)],
                           folder / "bad1")
    assert rc == DTYPE and "input x must be float32, got float64" in log
    rc, log, _ = run_model(runner, lib, "convnet", [np.zeros((2, 4, 16, 16), np.float32)],
                           folder / "bad2")
    assert rc == SHAPE and "input x has shape [2, 4, 16, 16]" in log
    rc, log, _ = run_model(runner, lib, "convnet", [np.zeros((65, 3, 16, 16), np.float32)],
                           folder / "bad3")
    assert rc == SHAPE and "size batch = 65 is outside its range [2, 64]" in log


def test_mha_gpt_library_equals_eager(tmp_path):
    """nn.MultiheadAttention with a boolean causal mask built from arange, through kilnc."""
    model = build(gpt.build, dropout=0.0, use_mha=True)
    idx = kiln.randint(0, 50, (3, 8))
    kiln.export(model, (idx,), dynamic_shapes={"idx": {0: kiln.Dim("batch", max=16)}}).save(
        tmp_path / "mha")
    kilnc(tmp_path / "mha.kir", "-o", tmp_path / "lib")
    runner = build_runner(tmp_path)
    tokens_ = np.random.default_rng(4).integers(0, 50, (4, 8))
    rc, log, outs = run_model(runner, tmp_path / "lib" / "libmha.so", "mha", [tokens_],
                              tmp_path / "run")
    assert rc == OK, log
    want, _ = model(kiln.tensor(tokens_.tolist(), dtype=kiln.int64))
    np.testing.assert_allclose(outs[0], np.array(want.tolist(), dtype=np.float32), rtol=1e-4,
                               atol=1e-5)


def test_runtime_is_installed_beside_kilnc():
    assert (runtime_dir() / "libkiln_aot.so").exists() and (runtime_dir() / "kiln_aot.h").exists()
