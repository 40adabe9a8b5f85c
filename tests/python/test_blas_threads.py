"""kiln.set_num_threads bounds OpenBLAS too: GEMMs use the same thread count as kiln's pool."""

import ctypes
import ctypes.util

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
def test_set_num_threads_reaches_openblas():
    lib = _openblas()
    before = kiln.get_num_threads()
    a = kiln.randn(64, 64)
    try:
        for n in (1, 2, 1):
            kiln.set_num_threads(n)
            a @ a  # BLAS follows the pool's count at its next call
            assert lib.openblas_get_num_threads() == n
    finally:
        kiln.set_num_threads(before)
