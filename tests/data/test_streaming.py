"""Streaming: the prefetch thread's lifetime, back-pressure, and errors carried to the consumer."""

from __future__ import annotations

import gc
import time

import pytest

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
    dl = streaming(CountingBatches(n=16))
    epoch = dl.epoch(0)
    thread = epoch.thread
    assert len(list(epoch)) == 4
    assert not thread.is_alive()


def test_breaking_out_of_an_epoch_stops_the_thread_and_the_next_epoch_is_clean():
    ds = CountingBatches(n=400)
    dl = streaming(ds, prefetch=2)
    for _batch in dl.epoch(0):
        break
    assert not prefetch_threads()
    fetched = ds.fetched
    assert fetched < 100  # it stopped loading instead of running the epoch out
    assert len(list(dl.epoch(1))) == 100


def test_an_epoch_created_and_never_consumed_stops_when_dropped():
    dl = streaming(CountingBatches(n=400))
    epoch = dl.epoch(0)
    thread = epoch.thread
    del epoch
    gc.collect()
    assert not thread.is_alive()
    assert len(list(dl.epoch(0))) == 100


def test_close_and_with_block_stop_the_thread():
    dl = streaming(CountingBatches(n=400))
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
        assert wait_until(epoch._queue.full)
        time.sleep(0.1)  # give a misbehaving producer the chance to run ahead
        ahead = ds.fetched - before
    assert ahead <= 3 + 1  # queue depth + the batch waiting to be enqueued


@pytest.mark.parametrize("exc_type", [ValueError, KeyError, OSError])
def test_dataset_exception_reaches_the_consumer_with_its_type_and_index(exc_type):
    dl = streaming(MapDataset(n=40, fail_at=13, exc=exc_type), shuffle=False)
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
    with pytest.raises(ValueError, match="sample 7 is corrupt") as info:
        fl.data.DataLoader.from_dataset(MapDataset(n=20, fail_at=7)).batch_size(4).build()
    assert any("MapDataset[7]" in note for note in info.value.__notes__)
