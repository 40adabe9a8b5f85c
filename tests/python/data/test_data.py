"""kiln.utils.data against torch.utils.data: batches, collation, samplers, random_split and
DistributedSampler's partition, from the same dataset."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.utils.data as tdata  # noqa: E402

import kiln  # noqa: E402
import kiln.utils.data as kdata  # noqa: E402

X = np.arange(30, dtype=np.float32).reshape(10, 3)
Y = np.arange(10)


def as_numpy(obj):
    if isinstance(obj, (kiln.Tensor, torch.Tensor)):
        return obj.numpy()
    if isinstance(obj, dict):
        return {k: as_numpy(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(as_numpy(o) for o in obj)
    return obj


def same(a, b):
    a, b = as_numpy(a), as_numpy(b)
    if isinstance(a, dict):
        assert a.keys() == b.keys()
        for k in a:
            same(a[k], b[k])
    elif isinstance(a, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            same(x, y)
    else:
        np.testing.assert_array_equal(a, b)
        if isinstance(a, np.ndarray):
            assert a.dtype == b.dtype


@pytest.mark.parametrize("batch_size,drop_last", [(1, False), (3, False), (3, True), (10, False)])
def test_tensor_dataset_batches_equal_torch(batch_size, drop_last):
    ours = kdata.DataLoader(kdata.TensorDataset(kiln.tensor(X), kiln.tensor(Y)),
                            batch_size=batch_size, drop_last=drop_last)  # fmt: skip
    theirs = tdata.DataLoader(tdata.TensorDataset(torch.tensor(X), torch.tensor(Y)),
                              batch_size=batch_size, drop_last=drop_last)  # fmt: skip
    assert len(ours) == len(theirs)
    batches = list(ours)
    assert len(batches) == len(list(theirs))
    for a, b in zip(batches, theirs, strict=True):
        same(a, b)


class Samples:
    """A map-style dataset of dicts, tuples, NumPy arrays and numbers (not a Dataset subclass,
    as torch allows)."""

    def __len__(self):
        return 5

    def __getitem__(self, i):
        return {"x": np.full(2, i, np.float32), "pair": (i, float(i) / 2), "name": f"s{i}"}


def test_default_collate_of_nested_samples_equals_torch():
    for a, b in zip(kdata.DataLoader(Samples(), batch_size=2),
                    tdata.DataLoader(Samples(), batch_size=2), strict=True):  # fmt: skip
        same(a, b)


def test_shuffle_visits_every_sample_once_per_epoch_and_follows_the_generator():
    ds = kdata.TensorDataset(kiln.tensor(Y))
    g = kiln.Generator()
    g.manual_seed(5)
    first = [int(b[0][0]) for b in kdata.DataLoader(ds, shuffle=True, generator=g)]
    g.manual_seed(5)
    again = [int(b[0][0]) for b in kdata.DataLoader(ds, shuffle=True, generator=g)]
    assert sorted(first) == list(range(10)) and first == again


@pytest.mark.parametrize("n,replicas,drop_last", [(10, 3, False), (10, 3, True), (2, 3, False),
                                                  (12, 4, False), (7, 2, True)])  # fmt: skip
def test_distributed_sampler_partitions_as_torch(n, replicas, drop_last):
    ds = list(range(n))
    for rank in range(replicas):
        ours = kdata.DistributedSampler(ds, replicas, rank, shuffle=False, drop_last=drop_last)
        theirs = tdata.DistributedSampler(ds, replicas, rank, shuffle=False, drop_last=drop_last)
        assert list(ours) == list(theirs) and len(ours) == len(theirs)


def test_shuffled_distributed_sampler_covers_the_dataset_and_changes_per_epoch():
    ds = list(range(11))
    samplers = [kdata.DistributedSampler(ds, 3, r, seed=4) for r in range(3)]
    shares = [list(s) for s in samplers]
    assert all(len(s) == 4 for s in shares)
    assert set(sum(shares, [])) == set(ds)  # padded by repeats, nothing missing
    assert shares == [list(s) for s in samplers]  # the same seed and epoch: the same order
    for s in samplers:
        s.set_epoch(1)
    assert [list(s) for s in samplers] != shares


def test_random_split_and_subsets():
    parts = kdata.random_split(list(range(10)), [0.5, 0.3, 0.2])
    assert [len(p) for p in parts] == [5, 3, 2]
    assert sorted(sum((list(p) for p in parts), [])) == list(range(10))
    with pytest.raises(ValueError, match="Sum of input lengths"):
        kdata.random_split(list(range(10)), [3, 3])
    cat = kdata.ConcatDataset([kdata.Subset(list(range(10)), [1, 2]), [7, 8]])
    assert [cat[i] for i in range(len(cat))] == [1, 2, 7, 8] and cat[-1] == 8


def test_iterable_dataset_and_errors_follow_torch():
    class Stream(kdata.IterableDataset):
        def __iter__(self):
            return iter([kiln.tensor([float(i)]) for i in range(5)])

    batches = list(kdata.DataLoader(Stream(), batch_size=2))
    assert [b.shape[0] for b in batches] == [2, 2, 1]
    with pytest.raises(ValueError, match="expected unspecified shuffle"):
        kdata.DataLoader(Stream(), shuffle=True)
    with pytest.raises(ValueError, match="mutually exclusive with shuffle"):
        kdata.DataLoader(list(range(3)), sampler=kdata.SequentialSampler(range(3)), shuffle=True)
    with pytest.raises(ValueError, match="batch_size should be a positive integer"):
        kdata.DataLoader(list(range(3)), batch_size=0)
    with pytest.raises(RuntimeError, match="Requires distributed package"):
        kdata.DistributedSampler(list(range(3)))
