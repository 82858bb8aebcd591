"""``Batch``: the tensors of one batch, addressable by position and by name."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import torch

from flodl.data.errors import DatasetShapeError, UnknownFieldError


class Batch(Sequence[torch.Tensor]):
    """The tensors of one batch, in dataset order, each with a name.

    Index by position (``batch[0]``) or by name (``batch["label"]``); unpack like a tuple
    (``x, y = batch``). Without explicit names the fields are called ``"0"``, ``"1"``, ...

    >>> import torch, flodl as fl
    >>> b = fl.data.Batch([torch.zeros(4, 3), torch.arange(4)], names=["image", "label"])
    >>> b["label"].tolist(), b[0].shape, len(b)
    ([0, 1, 2, 3], torch.Size([4, 3]), 2)
    >>> image, label = b
    >>> b.size
    4
    """

    __slots__ = ("_index", "_names", "_tensors")

    def __init__(self, tensors: Sequence[torch.Tensor], names: Sequence[str] | None = None) -> None:
        self._tensors = tuple(tensors)
        if names is None:
            names = [str(i) for i in range(len(self._tensors))]
        self._names = tuple(names)
        if len(self._names) != len(self._tensors):
            raise DatasetShapeError(
                f"Batch: {len(self._tensors)} tensors but {len(self._names)} names {self._names}"
            )
        self._index = {name: i for i, name in enumerate(self._names)}

    @classmethod
    def _trusted(
        cls, tensors: tuple[torch.Tensor, ...], index: dict[str, int], names: tuple[str, ...]
    ) -> Batch:
        # The loaders build thousands of batches per epoch with the same names: skip validation.
        batch = cls.__new__(cls)
        batch._tensors = tensors
        batch._index = index
        batch._names = names
        return batch

    def __getitem__(self, key):
        if isinstance(key, str):
            try:
                return self._tensors[self._index[key]]
            except KeyError:
                raise UnknownFieldError(
                    f"Batch: unknown field {key!r}. Available: {list(self._names)}"
                ) from None
        return self._tensors[key]

    def __len__(self) -> int:
        return len(self._tensors)

    def __iter__(self) -> Iterator[torch.Tensor]:
        return iter(self._tensors)

    def __contains__(self, key: object) -> bool:
        """``"label" in batch`` tests a field name (not tensor membership)."""
        return key in self._index

    @property
    def names(self) -> tuple[str, ...]:
        """The field names, in position order."""
        return self._names

    @property
    def tensors(self) -> tuple[torch.Tensor, ...]:
        """The tensors, in position order."""
        return self._tensors

    @property
    def size(self) -> int:
        """Number of samples in the batch (dim 0 of its tensors)."""
        return self._tensors[0].shape[0] if self._tensors else 0

    def get(self, name: str, default: torch.Tensor | None = None) -> torch.Tensor | None:
        """The tensor called ``name``, or ``default`` when there is no such field."""
        i = self._index.get(name)
        return default if i is None else self._tensors[i]

    def to_dict(self) -> dict[str, torch.Tensor]:
        """``{name: tensor}`` in position order."""
        return dict(zip(self._names, self._tensors, strict=True))

    def to(self, *args, **kwargs) -> Batch:
        """A batch with every tensor passed through ``Tensor.to(*args, **kwargs)``."""
        return Batch._trusted(
            tuple(t.to(*args, **kwargs) for t in self._tensors), self._index, self._names
        )

    def __repr__(self) -> str:
        fields = ", ".join(
            f"{n}={tuple(t.shape)}:{str(t.dtype).removeprefix('torch.')}"
            for n, t in zip(self._names, self._tensors, strict=True)
        )
        return f"Batch({fields})"
