"""The TCPStore control transport on loopback, in one process (no ranks spawned)."""

from __future__ import annotations

import queue
from datetime import timedelta

import pytest
import torch.distributed as dist

from flodl.train.messages import BatchTiming, Exiting
from flodl.train.transport import Bundle, KeyStream, KeyWriter, Sender, client


@pytest.fixture
def store():
    master = dist.TCPStore(
        "127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=10)
    )
    yield master


def drain(sink: queue.Queue, n: int) -> list:
    return [sink.get(timeout=10) for _ in range(n)]


def test_a_sender_delivers_every_message_in_order_and_close_flushes(store):
    sink: queue.Queue = queue.Queue()
    reader = KeyStream("127.0.0.1", store.port, "up/0", sink)
    sender = Sender(KeyWriter(client("127.0.0.1", store.port), "up/0"), "test-sender")
    sent = [BatchTiming(0, float(i), i) for i in range(200)]
    for msg in sent:
        sender.put(msg)
    sender.put(Exiting(0, error="boom"))
    sender.close()  # what a failing rank does right before it exits
    assert drain(sink, 201) == [*sent, Exiting(0, error="boom")]
    reader.stop()


def test_a_reader_unpacks_bundles_and_single_messages_alike(store):
    sink: queue.Queue = queue.Queue()
    reader = KeyStream("127.0.0.1", store.port, "ctl/1", sink)
    writer = KeyWriter(client("127.0.0.1", store.port), "ctl/1")
    assert writer.put("a")
    assert writer.put(Bundle(["b", "c"]))
    assert writer.put("d")
    assert drain(sink, 4) == ["a", "b", "c", "d"]
    reader.stop()
    assert not writer.put("late")  # the reader is gone: dropped, not left for nobody
