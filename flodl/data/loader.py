"""``DataLoader``: tensors resident when they fit on the device, streamed otherwise; Python datasets
streamed (re-read every epoch)."""

from __future__ import annotations

import operator
import warnings
from collections.abc import Iterator, Sequence
from typing import Any, Literal

import numpy as np
import torch

from flodl.data.epochs import DirectEpoch, EpochIterator, ResidentEpoch, StreamingEpoch
from flodl.data.errors import (
    BatchSizeError,
    DatasetShapeError,
    LoaderConfigError,
    ResidentFallbackWarning,
    ResidentMemoryError,
)
from flodl.data.memory import (
    HOST_RESIDENT_FRACTION,
    RESIDENT_FRACTION,
    MemoryProbe,
    describe_bytes,
    device_memory,
    fits_resident,
    is_out_of_memory,
    prefetch_depth,
    resident_budget,
)
from flodl.data.sampling import DEFAULT_SEED, epoch_order, shard_bounds
from flodl.data.sources import BatchSource, Source, TensorSource, as_source, require_samples
from flodl.log import get_logger
from flodl.smoke import SMOKE_BATCHES, smoke_enabled

log = get_logger("flodl.data")

Mode = Literal["auto", "resident", "streaming"]
_MODES = ("auto", "resident", "streaming")


def smoke_cap() -> int | None:
    """Batches per epoch allowed by ``FLODL_SMOKE`` (unset, empty or ``0`` → no cap)."""
    return SMOKE_BATCHES if smoke_enabled() else None


def _as_int(value: Any) -> int | None:
    """``value`` as an int when it is an integer (Python or NumPy, not a bool), else None."""
    if isinstance(value, bool):
        return None
    try:
        return operator.index(value)
    except TypeError:
        return None


def _check_int(value: Any, what: str, minimum: int, error: type[Exception]) -> int:
    number = _as_int(value)
    if number is None or number < minimum:
        raise error(f"DataLoader: {what} must be an integer ≥ {minimum}, got {value!r}")
    return number


def _check_bool(value: Any, what: str) -> bool:
    # bool("false") is True: a string or a number here is a mistake, not a switch
    if not isinstance(value, bool | np.bool_):
        raise LoaderConfigError(f"DataLoader: {what} takes True or False, got {value!r}")
    return bool(value)


