"""Tests of CUDA tensors: they run where kiln has a CUDA device — a GPU, or the host emulator
(``KILN_CUDA_EMULATOR=1``, which scripts/test.sh sets for a second pytest run of this folder) —
and are skipped elsewhere."""

import pytest

import kiln


def pytest_collection_modifyitems(config, items):
    if kiln.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="no CUDA device (run with KILN_CUDA_EMULATOR=1)")
    for item in items:
        if "tests/python/cuda/" in str(item.fspath).replace("\\", "/"):
            item.add_marker(skip)
