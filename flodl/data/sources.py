"""Dataset contracts and the adapters that turn any supported dataset into batch fetches.

The loaders only ever ask one question: "give me the rows at these indices, as tensors". Every
supported kind of dataset is adapted to that question here, once, at build time:

- tensors: one ``Tensor``, a tuple/list of tensors, a dict of named tensors, or a
  ``torch.utils.data.TensorDataset`` — rows are gathered with ``index_select``;
- a *batch dataset*: anything with ``__len__`` and ``get_batch(indices)`` (:class:`BatchDataset`);
- a *map-style dataset*: ``__len__`` + ``__getitem__`` returning a tensor, a tuple/list or a dict of
  tensors (numbers and NumPy arrays are converted; nested structures are refused) — any
  ``torch.utils.data.Dataset`` works unchanged; ``__getitems__`` (PyTorch's batched-fetch hook) is
  used when present.
"""

from __future__ import annotations

import abc
import contextlib
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np
import torch

from flodl.data.datasets.base import InMemoryDataset
from flodl.data.errors import DatasetShapeError, EmptyDatasetError, LoaderConfigError

Fields = tuple[torch.Tensor, ...]


@runtime_checkable
class BatchDataset(Protocol):
    """A dataset that returns whole batches: the fast contract.

    ``get_batch`` receives a 1-D ``int64`` CPU tensor of indices and returns a tensor, a sequence
    of tensors or a dict of named tensors whose first dimension equals ``len(indices)``. A loader
    with ``.prefetch(n)`` calls it from a background thread, so it must then be thread-safe
    (reading from tensors is).

    >>> import torch, flodl as fl
    >>> class Squares:
    ...     def __len__(self):
    ...         return 10
    ...     def get_batch(self, indices):
    ...         x = indices.float()
    ...         return {"x": x, "y": x * x}
    >>> loader = fl.data.DataLoader.from_dataset(Squares()).batch_size(5).shuffle(False).build()
    >>> next(iter(loader.epoch(0)))["y"].tolist()
    [0.0, 1.0, 4.0, 9.0, 16.0]
    """

    def __len__(self) -> int: ...

    def get_batch(self, indices: torch.Tensor) -> Any: ...


class Source(abc.ABC):
    """A dataset adapted to ``fetch(indices) -> tuple of tensors``; ``names`` when it has them.

    ``code`` names the user code every fetch runs (``"Aug.__getitem__"``), or is ``None`` when
    rows are gathered from stored tensors: such code may draw random numbers (augmentation), so
    the loader neither caches it silently nor runs it in a thread by default.
    """

    names: tuple[str, ...] | None = None
    description: str = "dataset"
    code: str | None = None

    @abc.abstractmethod
    def __len__(self) -> int: ...

    @abc.abstractmethod
    def fetch(self, indices: torch.Tensor) -> Fields:
        """The rows at ``indices``; they may share memory with the dataset (see :meth:`fetch_to`)."""

    def fetch_to(self, indices: torch.Tensor, device: torch.device, *, pin: bool = False) -> Fields:
        """The rows at ``indices`` on ``device``, in memory of their own: a batch changed in place
        (``x.sub_(mean)``) must not change the dataset. ``pin``: a copy from pinned CPU memory,
        not waited for (the caller orders it with a stream event)."""
        return tuple(_move(t, device, pin) for t in self.fetch(indices))

    def field_name(self, position: int) -> str:
        return self.names[position] if self.names else str(position)