class DataLoaderBuilder:
    """Configures a :class:`DataLoader`; every setter returns the builder. Finish with :meth:`build`."""

    def __init__(self, dataset: Any, names: Sequence[str] | None = None) -> None:
        self._dataset = dataset
        self._names = tuple(names) if names is not None else None
        self._batch_size: int | None = None
        self._shuffle = True
        self._seed = DEFAULT_SEED
        self._drop_last = True
        self._device = torch.device("cpu")
        self._mode: Mode = "auto"
        self._prefetch: int | None = None
        self._max_usage = RESIDENT_FRACTION
        self._probe: MemoryProbe = device_memory
        self._partition: tuple[int | None, int | None, tuple[float, ...] | None] | None = None

    def batch_size(self, n: int) -> DataLoaderBuilder:
        """Samples per batch (per rank when partitioned). Required."""
        self._batch_size = _check_int(n, "batch_size", 1, BatchSizeError)
        return self

    def shuffle(self, on: bool = True) -> DataLoaderBuilder:
        """Shuffle each epoch with the seeded permutation (default) or visit samples in order."""
        self._shuffle = _check_bool(on, "shuffle")
        return self

    def seed(self, seed: int) -> DataLoaderBuilder:
        """Base seed of the epoch permutations: epoch ``e`` uses ``seed + e`` (default 42)."""
        self._seed = _check_int(seed, "seed", 0, LoaderConfigError)
        return self

    def drop_last(self, on: bool = True) -> DataLoaderBuilder:
        """Drop the last partial batch (default: True, so BatchNorm never sees a batch of 1)."""
        self._drop_last = _check_bool(on, "drop_last")
        return self

    def device(self, device: str | torch.device) -> DataLoaderBuilder:
        """Where batches are delivered (default CPU)."""
        try:
            self._device = torch.device(device)
        except (RuntimeError, TypeError) as exc:
            raise LoaderConfigError(f"DataLoader: {device!r} is not a torch device") from exc
        return self

    def mode(self, mode: Mode) -> DataLoaderBuilder:
        """``"auto"`` (default): tensors resident if they fit, else streaming; a dataset whose
        items come from Python code (``__getitem__``, ``get_batch``) streams, so it is re-read
        every epoch. ``"resident"`` reads any dataset once and keeps it: random transforms in
        ``__getitem__`` then run once, not every epoch."""
        if mode not in _MODES:
            raise LoaderConfigError(
                f"DataLoader: mode must be one of {', '.join(_MODES)}, got {mode!r}"
            )
        self._mode = mode
        return self

    def streaming(self) -> DataLoaderBuilder:
        """Shorthand for ``mode("streaming")``."""
        return self.mode("streaming")

    def prefetch(self, depth: int) -> DataLoaderBuilder:
        """Fix the streaming prefetch depth (batches a background thread loads ahead).

        Default: sized from free memory for tensors; for a dataset whose items come from Python
        code, no thread — each batch is fetched in your loop's thread, in order, so
        ``fl.manual_seed`` reproduces its random draws. Setting a depth there opts in to the
        thread, whose random draws then interleave with the loop's (not reproducible).
        """
        self._prefetch = _check_int(depth, "prefetch depth", 1, LoaderConfigError)
        return self

    def vram_max_usage(self, fraction: float) -> DataLoaderBuilder:
        """Share of device memory the prefetch queue may fill (default 0.90, clamped to 0.5–0.99)."""
        self._max_usage = min(max(float(fraction), 0.5), 0.99)
        return self

    def memory_probe(self, probe: MemoryProbe) -> DataLoaderBuilder:
        """Replace how free memory is read (``probe(device) -> MemoryInfo | None``): a GPU's,
        or host RAM (``MemoryInfo(..., host=True)``) for the CPU."""
        if not callable(probe):
            raise LoaderConfigError("DataLoader: memory_probe needs a callable(device)")
        self._probe = probe
        return self

    def names(self, *names: str) -> DataLoaderBuilder:
        """Name the fields positionally (``batch["image"]``); must match the dataset's field count."""
        if len(set(names)) != len(names):
            raise LoaderConfigError(f"DataLoader: field names repeat: {list(names)}")
        self._names = tuple(map(str, names))
        return self

    def partition(
        self,
        rank: int | None = None,
        world_size: int | None = None,
        ratios: Sequence[float] | None = None,
    ) -> DataLoaderBuilder:
        """Give this process only its shard of every epoch (distributed training).

        ``rank``/``world_size`` default to ``torch.distributed``'s when a process group is
        initialised. ``ratios`` split samples unevenly (heterogeneous devices). The drop/pad rule
        is documented in docs/data-loading.md ("Distributed partitioning").
        """
        self._partition = (rank, world_size, tuple(ratios) if ratios is not None else None)
        return self

    def _resolve_partition(self) -> tuple[int, int, tuple[float, ...] | None]:
        if self._partition is None:
            return 0, 1, None
        rank, world, ratios = self._partition
        if rank is None or world is None:
            import torch.distributed as dist

            if not (dist.is_available() and dist.is_initialized()):
                raise LoaderConfigError(
                    "DataLoader: partition() without rank/world_size needs an initialised"
                    " torch.distributed process group — pass partition(rank, world_size)"
                )
            rank = dist.get_rank() if rank is None else rank
            world = dist.get_world_size() if world is None else world
        world = _check_int(world, "world_size", 1, LoaderConfigError)
        rank = _check_int(rank, "rank", 0, LoaderConfigError)
        if rank >= world:
            raise LoaderConfigError(f"DataLoader: rank {rank} is outside 0..{world - 1}")
        if ratios is not None and len(ratios) != world:
            raise LoaderConfigError(
                f"DataLoader: {len(ratios)} partition ratios for {world} ranks — one per rank"
            )
        return rank, world, ratios

    def build(self) -> DataLoader:
        """Validate, probe one sample, pick resident or streaming, and return the loader."""
        if self._batch_size is None:
            raise BatchSizeError("DataLoader: batch_size is required — call .batch_size(n)")
        source = as_source(self._dataset, self._names)
        n = require_samples(source)
        rank, world, ratios = self._resolve_partition()
        try:
            first = source.fetch(torch.zeros(1, dtype=torch.int64))
        except Exception as exc:
            exc.add_note(f"flodl.data: raised while probing sample 0 of {source.description}")
            raise
        if not first:
            raise DatasetShapeError(
                f"DataLoader: {source.description} returned no tensors for sample 0 — return at"
                " least one tensor per sample"
            )
        names = self._names or source.names or tuple(str(i) for i in range(len(first)))
        if len(names) != len(first):
            raise LoaderConfigError(
                f"DataLoader: {len(names)} names {list(names)} for {len(first)} fields of"
                f" {source.description} — give one name per field"
            )
        sample_bytes = sum(t.element_size() * t[0].numel() for t in first)
        _require_batches(source, n, self._batch_size, self._drop_last, rank, world, ratios)
        return DataLoader(
            source=source,
            names=names,
            sample_bytes=sample_bytes,
            num_samples=n,
            batch_size=self._batch_size,
            shuffle=self._shuffle,
            seed=self._seed,
            drop_last=self._drop_last,
            device=self._device,
            mode=self._mode,
            prefetch=self._prefetch,
            max_usage=self._max_usage,
            probe=self._probe,
            rank=rank,
            world_size=world,
            ratios=ratios,
        )


