"""Helpers for the kilnc tests: find kilnc, build the C++ runner once, move tensors through
`.kt` files (examples/aot/run_model.cpp's format)."""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[3]
KILN_DTYPES = ["bool", "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16",
               "float32", "float64"]
_NP = {"bool": np.bool_, "uint8": np.uint8, "int8": np.int8, "int16": np.int16,
       "int32": np.int32, "int64": np.int64, "float16": np.float16, "float32": np.float32,
       "float64": np.float64}  # fmt: skip

# kiln_status codes (aot/kiln_aot.h)
OK, INVALID_ARGUMENT, DTYPE, SHAPE, WEIGHTS, INCOMPATIBLE, RUNTIME = range(7)


def kilnc_path() -> str:
    """The installed kilnc (scripts/build.sh puts it beside the venv's python)."""
    exe = Path(sys.executable).parent / "kilnc"
    if exe.exists():
        return str(exe)
    return str(ROOT / "bazel-bin" / "aot" / "kilnc")


def runtime_dir() -> Path:
    return Path(kilnc_path()).resolve().parent.parent / "lib" / "kiln-aot"


def kilnc(*args, check=True, env=None) -> subprocess.CompletedProcess:
    proc = subprocess.run([kilnc_path(), *map(str, args)], capture_output=True, text=True,
                          env=env, timeout=600)
    if check and proc.returncode != 0:
        raise AssertionError(f"kilnc failed ({proc.returncode}):\n{proc.stdout}{proc.stderr}")
    return proc


def build_runner(out_dir: Path) -> Path:
    """Compiles examples/aot/run_model.cpp against kiln_aot.h (no model header needed)."""
    exe = out_dir / "run_model"
    if not exe.exists():
        cxx = os.environ.get("CXX") or shutil.which("c++") or "g++"
        subprocess.run([cxx, "-std=c++17", "-O1", "-I", str(runtime_dir()),
                        str(ROOT / "examples" / "aot" / "run_model.cpp"), "-o", str(exe),
                        "-L", str(runtime_dir()), "-lkiln_aot",
                        f"-Wl,-rpath,{runtime_dir()}", "-ldl", "-pthread"], check=True)
    return exe


def write_kt(path: Path, array: np.ndarray, dtype: str | None = None) -> Path:
    code = KILN_DTYPES.index(dtype or str(array.dtype))
    data = np.array(array, order="C")  # ascontiguousarray would make a 0-d array 1-d
    with open(path, "wb") as f:
        f.write(b"KT01" + struct.pack("<ii", code, data.ndim))
        f.write(struct.pack(f"<{data.ndim}q", *data.shape))
        f.write(data.tobytes())
    return path


def read_kt(path: Path) -> np.ndarray:
    raw = Path(path).read_bytes()
    assert raw[:4] == b"KT01"
    code, rank = struct.unpack("<ii", raw[4:12])
    sizes = struct.unpack(f"<{rank}q", raw[12:12 + 8 * rank])
    return np.frombuffer(raw[12 + 8 * rank:], dtype=_NP[KILN_DTYPES[code]]).reshape(sizes)


def run_model(runner: Path, lib: Path, name: str, inputs: list, work: Path, *extra):
    """Runs the model on numpy inputs; returns (returncode, stdout, outputs)."""
    work.mkdir(parents=True, exist_ok=True)
    for old in work.glob("out*.kt"):
        old.unlink()
    paths = [write_kt(work / f"in{k}.kt", x) for k, x in enumerate(inputs)]
    proc = subprocess.run([str(runner), str(lib), name, str(work), *map(str, paths),
                           *map(str, extra)], capture_output=True, text=True, timeout=600)
    outs = [read_kt(p) for p in sorted(work.glob("out*.kt"), key=lambda p: int(p.stem[3:]))]
    return proc.returncode, proc.stdout + proc.stderr, outs
