"""Readers for standard datasets from local files (no network at runtime)."""

from flodl.data.datasets.base import InMemoryDataset
from flodl.data.datasets.cifar import Cifar10
from flodl.data.datasets.mnist import MNIST
from flodl.data.datasets.text import CharCorpus

__all__ = ["MNIST", "CharCorpus", "Cifar10", "InMemoryDataset"]
