"""Resource sampling that never blocks training: CPU, RAM, process RSS, GPU utilisation and VRAM.

CPU and memory come from psutil (non-blocking: CPU percent is the delta since the previous sample).
GPUs are read through NVML (the ``nvidia-ml-py`` package, ``pip install flodl[gpu]``) when it loads;
utilisation is then averaged by a daemon poller thread between samples, so a sample taken right
after a burst of work still reports what the GPU did during the epoch. Without NVML, torch.cuda's
allocator counters give VRAM (and no utilisation). Unknown values stay ``None`` and are left out.
"""

from __future__ import annotations

import contextlib
import os
import platform
import threading
from dataclasses import dataclass, field
from typing import Any

import psutil

from flodl.monitor.format import format_bytes

__all__ = ["GpuSnapshot", "ResourceSample", "ResourceSampler"]


@dataclass(frozen=True)
class GpuSnapshot:
    """One GPU at one moment. ``vram_used`` is what the device reports in use (all processes);
    ``vram_reserved`` is this process's caching-allocator reservation, when torch.cuda knows it."""

    index: int
    name: str = ""
    util_percent: float | None = None
    vram_used: int | None = None
    vram_reserved: int | None = None
    vram_total: int | None = None

    @property
    def vram_alloc(self) -> int | None:
        """The VRAM figure shown to the user: this process's reservation, else the device's usage."""
        return self.vram_reserved if self.vram_reserved is not None else self.vram_used

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"dev": self.index}
        if self.name:
            out["name"] = self.name
        if self.util_percent is not None:
            out["util"] = round(self.util_percent, 1)
        if self.vram_alloc is not None:
            out["vram_alloc"] = self.vram_alloc
        if self.vram_total is not None:
            out["vram_total"] = self.vram_total
        return out


@dataclass(frozen=True)
class ResourceSample:
    """Machine and process resources at one moment (``None``: could not be read)."""

    cpu_percent: float | None = None
    ram_used: int | None = None
    ram_total: int | None = None
    rss: int | None = None
    gpus: tuple[GpuSnapshot, ...] = field(default_factory=tuple)

    @property
    def gpu_util_percent(self) -> float | None:
        """Mean utilisation over the GPUs that report one."""
        utils = [g.util_percent for g in self.gpus if g.util_percent is not None]
        return sum(utils) / len(utils) if utils else None

    def to_json(self) -> dict[str, Any]:
        """The dashboard/archive form: keys only for known values."""
        out: dict[str, Any] = {}
        if self.cpu_percent is not None:
            out["cpu"] = round(self.cpu_percent, 1)
        if self.ram_used is not None and self.ram_total is not None:
            out["ram_used"], out["ram_total"] = self.ram_used, self.ram_total
        if self.rss is not None:
            out["rss"] = self.rss
        if (util := self.gpu_util_percent) is not None:
            out["gpu"] = round(util, 1)
        if self.gpus:
            first = self.gpus[0]
            if first.vram_alloc is not None:
                out["vram_alloc"] = first.vram_alloc
            if first.vram_total is not None:
                out["vram_total"] = first.vram_total
            out["gpus"] = [g.to_json() for g in self.gpus]
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ResourceSample:
        """Rebuild a sample from :meth:`to_json` (how another rank's sample travels to rank 0)."""
        gpus = tuple(
            GpuSnapshot(
                index=int(g.get("dev", i)),
                name=str(g.get("name", "")),
                util_percent=g.get("util"),
                vram_reserved=g.get("vram_alloc"),
                vram_total=g.get("vram_total"),
            )
            for i, g in enumerate(data.get("gpus", []))
        )
        return cls(
            cpu_percent=data.get("cpu"),
            ram_used=data.get("ram_used"),
            ram_total=data.get("ram_total"),
            rss=data.get("rss"),
            gpus=gpus,
        )

    def summary(self) -> str:
        """``CPU: 12% | RAM: 3.1 GB/15.5 GB | RSS: 812 MB | GPU: 80% | VRAM: 2.1 GB/8.0 GB``."""
        parts = []
        if self.cpu_percent is not None:
            parts.append(f"CPU: {self.cpu_percent:.0f}%")
        if self.ram_used is not None and self.ram_total is not None:
            parts.append(f"RAM: {format_bytes(self.ram_used)}/{format_bytes(self.ram_total)}")
        if self.rss is not None:
            parts.append(f"RSS: {format_bytes(self.rss)}")
        for gpu in self.gpus:
            tag = f"GPU{gpu.index}" if len(self.gpus) > 1 else "GPU"
            text = f"{tag}:"
            if gpu.util_percent is not None:
                text += f" {gpu.util_percent:.0f}%"
            if gpu.vram_alloc is not None:
                total = f"/{format_bytes(gpu.vram_total)}" if gpu.vram_total else ""
                text += f" {format_bytes(gpu.vram_alloc)}{total}"
            parts.append(text)
        return " | ".join(parts)


