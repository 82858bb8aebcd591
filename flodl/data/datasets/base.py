"""Datasets held as named tensors in memory (the built-in readers produce these)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch

from flodl.data.errors import DatasetFormatError, DatasetShapeError
from flodl.log import get_logger


class InMemoryDataset:
    """Equally long named tensors; a batch dataset, a map-style dataset, and loader-friendly.

    The :class:`~flodl.data.DataLoader` gathers rows straight from :attr:`tensors` (no copy in
    resident mode on CPU).

    >>> import torch, flodl as fl
    >>> ds = fl.data.datasets.InMemoryDataset({"x": torch.arange(6.0), "y": torch.arange(6)})
    >>> len(ds), ds[2], ds.get_batch(torch.tensor([0, 5]))["y"].tolist()
    (6, {'x': tensor(2.), 'y': tensor(2)}, [0, 5])
    """

    def __init__(self, fields: dict[str, torch.Tensor]) -> None:
        lengths = {name: t.shape[0] for name, t in fields.items()}
        if len(set(lengths.values())) > 1:
            raise DatasetShapeError(
                f"{type(self).__name__}: fields have different lengths {lengths}"
            )
        self.names: tuple[str, ...] = tuple(fields)
        self.tensors: tuple[torch.Tensor, ...] = tuple(fields.values())

    def __len__(self) -> int:
        return self.tensors[0].shape[0]

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {name: t[index] for name, t in zip(self.names, self.tensors, strict=True)}

    def get_batch(self, indices: torch.Tensor) -> dict[str, torch.Tensor]:
        return {
            name: t.index_select(0, indices)
            for name, t in zip(self.names, self.tensors, strict=True)
        }

    def split(self, fraction: float) -> tuple[InMemoryDataset, InMemoryDataset]:
        """The first ``fraction`` of samples and the rest, as two datasets (no shuffling)."""
        if not 0.0 < fraction < 1.0:
            raise DatasetShapeError(f"split: fraction must be in (0, 1), got {fraction}")
        cut = int(len(self) * fraction)
        head = {n: t[:cut] for n, t in zip(self.names, self.tensors, strict=True)}
        tail = {n: t[cut:] for n, t in zip(self.names, self.tensors, strict=True)}
        return InMemoryDataset(head), InMemoryDataset(tail)

    def __repr__(self) -> str:
        shapes = ", ".join(
            f"{n}={tuple(t.shape)}" for n, t in zip(self.names, self.tensors, strict=True)
        )
        return f"{type(self).__name__}({shapes})"


def read_bytes(path: Path, what: str) -> bytes:
    """The file's bytes, transparently gunzipped; a clear error when it is missing or corrupt."""
    import gzip

    if not path.is_file():
        raise DatasetFormatError(f"{what}: {path} does not exist — download it first")
    raw = path.read_bytes()
    get_logger("flodl.data").debug("%s: read %s (%d bytes)", what, path, len(raw))
    if raw[:2] == b"\x1f\x8b":
        try:
            return gzip.decompress(raw)
        except (OSError, EOFError) as exc:
            raise DatasetFormatError(f"{what}: {path} is a corrupt or truncated gzip file") from exc
    return raw


def first_existing(root: Path, names: Sequence[str], what: str) -> Path:
    """The first of ``root/name`` (or ``root/name.gz``) that exists."""
    for name in names:
        for candidate in (root / name, root / f"{name}.gz"):
            if candidate.is_file():
                return candidate
    raise DatasetFormatError(
        f"{what}: none of {list(names)} (or .gz) found in {root} — check the directory"
    )
