"""Device memory: what the loader asks before keeping data resident or sizing its prefetch queue.

The question goes through a *memory probe*, a callable ``probe(device) -> MemoryInfo | None``.
The default asks CUDA (``torch.cuda.mem_get_info``) for a GPU, the operating system for the CPU
(host RAM, ``MemoryInfo(host=True)``), and answers ``None`` for devices without a memory budget.
Inject your own probe with ``DataLoader.from_dataset(ds).memory_probe(probe)`` — e.g. to simulate
a small GPU, or a machine with little RAM, in a test.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import psutil
import torch

#: Fraction of total device memory the resident check allows the dataset to fill: 90% leaves
#: room for activations and the allocator's cache (the Rust original's value, kept so a dataset
#: resident there stays resident here).
RESIDENT_FRACTION = 0.90
#: Fraction of *available* host RAM a dataset may take to be kept resident on the CPU by
#: ``mode("auto")`` (tensors held elsewhere, copied to host memory): half of what is free leaves
#: the rest of the machine (and the model) room to work. ``mode("resident")`` does not ask.
HOST_RESIDENT_FRACTION = 0.5
#: Upper bound on prefetched batches: past a handful, more depth only costs memory.
MAX_PREFETCH_DEPTH = 16
#: Depth when the device has no memory budget (CPU) or batches have no size: double buffering.
DEFAULT_PREFETCH_DEPTH = 2


@dataclass(frozen=True)
class MemoryInfo:
    """Free and total bytes of a device, as ``torch.cuda.mem_get_info`` reports them.

    ``host=True`` marks host RAM (the CPU target): ``free`` is what the operating system reports
    as available. Residency is then judged against ``HOST_RESIDENT_FRACTION`` of it, and the
    streaming depth stays at double buffering.

    >>> import flodl as fl
    >>> small_gpu = fl.data.MemoryInfo(free=3 << 30, total=4 << 30)
    >>> small_gpu.used
    1073741824
    >>> laptop = fl.data.MemoryInfo(free=6 << 30, total=16 << 30, host=True)
    """

    free: int
    total: int
    host: bool = False

    @property
    def used(self) -> int:
        return self.total - self.free


class MemoryProbe(Protocol):
    """Reads a device's memory: ``probe(device) -> MemoryInfo | None`` (``None``: no budget).

    >>> import torch, flodl as fl
    >>> def small_gpu(device: torch.device) -> fl.data.MemoryInfo:
    ...     return fl.data.MemoryInfo(free=512 << 20, total=1 << 30)
    >>> loader = (fl.data.DataLoader.from_tensors(torch.zeros(4096, 1024))   # 16 MiB
    ...           .batch_size(64).memory_probe(small_gpu).build())
    >>> loader.mode
    'resident'
    """

    def __call__(self, device: torch.device, /) -> MemoryInfo | None: ...


def device_memory(device: torch.device) -> MemoryInfo | None:
    """The default probe: CUDA free/total bytes; available/total host RAM for the CPU
    (``host=True``); ``None`` for other devices.

    >>> import torch, flodl as fl
    >>> ram = fl.data.device_memory(torch.device("cpu"))
    >>> ram.host and 0 < ram.free <= ram.total
    True
    """
    if device.type == "cuda":
        free, total = torch.cuda.mem_get_info(device)
        return MemoryInfo(free=free, total=total)
    if device.type == "cpu":
        ram = psutil.virtual_memory()
        return MemoryInfo(free=int(ram.available), total=int(ram.total), host=True)
    return None


def resident_budget(info: MemoryInfo) -> float:
    """Bytes a resident dataset may take: ``HOST_RESIDENT_FRACTION`` of available host RAM, or
    ``RESIDENT_FRACTION`` of a device's total minus what is already used on it."""
    if info.host:
        return HOST_RESIDENT_FRACTION * info.free
    return RESIDENT_FRACTION * info.total - info.used


def fits_resident(nbytes: int, info: MemoryInfo | None) -> bool:
    """Whether ``nbytes`` fit in :func:`resident_budget` (always, without memory information).

    >>> import flodl as fl
    >>> gpu = fl.data.MemoryInfo(free=6 << 30, total=8 << 30)   # budget 0.9·8 − 2 = 5.2 GiB
    >>> fl.data.fits_resident(5 << 30, gpu), fl.data.fits_resident(6 << 30, gpu)
    (True, False)
    >>> ram = fl.data.MemoryInfo(free=8 << 30, total=16 << 30, host=True)   # budget 0.5·8 GiB
    >>> fl.data.fits_resident(3 << 30, ram), fl.data.fits_resident(5 << 30, ram)
    (True, False)
    """
    if info is None:
        return True
    return nbytes < resident_budget(info)


def describe_bytes(nbytes: float) -> str:
    """``512 B``, ``12.3 MiB``, ``4.0 GiB`` — sizes in the loader's messages.

    >>> describe_bytes(12_900_000), describe_bytes(3 << 30)
    ('12.3 MiB', '3.0 GiB')
    """
    if nbytes >= 1 << 30:
        return f"{nbytes / (1 << 30):.1f} GiB"
    if nbytes >= 1 << 20:
        return f"{nbytes / (1 << 20):.1f} MiB"
    if nbytes >= 1 << 10:
        return f"{nbytes / (1 << 10):.1f} KiB"
    return f"{int(nbytes)} B"


def prefetch_depth(
    batch_bytes: int,
    info: MemoryInfo | None,
    *,
    max_usage: float = RESIDENT_FRACTION,
    reserve: int = 0,
) -> int:
    """How many batches the streaming thread may hold ahead of the consumer.

    budget = total·clamp(max_usage, 0.5, 0.99) − used − reserve; depth = budget // batch_bytes,
    clamped to [1, ``MAX_PREFETCH_DEPTH``]. Host RAM (CPU), no memory information or empty
    batches → 2: on the CPU the loading thread shares the cores with training, so a deeper queue
    would only hold more memory.

    >>> import flodl as fl
    >>> tiny = fl.data.MemoryInfo(free=900, total=1000)     # budget 0.9·1000 − 100 = 800 bytes
    >>> fl.data.prefetch_depth(200, tiny), fl.data.prefetch_depth(10_000, tiny)
    (4, 1)
    >>> fl.data.prefetch_depth(200, None), fl.data.prefetch_depth(200, fl.data.MemoryInfo(
    ...     free=1 << 30, total=2 << 30, host=True))
    (2, 2)
    """
    if info is None or info.host or batch_bytes <= 0:
        return DEFAULT_PREFETCH_DEPTH
    usage = min(max(max_usage, 0.5), 0.99)
    budget = info.total * usage - info.used - reserve
    return int(min(max(budget // batch_bytes, 1), MAX_PREFETCH_DEPTH))


def is_out_of_memory(exc: BaseException) -> bool:
    """CUDA and host allocation failures (the errors that make resident fall back to streaming)."""
    return isinstance(exc, torch.OutOfMemoryError | MemoryError)