class _Nvml:
    """NVML handles plus a daemon thread averaging utilisation between samples."""

    def __init__(self, poll_interval: float | None) -> None:
        """``poll_interval`` None: no averaging thread (the caller reads :meth:`instant`)."""
        import pynvml  # nvidia-ml-py; ImportError when absent

        pynvml.nvmlInit()  # NVMLError without a driver
        self.nv = pynvml
        count = pynvml.nvmlDeviceGetCount()
        self.handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        self.names = [self._name(h) for h in self.handles]
        self._sums = [0.0] * count
        self._counts = [0] * count
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._poll_interval = poll_interval
        self._thread: threading.Thread | None = None
        if count and poll_interval is not None:
            self._thread = threading.Thread(
                target=self._poll, name="flodl-gpu-util-poller", daemon=True
            )
            self._thread.start()

    def _name(self, handle: Any) -> str:
        name = self.nv.nvmlDeviceGetName(handle)
        return name.decode() if isinstance(name, bytes) else str(name)

    def _poll(self) -> None:
        while not self._stop.wait(self._poll_interval):
            for i, handle in enumerate(self.handles):
                with contextlib.suppress(self.nv.NVMLError):
                    util = self.nv.nvmlDeviceGetUtilizationRates(handle).gpu
                    with self._lock:
                        self._sums[i] += util
                        self._counts[i] += 1

    def read(self, index: int) -> tuple[float | None, int | None, int | None]:
        """(mean utilisation since the last read, used bytes, total bytes) of device ``index``."""
        handle = self.handles[index]
        with self._lock:
            count, total = self._counts[index], self._sums[index]
            self._sums[index], self._counts[index] = 0.0, 0
        util: float | None = total / count if count else None
        if util is None:
            with contextlib.suppress(self.nv.NVMLError):
                util = float(self.nv.nvmlDeviceGetUtilizationRates(handle).gpu)
        used = vram_total = None
        with contextlib.suppress(self.nv.NVMLError):
            mem = self.nv.nvmlDeviceGetMemoryInfo(handle)
            used, vram_total = int(mem.used), int(mem.total)
        return util, used, vram_total

    def instant(self, index: int) -> tuple[int | None, int | None, int | None]:
        """(utilisation now, used bytes, total bytes) of device ``index``; None: unreadable."""
        handle = self.handles[index]
        util = used = total = None
        with contextlib.suppress(self.nv.NVMLError):
            util = int(self.nv.nvmlDeviceGetUtilizationRates(handle).gpu)
        with contextlib.suppress(self.nv.NVMLError):
            mem = self.nv.nvmlDeviceGetMemoryInfo(handle)
            used, total = int(mem.used), int(mem.total)
        return util, used, total

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2 * (self._poll_interval or 0) + 1)
        with contextlib.suppress(Exception):
            self.nv.nvmlShutdown()


