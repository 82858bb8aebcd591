"""Device memory: what the loader asks before keeping data resident or sizing its prefetch queue.

The question goes through a *memory probe*, a callable ``probe(device) -> MemoryInfo | None``.
The default asks CUDA (``torch.cuda.mem_get_info``) and answers ``None`` for devices without a
memory budget (CPU: the dataset is already in host memory). Inject your own probe with
``DataLoader.from_dataset(ds).memory_probe(probe)`` — e.g. to simulate a small GPU in a test.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch

#: Fraction of total device memory the resident check allows the dataset to fill (the original's).
RESIDENT_FRACTION = 0.90
#: Upper bound on prefetched batches: past a handful, more depth only costs memory.
MAX_PREFETCH_DEPTH = 16
#: Depth when the device has no memory budget (CPU) or batches have no size: double buffering.
DEFAULT_PREFETCH_DEPTH = 2


@dataclass(frozen=True)
class MemoryInfo:
    """Free and total bytes of a device, as ``torch.cuda.mem_get_info`` reports them.

    >>> import flodl as fl
    >>> small_gpu = fl.data.MemoryInfo(free=3 << 30, total=4 << 30)
    >>> small_gpu.used
    1073741824
    """

    free: int
    total: int

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
    """The default probe: CUDA free/total bytes; ``None`` for CPU and other devices."""
    if device.type == "cuda":
        free, total = torch.cuda.mem_get_info(device)
        return MemoryInfo(free=free, total=total)
    return None


def fits_resident(nbytes: int, info: MemoryInfo | None) -> bool:
    """Whether ``nbytes`` fit in ``RESIDENT_FRACTION`` of the device minus what is already used.

    >>> import flodl as fl
    >>> gpu = fl.data.MemoryInfo(free=6 << 30, total=8 << 30)   # budget 0.9·8 − 2 = 5.2 GiB
    >>> fl.data.fits_resident(5 << 30, gpu), fl.data.fits_resident(6 << 30, gpu)
    (True, False)
    """
    if info is None:
        return True
    return nbytes < RESIDENT_FRACTION * info.total - info.used


def prefetch_depth(
    batch_bytes: int,
    info: MemoryInfo | None,
    *,
    max_usage: float = RESIDENT_FRACTION,
    reserve: int = 0,
) -> int:
    """How many batches the streaming thread may hold ahead of the consumer.

    budget = total·clamp(max_usage, 0.5, 0.99) − used − reserve; depth = budget // batch_bytes,
    clamped to [1, ``MAX_PREFETCH_DEPTH``]. No memory information (CPU) or empty batches → 2.

    >>> import flodl as fl
    >>> tiny = fl.data.MemoryInfo(free=900, total=1000)     # budget 0.9·1000 − 100 = 800 bytes
    >>> fl.data.prefetch_depth(200, tiny), fl.data.prefetch_depth(10_000, tiny)
    (4, 1)
    >>> fl.data.prefetch_depth(200, None)
    2
    """
    if info is None or batch_bytes <= 0:
        return DEFAULT_PREFETCH_DEPTH
    usage = min(max(max_usage, 0.5), 0.99)
    budget = info.total * usage - info.used - reserve
    return int(min(max(budget // batch_bytes, 1), MAX_PREFETCH_DEPTH))


def is_out_of_memory(exc: BaseException) -> bool:
    """CUDA and host allocation failures (the errors that make resident fall back to streaming)."""
    return isinstance(exc, torch.OutOfMemoryError | MemoryError)
