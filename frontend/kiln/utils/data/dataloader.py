"""DataLoader and default_collate (torch.utils.data's), loading in the calling process."""

from __future__ import annotations

import collections.abc
import numbers

import numpy as np

import kiln
from kiln.utils.data.dataset import IterableDataset
from kiln.utils.data.sampler import BatchSampler, RandomSampler, SequentialSampler


def default_collate(batch):
    """A list of samples as one batch: tensors (and NumPy arrays, numbers) stacked along a new
    first dim; dicts and named tuples collated field by field, tuples and lists into a list of
    fields (as torch does); strings kept as lists."""
    elem = batch[0]
    if isinstance(elem, kiln.Tensor):
        return kiln.stack(list(batch), 0)
    if isinstance(elem, np.ndarray) and elem.dtype.kind not in "SUO":
        return kiln.stack([kiln.as_tensor(b) for b in batch], 0)
    if isinstance(elem, np.generic):
        return kiln.as_tensor(np.array(batch))
    if isinstance(elem, bool):
        return kiln.tensor(batch)
    if isinstance(elem, float):
        return kiln.tensor(batch, dtype=kiln.float64)
    if isinstance(elem, numbers.Integral):
        return kiln.tensor(batch)
    if isinstance(elem, (str, bytes)):
        return batch
    if isinstance(elem, collections.abc.Mapping):
        return type(elem)({k: default_collate([d[k] for d in batch]) for k in elem})
    if isinstance(elem, tuple) and hasattr(elem, "_fields"):  # a named tuple
        return type(elem)(*(default_collate(list(s)) for s in zip(*batch, strict=True)))
    if isinstance(elem, collections.abc.Sequence):
        if any(len(s) != len(elem) for s in batch):
            raise RuntimeError("each element in list of batch should be of equal size")
        fields = [default_collate(list(s)) for s in zip(*batch, strict=True)]
        if isinstance(elem, (tuple, list)):  # a tuple sample collates to a list, as torch's
            return fields
        try:
            return type(elem)(fields)
        except TypeError:
            return fields
    raise TypeError(
        "default_collate: batch must contain tensors, numpy arrays, numbers, dicts or lists; "
        f"found {type(elem)}"
    )


class DataLoader:
    """Batches of a dataset: torch's arguments and semantics, loading in this process."""

    def __init__(self, dataset, batch_size=1, shuffle=None, sampler=None, batch_sampler=None,
                 num_workers=0, collate_fn=None, pin_memory=False, drop_last=False, timeout=0,
                 worker_init_fn=None, multiprocessing_context=None, generator=None, *,
                 prefetch_factor=None, persistent_workers=False, pin_memory_device="",
                 in_order=True):  # fmt: skip
        if num_workers < 0:
            raise ValueError(
                "num_workers option should be non-negative; use num_workers=0 to disable "
                "multiprocessing."
            )
        self.dataset, self.num_workers, self.drop_last = dataset, num_workers, drop_last
        self.generator = generator
        self._iterable = isinstance(dataset, IterableDataset)
        if self._iterable and (shuffle or sampler is not None or batch_sampler is not None):
            raise ValueError(
                "DataLoader with IterableDataset: expected unspecified shuffle, sampler or "
                "batch_sampler option"
            )
        if batch_sampler is not None:
            if batch_size != 1 or shuffle or sampler is not None or drop_last:
                raise ValueError(
                    "batch_sampler option is mutually exclusive with batch_size, shuffle, "
                    "sampler, and drop_last"
                )
            batch_size, drop_last = None, False
        elif batch_size is None and drop_last:
            raise ValueError(
                "batch_size=None option disables auto-batching and is mutually exclusive with "
                "drop_last"
            )
        if sampler is not None and shuffle:
            raise ValueError("sampler option is mutually exclusive with shuffle")
        if sampler is None and not self._iterable:
            sampler = (RandomSampler(dataset, generator=generator) if shuffle
                       else SequentialSampler(dataset))  # fmt: skip
        if batch_sampler is None and batch_size is not None and not self._iterable:
            batch_sampler = BatchSampler(sampler, batch_size, drop_last)
        self.batch_size, self.sampler, self.batch_sampler = batch_size, sampler, batch_sampler
        self.collate_fn = collate_fn or (default_collate if batch_size is not None or
                                         batch_sampler is not None else (lambda x: x))  # fmt: skip

    def __iter__(self):
        if self._iterable:
            if self.batch_size is None:
                yield from (self.collate_fn(s) for s in self.dataset)
                return
            batch = []
            for sample in self.dataset:
                batch.append(sample)
                if len(batch) == self.batch_size:
                    yield self.collate_fn(batch)
                    batch = []
            if batch and not self.drop_last:
                yield self.collate_fn(batch)
            return
        if self.batch_sampler is None:
            for i in self.sampler:
                yield self.collate_fn(self.dataset[i])
            return
        for indices in self.batch_sampler:
            yield self.collate_fn([self.dataset[i] for i in indices])

    def __len__(self):
        if self._iterable:
            n = len(self.dataset)
            if self.batch_size is None:
                return n
            return n // self.batch_size if self.drop_last else -(-n // self.batch_size)
        return len(self.batch_sampler if self.batch_sampler is not None else self.sampler)