class TensorSource(Source):
    """Rows of equally long tensors (the whole dataset is already in memory)."""

    def __init__(
        self,
        tensors: Sequence[torch.Tensor],
        names: Sequence[str] | None,
        what: str,
        rows: torch.Tensor | None = None,
    ):
        self.description = what
        self.tensors = tuple(tensors)
        self.names = tuple(names) if names is not None else None
        # A Subset's rows of the tensors (int64, CPU), or None for all of them.
        self.rows = rows
        if not self.tensors:
            raise DatasetShapeError(f"DataLoader: {what} holds no tensors — pass at least one")
        if self.names is not None and len(self.names) != len(self.tensors):
            raise LoaderConfigError(
                f"DataLoader: {len(self.names)} names {list(self.names)} for"
                f" {len(self.tensors)} fields of {what} — give one name per field"
            )
        labels = self.names or tuple(str(i) for i in range(len(self.tensors)))
        for name, t in zip(labels, self.tensors, strict=True):
            if not isinstance(t, torch.Tensor):
                raise DatasetShapeError(
                    f"DataLoader: field {name!r} of {what} is a {type(t).__name__}, not a tensor"
                    " — convert it with torch.as_tensor"
                )
            if t.dim() == 0:
                raise DatasetShapeError(
                    f"DataLoader: field {name!r} of {what} is a 0-d tensor; samples are rows of"
                    " dimension 0 — give it at least one dimension"
                )
        lengths = {name: t.shape[0] for name, t in zip(labels, self.tensors, strict=True)}
        if len(set(lengths.values())) > 1:
            detail = ", ".join(f"{n!r} has {k}" for n, k in lengths.items())
            raise DatasetShapeError(
                f"DataLoader: the tensors of {what} have different lengths ({detail}) — every"
                " field needs one row per sample"
            )
        self._len = self.tensors[0].shape[0] if rows is None else len(rows)

    def __len__(self) -> int:
        return self._len

    def fetch(self, indices: torch.Tensor) -> Fields:
        if self.rows is not None:
            indices = self.rows[indices]
        return tuple(t.index_select(0, indices.to(t.device)) for t in self.tensors)

    def subset(self, indices: Any, what: str) -> TensorSource:
        """The rows ``indices`` of this source (a ``torch.utils.data.Subset``), not copied."""
        rows = _subset_rows(indices, len(self), what, self.description)
        if self.rows is not None:
            rows = self.rows[rows]
        return TensorSource(self.tensors, self.names, what, rows)


class ConcatSource(Source):
    """Rows of a ``torch.utils.data.ConcatDataset`` whose parts are all stored tensors: each
    batch gathers its rows from the parts they fall in, in one call per part and field, with no
    copy of the whole dataset (``rows``: a Subset's rows, as in :class:`TensorSource`)."""

    def __init__(self, parts: Sequence[TensorSource], what: str, rows: torch.Tensor | None = None):
        self.parts = tuple(parts)
        self.description = what
        self.names = self.parts[0].names
        self.rows = rows
        first = self.parts[0].tensors
        for k, part in enumerate(self.parts[1:], 1):
            if part.names != self.names or len(part.tensors) != len(first):
                raise DatasetShapeError(
                    f"DataLoader: part {k} of {what} has fields "
                    f"{list(part.names or range(len(part.tensors)))}, part 0 has "
                    f"{list(self.names or range(len(first)))} — every part needs the same fields"
                )
            for j, (a, b) in enumerate(zip(first, part.tensors, strict=True)):
                if a.shape[1:] != b.shape[1:] or a.dtype != b.dtype or a.device != b.device:
                    raise DatasetShapeError(
                        f"DataLoader: field {self.field_name(j)!r} of part {k} of {what} is "
                        f"{_row_kind(b)}, part 0's is {_row_kind(a)} — the parts' samples "
                        "must have the same shape, dtype and device"
                    )
        sizes = torch.tensor([len(part) for part in self.parts], dtype=torch.int64)
        self._ends = sizes.cumsum(0)
        self._starts = self._ends - sizes
        self._len = int(self._ends[-1]) if rows is None else len(rows)

    def __len__(self) -> int:
        return self._len

    def fetch(self, indices: torch.Tensor) -> Fields:
        if self.rows is not None:
            indices = self.rows[indices]
        which = torch.searchsorted(self._ends, indices, right=True)
        firsts = self.parts[0].tensors
        out = [t.new_empty((len(indices), *t.shape[1:])) for t in firsts]
        for k in which.unique().tolist():
            at = (which == k).nonzero().squeeze(1)
            rows = self.parts[k].fetch(indices[at] - self._starts[k])
            for field, values in zip(out, rows, strict=True):
                field.index_copy_(0, at.to(field.device), values)
        return tuple(out)

    def subset(self, indices: Any, what: str) -> ConcatSource:
        rows = _subset_rows(indices, len(self), what, self.description)
        if self.rows is not None:
            rows = self.rows[rows]
        return ConcatSource(self.parts, what, rows)


