"""kiln.set_num_threads bounds the BLAS too (MKL or OpenBLAS), and the BLAS kiln picks gives the
same products: MKL when the environment has it, OpenBLAS when asked or when MKL cannot load."""

import ctypes
import ctypes.util
import os
import subprocess
import sys

import numpy as np
import pytest

import kiln


def _openblas():
    for name in ("libopenblas.so.0", ctypes.util.find_library("openblas") or ""):
        if not name:
            continue
        try:
            lib = ctypes.CDLL(name)  # the instance the extension already loaded
            lib.openblas_get_num_threads.restype = ctypes.c_int
            return lib
        except OSError:
            continue
    return None


def _thread_count():
    """The thread count of the BLAS kiln uses, read from the library itself."""
    if kiln._C._blas() == "mkl":
        return ctypes.CDLL(os.environ["KILN_MKL_LIB"]).MKL_Get_Max_Threads()
    return _openblas().openblas_get_num_threads()


@pytest.mark.skipif(
    kiln._C._blas() == "openblas" and _openblas() is None,
    reason="libopenblas is not loadable by name",
)
def test_set_num_threads_reaches_the_blas():
    before = kiln.get_num_threads()
    a = kiln.randn(64, 64)
    try:
        for n in (1, 2, 1):
            kiln.set_num_threads(n)
            a @ a  # BLAS follows the pool's count at its next call
            assert _thread_count() == n
    finally:
        kiln.set_num_threads(before)


def test_mkl_is_used_when_the_environment_has_it():
    from kiln._blas_env import _mkl_library

    expected = "mkl" if _mkl_library() and os.environ.get("KILN_BLAS") != "openblas" else "openblas"
    assert kiln._C._blas() == expected


PROGRAM = """
import numpy as np, kiln
rng = np.random.default_rng(0)
a, b = rng.standard_normal((67, 45)), rng.standard_normal((45, 33))
for dt in (np.float32, np.float64):
    x, y = kiln.tensor(a.astype(dt)), kiln.tensor(b.astype(dt))
    np.save(f"{kiln._C._blas()}_{np.dtype(dt).name}.npy", (x @ y.t().contiguous().t()).numpy())
print(kiln._C._blas())
"""


def _run(tmp_path, **env):
    out = subprocess.run(
        [sys.executable, "-c", PROGRAM],
        cwd=tmp_path,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.strip(), out.stderr


def test_both_libraries_agree_and_a_broken_mkl_falls_back(tmp_path):
    name, _ = _run(tmp_path, KILN_BLAS="openblas")
    assert name == "openblas"
    name, err = _run(tmp_path, KILN_MKL_LIB=str(tmp_path / "missing.so"))
    assert name == "openblas" and "could not be loaded" in err
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((67, 45)), rng.standard_normal((45, 33))
    for dt, tol in (("float32", 1e-4), ("float64", 1e-12)):
        np.testing.assert_allclose(np.load(tmp_path / f"openblas_{dt}.npy"), a @ b, rtol=tol)
    if kiln._C._blas() == "mkl":
        env = {k: v for k, v in os.environ.items() if k != "KILN_BLAS"}
        out = subprocess.run(
            [sys.executable, "-c", PROGRAM], cwd=tmp_path, env=env, capture_output=True, text=True
        )
        assert out.stdout.strip() == "mkl"
        for dt, tol in (("float32", 1e-4), ("float64", 1e-12)):
            np.testing.assert_allclose(np.load(tmp_path / f"mkl_{dt}.npy"), a @ b, rtol=tol)
