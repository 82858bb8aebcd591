"""Streaming: the prefetch thread's lifetime, back-pressure, and errors carried to the consumer."""

from __future__ import annotations

import gc
import time

import pytest
import torch

import flodl as fl

from .conftest import CountingBatches, MapDataset, prefetch_threads


def streaming(ds, bs=4, **options) -> fl.data.DataLoader:
    builder = fl.data.DataLoader.from_dataset(ds).batch_size(bs).streaming()
    for name, value in options.items():
        getattr(builder, name)(value)
    return builder.build()


def wait_until(condition, timeout=10.0) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def test_exhausting_an_epoch_ends_its_thread():
    dl = streaming(CountingBatches(n=16), prefetch=2)
    epoch = dl.epoch(0)
    thread = epoch.thread
    assert len(list(epoch)) == 4
    assert thread.ident is not None and not thread.is_alive()


def test_breaking_out_of_an_epoch_stops_the_thread_and_the_next_epoch_is_clean():
    ds = CountingBatches(n=400)
    dl = streaming(ds, prefetch=2)
    for _batch in dl.epoch(0):
        break
    assert not prefetch_threads()
    fetched = ds.fetched
    assert fetched < 100  # it stopped loading instead of running the epoch out
    assert len(list(dl.epoch(1))) == 100


def test_an_epoch_loads_nothing_until_its_first_batch_is_asked_for():
    ds = CountingBatches(n=400)
    dl = streaming(ds, prefetch=2)
    before = ds.fetched  # build() probed one sample
    epoch = dl.epoch(0)
    assert len(epoch) == 100  # len() is known without loading
    assert not wait_until(lambda: ds.fetched > before, timeout=0.2)
    assert not epoch.thread.is_alive()
    del epoch  # dropping it never waits on a fetch
    gc.collect()
    assert len(list(dl.epoch(0))) == 100


def test_an_epoch_dropped_after_its_first_batch_stops_its_thread():
    dl = streaming(CountingBatches(n=400), prefetch=2)
    epoch = dl.epoch(0)
    next(epoch)
    thread = epoch.thread
    del epoch
    gc.collect()
    assert not thread.is_alive()


def test_close_and_with_block_stop_the_thread():
    dl = streaming(CountingBatches(n=400), prefetch=2)
    with dl.epoch(0) as epoch:
        next(epoch)
        thread = epoch.thread
    assert not thread.is_alive()
    with pytest.raises(StopIteration):
        next(epoch)


def test_back_pressure_bounds_the_batches_loaded_ahead():
    ds = CountingBatches(n=400)
    dl = streaming(ds, prefetch=3)
    before = ds.fetched  # build() probed one sample
    with dl.epoch(0) as epoch:
        next(epoch)
        assert wait_until(epoch._queue.full)
        time.sleep(0.1)  # give a misbehaving producer the chance to run ahead
        ahead = ds.fetched - before - 1
    assert ahead <= 3 + 1  # queue depth + the batch waiting to be enqueued


@pytest.mark.parametrize("prefetch", [None, 2], ids=["in the loop", "in a thread"])
@pytest.mark.parametrize("exc_type", [ValueError, KeyError, OSError])
def test_dataset_exception_reaches_the_consumer_with_its_type_and_index(exc_type, prefetch):
    options = {"prefetch": prefetch} if prefetch else {}
    dl = streaming(MapDataset(n=40, fail_at=13, exc=exc_type), shuffle=False, **options)
    seen = 0
    with pytest.raises(exc_type) as info:
        for _batch in dl.epoch(0):
            seen += 1
    notes = "\n".join(getattr(info.value, "__notes__", []))
    assert "MapDataset[13]" in notes
    assert "batch 3 of epoch 0" in notes and "12, 13, 14, 15" in notes
    assert seen == 3  # the batches before the failing one were delivered
    assert not prefetch_threads()


def test_loader_recovers_after_a_failed_epoch():
    ds = MapDataset(n=40, fail_at=13)
    dl = streaming(ds, shuffle=False)
    with pytest.raises(ValueError):
        list(dl.epoch(0))
    ds.fail_at = None
    assert len(list(dl.epoch(1))) == 10


def test_resident_build_errors_keep_their_type_and_index():
    builder = fl.data.DataLoader.from_dataset(MapDataset(n=20, fail_at=7)).batch_size(4)
    with pytest.raises(ValueError, match="sample 7 is corrupt") as info:
        builder.mode("resident").build()
    assert any("MapDataset[7]" in note for note in info.value.__notes__)


class Augmented(torch.utils.data.Dataset):
    """Draws from torch's global RNG per sample, as a torchvision transform (RandomCrop) does."""

    def __len__(self):
        return 24

    def __getitem__(self, i):
        return torch.rand(3) + i, i


def seeded_run(**options) -> list[torch.Tensor]:
    fl.manual_seed(0)
    builder = fl.data.DataLoader.from_dataset(Augmented()).batch_size(4).seed(1)
    for name, value in options.items():
        getattr(builder, name)(value)
    dl = builder.build()
    drawn = []
    for epoch in range(2):
        for batch in dl.epoch(epoch):
            drawn.append(batch[0])
            drawn.append(torch.nn.functional.dropout(torch.ones(16), 0.5))  # the loop draws too
    return drawn


@pytest.mark.parametrize("mode", ["auto", "streaming"])
def test_a_python_dataset_is_reproducible_with_the_global_seed(mode):
    # Fetched in the loop's thread (torch's num_workers=0): the dataset's and the loop's random
    # draws happen in one fixed order. A prefetch thread would interleave them by timing.
    dl = fl.data.DataLoader.from_dataset(Augmented()).batch_size(4).mode(mode).build()
    assert dl.mode == "streaming" and dl.prefetch_depth == 0
    first = seeded_run(mode=mode)
    for _ in range(3):
        again = seeded_run(mode=mode)
        assert all(a.equal(b) for a, b in zip(first, again, strict=True))
    assert not prefetch_threads()


def test_a_python_dataset_is_prefetched_in_a_thread_only_when_asked():
    dl = streaming(Augmented(), prefetch=3)
    epoch = dl.epoch(0)
    next(epoch)
    assert dl.prefetch_depth == 3 and epoch.thread.is_alive()
    epoch.close()
    tensors = fl.data.DataLoader.from_tensors(torch.zeros(8, 2)).batch_size(2).streaming().build()
    assert tensors.prefetch_depth == 2  # gathers from tensors draw nothing: prefetched by default
