"""kiln.utils.data: torch.utils.data's datasets, samplers and DataLoader (in-process loading).

A training script written for torch keeps its data pipeline with only the import swapped:
``Dataset``/``IterableDataset``, ``TensorDataset``, ``Subset``, ``ConcatDataset``,
``random_split``, the samplers (``SequentialSampler``, ``RandomSampler``,
``SubsetRandomSampler``, ``BatchSampler``, ``DistributedSampler``) and ``DataLoader`` with
torch's batching and default collation. Loading runs in the calling process: ``num_workers``,
``pin_memory``, ``prefetch_factor`` and ``persistent_workers`` are accepted and the batches are
the ones torch's workers would produce, in the same order, made without worker processes.
Shuffling draws from kiln's generator, so a shuffled order is not torch's.
"""

from kiln.utils.data.dataloader import DataLoader, default_collate
from kiln.utils.data.dataset import (
    ConcatDataset,
    Dataset,
    IterableDataset,
    Subset,
    TensorDataset,
    random_split,
)
from kiln.utils.data.distributed import DistributedSampler
from kiln.utils.data.sampler import (
    BatchSampler,
    RandomSampler,
    Sampler,
    SequentialSampler,
    SubsetRandomSampler,
    WeightedRandomSampler,
)

__all__ = [
    "BatchSampler",
    "ConcatDataset",
    "DataLoader",
    "Dataset",
    "DistributedSampler",
    "IterableDataset",
    "RandomSampler",
    "Sampler",
    "SequentialSampler",
    "Subset",
    "SubsetRandomSampler",
    "TensorDataset",
    "WeightedRandomSampler",
    "default_collate",
    "random_split",
]