def _row_kind(t: torch.Tensor) -> str:
    return f"{tuple(t.shape[1:])} {t.dtype} on {t.device}"


def _subset_rows(indices: Any, n: int, what: str, of: str) -> torch.Tensor:
    """A Subset's indices as int64 rows in ``range(n)``; negative ones as Python takes them."""
    rows = torch.as_tensor(indices, dtype=torch.int64).reshape(-1)
    bad = rows[(rows < -n) | (rows >= n)]
    if len(bad):
        raise DatasetShapeError(
            f"DataLoader: {what} has indices {_show(bad)} outside the {n} samples of {of}"
        )
    return rows % n if n else rows


class BatchSource(Source):
    """A user dataset with ``get_batch(indices)``; checks what it returns."""

    def __init__(self, dataset: Any):
        self.dataset = dataset
        self.description = type(dataset).__name__
        self.code = f"{self.description}.get_batch"
        self._len = len(dataset)
        self._count: int | None = None

    def __len__(self) -> int:
        return self._len

    def fetch(self, indices: torch.Tensor) -> Fields:
        return self._checked(indices)[0]

    def fetch_to(self, indices: torch.Tensor, device: torch.device, *, pin: bool = False) -> Fields:
        fields, given = self._checked(indices)
        moved = []
        for t, shared in zip(fields, given, strict=True):
            m = _move(t, device, pin)
            # A tensor get_batch returned may be the dataset's own memory (a slice, or
            # torch.from_numpy of one) when the move copied nothing: copy it. A move to another
            # device copies anyway, so the GPU path pays nothing extra.
            if shared and _same_memory(m, t):
                m = m.clone()
            moved.append(m)
        return tuple(moved)

    def _checked(self, indices: torch.Tensor) -> tuple[Fields, tuple[bool, ...]]:
        """get_batch's fields, checked, and which of them it returned as tensors (those may share
        memory with the dataset; numbers and arrays are converted into memory of their own)."""
        out = self.dataset.get_batch(indices)
        where = f"{self.description}.get_batch"
        fields, names = split_fields(out, where, copy=True)
        given = _given_tensors(out)
        if self._count is None:
            self._count = len(fields)
            if self.names is None:
                self.names = names
        elif names is not None and self.names is not None and names != self.names:
            fields = _by_key(fields, names, self.names, f"{where} for indices {_show(indices)}")
        elif len(fields) != self._count or (names is None) != (self.names is None):
            got = list(names) if names is not None else f"{len(fields)} unnamed"
            raise DatasetShapeError(
                f"DataLoader: {where} returned fields {got} for the batch of indices"
                f" {_show(indices)} but the first batch had"
                f" {list(self.names) if self.names is not None else f'{self._count} unnamed'}"
                " — return the same fields for every batch"
            )
        rows = indices.shape[0]
        for i, t in enumerate(fields):
            if t.dim() == 0 or t.shape[0] != rows:
                raise DatasetShapeError(
                    f"DataLoader: {self.description}.get_batch returned field"
                    f" {self.field_name(i)!r} with shape"
                    f" {tuple(t.shape)} for {rows} indices — dimension 0 must equal the number"
                    " of indices"
                )
        return fields, tuple(id(t) in given for t in fields)


def _given_tensors(out: Any) -> set[int]:
    """The ids of the tensors in get_batch's output (as opposed to ones converted here)."""
    if isinstance(out, torch.Tensor):
        return {id(out)}
    if isinstance(out, Mapping):
        return {id(v) for v in out.values() if isinstance(v, torch.Tensor)}
    if isinstance(out, Sequence) and not isinstance(out, str | bytes):
        return {id(v) for v in out if isinstance(v, torch.Tensor)}
    return set()


def _move(t: torch.Tensor, device: torch.device, pin: bool) -> torch.Tensor:
    if pin and t.device.type == "cpu" and device.type == "cuda":
        return t.pin_memory().to(device, non_blocking=True)
    return t.to(device)


