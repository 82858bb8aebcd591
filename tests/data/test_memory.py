"""Mode selection, prefetch depth and OOM fallback, driven by a simulated device-memory probe."""

from __future__ import annotations

import warnings
from typing import ClassVar

import pytest
import torch
from torch.utils.data import TensorDataset

import flodl as fl

from .conftest import CountingBatches, MapDataset

MiB = 1 << 20


class SimulatedGpu:
    """A memory probe reporting a GPU of ``total`` bytes with ``used`` taken; counts its calls."""

    def __init__(self, total: int, used: int = 0):
        self.total, self.used, self.calls = total, used, 0

    def __call__(self, device: torch.device) -> fl.data.MemoryInfo:
        self.calls += 1
        return fl.data.MemoryInfo(free=self.total - self.used, total=self.total)


class SimulatedHost:
    """A memory probe reporting host RAM with ``available`` bytes free (the CPU target)."""

    def __init__(self, available: int, total: int = 64 << 30):
        self.available, self.total = available, total

    def __call__(self, device: torch.device) -> fl.data.MemoryInfo:
        return fl.data.MemoryInfo(free=self.available, total=self.total, host=True)


class GatherSpy(torch.Tensor):
    """A tensor type that notes, for every row gather, where the data and the indices live."""

    gathers: ClassVar[list[tuple[str, str]]] = []

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in (torch.Tensor.index_select, torch.index_select):
            index = args[2] if len(args) > 2 else kwargs["index"]
            cls.gathers.append((args[0].device.type, index.device.type))
        return super().__torch_function__(func, types, args, kwargs)


def full_device_tensor(
    t: torch.Tensor, capacity: int, error: type[BaseException] = torch.OutOfMemoryError
) -> torch.Tensor:
    """``t`` as a tensor whose move to another device fails, as a full CUDA device would, when
    it has more than ``capacity`` rows (the whole dataset does; a batch does not)."""

    class OnFullDevice(torch.Tensor):
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            if func is torch.Tensor.to and args[0].shape[0] > capacity:
                raise error(f"Tried to allocate {args[0].nbytes} bytes; device is full")
            return super().__torch_function__(func, types, args, kwargs or {})

    return t.as_subclass(OnFullDevice)


def full_device_dataset(n=100, capacity=50, error=torch.OutOfMemoryError):
    x = full_device_tensor(torch.ones(n, 256), capacity, error)  # 1 KiB + 8 bytes per sample
    return {"x": x, "i": full_device_tensor(torch.arange(n), capacity, error)}


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


def test_auto_on_cpu_keeps_tensors_resident_they_are_already_in_host_memory():
    dl = build(dataset(), SimulatedHost(available=1000))  # even with almost no RAM left
    assert dl.mode == "resident"
    assert dl.mode_reason == "the tensors are already in host memory (nothing to copy)"
    assert build(dataset()).mode == "resident"  # the default probe, this machine's RAM


class RandomlyAugmented(torch.utils.data.Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, i):
        return torch.rand(2), i  # a random transform, as torchvision's RandomCrop draws


def test_auto_streams_python_datasets_so_random_augmentation_is_redrawn_every_epoch():
    roomy = SimulatedHost(available=1 << 40)
    dl = build(RandomlyAugmented(), roomy, bs=8, shuffle=False)
    assert dl.mode == "streaming"
    assert dl.mode_reason == (
        "RandomlyAugmented.__getitem__ is Python code (it may draw random transforms), so it is"
        " called every epoch; mode('resident') would read the dataset once and keep it"
    )
    first, second = (next(iter(dl.epoch(e)))[0] for e in (0, 1))
    assert not first.equal(second)  # as PyTorch's DataLoader does
    assert build(CountingBatches(), roomy).mode == "streaming"  # get_batch is code too
    assert "CountingBatches.get_batch is Python code" in build(CountingBatches()).mode_reason
    # A forced resident loader reads the dataset once: the transform ran once and is kept.
    frozen = build(RandomlyAugmented(), roomy, mode="resident", bs=8, shuffle=False)
    assert next(iter(frozen.epoch(0)))[0].equal(next(iter(frozen.epoch(1)))[0])


def test_auto_keeps_plain_tensor_datasets_resident_but_not_subclasses_that_make_items():
    x = torch.arange(8.0)
    for ds in (TensorDataset(x), fl.data.datasets.InMemoryDataset({"x": x})):
        assert build(ds, bs=4).mode == "resident"

    class Noisy(TensorDataset):
        def __getitem__(self, i):
            return (self.tensors[0][i] + torch.rand(()),)

    class NoisyBatches(fl.data.datasets.InMemoryDataset):
        def get_batch(self, indices):
            return {"x": self.tensors[0][indices] + torch.rand(len(indices))}

    for ds in (Noisy(x), NoisyBatches({"x": x})):
        dl = build(ds, bs=4, shuffle=False)
        assert dl.mode == "streaming"
        assert not next(iter(dl.epoch(0)))[0].equal(x[:4])  # the override is what is called


def test_explicit_resident_reads_a_map_dataset_once():
    ds = MapDataset(n=1000)
    dl = build(ds, SimulatedHost(available=1000), mode="resident")  # forced: the probe is not asked
    assert dl.mode == "resident" and ds.calls == 1 + 1000  # probe, then all read once
    list(dl.epoch(0))
    list(dl.epoch(1))
    assert ds.calls == 1 + 1000


