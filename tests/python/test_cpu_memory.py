"""kiln.cpu's memory statistics: the host bytes of live kiln tensors and compiled programs'
buffers, their peak, and its reset; memory borrowed from NumPy is not counted."""

from __future__ import annotations

import numpy as np

import kiln


def test_allocated_and_peak_follow_tensors():
    kiln.cpu.reset_peak_memory_stats()
    base = kiln.cpu.memory_allocated()
    x = kiln.empty(1 << 20)  # 4 MiB
    assert kiln.cpu.memory_allocated() == base + (4 << 20)
    y = x * 2
    assert kiln.cpu.max_memory_allocated() >= base + (8 << 20)
    del x, y
    assert kiln.cpu.memory_allocated() == base
    assert kiln.cpu.max_memory_allocated() >= base + (8 << 20)
    kiln.cpu.reset_peak_memory_stats()
    assert kiln.cpu.max_memory_allocated() == base


def test_borrowed_numpy_memory_is_not_counted():
    base = kiln.cpu.memory_allocated()
    a = np.ones(1 << 20)
    t = kiln.from_numpy(a)
    assert kiln.cpu.memory_allocated() == base
    assert t.sum().item() == 1 << 20


def test_the_torch_cpu_functions():
    assert kiln.cpu.is_available() and kiln.cpu.device_count() == 1
    assert kiln.cpu.current_device() == "cpu"
    kiln.cpu.synchronize()