def _require_batches(
    source: Source,
    n: int,
    batch_size: int,
    drop_last: bool,
    rank: int,
    world: int,
    ratios: tuple[float, ...] | None,
) -> None:
    """Refuse a loader whose epochs would yield no batch: a training loop would run zero steps."""
    _, shard = shard_bounds(n, rank, world, ratios, drop_last)
    if shard >= batch_size or (shard > 0 and not drop_last):
        return
    if world == 1:
        where = f"{source.description} has {n} samples"
    else:
        where = f"partition(rank={rank}, world_size={world}) gives this rank {shard} of {n} samples"
    if shard == 0:
        fix = "use fewer ranks" + (" or a larger ratio for this rank" if ratios else "")
        detail = ""
    else:
        fix = "use a smaller batch_size, or .drop_last(False) to keep the partial batch"
        detail = f", fewer than batch_size {batch_size}"
    raise BatchSizeError(
        f"DataLoader: every epoch would have 0 batches: {where}{detail}, with"
        f" drop_last({drop_last}) — {fix}"
    )


class DataLoader:
    """Batches of a dataset: tensors kept on the device when they fit, streamed otherwise; a dataset
    that makes its samples in Python (``__getitem__``, ``get_batch``) is called every epoch.

    Build one with :meth:`from_dataset` (or :meth:`from_tensors`); iterate an epoch with
    :meth:`epoch`. The order of epoch ``e`` depends only on ``(seed, e)``, in every process.

    >>> import torch, flodl as fl
    >>> x, y = torch.randn(100, 3), torch.arange(100)
    >>> loader = (fl.data.DataLoader.from_tensors(x=x, y=y)
    ...           .batch_size(32).seed(7).build())
    >>> loader.mode, len(loader)              # 100 // 32 batches: drop_last is on by default
    ('resident', 3)
    >>> for batch in loader.epoch(0):
    ...     assert batch["x"].shape == (32, 3) and batch[1].shape == (32,)
    """

    def __init__(
        self,
        *,
        source: Source,
        names: tuple[str, ...],
        sample_bytes: int,
        num_samples: int,
        batch_size: int,
        shuffle: bool,
        seed: int,
        drop_last: bool,
        device: torch.device,
        mode: Mode,
        prefetch: int | None,
        max_usage: float,
        probe: MemoryProbe,
        rank: int,
        world_size: int,
        ratios: tuple[float, ...] | None,
    ) -> None:
        self._source = source
        self._index = {name: i for i, name in enumerate(names)}
        self._sample_bytes = sample_bytes
        self._n = num_samples
        self._batch_size = batch_size
        self._shuffle = shuffle
        self._seed = seed
        self._drop_last = drop_last
        self._device = device
        self._user_depth = prefetch
        self._max_usage = max_usage
        self._probe = probe
        self._rank, self._world_size, self._ratios = rank, world_size, ratios
        self._offset, self._shard = shard_bounds(num_samples, rank, world_size, ratios, drop_last)
        self._next_epoch = 0
        self._subset_plan: tuple[int, list[torch.Tensor]] | None = None
        self._resident: tuple[torch.Tensor, ...] | None = None
        self._depth = prefetch or 0
        self._mode_reason = ""
        self._place(mode)
        log.info(
            "DataLoader: %d samples (this shard: %d), batch size %d, %s on %s (%s)",
            num_samples,
            self._shard,
            self._batch_size,
            self.mode,
            self._device,
            self._mode_reason,
        )

    # -- construction -------------------------------------------------------------------------

    @classmethod
    def from_dataset(cls, dataset: Any, *, names: Sequence[str] | None = None) -> DataLoaderBuilder:
        """Start a builder for any supported dataset (tensors, dict, map-style, batch dataset)."""
        return DataLoaderBuilder(dataset, names)

    @classmethod
    def from_tensors(cls, *tensors: torch.Tensor, **named: torch.Tensor) -> DataLoaderBuilder:
        """Start a builder over equally long tensors, positional (``"0"``, ...) or named."""
        if tensors and named:
            raise LoaderConfigError(
                "DataLoader.from_tensors: pass tensors either all positionally or all by name"
            )
        if named:
            return DataLoaderBuilder(dict(named))
        return DataLoaderBuilder(list(tensors))

    def _place(self, mode: Mode) -> None:
        if mode == "streaming":
            self._start_streaming("mode('streaming') was asked for")
            return
        nbytes = self._sample_bytes * self._n
        reason = "mode('resident') was asked for"
        if mode == "auto" and self._source.code is not None:
            # Keeping it would freeze what the code returned once (random augmentation included)
            self._start_streaming(
                f"{self._source.code} is Python code (it may draw random transforms), so it is"
                " called every epoch; mode('resident') would read the dataset once and keep it"
            )
            if isinstance(self._source, BatchSource) and self._device.type == "cuda":
                # batch-level code is seldom random: say what is faster when it is not
                log.info(
                    "DataLoader: %s runs in the training thread, one batch at a time; if it"
                    " returns the same rows every epoch (no random transforms),"
                    " .mode('resident') keeps the dataset on %s, or .prefetch(n) fetches"
                    " batches ahead in a background thread",
                    self._source.code,
                    self._device,
                )
            return
        if mode == "auto":
            fits, reason = self._fits(nbytes)
            if not fits:
                self._start_streaming(reason)
                return
        try:
            self._resident = self._load_resident()
        except Exception as exc:
            if not is_out_of_memory(exc):
                raise
            self._resident = None
            if self._device.type == "cuda":
                torch.cuda.empty_cache()
            if mode == "resident":
                raise ResidentMemoryError(
                    f"DataLoader: the dataset ({describe_bytes(nbytes)}) does not fit on"
                    f" {self._device} — use mode('streaming') or mode('auto')"
                ) from exc
            warnings.warn(
                f"DataLoader: ran out of memory keeping the dataset ({describe_bytes(nbytes)})"
                f" resident on {self._device}; streaming it instead",
                ResidentFallbackWarning,
                stacklevel=4,
            )
            self._start_streaming(
                f"ran out of memory keeping the dataset ({describe_bytes(nbytes)}) resident"
            )
            return
        self._mode_reason = reason

    def _fits(self, nbytes: int) -> tuple[bool, str]:
        """Whether auto mode keeps the dataset resident, and why. ``nbytes`` is an estimate made
        before anything is read: sample 0's size times the number of samples."""
        info = self._probe(self._device)
        size = f"{describe_bytes(nbytes)} (sample 0 × {self._n})"
        if info is None:
            return True, f"{self._device} has no memory budget to check"
        if info.host and self._already_on_target():
            return True, "the tensors are already in host memory (nothing to copy)"
        budget = resident_budget(info)
        if info.host:
            where = (
                f"{HOST_RESIDENT_FRACTION:.0%} of the {describe_bytes(info.free)} of available"
                " host RAM"
            )
        else:
            where = (
                f"the {describe_bytes(max(budget, 0))} budget on {self._device}"
                f" ({RESIDENT_FRACTION:.2f} × {describe_bytes(info.total)} total −"
                f" {describe_bytes(info.used)} used)"
            )
        if fits_resident(nbytes, info):
            return True, f"the dataset, {size}, fits in {where}"
        return False, f"the dataset, {size}, exceeds {where}"

    def _already_on_target(self) -> bool:
        source = self._source
        return (
            isinstance(source, TensorSource)
            and source.rows is None  # a Subset's rows are gathered (copied) once
            and all(t.device == self._device for t in source.tensors)
        )

    def _load_resident(self) -> tuple[torch.Tensor, ...]:
        source = self._source
        if isinstance(source, TensorSource):  # already tensors: move them (no-op on their device)
            if source.rows is not None:  # a Subset: only its rows
                return tuple(
                    t.index_select(0, source.rows.to(t.device)).to(self._device)
                    for t in source.tensors
                )
            return tuple(t.to(self._device) for t in source.tensors)
        try:
            tensors = source.fetch(torch.arange(self._n, dtype=torch.int64))
        except Exception as exc:
            exc.add_note(
                f"flodl.data: raised while loading all {self._n} samples of"
                f" {source.description} to keep them resident on {self._device}"
            )
            raise
        return tuple(t.to(self._device) for t in tensors)

    def _start_streaming(self, reason: str) -> None:
        self._mode_reason = reason
        if self._user_depth is None:
            self._depth = self._auto_depth()

    def _auto_depth(self) -> int:
        if self._source.code is not None:
            return 0  # fetched in the consumer's thread (see prefetch())
        batch_bytes = self._sample_bytes * self._batch_size
        return prefetch_depth(batch_bytes, self._probe(self._device), max_usage=self._max_usage)

    # -- iteration ----------------------------------------------------------------------------

    def _plan(self, epoch: int) -> list[torch.Tensor]:
        order = epoch_order(self._n, epoch, seed=self._seed, shuffle=self._shuffle)
        rows = order[self._offset : self._offset + self._shard]
        if self._resident is not None:
            rows = rows.to(self._device)  # the permutation lives on the device, like the data
        return list(rows.split(self._batch_size))[: self._count_batches()]

    def _count_batches(self) -> int:
        full, partial = divmod(self._shard, self._batch_size)
        count = full if self._drop_last or partial == 0 else full + 1
        cap = smoke_cap()
        return count if cap is None else min(count, cap)

    def epoch(self, epoch: int) -> EpochIterator:
        """The batches of epoch ``epoch`` (an exact-size iterator of :class:`~flodl.data.Batch`).

        Same ``(seed, epoch)`` → same batches, in every run and every process. A prefetching
        loader starts its thread at the first batch asked for; it stops when the iterator is
        exhausted, closed, or dropped (e.g. after ``break``).
        """
        epoch = _check_int(epoch, "epoch", 0, LoaderConfigError)
        self._next_epoch = epoch + 1
        return self._iterate(self._plan(epoch), epoch)

    def epoch_subset(self, epoch: int, positions: Sequence[int]) -> EpochIterator:
        """Only the batches at ``positions`` (0-based, in order) of epoch ``epoch``.

        For schedulers that hand out an epoch's batches piecewise, e.g. El Che windows in Graph
        mode, where each rank takes its share of every window from the same epoch order. The
        epoch's order is computed once and reused while the positions stay in that epoch.

        >>> import torch, flodl as fl
        >>> loader = fl.data.DataLoader.from_tensors(torch.arange(8)).batch_size(2).build()
        >>> whole = [b[0].tolist() for b in loader.epoch(3)]
        >>> [b[0].tolist() for b in loader.epoch_subset(3, [1, 3])] == [whole[1], whole[3]]
        True
        """
        epoch = _check_int(epoch, "epoch", 0, LoaderConfigError)
        cached = self._subset_plan
        if cached is None or cached[0] != epoch:
            cached = self._subset_plan = (epoch, self._plan(epoch))
        plan = cached[1]
        numbers = [_as_int(p) for p in positions]
        if None in numbers:
            wrong = [p for p, k in zip(positions, numbers, strict=True) if k is None]
            raise LoaderConfigError(
                f"epoch_subset: batch positions must be integers, got {wrong[:5]}"
            )
        chosen = [k for k in numbers if k is not None]
        bad = [k for k in chosen if not 0 <= k < len(plan)]
        if bad:
            raise LoaderConfigError(
                f"epoch_subset: batch positions {bad[:5]} are outside this epoch's "
                f"{len(plan)} batches (0..{len(plan) - 1})"
            )
        return self._iterate([plan[k] for k in chosen], epoch)

    def _iterate(self, plan: list[torch.Tensor], epoch: int) -> EpochIterator:
        if self._resident is not None:
            return ResidentEpoch(self._resident, plan, self._index)
        if self._user_depth is None:  # re-probe: the model may have taken memory since build
            self._depth = self._auto_depth()
        if self._depth == 0:
            return DirectEpoch(self._source, plan, self._index, self._device, epoch)
        return StreamingEpoch(self._source, plan, self._index, self._device, self._depth, epoch)

    def __iter__(self) -> Iterator:
        """Iterate the next epoch (0, 1, 2, ... or the one after the last :meth:`epoch` call)."""
        return self.epoch(self._next_epoch)

    def __len__(self) -> int:
        return self._count_batches()

    # -- introspection ------------------------------------------------------------------------

    @property
    def mode(self) -> str:
        """``"resident"`` or ``"streaming"`` — what ``mode("auto")`` chose, after any fallback."""
        return "resident" if self._resident is not None else "streaming"

    @property
    def mode_reason(self) -> str:
        """Why :attr:`mode` is what it is, in words (also in the loader's ``repr``).

        >>> import torch, flodl as fl
        >>> fl.data.DataLoader.from_tensors(torch.zeros(8, 2)).batch_size(4).build().mode_reason
        'the tensors are already in host memory (nothing to copy)'
        """
        return self._mode_reason

    @property
    def num_batches(self) -> int:
        """Batches per epoch for this rank."""
        return self._count_batches()

    @property
    def batch_size(self) -> int:
        return self._batch_size

    @property
    def num_samples(self) -> int:
        """Samples this rank visits per epoch (its shard; the whole dataset when not partitioned)."""
        return self._shard

    @property
    def dataset_size(self) -> int:
        """Samples in the whole dataset (all ranks)."""
        return self._n

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._index)

    @property
    def device(self) -> torch.device:
        return self._device

    @property
    def seed(self) -> int:
        return self._seed

    @property
    def rank(self) -> int:
        return self._rank

    @property
    def world_size(self) -> int:
        return self._world_size

    @property
    def prefetch_depth(self) -> int:
        """Batches the streaming thread loads ahead; 0 when there is no thread (resident, or
        a Python dataset fetched in the consumer's thread)."""
        return 0 if self._resident is not None else self._depth

    def set_prefetch_depth(self, depth: int) -> None:
        """Fix the streaming depth from the next epoch on (turns off the per-epoch re-probe; for
        a Python dataset, turns on the background thread, as :meth:`DataLoaderBuilder.prefetch`)."""
        self._user_depth = self._depth = _check_int(depth, "prefetch depth", 1, LoaderConfigError)

    def __repr__(self) -> str:
        part = f", rank={self._rank}/{self._world_size}" if self._world_size > 1 else ""
        return (
            f"DataLoader(mode={self.mode!r}, samples={self._shard}, batch_size={self._batch_size},"
            f" batches={self.num_batches}, device={str(self._device)!r}, names={list(self.names)}"
            f"{part}, reason={self._mode_reason!r})"
        )