def test_auto_on_cpu_streams_tensors_elsewhere_too_big_for_the_available_host_ram():
    # tensors on another device ("meta" stands in for a GPU), delivered to the CPU: 264 000 bytes
    ds = {"x": torch.zeros(1000, 64, device="meta"), "y": torch.arange(1000, device="meta")}
    dl = build(ds, SimulatedHost(available=500_000))  # half of 500 000 is under 264 000
    assert dl.mode == "streaming"
    reason = dl.mode_reason
    assert reason == (
        "the dataset, 257.8 KiB (sample 0 × 1000), exceeds 50% of the 488.3 KiB of available"
        " host RAM"
    )
    assert f"reason={reason!r}" in repr(dl)
    assert dl.prefetch_depth == 2  # streaming to host RAM: double buffering


def test_resident_permutation_lives_on_the_target_device():
    GatherSpy.gathers.clear()
    x = torch.arange(40.0).reshape(20, 2).as_subclass(GatherSpy)
    dl = fl.data.DataLoader.from_tensors(x=x, y=torch.arange(20)).batch_size(5).device("meta")
    dl = dl.build()
    assert dl.mode == "resident" and dl.mode_reason == "meta has no memory budget to check"
    batches = list(dl.epoch(0))
    assert len(batches) == 4
    assert {(b["x"].device.type, b["y"].device.type) for b in batches} == {("meta", "meta")}
    on_meta = [g for g in GatherSpy.gathers if g[0] == "meta"]
    assert on_meta == [("meta", "meta")] * 4  # every batch gathered with indices on the device


def test_auto_picks_by_size_against_the_probe():
    roomy = SimulatedGpu(total=10 * MiB, used=1 * MiB)  # budget 9 − 1 = 8 MiB
    assert build(dataset(), roomy).mode == "resident"
    cramped = SimulatedGpu(total=1 * MiB, used=800_000)  # budget 0.9 MiB − 0.8 MB ≈ 143 kB
    dl = build(dataset(), cramped)
    assert dl.mode == "streaming"
    assert dl.mode_reason == (
        "the dataset, 257.8 KiB (sample 0 × 1000), exceeds the 140.4 KiB budget on cpu"
        " (0.90 × 1.0 MiB total − 781.2 KiB used)"
    )
    seen = [i for b in dl.epoch(0) for i in b["y"].tolist()]
    assert len(seen) == len(set(seen)) == 992  # 1000 // 16 full batches, no repeats


def test_forced_modes_ignore_the_probe():
    cramped = SimulatedGpu(total=1 * MiB, used=1 * MiB)
    streaming = build(dataset(), cramped, mode="streaming")
    assert streaming.mode == "streaming"
    assert streaming.mode_reason == "mode('streaming') was asked for"
    resident = build(dataset(), cramped, mode="resident")
    assert resident.mode == "resident"  # CPU holds it
    assert resident.mode_reason == "mode('resident') was asked for"


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
    ds = full_device_dataset(n=100, capacity=50)
    with pytest.warns(fl.data.ResidentFallbackWarning, match="streaming it instead"):
        dl = build(ds, SimulatedGpu(total=1 << 30), device="meta")
    assert dl.mode == "streaming" and dl.prefetch_depth >= 1
    assert dl.mode_reason == "ran out of memory keeping the dataset (100.8 KiB) resident"
    batches = list(dl.epoch(0))
    assert len(batches) == 6 and all(b["x"].device.type == "meta" for b in batches)


def test_host_memory_error_also_falls_back():
    with pytest.warns(fl.data.ResidentFallbackWarning):
        dl = build(full_device_dataset(error=MemoryError), SimulatedGpu(1 << 30), device="meta")
    assert dl.mode == "streaming"


def test_forced_resident_out_of_memory_is_an_error_not_a_silent_switch():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(fl.data.ResidentMemoryError, match="mode\\('streaming'\\)") as info:
            build(DeviceWithCapacity(n=100, capacity=50), mode="resident")
    assert isinstance(info.value.__cause__, torch.OutOfMemoryError)


def test_other_errors_while_going_resident_propagate():
    with pytest.raises(RuntimeError, match="device is full"):
        build(full_device_dataset(error=RuntimeError), SimulatedGpu(1 << 30), device="meta")


def test_probe_formulas():
    info = fl.data.MemoryInfo(free=6 << 30, total=8 << 30)
    assert fl.data.fits_resident(5 << 30, info) and not fl.data.fits_resident(6 << 30, info)
    assert fl.data.fits_resident(1 << 50, None)
    assert fl.data.prefetch_depth(0, info) == 2
    ram = fl.data.device_memory(torch.device("cpu"))
    assert ram.host and 0 < ram.free <= ram.total  # host RAM, from the operating system
    assert fl.data.device_memory(torch.device("meta")) is None
    host = fl.data.MemoryInfo(free=8 << 30, total=16 << 30, host=True)
    assert fl.data.fits_resident(3 << 30, host) and not fl.data.fits_resident(4 << 30, host)
    assert fl.data.prefetch_depth(1024, host) == 2


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("mode", ["resident", "streaming"])
def test_cuda_batches_land_on_the_device(mode):
    dl = build(dataset(), mode=mode, device="cuda")
    batch = next(iter(dl.epoch(0)))
    assert batch["x"].is_cuda and batch["y"].is_cuda
    seen = [i for b in dl.epoch(1) for i in b["y"].tolist()]
    assert len(seen) == len(set(seen)) == 992


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("prefetch", [None, 2], ids=["in the loop", "in a thread"])
def test_cuda_batches_of_a_python_dataset_land_on_the_device(prefetch):
    options = {"prefetch": prefetch} if prefetch else {}
    dl = build(MapDataset(n=40), device="cuda", bs=4, **options)
    labels = [i for b in dl.epoch(0) for i in b["label"].tolist() if b["x"].is_cuda]
    assert sorted(labels) == list(range(40))