def _same_memory(moved: torch.Tensor, fetched: torch.Tensor) -> bool:
    if moved is fetched:
        return True
    if moved.device != fetched.device or moved.layout != torch.strided:
        return False
    return moved.untyped_storage().data_ptr() == fetched.untyped_storage().data_ptr()


def _show(indices: torch.Tensor | list[int]) -> list:
    rows = indices.tolist() if isinstance(indices, torch.Tensor) else indices
    return rows if len(rows) <= 8 else [*rows[:8], "..."]


def _by_key(fields: Fields, names: tuple[str, ...], order: tuple[str, ...], where: str) -> Fields:
    """Fields reordered to ``order`` when the keys are the same in another order (torch's
    default collate also matches dict samples by key)."""
    if sorted(names) != sorted(order):
        raise DatasetShapeError(
            f"DataLoader: {where} has keys {list(names)} but the first had {list(order)} — return"
            " the same keys every time"
        )
    position = {name: i for i, name in enumerate(names)}
    return tuple(fields[position[name]] for name in order)


class MapSource(Source):
    """A map-style dataset (``len`` + ``__getitem__``): samples fetched one by one and stacked."""

    def __init__(self, dataset: Any):
        self.dataset = dataset
        self.description = type(dataset).__name__
        self._len = len(dataset)
        self._getitems = getattr(dataset, "__getitems__", None)
        hook = "__getitems__" if self._getitems is not None else "__getitem__"
        self.code = f"{self.description}.{hook}"
        self._shapes: tuple[torch.Size, ...] | None = None

    def __len__(self) -> int:
        return self._len

    def _sample(self, index: int, raw: Any) -> Fields:
        shapes = self._shapes
        if shapes is not None:  # the common case first: tensors as the first sample had them
            kind = type(raw)
            if kind is tuple or kind is list:
                values = tuple(raw) if self.names is None else ()
            elif kind is dict and self.names is not None and tuple(raw) == self.names:
                values = tuple(raw.values())
            else:
                values = ()
            if len(values) == len(shapes) and all(
                type(t) is torch.Tensor and t.shape == shape
                for t, shape in zip(values, shapes, strict=True)
            ):
                return values
        fields, names = split_fields(raw, f"{self.description}[{index}]", nested=False)
        if self._shapes is None:
            self.names = names
            self._shapes = tuple(t.shape for t in fields)
            return fields
        if names is not None and self.names is not None and names != self.names:
            fields = _by_key(fields, names, self.names, f"{self.description}[{index}]")
            names = self.names
        if names != self.names or len(fields) != len(self._shapes):
            raise DatasetShapeError(
                f"DataLoader: {self.description}[{index}] has fields"
                f" {list(names) if names else len(fields)} but the first sample had"
                f" {list(self.names) if self.names else len(self._shapes)} — every sample needs"
                " the same structure"
            )
        for i, (t, shape) in enumerate(zip(fields, self._shapes, strict=True)):
            if t.shape != shape:
                raise DatasetShapeError(
                    f"DataLoader: {self.description}[{index}] field {self.field_name(i)!r}"
                    f" has shape"
                    f" {tuple(t.shape)} but the first sample's is {tuple(shape)} — pad or"
                    " resize samples to one shape, or return whole batches from get_batch"
                )
        return fields

    def fetch(self, indices: torch.Tensor) -> Fields:
        keys = indices.tolist()
        if self._getitems is not None:
            try:
                raws = self._getitems(keys)
            except Exception as exc:
                exc.add_note(f"flodl.data: raised by {self.code}({_show(keys)})")
                raise
            if len(raws) != len(keys):
                raise DatasetShapeError(
                    f"DataLoader: {self.code} returned {len(raws)} samples for {len(keys)}"
                    f" indices {_show(keys)} — return one sample per index, in order"
                )
        else:
            raws = []
            for key in keys:
                try:
                    raws.append(self.dataset[key])
                except Exception as exc:
                    exc.add_note(f"flodl.data: raised by {self.description}[{key}]")
                    raise
        stacked = self._stack_plain(raws)
        if stacked is not None:
            return stacked
        samples = [self._sample(k, raw) for k, raw in zip(keys, raws, strict=True)]
        if not samples:
            return ()
        return tuple(torch.stack(column) for column in zip(*samples, strict=True))

    def _stack_plain(self, raws: Sequence[Any]) -> Fields | None:
        """The batch of unnamed tensor samples shaped as the first one, stacked with no check per
        sample (a Python check per sample costs as much as the dataset's own ``__getitem__``);
        None when anything differs, for the checking path to stack or to explain."""
        if self._shapes is None or self.names is not None or not raws:
            return None
        if not set(map(type, raws)) <= {tuple, list}:  # a lone tensor would be split in rows
            return None
        try:
            fields = tuple(torch.stack(column) for column in zip(*raws, strict=True))
        except (TypeError, ValueError, RuntimeError):  # numbers, nesting, sizes: checked below
            return None
        if len(fields) != len(self._shapes) or any(
            f.shape[1:] != shape for f, shape in zip(fields, self._shapes, strict=True)
        ):
            return None
        return fields


