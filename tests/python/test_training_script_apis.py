"""Calls that ported training scripts make unconditionally (seed_everything, device picking,
imbalanced sampling, metric-learning masks), as torch answers them on a CPU-only machine."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import kiln


def test_cuda_seeding_and_cache_calls_do_nothing_without_cuda():
    if kiln.cuda.is_available():
        pytest.skip("a CUDA device is present")
    kiln.manual_seed(3)
    want = kiln.rand(4)
    kiln.manual_seed(3)
    kiln.cuda.manual_seed(5)  # nothing to seed: the CPU stream is untouched, as torch's
    kiln.cuda.manual_seed_all(5)
    kiln.cuda.seed_all()
    kiln.cuda.empty_cache()
    assert kiln.equal(kiln.rand(4), want)


def test_mps_is_never_available():
    assert kiln.backends.mps.is_available() is False
    assert kiln.backends.mps.is_built() is False


@pytest.mark.parametrize("shape,wrap", [((3, 3), False), ((3, 5), False), ((7, 3), False),
                                        ((7, 3), True), ((5, 2), True), ((3, 3, 3), False)])
def test_fill_diagonal_matches_torch(shape, wrap):
    got = kiln.arange(float(np.prod(shape))).reshape(shape).fill_diagonal_(-1.0, wrap=wrap)
    want = torch.arange(float(np.prod(shape))).reshape(shape).fill_diagonal_(-1.0, wrap=wrap)
    np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_fill_diagonal_writes_through_a_view_and_rejects_bad_shapes():
    base = kiln.zeros(4, 6)
    base[:, ::2].fill_diagonal_(1.0)  # a strided view: the base sees the writes
    want = torch.zeros(4, 6)
    want[:, ::2].fill_diagonal_(1.0)
    np.testing.assert_array_equal(base.numpy(), want.numpy())
    with pytest.raises(RuntimeError, match="all dimensions"):
        kiln.zeros(2, 3, 3).fill_diagonal_(1.0)
    with pytest.raises(RuntimeError, match="dimensions must"):
        kiln.zeros(3).fill_diagonal_(1.0)


def test_weighted_random_sampler_draws_by_weight():
    gen = kiln.Generator().manual_seed(0)
    sampler = kiln.utils.data.WeightedRandomSampler([0.0, 1.0, 3.0], 4000, generator=gen)
    drawn = np.array(list(sampler))
    assert len(sampler) == 4000 and drawn.shape == (4000,)
    counts = np.bincount(drawn, minlength=3)
    assert counts[0] == 0
    assert 0.70 < counts[2] / 4000 < 0.80  # 3/4 of the weight
    unique = list(kiln.utils.data.WeightedRandomSampler([1, 1, 1, 1], 4, replacement=False))
    assert sorted(unique) == [0, 1, 2, 3]
    loader = kiln.utils.data.DataLoader(kiln.utils.data.TensorDataset(kiln.arange(3.0)),
                                        batch_size=2, sampler=sampler)
    assert sum(len(b[0]) for b in loader) == 4000
    with pytest.raises(ValueError, match="num_samples"):
        kiln.utils.data.WeightedRandomSampler([1.0], 0)
