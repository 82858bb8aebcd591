"""MNIST from its IDX files (``train-images-idx3-ubyte[.gz]`` and friends)."""

from __future__ import annotations

import math
import struct
from pathlib import Path

import torch

from flodl.data.datasets.base import InMemoryDataset, first_existing, read_bytes
from flodl.data.errors import DatasetFormatError

_IDX_UBYTE = 0x08


def read_idx(path: Path) -> torch.Tensor:
    """A uint8 tensor from an IDX file (magic ``0x0000 08 nd``, big-endian dimensions)."""
    data = read_bytes(path, "IDX")
    if len(data) < 4 or data[0] != 0 or data[1] != 0:
        raise DatasetFormatError(f"IDX: {path} does not start with an IDX magic number")
    if data[2] != _IDX_UBYTE:
        raise DatasetFormatError(
            f"IDX: {path} holds type 0x{data[2]:02x}; only unsigned bytes are supported"
        )
    ndim = data[3]
    header = 4 + 4 * ndim
    if ndim == 0 or len(data) < header:
        raise DatasetFormatError(f"IDX: {path} has a truncated header")
    dims = struct.unpack(f">{ndim}I", data[4:header])
    count = math.prod(dims)
    if len(data) != header + count:
        raise DatasetFormatError(
            f"IDX: {path} should hold {count} bytes of data for shape {dims}, found"
            f" {len(data) - header} — the file is truncated or corrupt"
        )
    return torch.frombuffer(bytearray(data[header:]), dtype=torch.uint8).reshape(dims)


class MNIST(InMemoryDataset):
    """MNIST digits: ``image`` float32 ``[N, 1, 28, 28]`` in [0, 1] and ``label`` int64 ``[N]``.

    ``root`` holds the four standard IDX files, gzipped or not (``train-images-idx3-ubyte.gz``,
    ``train-labels-idx1-ubyte.gz``, ``t10k-images-idx3-ubyte.gz``, ``t10k-labels-idx1-ubyte.gz``).

    >>> import flodl as fl
    >>> ds = fl.data.MNIST("data/mnist", train=True)          # doctest: +SKIP
    >>> ds.names, ds.tensors[0].shape                          # doctest: +SKIP
    (('image', 'label'), torch.Size([60000, 1, 28, 28]))
    """

    def __init__(self, root: str | Path, *, train: bool = True) -> None:
        root = Path(root)
        prefix = "train" if train else "t10k"
        images = read_idx(
            first_existing(
                root, [f"{prefix}-images-idx3-ubyte", f"{prefix}-images.idx3-ubyte"], "MNIST"
            )
        )
        labels = read_idx(
            first_existing(
                root, [f"{prefix}-labels-idx1-ubyte", f"{prefix}-labels.idx1-ubyte"], "MNIST"
            )
        )
        if images.dim() != 3 or labels.dim() != 1:
            raise DatasetFormatError(
                f"MNIST: expected images [N, H, W] and labels [N] in {root}, got"
                f" {tuple(images.shape)} and {tuple(labels.shape)}"
            )
        if images.shape[0] != labels.shape[0]:
            raise DatasetFormatError(
                f"MNIST: {images.shape[0]} images but {labels.shape[0]} labels in {root}"
            )
        super().__init__(
            {
                "image": images.unsqueeze(1).float().div_(255.0),
                "label": labels.long(),
            }
        )
