"""Tensor.contiguous / Tensor.clone with memory_format, kiln.clone and kiln.detach, against torch:
contiguous_format and preserve_format are accepted (a permuted dense tensor's clone keeps its
strides, as torch's) and the rest are refused by name (kiln has no channels_last layout)."""

import numpy as np
import pytest
import torch

import kiln
from kiln._capture.backend_compiled import CpuBackend


def pair(shape=(3, 4, 5), seed=0):
    a = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    return kiln.tensor(a), torch.tensor(a)


def same(k, t):
    assert tuple(k.shape) == tuple(t.shape) and tuple(k.stride()) == tuple(t.stride())
    np.testing.assert_array_equal(k.numpy(), t.numpy())


@pytest.mark.parametrize("view", [lambda x: x, lambda x: x.transpose(0, 2), lambda x: x[:, 1:3],
                                  lambda x: x.permute(1, 2, 0), lambda x: x.expand(2, 3, 4, 5)])
def test_clone_and_contiguous_formats_match_torch(view):
    k, t = pair()
    kv, tv = view(k), view(t)
    same(kv.contiguous(memory_format=kiln.contiguous_format),
         tv.contiguous(memory_format=torch.contiguous_format))
    for kf, tf in ((kiln.contiguous_format, torch.contiguous_format),
                   (kiln.preserve_format, torch.preserve_format)):  # fmt: skip
        kc, tc = kv.clone(memory_format=kf), tv.clone(memory_format=tf)
        same(kc, tc)  # preserve_format keeps a permuted dense tensor's strides
        assert kc.data_ptr() != kv.data_ptr()  # always a copy
    same(kiln.clone(kv, memory_format=kiln.contiguous_format),
         torch.clone(tv, memory_format=torch.contiguous_format))


def test_contiguous_of_a_contiguous_tensor_shares_its_memory_and_detach_too():
    k, _ = pair()
    assert k.contiguous(memory_format=kiln.contiguous_format).data_ptr() == k.data_ptr()
    d = kiln.detach(k.requires_grad_(True))
    assert not d.requires_grad and d.data_ptr() == k.data_ptr()


def test_clone_of_a_sliced_and_permuted_tensor_is_row_major():
    """Known difference: torch's preserve_format follows a non-dense tensor's stride order
    ([3, 5, 1] with strides (20, 1, 5) clones to (5, 1, 5)); kiln copies row-major (5, 1, 1).
    The values agree."""
    k, t = pair()
    kc, tc = k[:, :1].transpose(1, 2).clone(), t[:, :1].transpose(1, 2).clone()
    assert tuple(kc.stride()) == (5, 1, 1)
    np.testing.assert_array_equal(kc.numpy(), tc.numpy())


def test_clone_of_a_permuted_tensor_keeps_its_gradient():
    k, t = pair()
    k.requires_grad_(True)
    t.requires_grad_(True)
    kc, tc = k.transpose(0, 2).clone(), t.transpose(0, 2).clone()
    same(kc.detach(), tc.detach())
    (kc * kiln.arange(60.0).reshape(5, 4, 3)).sum().backward()
    (tc * torch.arange(60.0).reshape(5, 4, 3)).sum().backward()
    np.testing.assert_array_equal(k.grad.numpy(), t.grad.numpy())


def test_wrong_formats_are_refused_by_name():
    k, _ = pair()
    with pytest.raises(RuntimeError, match="preserve memory format is unsupported"):
        k.contiguous(memory_format=kiln.preserve_format)
    with pytest.raises(TypeError, match="must be memory_format, not str"):
        k.clone(memory_format="contiguous")


def test_compiled_clone_with_a_format_equals_eager():
    def fn(x):
        return x.clone(memory_format=kiln.contiguous_format) * 2

    k, _ = pair()
    backend = CpuBackend(fallback=False)
    with kiln.no_grad():
        got = kiln.compile(fn, backend=backend)(k)
    np.testing.assert_array_equal(got.numpy(), fn(k).numpy())
    assert backend.reports[0].eager_nodes == 0