def split_fields(
    out: Any, where: str, *, nested: bool = True, copy: bool = False
) -> tuple[Fields, tuple[str, ...] | None]:
    """A tensor, sequence or mapping of tensor-likes → (tensors, names or None).

    ``nested=False`` (samples) refuses a dict, or a tuple or list holding tensors, arrays or
    sequences, inside the sample: torch's collate would keep it as a nested structure, and
    converting it would merge its items into one field. A flat list of numbers is one field
    when the sample names it (``{"bbox": [0.1, 0.2, 0.3, 0.4]}``), and refused by position:
    ``x, (label, weight) = batch`` would unpack the rows of one ``(B, 2)`` field, not two.
    ``copy=True`` gives arrays memory of their own instead of sharing a NumPy dataset's memory.
    """
    if isinstance(out, torch.Tensor):
        return (out,), None
    if isinstance(out, Mapping):
        items = [(str(k), f"{where}[{k!r}]", v) for k, v in out.items()]
        names: tuple[str, ...] | None = tuple(name for name, _, _ in items)
    elif isinstance(out, Sequence) and not isinstance(out, str | bytes):
        items = [(str(i), f"{where}[{i}]", v) for i, v in enumerate(out)]
        names = None
    else:
        return (_as_tensor(out, where, copy),), None
    if not nested:
        for name, at, value in items:
            if _is_nested(value) or (names is None and _is_sequence(value)):
                raise DatasetShapeError(
                    f"DataLoader: {at} is a {type(value).__name__} nested in the sample (field"
                    f" {name!r}); a batch is a flat list of named tensors, so nested samples are"
                    " not collated — return its items as fields of their own, e.g. (x, label,"
                    " weight) or a flat dict, or a tensor or NumPy array for one field"
                )
    return tuple(_as_tensor(v, at, copy) for _, at, v in items), names


def _is_sequence(value: Any) -> bool:
    return isinstance(value, Sequence) and not isinstance(value, str | bytes)


def _is_nested(value: Any) -> bool:
    if isinstance(value, Mapping):
        return True
    if not _is_sequence(value):
        return False
    return any(
        isinstance(v, Mapping | torch.Tensor | np.ndarray)
        or (isinstance(v, Sequence) and not isinstance(v, str | bytes))
        for v in value
    )


def _as_tensor(value: Any, where: str, copy: bool = False) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        return value
    if copy and _fresh_array(value):  # e.g. arr[indices]: already a copy, nothing to protect
        try:
            return torch.from_numpy(value)
        except (TypeError, ValueError, RuntimeError):
            pass  # a dtype or layout torch cannot share: copied below
    try:
        return torch.tensor(value) if copy else torch.as_tensor(value)
    except (TypeError, ValueError, RuntimeError) as exc:
        raise DatasetShapeError(
            f"DataLoader: {where} is a {type(value).__name__}, which is not convertible to a"
            " tensor — return tensors, numbers or NumPy arrays"
        ) from exc


def _fresh_array(value: Any) -> bool:
    """A NumPy array that owns its memory and is no view: fancy indexing made it just now (a
    slice of the dataset is a view, with a ``base``)."""
    return (
        isinstance(value, np.ndarray)
        and value.flags.owndata
        and value.base is None
        and value.flags.writeable  # torch.from_numpy warns about a read-only one
    )


