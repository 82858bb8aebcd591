"""Data loading: resident and streaming DataLoader, datasets, partitioning across ranks.

``fl.data`` is a namespace (its names are not re-exported at the top level)::

    import flodl as fl
    loader = fl.data.DataLoader.from_dataset(ds).batch_size(64).build()
    for batch in loader.epoch(epoch):
        x, y = batch["image"], batch["label"]

Guide: docs/data-loading.md.
"""

from flodl.data import datasets
from flodl.data.batch import Batch
from flodl.data.datasets import MNIST, CharCorpus, Cifar10
from flodl.data.epochs import EpochIterator
from flodl.data.errors import (
    BatchSizeError,
    DataError,
    DatasetFormatError,
    DatasetShapeError,
    EmptyDatasetError,
    LoaderConfigError,
    PrefetchError,
    ResidentFallbackWarning,
    ResidentMemoryError,
    UnknownFieldError,
)
from flodl.data.loader import SMOKE_BATCHES, DataLoader, DataLoaderBuilder
from flodl.data.memory import MemoryInfo, MemoryProbe, device_memory, fits_resident, prefetch_depth
from flodl.data.sampling import epoch_order, make_partition, partition_sizes
from flodl.data.sources import BatchDataset

__all__ = [
    "MNIST",
    "SMOKE_BATCHES",
    "Batch",
    "BatchDataset",
    "BatchSizeError",
    "CharCorpus",
    "Cifar10",
    "DataError",
    "DataLoader",
    "DataLoaderBuilder",
    "DatasetFormatError",
    "DatasetShapeError",
    "EmptyDatasetError",
    "EpochIterator",
    "LoaderConfigError",
    "MemoryInfo",
    "MemoryProbe",
    "PrefetchError",
    "ResidentFallbackWarning",
    "ResidentMemoryError",
    "UnknownFieldError",
    "datasets",
    "device_memory",
    "epoch_order",
    "fits_resident",
    "make_partition",
    "partition_sizes",
    "prefetch_depth",
]