class ResourceSampler:
    """Takes :class:`ResourceSample` readings; cheap enough to call once per epoch.

    >>> sampler = ResourceSampler()
    >>> sample = sampler.sample()
    >>> sample.ram_total > 0 and sample.rss > 0
    True
    >>> sampler.close()
    """

    def __init__(self, *, gpu: bool = True, poll_interval: float = 1.0) -> None:
        self._process = psutil.Process(os.getpid())
        psutil.cpu_percent(interval=None)  # baseline: the next call reports the delta since now
        self._nvml: _Nvml | None = None
        if gpu:
            with contextlib.suppress(Exception):  # no nvidia-ml-py, no driver, no device
                self._nvml = _Nvml(poll_interval)

    @staticmethod
    def _torch_cuda() -> Any | None:
        """torch.cuda when torch is already imported and CUDA is initialised (never initialise it
        here: that would allocate a context on every device)."""
        import sys

        torch = sys.modules.get("torch")
        if torch is None or not torch.cuda.is_available() or not torch.cuda.is_initialized():
            return None
        return torch.cuda

    def sample(self) -> ResourceSample:
        cpu = psutil.cpu_percent(interval=None)
        vm = psutil.virtual_memory()
        try:
            rss: int | None = int(self._process.memory_info().rss)
        except psutil.Error:
            rss = None
        return ResourceSample(
            cpu_percent=float(cpu),
            ram_used=int(vm.total - vm.available),
            ram_total=int(vm.total),
            rss=rss,
            gpus=self._gpus(),
        )

    def _gpus(self) -> tuple[GpuSnapshot, ...]:
        cuda = self._torch_cuda()
        reserved: dict[int, int] = {}
        if cuda is not None:
            for i in range(cuda.device_count()):
                with contextlib.suppress(Exception):
                    reserved[i] = int(cuda.memory_reserved(i))
        if self._nvml is not None:
            snaps = []
            for i, name in enumerate(self._nvml.names):
                util, used, total = self._nvml.read(i)
                snaps.append(GpuSnapshot(i, name, util, used, reserved.get(i), total))
            return tuple(snaps)
        if cuda is None:
            return ()
        snaps = []
        for i in range(cuda.device_count()):
            total = None
            with contextlib.suppress(Exception):
                total = int(cuda.mem_get_info(i)[1])
            snaps.append(
                GpuSnapshot(i, cuda.get_device_name(i), None, None, reserved.get(i), total)
            )
        return tuple(snaps)

    def close(self) -> None:
        """Stop the GPU poller thread, if one runs."""
        if self._nvml is not None:
            self._nvml.close()
            self._nvml = None


def hardware_summary() -> str:
    """``AMD EPYC 7B13 (2 threads, 8GB)`` plus ``| NVIDIA L4 (22GB)`` per GPU, for the dashboard."""
    cpu = _cpu_model() or platform.processor() or platform.machine() or "Unknown CPU"
    threads = psutil.cpu_count(logical=True) or 1
    ram_gb = psutil.virtual_memory().total // 1024**3
    text = f"{cpu} ({threads} threads, {ram_gb}GB)"
    with contextlib.suppress(Exception):
        import pynvml

        pynvml.nvmlInit()
        try:
            for i in range(pynvml.nvmlDeviceGetCount()):
                handle = pynvml.nvmlDeviceGetHandleByIndex(i)
                name = pynvml.nvmlDeviceGetName(handle)
                name = name.decode() if isinstance(name, bytes) else str(name)
                total = int(pynvml.nvmlDeviceGetMemoryInfo(handle).total)
                text += f" | {name} ({total // 1024**3}GB)"
        finally:
            pynvml.nvmlShutdown()
    return text


def _cpu_model() -> str | None:
    with contextlib.suppress(OSError), open("/proc/cpuinfo", encoding="utf-8") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return None