def as_source(dataset: Any, names: Sequence[str] | None = None) -> Source:
    """Adapt ``dataset`` to a :class:`Source`; raises a clear error for anything unsupported."""
    from torch.utils.data import ConcatDataset, IterableDataset, Subset
    from torch.utils.data import TensorDataset as TorchTensorDataset

    if isinstance(dataset, Source):
        return dataset
    # Gathered from their tensors unless a subclass overrides how items are made (e.g. adds
    # random augmentation): then its code is called like any other dataset's.
    if isinstance(dataset, InMemoryDataset):
        if not _overrides(dataset, InMemoryDataset):
            return TensorSource(dataset.tensors, names or dataset.names, type(dataset).__name__)
        if type(dataset).get_batch is InMemoryDataset.get_batch:  # only __getitem__ overridden
            return MapSource(dataset)
    if isinstance(dataset, torch.Tensor):
        return TensorSource([dataset], names, "the tensor")
    if isinstance(dataset, TorchTensorDataset) and not _overrides(dataset, TorchTensorDataset):
        return TensorSource(dataset.tensors, names, "the TensorDataset")
    if isinstance(dataset, Subset) and not _overrides(dataset, Subset):
        # random_split's parts: rows of stored tensors draw no random numbers, so they are
        # gathered (and may stay resident) like the tensors they come from
        inner: Source | None = None
        with contextlib.suppress(LoaderConfigError, DatasetShapeError):
            inner = as_source(dataset.dataset, names)  # else read as Subset.__getitem__
        if isinstance(inner, TensorSource | ConcatSource):
            return inner.subset(dataset.indices, f"the Subset of {inner.description}")
    if isinstance(dataset, ConcatDataset) and not _overrides(dataset, ConcatDataset):
        # parts of stored tensors are gathered like them; any other part is read through
        # ConcatDataset.__getitem__ (its code may draw random numbers)
        parts: list[Source] = []
        with contextlib.suppress(LoaderConfigError, DatasetShapeError):
            parts = [as_source(part, names) for part in dataset.datasets]
        if parts and all(isinstance(part, TensorSource) for part in parts):
            what = f"the ConcatDataset of {len(parts)} parts"
            # parts of other shapes or dtypes are collated sample by sample, as torch does
            # (int32 and int64 labels stack to int64)
            with contextlib.suppress(DatasetShapeError):
                return ConcatSource([p for p in parts if isinstance(p, TensorSource)], what)
    if isinstance(dataset, Mapping):
        return TensorSource(list(dataset.values()), list(map(str, dataset)), "the dict of tensors")
    if isinstance(dataset, tuple | list) and all(isinstance(t, torch.Tensor) for t in dataset):
        return TensorSource(list(dataset), names, f"the {type(dataset).__name__} of tensors")
    if isinstance(dataset, IterableDataset):
        raise LoaderConfigError(
            f"DataLoader: {type(dataset).__name__} is an IterableDataset, which has no random"
            " access, so it cannot be shuffled, partitioned or kept resident — give it __len__"
            " and __getitem__ (or get_batch)"
        )
    if not hasattr(dataset, "__len__"):
        raise LoaderConfigError(
            f"DataLoader: a {type(dataset).__name__} is not a dataset — pass tensors, a dict of"
            " tensors, or an object with __len__ and __getitem__ or get_batch(indices)"
        )
    if callable(getattr(dataset, "get_batch", None)):
        return BatchSource(dataset)
    if hasattr(dataset, "__getitem__"):
        return MapSource(dataset)
    raise LoaderConfigError(
        f"DataLoader: {type(dataset).__name__} has __len__ but neither __getitem__ nor"
        " get_batch(indices) — implement one of them"
    )


def _overrides(dataset: Any, base: type) -> bool:
    hooks = ("__getitem__", "__getitems__", "get_batch")
    return any(getattr(type(dataset), h, None) is not getattr(base, h, None) for h in hooks)


def require_samples(source: Source) -> int:
    n = len(source)
    if n == 0:
        raise EmptyDatasetError(
            f"DataLoader: empty dataset ({source.description} has 0 samples) — check the path"
            " or filter that produced it"
        )
    return n
