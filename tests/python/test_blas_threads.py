"""kiln.set_num_threads bounds the BLAS too (OpenBLAS's own threads; MKL runs sequentially, split
over kiln's pool), the pool's split GEMMs equal NumPy's products at every thread count, and the
BLAS kiln picks gives the same products: MKL when the environment has it, OpenBLAS when asked or
when MKL cannot load."""

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


@pytest.mark.skipif(_openblas() is None, reason="libopenblas is not loadable by name")
def test_set_num_threads_reaches_the_blas():
    before = kiln.get_num_threads()
    a = kiln.randn(64, 64)
    try:
        for n in (1, 2, 1):
            kiln.set_num_threads(n)
            a @ a  # OpenBLAS follows the pool's count at its next call
            assert _openblas().openblas_get_num_threads() == n
            if kiln._C._blas() == "mkl":  # sequential: kiln's pool runs its blocks
                assert ctypes.CDLL(os.environ["KILN_MKL_LIB"]).MKL_Get_Max_Threads() == 1
    finally:
        kiln.set_num_threads(before)


# (m, n, k): one block (too small to split), row blocks, column blocks (few rows), a 2-D grid
# at 4 threads, and outputs too small for blocks split over k (a weight gradient's shape).
POOL_SHAPES = [
    (8, 8, 8), (512, 96, 64), (20, 700, 64), (300, 260, 50), (16, 27, 5000), (3, 5, 9001)
]


@pytest.mark.parametrize("threads", [1, 2, 3, 4])
@pytest.mark.parametrize("shape", POOL_SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_split_gemms_equal_numpy(threads, shape, dtype):
    m, n, k = shape
    rng = np.random.default_rng(m * n + k)
    a, b = rng.standard_normal((m, k)).astype(dtype), rng.standard_normal((k, n)).astype(dtype)
    c = rng.standard_normal((m, n)).astype(dtype)
    tol = dict(rtol=2e-4, atol=2e-4 * np.sqrt(k)) if dtype == np.float32 else dict(rtol=1e-10)
    before = kiln.get_num_threads()
    try:
        kiln.set_num_threads(threads)
        x, y, z = kiln.tensor(a), kiln.tensor(b), kiln.tensor(c)
        # every transpose flag: blocks and k-slices start at different offsets in each layout
        xt, yt = kiln.tensor(a.T.copy()).t(), kiln.tensor(b.T.copy()).t()
        for lhs, rhs in ((x, y), (xt, y), (x, yt), (xt, yt)):
            np.testing.assert_allclose((lhs @ rhs).numpy(), a @ b, **tol)
        # beta and alpha reach every block (and only the first k-slice adds beta * c)
        got = kiln.addmm(z, x, y, beta=0.5, alpha=2.0).numpy()
        np.testing.assert_allclose(got, 0.5 * c + 2.0 * (a @ b), **tol)
    finally:
        kiln.set_num_threads(before)


@pytest.mark.parametrize("threads", [2, 3])
@pytest.mark.parametrize("count", [1, 2, 5, 32])
def test_split_batches_equal_numpy(threads, count):
    rng = np.random.default_rng(count)
    a = rng.standard_normal((count, 64, 48)).astype(np.float32)
    b = rng.standard_normal((count, 48, 80)).astype(np.float32)
    before = kiln.get_num_threads()
    try:
        kiln.set_num_threads(threads)
        got = (kiln.tensor(a) @ kiln.tensor(b)).numpy()
        np.testing.assert_allclose(got, a @ b, rtol=2e-4, atol=2e-3)
        got = (kiln.tensor(a) @ kiln.tensor(b.transpose(0, 2, 1).copy()).transpose(1, 2)).numpy()
        np.testing.assert_allclose(got, a @ b, rtol=2e-4, atol=2e-3)
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
