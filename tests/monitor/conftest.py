"""Shared helpers for the monitor tests: a real SSE client and a small Graph-like test input."""

from __future__ import annotations

import html
import http.client
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from urllib.parse import urlsplit

import pytest

import flodl as fl


class TinyGraph:
    """A real object implementing the duck-typed Graph contract the monitor relies on."""

    def __init__(self, label: str = "tiny", metrics: dict[str, float] | None = None) -> None:
        self.label = label
        self.structural_hash = "0123456789abcdef" * 4
        self.metrics = metrics or {"loss": 1.0, "enc.acc": 0.5}
        self.svg_calls = 0

    def latest_metrics(self) -> dict[str, float]:
        return dict(self.metrics)

    def svg(self) -> str:
        self.svg_calls += 1
        return (
            '<svg xmlns="http://www.w3.org/2000/svg" width="80" height="30">'
            f'<text x="4" y="20">{html.escape(self.label)} v{self.svg_calls}</text></svg>'
        )


@dataclass
class Event:
    id: str | None
    event: str
    data: str

    @property
    def json(self):
        return json.loads(self.data)


class SSEClient:
    """A minimal, strict Server-Sent Events client over http.client (bounded by a timeout)."""

    def __init__(self, url: str, *, last_event_id: str | None = None, timeout: float = 5.0):
        parts = urlsplit(url)
        self.conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout)
        headers = {"Accept": "text/event-stream"}
        if last_event_id is not None:
            headers["Last-Event-ID"] = last_event_id
        self.conn.request("GET", "/events", headers=headers)
        self.response = self.conn.getresponse()

    def events(self) -> Iterator[Event]:
        """Events until the server ends the stream (raises TimeoutError if it stalls)."""
        fields: dict[str, str] = {}
        while True:
            line = self.response.readline()
            if not line:
                return
            text = line.decode("utf-8").rstrip("\n")
            if not text:
                if "event" in fields or "data" in fields:
                    yield Event(
                        fields.get("id"), fields.get("event", "message"), fields.get("data", "")
                    )
                fields = {}
            elif not text.startswith(":"):
                key, _, value = text.partition(":")
                fields[key] = value[1:] if value.startswith(" ") else value

    def take(self, n: int) -> list[Event]:
        out = []
        for event in self.events():
            out.append(event)
            if len(out) == n:
                break
        return out

    def close(self) -> None:
        # the response holds its own reference to the socket: both must go for the FIN to be sent
        self.response.close()
        self.conn.close()


@pytest.fixture
def tiny_graph() -> TinyGraph:
    return TinyGraph()


@pytest.fixture
def served():
    """A quiet monitor serving on a free loopback port; closed (and checked closed) after."""
    before = set(threading.enumerate())
    mon = fl.Monitor(5, stream=None)
    mon.serve(port=0)
    yield mon
    mon.close()
    leftover = [t for t in threading.enumerate() if t not in before and t.is_alive()]
    assert not leftover, f"threads left running after close(): {leftover}"


@pytest.fixture
def sse() -> type[SSEClient]:
    """The SSE client class (fixtures are how helpers reach tests under --import-mode=importlib)."""
    return SSEClient


@pytest.fixture
def graph_cls() -> type[TinyGraph]:
    return TinyGraph
