"""Parameter dtype casting and CUDA memory queries, under the names the Rust flodl uses for them.

The CUDA helpers are thin wrappers over ``torch.cuda`` that behave the same whether or not a GPU
is present: queries that need one raise :class:`DeviceError` with a hint, housekeeping calls
(:func:`cuda_empty_cache`, :func:`cuda_reset_peak_stats`) do nothing, and
:func:`cuda_utilization` returns ``None``.

=============================  ==========================================  ==========================
flodl                          torch                                       reports
=============================  ==========================================  ==========================
``cuda_memory_info(d)``        ``total - free`` of ``mem_get_info(d)``     (used, total) device bytes
``cuda_active_bytes(d)``       ``memory_allocated(d)``                     bytes backing live tensors
``cuda_allocated_bytes(d)``    ``memory_reserved(d)``                      bytes held by the allocator
``cuda_peak_active_bytes(d)``  ``max_memory_allocated(d)``                 peak since the last reset
``cuda_peak_reserved_bytes``   ``max_memory_reserved(d)``                  peak reserved
``cuda_reset_peak_stats(d)``   ``reset_peak_memory_stats(d)``              —
``cuda_empty_cache()``         ``empty_cache()``                           —
``cuda_utilization(d)``        ``utilization(d)`` (NVML)                   GPU busy %, or None
=============================  ==========================================  ==========================
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from flodl.errors import DeviceError

__all__ = [
    "DeviceError",
    "cast_parameters",
    "cuda_active_bytes",
    "cuda_allocated_bytes",
    "cuda_available",
    "cuda_device_count",
    "cuda_empty_cache",
    "cuda_memory_info",
    "cuda_peak_active_bytes",
    "cuda_peak_reserved_bytes",
    "cuda_reset_peak_stats",
    "cuda_utilization",
]


def cast_parameters(params: torch.nn.Module | Iterable[torch.Tensor], dtype: torch.dtype) -> int:
    """Cast every parameter (and its gradient, if any) to ``dtype`` in place; returns how many changed.

    Parameters already in ``dtype`` are skipped, and the parameter objects stay the same, so
    references held elsewhere see the new dtype. Create optimizers *after* casting: their state
    (e.g. Adam moments) keeps the dtype it was created with. A failing cast raises instead of
    being skipped silently (which would leave a model of mixed dtypes), and gradients are cast
    too so the next backward and optimizer step do not mix dtypes.

    >>> import torch
    >>> net = torch.nn.Linear(2, 2)
    >>> cast_parameters(net, torch.float64), net.weight.dtype, cast_parameters(net, torch.float64)
    (2, torch.float64, 0)
    """
    if isinstance(params, torch.nn.Module):
        params = params.parameters()
    changed = 0
    for p in params:
        if p.dtype == dtype:
            continue
        p.data = p.data.to(dtype)
        if p.grad is not None:
            p.grad = p.grad.to(dtype)
        changed += 1
    return changed


def cuda_available() -> bool:
    """Whether torch can use at least one CUDA device."""
    return torch.cuda.is_available()


def cuda_device_count() -> int:
    """Number of visible CUDA devices (0 without a GPU or a CUDA build of torch)."""
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def _require(device: int) -> int:
    if not torch.cuda.is_available():
        build = "a CPU-only torch build" if torch.version.cuda is None else "no visible CUDA device"
        raise DeviceError(
            f"CUDA memory query needs a GPU, but this process has {build} — "
            "guard it with fl.cuda_available() (or run `fdl diagnose` to see why)"
        )
    count = torch.cuda.device_count()
    if not 0 <= device < count:
        raise DeviceError(f"CUDA device {device} does not exist: {count} device(s) are visible")
    return device


def cuda_memory_info(device: int = 0) -> tuple[int, int]:
    """``(used, total)`` bytes of the device as the driver sees them (all processes)."""
    free, total = torch.cuda.mem_get_info(_require(device))
    return total - free, total


def cuda_active_bytes(device: int = 0) -> int:
    """Bytes currently backing live tensors of this process."""
    return torch.cuda.memory_allocated(_require(device))


def cuda_allocated_bytes(device: int = 0) -> int:
    """Bytes reserved by torch's caching allocator (what the monitor reports as VRAM)."""
    return torch.cuda.memory_reserved(_require(device))


def cuda_peak_active_bytes(device: int = 0) -> int:
    """Peak of :func:`cuda_active_bytes` since start or :func:`cuda_reset_peak_stats`."""
    return torch.cuda.max_memory_allocated(_require(device))


def cuda_peak_reserved_bytes(device: int = 0) -> int:
    """Peak of :func:`cuda_allocated_bytes` since start or :func:`cuda_reset_peak_stats`."""
    return torch.cuda.max_memory_reserved(_require(device))


def cuda_reset_peak_stats(device: int = 0) -> None:
    """Restart peak tracking (e.g. between profiling phases). Does nothing without a GPU."""
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats(_require(device))


def cuda_empty_cache() -> None:
    """Return cached, unused blocks to the driver. Does nothing without a GPU."""
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def cuda_utilization(device: int = 0) -> int | None:
    """GPU busy percentage from NVML, or ``None`` when there is no GPU or NVML is unavailable."""
    if not torch.cuda.is_available() or not 0 <= device < torch.cuda.device_count():
        return None
    try:
        return int(torch.cuda.utilization(device))
    except Exception:  # pynvml missing or the driver refuses: None means unknown, not an error
        return None
