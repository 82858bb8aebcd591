"""CIFAR-10 from its binary batches (``data_batch_1.bin`` … ``data_batch_5.bin``, ``test_batch.bin``)."""

from __future__ import annotations

from pathlib import Path

import torch

from flodl.data.datasets.base import InMemoryDataset, first_existing, read_bytes
from flodl.data.errors import DatasetFormatError

_RECORD = 1 + 3 * 32 * 32  # one label byte, then 1024 red, 1024 green, 1024 blue bytes
CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")


def read_cifar_batch(path: Path) -> tuple[torch.Tensor, torch.Tensor]:
    """(images uint8 ``[N, 3, 32, 32]``, labels uint8 ``[N]``) from one binary batch file."""
    data = read_bytes(path, "CIFAR-10")
    if not data or len(data) % _RECORD:
        raise DatasetFormatError(
            f"CIFAR-10: {path} is {len(data)} bytes, not a whole number of {_RECORD}-byte records"
            " — the file is truncated or not a CIFAR-10 binary batch"
        )
    records = torch.frombuffer(bytearray(data), dtype=torch.uint8).reshape(-1, _RECORD)
    labels = records[:, 0].clone()
    if int(labels.max()) >= len(CLASSES):
        raise DatasetFormatError(f"CIFAR-10: {path} has label {int(labels.max())}; labels are 0–9")
    return records[:, 1:].reshape(-1, 3, 32, 32).clone(), labels


class Cifar10(InMemoryDataset):
    """CIFAR-10: ``image`` float32 ``[N, 3, 32, 32]`` in [0, 1] and ``label`` int64 ``[N]``.

    ``root`` is the ``cifar-10-batches-bin`` directory (or its parent). ``train=True`` reads the
    five ``data_batch_*.bin`` files, ``train=False`` reads ``test_batch.bin``.

    >>> import flodl as fl
    >>> ds = fl.data.Cifar10("data", train=False)             # doctest: +SKIP
    >>> len(ds), fl.data.datasets.cifar.CLASSES[int(ds[0]["label"])]   # doctest: +SKIP
    (10000, 'cat')
    """

    def __init__(self, root: str | Path, *, train: bool = True) -> None:
        root = Path(root)
        if (root / "cifar-10-batches-bin").is_dir():
            root = root / "cifar-10-batches-bin"
        names = [f"data_batch_{i}.bin" for i in range(1, 6)] if train else ["test_batch.bin"]
        parts = [read_cifar_batch(first_existing(root, [name], "CIFAR-10")) for name in names]
        images = torch.cat([p[0] for p in parts])
        labels = torch.cat([p[1] for p in parts])
        super().__init__({"image": images.float().div_(255.0), "label": labels.long()})
