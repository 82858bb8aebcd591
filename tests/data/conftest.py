"""Small datasets that stand in for real ones; each behaves like a user's would."""

from __future__ import annotations

import threading

import pytest
import torch


class MapDataset:
    """Map-style: a dict per sample, like a typical torch Dataset."""

    def __init__(self, n: int = 20, fail_at: int | None = None, exc: type[Exception] = ValueError):
        self.n, self.fail_at, self.exc = n, fail_at, exc
        self.calls = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        with self._lock:
            self.calls += 1
        if i == self.fail_at:
            raise self.exc(f"sample {i} is corrupt")
        return {"x": torch.full((3,), float(i)), "label": i}


class CountingBatches:
    """Batch dataset that counts get_batch calls (to observe the prefetch thread)."""

    def __init__(self, n: int = 64, width: int = 4):
        self.n, self.width = n, width
        self.fetched = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return self.n

    def get_batch(self, indices: torch.Tensor):
        with self._lock:
            self.fetched += 1
        x = indices.float().unsqueeze(1).expand(-1, self.width).contiguous()
        return x, indices.clone()


def prefetch_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("flodl-prefetch")]


@pytest.fixture(autouse=True)
def _no_smoke_cap(monkeypatch):
    monkeypatch.delenv("FLODL_SMOKE", raising=False)


@pytest.fixture(autouse=True)
def _no_leaked_threads():
    yield
    for thread in prefetch_threads():
        thread.join(5)
    assert not prefetch_threads(), "a prefetch thread outlived its epoch"
