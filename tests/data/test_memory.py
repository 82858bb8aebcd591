"""Mode selection, prefetch depth and OOM fallback, driven by a simulated device-memory probe."""

from __future__ import annotations

import warnings

import pytest
import torch

import flodl as fl

MiB = 1 << 20


class SimulatedGpu:
    """A memory probe reporting a GPU of ``total`` bytes with ``used`` taken; counts its calls."""

    def __init__(self, total: int, used: int = 0):
        self.total, self.used, self.calls = total, used, 0

    def __call__(self, device: torch.device) -> fl.data.MemoryInfo:
        self.calls += 1
        return fl.data.MemoryInfo(free=self.total - self.used, total=self.total)


class DeviceWithCapacity:
    """A batch dataset on a device that holds at most ``capacity`` rows: materialising more raises
    the allocator's out-of-memory error, as a CUDA device would."""

    def __init__(self, n: int, capacity: int, error: type[BaseException] = torch.OutOfMemoryError):
        self.n, self.capacity, self.error = n, capacity, error

    def __len__(self) -> int:
        return self.n

    def get_batch(self, indices: torch.Tensor):
        if len(indices) > self.capacity:
            raise self.error(f"Tried to allocate {len(indices) * 1024} bytes; device is full")
        return torch.ones(len(indices), 256), indices.clone()  # 1 KiB + 8 bytes per sample


def build(ds, probe=None, mode="auto", bs=16, **options):
    builder = fl.data.DataLoader.from_dataset(ds).batch_size(bs).mode(mode)
    if probe is not None:
        builder.memory_probe(probe)
    for name, value in options.items():
        getattr(builder, name)(value)
    return builder.build()


def dataset(n=1000):  # 1000 samples × (64 floats + 1 int64) = 264 000 bytes
    return {"x": torch.zeros(n, 64), "y": torch.arange(n)}


def test_auto_on_cpu_is_resident_without_a_memory_budget():
    assert build(dataset()).mode == "resident"


def test_auto_picks_by_size_against_the_probe():
    roomy = SimulatedGpu(total=10 * MiB, used=1 * MiB)  # budget 9 − 1 = 8 MiB
    assert build(dataset(), roomy).mode == "resident"
    cramped = SimulatedGpu(total=1 * MiB, used=800_000)  # budget 0.9 MiB − 0.8 MB ≈ 143 kB
    dl = build(dataset(), cramped)
    assert dl.mode == "streaming"
    seen = [i for b in dl.epoch(0) for i in b["y"].tolist()]
    assert len(seen) == len(set(seen)) == 992  # 1000 // 16 full batches, no repeats


def test_forced_modes_ignore_the_probe():
    cramped = SimulatedGpu(total=1 * MiB, used=1 * MiB)
    assert build(dataset(), cramped, mode="streaming").mode == "streaming"
    assert build(dataset(), cramped, mode="resident").mode == "resident"  # CPU holds it


def test_prefetch_depth_follows_free_memory_and_is_re_probed_each_epoch():
    # batch = 16 × 264 bytes = 4224 bytes; budget = 0.9·total − used
    gpu = SimulatedGpu(total=100_000, used=60_000)  # 30 000 bytes → 7 batches
    dl = build(dataset(), gpu, mode="streaming")
    assert dl.prefetch_depth == 7
    gpu.used = 80_000  # the model took memory: 10 000 bytes → 2 batches
    epoch = dl.epoch(0)
    assert dl.prefetch_depth == 2 and epoch._queue.maxsize == 2
    epoch.close()
    gpu.used = 90_000  # no budget left: still one batch at a time
    dl.epoch(1).close()
    assert dl.prefetch_depth == 1


def test_prefetch_depth_is_capped_and_cpu_is_double_buffered():
    huge = SimulatedGpu(total=1 << 40)
    assert build(dataset(), huge, mode="streaming").prefetch_depth == 16
    assert build(dataset(), mode="streaming").prefetch_depth == 2
    assert build(dataset()).prefetch_depth == 0  # resident


def test_user_depth_turns_off_adaptation():
    gpu = SimulatedGpu(total=100_000, used=60_000)
    dl = build(dataset(), gpu, mode="streaming", prefetch=5)
    gpu.used = 89_000
    dl.epoch(0).close()
    assert dl.prefetch_depth == 5
    dl.set_prefetch_depth(3)
    dl.epoch(1).close()
    assert dl.prefetch_depth == 3


def test_vram_max_usage_is_clamped_and_changes_the_budget():
    gpu = SimulatedGpu(total=100_000, used=0)
    assert build(dataset(), gpu, mode="streaming", vram_max_usage=0.1).prefetch_depth == 11  # 0.5
    assert build(dataset(), gpu, mode="streaming", vram_max_usage=0.6).prefetch_depth == 14


def test_out_of_memory_while_going_resident_falls_back_to_streaming_with_a_warning():
    ds = DeviceWithCapacity(n=100, capacity=50)
    with pytest.warns(fl.data.ResidentFallbackWarning, match="streaming it instead"):
        dl = build(ds, SimulatedGpu(total=1 << 30))
    assert dl.mode == "streaming" and dl.prefetch_depth >= 1
    seen = [i for b in dl.epoch(0) for i in b[1].tolist()]
    assert len(seen) == len(set(seen)) == 96


def test_host_memory_error_also_falls_back():
    with pytest.warns(fl.data.ResidentFallbackWarning):
        dl = build(DeviceWithCapacity(n=100, capacity=50, error=MemoryError))
    assert dl.mode == "streaming"


def test_forced_resident_out_of_memory_is_an_error_not_a_silent_switch():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(fl.data.ResidentMemoryError, match="mode\\('streaming'\\)") as info:
            build(DeviceWithCapacity(n=100, capacity=50), mode="resident")
    assert isinstance(info.value.__cause__, torch.OutOfMemoryError)


def test_other_errors_while_going_resident_propagate():
    with pytest.raises(RuntimeError, match="device is full"):
        build(DeviceWithCapacity(n=100, capacity=50, error=RuntimeError))


def test_probe_formulas():
    info = fl.data.MemoryInfo(free=6 << 30, total=8 << 30)
    assert fl.data.fits_resident(5 << 30, info) and not fl.data.fits_resident(6 << 30, info)
    assert fl.data.fits_resident(1 << 50, None)
    assert fl.data.prefetch_depth(0, info) == 2
    assert fl.data.device_memory(torch.device("cpu")) is None


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("mode", ["resident", "streaming"])
def test_cuda_batches_land_on_the_device(mode):
    dl = build(dataset(), mode=mode, device="cuda")
    batch = next(iter(dl.epoch(0)))
    assert batch["x"].is_cuda and batch["y"].is_cuda
    seen = [i for b in dl.epoch(1) for i in b["y"].tolist()]
    assert len(seen) == len(set(seen)) == 992
