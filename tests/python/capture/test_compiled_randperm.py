"""``randperm`` compiled: eager's permutation for the same generator state (a ``randperm``
extern runs Fisher-Yates from the counters the program reserved), in the dtype asked for, for a
size that changes between calls, inside mixup's batch shuffle; the generator ends where eager's
ends and no node runs eagerly."""

from __future__ import annotations

import pytest
from corpus_util import fresh_capture  # noqa: F401 - autouse: empty caches around every test
from test_compiled_random import draws_as_eager, one_compiled_part

import kiln


@pytest.mark.parametrize("dtype", [None, kiln.int32, kiln.float32, kiln.int16], ids=str)
def test_randperm_is_eagers_permutation(dtype):
    def fn(x):
        p = kiln.randperm(x.shape[0]) if dtype is None else kiln.randperm(x.shape[0], dtype=dtype)
        return p, x * 2

    one_compiled_part(draws_as_eager(fn, kiln.randn(37, 2)))


def test_sizes_that_change_between_calls_and_the_empty_and_single_permutations():
    def fn(x):
        return kiln.randperm(x.shape[0]) + x.shape[0]

    backend = draws_as_eager(fn, kiln.randn(6), calls=[(kiln.randn(9),), (kiln.randn(1),),
                                                        (kiln.randn(0),)])  # fmt: skip
    for report in backend.reports:
        assert report.eager_nodes == 0 and report.fallbacks == []


def test_mixup_shuffles_the_batch_in_one_compiled_part():
    """Mixup's batch shuffle as training scripts write it: one graph, no eager node."""

    def mixup(x, y, lam):
        index = kiln.randperm(x.size(0))
        return lam * x + (1 - lam) * x[index, :], y, y[index]

    backend = draws_as_eager(mixup, kiln.randn(16, 3, 4, 4), kiln.randint(0, 10, (16,)),
                             kiln.tensor(0.3))  # fmt: skip
    report = one_compiled_part(backend)
    assert report.infos[0]["kernels"] >= 1
