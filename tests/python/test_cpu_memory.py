"""kiln.cpu's memory statistics: the host bytes of live kiln tensors and compiled programs'
buffers, their peak, and its reset; memory borrowed from NumPy is not counted."""

from __future__ import annotations

import numpy as np
import pytest

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


def test_a_storage_resized_to_zero_frees_its_memory_and_its_views_see_new_memory():
    base = kiln.cpu.memory_allocated()
    full = kiln.arange(1 << 18, dtype=kiln.float32)  # 1 MiB
    view = full[4:8].view(2, 2)
    assert kiln.cpu.memory_allocated() == base + (1 << 20)
    full._storage_resize_(0)
    assert full._storage_nbytes() == 0 and view._storage_nbytes() == 0
    assert kiln.cpu.memory_allocated() == base
    with pytest.raises(RuntimeError, match="memory was released"):
        view.sum()
    with pytest.raises(RuntimeError, match="memory was released"):
        view.data_ptr()
    with pytest.raises(RuntimeError, match="below the 1048576 the storage was made with"):
        full._storage_resize_(64)  # views past 64 bytes would read beyond it
    full._storage_resize_(1 << 20)
    assert kiln.cpu.memory_allocated() == base + (1 << 20)
    full.fill_(3.0)
    np.testing.assert_array_equal(view.numpy(), np.full((2, 2), 3.0, np.float32))
    # growing keeps the contents
    small = kiln.arange(4, dtype=kiln.float64)
    small._storage_resize_(64)
    np.testing.assert_array_equal(small.numpy(), [0.0, 1.0, 2.0, 3.0])
    with pytest.raises(RuntimeError, match="non-negative"):
        small._storage_resize_(-1)
