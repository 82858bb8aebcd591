"""The live dashboard server: one event-loop thread, Server-Sent Events from an event log.

Every event (an epoch, new metadata, a new graph, completion) is appended to one log and numbered.
Each SSE client keeps a cursor into the log and sends what lies past it, so a client that joins
late replays the whole history, a reconnecting browser (``Last-Event-ID``) resumes exactly where it
stopped, and no event can fall between "replay" and "subscribe" (the Rust original lost those and
replayed everything again on reconnect). Ids carry a per-run token so an id from another run (the
same port, a previous script) triggers a full replay instead of a wrong resume.

Hardening over the original: binds loopback unless told otherwise, checks the ``Host`` header when
bound to loopback (DNS rebinding), no CORS header, a content security policy, and ``close()`` really
closes the port and ends every stream.

Capacity. One thread runs a ``selectors`` loop that owns every socket: it accepts, reads request
heads, answers, and writes the SSE streams (non-blocking, each client with its own cursor and a
bounded output buffer). So:

* ``max_clients`` is exactly the number of concurrent ``/events`` streams; the page,
  ``/api/history`` and the graph are answered whatever the streams do (they never wait for a slot);
* a client that connects and sends nothing, or dribbles its request (slow-loris), holds a socket
  and a few bytes, never a thread, and is dropped after ``HEAD_TIMEOUT_SECS``; past
  ``MAX_PENDING`` such connections the oldest is dropped, so a flood cannot lock out a real client;
* a client that stops reading its stream is dropped after ``SLOW_CLIENT_SECS`` without a byte
  written (its browser reconnects and resumes with ``Last-Event-ID``), never slowing the others;
* the training thread only appends to the log and wakes the loop (one byte on a socket pair): the
  fan-out to every client happens on the loop thread, not inside ``Monitor.log``.
"""

from __future__ import annotations

import contextlib
import email.utils
import errno
import ipaddress
import os
import secrets
import selectors
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from http.client import HTTPMessage, parse_headers
from io import BytesIO
from typing import Any
from urllib.parse import parse_qs, urlsplit

from flodl.log import get_logger
from flodl.monitor.errors import MonitorServerError
from flodl.monitor.page import content_security_policy, strict_json

__all__ = ["DashboardServer", "EventLog"]

log = get_logger("flodl.monitor")

KEEPALIVE_SECS = 15.0
# How often the loop looks at deadlines and keepalives when nothing happens. A closed tab frees its
# slot at once (the loop sees its end-of-file), not at the next check.
PEER_CHECK_SECS = 1.0
HEAD_TIMEOUT_SECS = 10.0  # a client has this long to send its request line and headers
MAX_HEAD_BYTES = 16 * 1024  # a longer request head is refused (431)
SLOW_CLIENT_SECS = 30.0  # a client that accepts no byte of its pending output for this long goes
REPLY_TIMEOUT_SECS = 10.0  # the same for a page/history/graph answer
RENDER_TIMEOUT_SECS = 120.0  # a /timeline.html request waits this long for its page at most
MAX_PENDING = 512  # connections still sending their request or reading an answer; oldest dropped
STREAM_BATCH_BYTES = 256 * 1024  # what one stream buffers at once (the rest stays in the log)
SERVER_NICE = 5  # the server thread yields the CPU to training when cores are busy
# Graph views are documents made from user strings: no script, no plugin, an opaque origin.
_INERT_DOCUMENT = {
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; sandbox"
}
_LOOPBACK_NAMES = {"localhost", "127.0.0.1", "::1"}


class EventLog:
    """An append-only, numbered list of SSE events with a condition to wait on."""

    def __init__(self) -> None:
        self.run_token = secrets.token_hex(4)
        self._events: list[tuple[str, str]] = []  # (event name, JSON data)
        self._keys: list[Any] = []  # what each event is about: a later one with its key replaces it
        self._frames: list[bytes] = []  # each event as sent, encoded once for every client
        self._cond = threading.Condition()
        self._complete = False
        self._closed = False
        self._listeners: list[Callable[[], None]] = []

    def subscribe(self, wake: Callable[[], None]) -> None:
        """Call ``wake()`` (cheap, non-blocking) after every publish and on close."""
        self._listeners.append(wake)

    def publish(self, event: str, data: Any, *, key: Any = None) -> int:
        """Append an event; ``key`` (e.g. an epoch) makes it replace the earlier events of the
        same name and key in :meth:`history` (streams send every event, in order)."""
        payload = strict_json(data)
        with self._cond:
            self._events.append((event, payload))
            self._keys.append(key)
            self._frames.append(self.frame(len(self._events), event, payload))
            if event == "complete":
                self._complete = True
            self._cond.notify_all()
            count = len(self._events)
        for wake in self._listeners:
            wake()
        return count

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        for wake in self._listeners:
            wake()

    def __len__(self) -> int:
        with self._cond:
            return len(self._events)

    @property
    def state(self) -> tuple[int, bool, bool]:
        """(number of events, complete, closed)."""
        with self._cond:
            return len(self._events), self._complete, self._closed

    def frames(self, cursor: int, limit: int) -> tuple[bytes, int]:
        """SSE frames for the events after ``cursor`` (about ``limit`` bytes at most, at least
        one event) and the new cursor."""
        with self._cond:
            pending = self._frames[cursor:]
        out, size = [], 0
        for frame in pending:
            out.append(frame)
            size += len(frame)
            cursor += 1
            if size >= limit:
                break
        return b"".join(out), cursor

    def resume_point(self, last_event_id: str | None) -> int:
        """How many events a client with this ``Last-Event-ID`` has already seen."""
        if not last_event_id:
            return 0
        token, _, number = last_event_id.strip().partition("-")
        if token != self.run_token or not number.isdigit():
            return 0
        with self._cond:
            return min(int(number), len(self._events))

    def wait_past(
        self, cursor: int, timeout: float
    ) -> tuple[list[tuple[int, str, str]], bool, bool]:
        """Events after ``cursor`` (waiting up to ``timeout`` for one), whether the run is
        complete, and whether the log was closed."""
        with self._cond:
            if cursor >= len(self._events) and not (self._closed or self._complete):
                self._cond.wait(timeout)
            batch = [(i + 1, e, d) for i, (e, d) in enumerate(self._events[cursor:], cursor)]
            return batch, self._complete, self._closed

    def history(self, event: str) -> list[str]:
        """The data of every ``event``, the latest for each key, in order of first appearance."""
        with self._cond:
            latest: dict[Any, str] = {}
            for index, ((name, data), key) in enumerate(zip(self._events, self._keys, strict=True)):
                if name == event:
                    latest[index if key is None else (key,)] = data
            return list(latest.values())

    def frame(self, number: int, event: str, data: str) -> bytes:
        return f"id: {self.run_token}-{number}\nevent: {event}\ndata: {data}\n\n".encode()


def check_port(port: object) -> int:
    """``port`` if it is a TCP port number (0 asks for a free one), else a clear error rather
    than the socket layer's bare ``TypeError`` or ``OverflowError``."""
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise MonitorServerError(
            f"port={port!r}: need an int in [0, 65535] (0 picks a free port), e.g. "
            "mon.serve(port=8080)"
        )
    return port


@dataclass(eq=False)
class _Conn:
    """One client socket, owned by the loop thread."""

    sock: socket.socket
    # "head" (reading the request), "reply" (writing an answer), "stream" (SSE), "render"
    # (waiting for /timeline.html from the worker thread)
    kind: str
    since: float  # when it connected (head) or last made progress (reply, stream)
    inbuf: bytearray = field(default_factory=bytearray)
    out: bytearray = field(default_factory=bytearray)
    cursor: int = 0  # stream: events already queued for it
    idle_since: float = 0.0  # stream: when anything was last queued (for keepalives)
    ending: bool = False  # stream: close once ``out`` is written
    head_only: bool = False  # render: a HEAD request (the answer without its body)


_REASONS = {status.value: status.phrase for status in HTTPStatus}


def _response_head(status: int, headers: list[tuple[str, str]]) -> bytes:
    lines = [f"HTTP/1.1 {status} {_REASONS.get(status, '')}"]
    lines.append("Server: flodl-monitor")
    lines.append(f"Date: {email.utils.formatdate(usegmt=True)}")
    lines += [f"{k}: {v}" for k, v in headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


_COMMON = [
    ("X-Content-Type-Options", "nosniff"),
    ("Referrer-Policy", "no-referrer"),
    ("Cache-Control", "no-store"),
]


def _answer(
    status: int,
    body: bytes,
    content_type: str,
    head: bool = False,
    extra: dict[str, str] | None = None,
) -> bytes:
    headers = [
        ("Content-Type", content_type),
        ("Content-Length", str(len(body))),
        ("Connection", "close"),  # one request per connection: nothing idles on keep-alive
        *_COMMON,
        *(extra or {}).items(),
    ]
    return _response_head(status, headers) + (b"" if head else body)


def _plain(status: int, text: str, extra: dict[str, str] | None = None) -> bytes:
    return _answer(status, text.encode(), "text/plain; charset=utf-8", extra=extra)


class DashboardServer:
    """Serves the dashboard page, ``/events``, ``/api/history``, ``/graph.svg``, ``/graph.html`` and ``/timeline.html``.

    ``render`` builds the page (live mode) on each request; the monitor publishes into ``log``.
    ``max_clients`` bounds the concurrent SSE streams only (see the module docstring).
    """

    def __init__(
        self,
        render: Callable[[], tuple[str, str]],
        *,
        host: str = "127.0.0.1",
        port: int = 3000,
        max_clients: int = 16,
        log: EventLog | None = None,
    ) -> None:
        check_port(port)
        if isinstance(max_clients, bool) or not isinstance(max_clients, int) or max_clients < 1:
            raise MonitorServerError(
                f"max_clients={max_clients!r}: need a positive number of dashboard streams"
            )
        self.render = render
        self.log = log or EventLog()
        self.svg: str | None = None
        self.graph_html: str | None = None  # the graph's HTML view, when there is no SVG
        self.timeline_page: Callable[[], tuple[str, str]] | None = None  # /timeline.html
        self.meta: Callable[[], Any] | None = None  # /api/meta: the live page's boot data
        # /timeline.html is rendered on a worker thread (seconds for a long timeline), one render
        # at a time: requests arriving meanwhile share it, and the loop keeps serving the others.
        self._renders: list[_Conn] = []  # loop thread only: clients waiting for the render
        self._rendered: list[bytes] = []  # answers handed back by the worker
        self._render_thread: threading.Thread | None = None
        self._rendered_lock = threading.Lock()
        self.max_clients = max_clients
        self._conns: dict[socket.socket, _Conn] = {}  # loop thread only
        self._streams = 0
        self._closed = False
        self._listener = _listen(host, port, backlog=max(128, 2 * max_clients))
        self.host = host
        self._bound = str(self._listener.getsockname()[0])
        self.port = int(self._listener.getsockname()[1])
        self.loopback = _is_loopback(host)
        self._selector = selectors.DefaultSelector()  # epoll/kqueue: no descriptor limit
        self._wake_r, self._wake_w = socket.socketpair()
        for sock in (self._listener, self._wake_r, self._wake_w):
            sock.setblocking(False)
        self._selector.register(self._listener, selectors.EVENT_READ, "accept")
        self._selector.register(self._wake_r, selectors.EVENT_READ, "wake")
        self._wake_pending = False
        self.log.subscribe(self._wake)
        self._thread = threading.Thread(
            target=self._run, name=f"flodl-dashboard:{self.port}", daemon=True
        )
        self._thread.start()

    @property
    def url(self) -> str:
        # On loopback, the address actually bound (127.0.0.1 or ::1), never "localhost": a
        # browser may resolve that to the other family first and reach another program there.
        host = self._bound if self.loopback else self.host
        if host in ("0.0.0.0", "::", ""):
            host = socket.gethostname()
        return f"http://{'[' + host + ']' if ':' in host else host}:{self.port}"

    def host_allowed(self, host_header: str | None) -> bool:
        """Bound to loopback, only loopback names may address us (blocks DNS rebinding)."""
        if not self.loopback:
            return True
        if not host_header:
            return False
        host = host_header.strip().lower()
        if host.startswith("["):
            host = host[1 : host.find("]")] if "]" in host else host
        else:
            host = host.rsplit(":", 1)[0]
        return host in _LOOPBACK_NAMES or _is_loopback(host)

    @property
    def active_streams(self) -> int:
        return self._streams

    def close(self, timeout: float = 5.0) -> None:
        """Stop accepting, end every SSE stream, free the port; idempotent."""
        if self._closed:
            return
        self._closed = True
        self.log.close()
        self._wake()
        self._thread.join(timeout)
        if self._render_thread is not None:  # a timeline page being rendered: let it end
            self._render_thread.join(timeout)

    # -- the loop (everything below runs on the loop thread) -----------------------------------

    def _wake(self) -> None:
        """Called by publishing threads: one byte wakes the loop (cheap; never blocks)."""
        if self._wake_pending:
            return
        self._wake_pending = True
        with contextlib.suppress(OSError):  # full (a wake is pending anyway) or closed
            self._wake_w.send(b"\0")

    def _run(self) -> None:
        if sys.platform.startswith("linux"):  # there (only) a thread id is a valid target
            with contextlib.suppress(OSError):
                os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), SERVER_NICE)
        try:
            while not self._closed:
                for key, mask in self._selector.select(PEER_CHECK_SECS):
                    if key.data == "accept":
                        self._accept()
                    elif key.data == "wake":
                        self._drain_wake()
                    else:
                        try:
                            self._ready(key.data, mask)
                        except Exception as err:  # one bad client never stops the dashboard
                            log.warning("dashboard request failed: %r", err)
                            self._drop(key.data)
                self._deliver_renders()
                self._fan_out()
                self._sweep(time.monotonic())
        finally:
            self._shutdown()

    def _drain_wake(self) -> None:
        # Drain first, then clear the flag. The other order loses wake-ups: a publish between
        # the two sets the flag and sends a byte that the drain then eats, the flag stays set,
        # and every later event waits for the loop's 1 s timeout. In this order a publish that
        # finds the flag set is still seen: the fan-out below reads the log after this.
        with contextlib.suppress(OSError):
            while self._wake_r.recv(4096):
                pass
        self._wake_pending = False

    def _accept(self) -> None:
        for _ in range(64):  # a burst of connections, without starving the rest of the loop
            try:
                sock, _ = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:  # out of descriptors: free the oldest unanswered one, never spin
                pending = [c for c in self._conns.values() if c.kind != "stream"]
                if pending:
                    self._drop(min(pending, key=lambda c: c.since))
                else:
                    time.sleep(0.05)
                return
            sock.setblocking(False)
            conn = _Conn(sock, "head", time.monotonic())
            self._conns[sock] = conn
            self._selector.register(sock, selectors.EVENT_READ, conn)
            self._evict_pending()

    def _evict_pending(self) -> None:
        """Past MAX_PENDING unanswered connections, drop the oldest (a flood of half-open
        sockets then only ever pushes out itself, never a client that sends its request)."""
        pending = [c for c in self._conns.values() if c.kind != "stream"]
        if len(pending) > MAX_PENDING:
            for conn in sorted(pending, key=lambda c: c.since)[: len(pending) - MAX_PENDING]:
                self._drop(conn)

    def _ready(self, conn: _Conn, mask: int) -> None:
        if conn.sock not in self._conns:
            return  # dropped earlier in this round
        if mask & selectors.EVENT_READ:
            if conn.kind == "head":
                self._read_head(conn)
            else:
                self._read_ignored(conn)
        if conn.sock in self._conns and mask & selectors.EVENT_WRITE:
            self._write(conn)

    def _read_ignored(self, conn: _Conn) -> None:
        """A reply or stream client has nothing more to say: data is discarded, end-of-file or
        an error means it is gone (a closed tab frees its stream slot at once)."""
        try:
            data = conn.sock.recv(4096)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if data:
            return
        if conn.kind == "reply" and conn.out:  # a client that half-closed after its request
            self._selector.modify(conn.sock, selectors.EVENT_WRITE, conn)  # still gets its answer
            return
        if conn.kind == "render":  # the same, while its page is made: watched again by _write
            self._selector.unregister(conn.sock)
            return
        self._drop(conn)

    def _read_head(self, conn: _Conn) -> None:
        try:
            data = conn.sock.recv(8192)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self._drop(conn)
            return
        conn.inbuf += data
        end = conn.inbuf.find(b"\r\n\r\n")
        if end < 0:
            end = conn.inbuf.find(b"\n\n")
        if end < 0:
            if len(conn.inbuf) > MAX_HEAD_BYTES:
                self._reply(conn, _plain(431, "request header too large\n"))
            return
        if end > MAX_HEAD_BYTES:
            self._reply(conn, _plain(431, "request header too large\n"))
            return
        self._route(conn, bytes(conn.inbuf[:end]))

    def _route(self, conn: _Conn, head: bytes) -> None:
        parsed = _parse_head(head)
        if parsed is None:
            self._reply(conn, _plain(400, "bad request\n"))
            return
        method, target, headers = parsed
        if method not in ("GET", "HEAD"):
            self._reply(conn, _plain(501, f"unsupported method {method!r}\n"))
            return
        is_head = method == "HEAD"
        if not self.host_allowed(headers.get("Host")):
            self._reply(
                conn, _answer(403, b"forbidden host\n", "text/plain; charset=utf-8", is_head)
            )
            return
        url = urlsplit(target)
        path = url.path
        if path == "/events" and not is_head:
            # ?last=<id>: a page that opened a new EventSource after a refused one (503) resumes
            # where it was, as Last-Event-ID does on the browser's own reconnects
            last = parse_qs(url.query).get("last", [None])[0]
            self._open_stream(conn, headers.get("Last-Event-ID") or last)
        elif path in ("/", "/index.html"):
            page, nonce = self.render()
            policy = {"Content-Security-Policy": content_security_policy(nonce)}
            self._reply(
                conn, _answer(200, page.encode(), "text/html; charset=utf-8", is_head, policy)
            )
        elif path == "/api/history":
            body = ("[" + ",".join(self.log.history("epoch")) + "]").encode()
            run = {"X-Flodl-Run": self.log.run_token}  # which run this history belongs to
            self._reply(conn, _answer(200, body, "application/json", is_head, run))
        elif path == "/api/meta" and (meta := self.meta) is not None:
            body = strict_json(meta()).encode()
            self._reply(conn, _answer(200, body, "application/json", is_head))
        elif path == "/graph.svg" and (svg := self.svg) is not None:
            # opened directly, an SVG is a document: keep any script in it inert
            self._reply(conn, _answer(200, svg.encode(), "image/svg+xml", is_head, _INERT_DOCUMENT))
        elif path == "/timeline.html" and (timeline := self.timeline_page) is not None:
            self._render_timeline(conn, timeline, is_head)
        elif path == "/graph.html" and (view := self.graph_html) is not None:
            self._reply(
                conn,
                _answer(200, view.encode(), "text/html; charset=utf-8", is_head, _INERT_DOCUMENT),
            )
        else:
            self._reply(conn, _answer(404, b"not found\n", "text/plain; charset=utf-8", is_head))

    def _render_timeline(
        self, conn: _Conn, timeline: Callable[[], tuple[str, str]], is_head: bool
    ) -> None:
        conn.kind, conn.since, conn.inbuf, conn.head_only = (
            "render",
            time.monotonic(),
            bytearray(),
            is_head,
        )
        self._renders.append(conn)
        if len(self._renders) > 1:
            return  # a render is under way: this client gets that page too

        def work() -> None:
            try:
                page, nonce = timeline()  # the Monitor's Timeline as it is now
                policy = {"Content-Security-Policy": content_security_policy(nonce)}
                data = _answer(200, page.encode(), "text/html; charset=utf-8", extra=policy)
            except Exception as err:  # a broken timeline costs its page, never the dashboard
                log.warning("dashboard: could not render /timeline.html: %r", err)
                data = _plain(500, "could not render the timeline (see the training log)\n")
            with self._rendered_lock:
                self._rendered.append(data)
            self._wake()

        self._render_thread = threading.Thread(
            target=work, name="flodl-dashboard-timeline", daemon=True
        )
        self._render_thread.start()

    def _deliver_renders(self) -> None:
        with self._rendered_lock:
            done, self._rendered = self._rendered, []
        for data in done:
            waiting, self._renders = self._renders, []
            head = data[: data.index(b"\r\n\r\n") + 4]
            for conn in waiting:
                if conn.sock in self._conns:
                    self._reply(conn, head if conn.head_only else data)

    def _reply(self, conn: _Conn, data: bytes) -> None:
        conn.kind, conn.since, conn.inbuf = "reply", time.monotonic(), bytearray()
        conn.out += data
        self._write(conn)

    def _open_stream(self, conn: _Conn, last_event_id: str | None) -> None:
        if self._streams >= self.max_clients or self._closed:
            self._reply(
                conn,
                _plain(
                    503,
                    "too many dashboard clients; close another tab\n",
                    {"Retry-After": "5"},
                ),
            )
            return
        self._streams += 1
        now = time.monotonic()
        conn.kind, conn.since, conn.idle_since, conn.inbuf = "stream", now, now, bytearray()
        conn.cursor = self.log.resume_point(last_event_id)
        head = _response_head(
            200, [("Content-Type", "text/event-stream"), *_COMMON, ("Connection", "close")]
        )
        conn.out += head + b"retry: 2000\n\n"
        self._queue(conn, now)
        self._write(conn)

    def _queue(
        self, conn: _Conn, now: float, batches: dict[int, tuple[bytes, int]] | None = None
    ) -> None:
        """Refill an idle stream's buffer from the log; end it once the run is complete.

        ``batches``: frames already joined this round, by cursor (most streams share one, so a
        new epoch is joined once, not once per client)."""
        if conn.out or conn.ending:
            return
        count, complete, closed = self.log.state
        if conn.cursor < count:
            batch = batches.get(conn.cursor) if batches is not None else None
            if batch is None:
                batch = self.log.frames(conn.cursor, STREAM_BATCH_BYTES)
                if batches is not None:
                    batches[conn.cursor] = batch
            data, conn.cursor = batch
            conn.out += data
            conn.idle_since = now
        elif complete or closed:
            conn.ending = True
        elif now - conn.idle_since >= KEEPALIVE_SECS:
            # keeps proxies from timing out, and notices a client that vanished without a FIN
            conn.out += b": keepalive\n\n"
            conn.idle_since = now

    def _fan_out(self) -> None:
        now = time.monotonic()
        batches: dict[int, tuple[bytes, int]] = {}
        for conn in [c for c in self._conns.values() if c.kind == "stream"]:
            if not conn.out:
                self._queue(conn, now, batches)
                self._write(conn, batches)

    def _write(self, conn: _Conn, batches: dict[int, tuple[bytes, int]] | None = None) -> None:
        while conn.out:
            try:
                sent = conn.sock.send(conn.out)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                self._drop(conn)
                return
            del conn.out[:sent]
            conn.since = time.monotonic()
            if not conn.out and conn.kind == "stream":
                self._queue(conn, conn.since, batches)  # more is waiting in the log: keep going
        if conn.out:
            events = selectors.EVENT_WRITE if conn.kind == "reply" else selectors.EVENT_READ
            self._watch(conn, events | selectors.EVENT_WRITE)
            return
        if conn.kind == "reply" or conn.ending:
            self._drop(conn, graceful=True)
            return
        self._watch(conn, selectors.EVENT_READ)

    def _watch(self, conn: _Conn, events: int) -> None:
        try:
            self._selector.modify(conn.sock, events, conn)
        except KeyError:  # unregistered while a half-closed client waited for its page
            self._selector.register(conn.sock, events, conn)

    def _sweep(self, now: float) -> None:
        """Drop clients past their deadline: a request not sent in time, an answer or a stream
        the client stopped reading."""
        limits = {
            "head": HEAD_TIMEOUT_SECS,
            "reply": REPLY_TIMEOUT_SECS,
            "stream": SLOW_CLIENT_SECS,
            "render": RENDER_TIMEOUT_SECS,
        }
        for conn in list(self._conns.values()):
            waiting = conn.kind != "stream" or bool(conn.out)
            if waiting and now - conn.since > limits[conn.kind]:
                self._drop(conn)  # a dropped stream reconnects and resumes (Last-Event-ID)

    def _drop(self, conn: _Conn, *, graceful: bool = False) -> None:
        if self._conns.pop(conn.sock, None) is None:
            return
        if conn.kind == "stream":
            self._streams -= 1
        with contextlib.suppress(KeyError, ValueError, OSError):
            self._selector.unregister(conn.sock)
        if graceful:
            with contextlib.suppress(OSError):
                conn.sock.shutdown(socket.SHUT_WR)
        with contextlib.suppress(OSError):
            conn.sock.close()

    def _shutdown(self) -> None:
        """Close the port, then every connection (streams get what is buffered, then a FIN)."""
        with contextlib.suppress(KeyError, ValueError, OSError):
            self._selector.unregister(self._listener)
        self._listener.close()
        for conn in list(self._conns.values()):
            if conn.kind == "stream" and conn.out:
                with contextlib.suppress(OSError):
                    conn.sock.send(conn.out)
            self._drop(conn, graceful=conn.kind == "stream")
        self._selector.close()
        self._wake_r.close()
        self._wake_w.close()


def _parse_head(head: bytes) -> tuple[str, str, HTTPMessage] | None:
    """(method, target, headers) of a request head, or None when it is not HTTP/1.x."""
    line, _, rest = head.partition(b"\n")
    parts = line.decode("latin-1").strip().split()
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        return None
    try:
        headers = parse_headers(BytesIO(rest + b"\r\n\r\n"))
    except Exception:  # malformed header lines: a bad request, never a crashed loop
        return None
    return parts[0], parts[1], headers


def _listen(host: str, port: int, backlog: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        # only lets a new server reuse a port in TIME_WAIT, never share one that is listening
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        # a page load opens several connections at once; past the backlog the kernel drops SYNs
        sock.listen(min(backlog, socket.SOMAXCONN))
    except OSError as err:
        sock.close()
        if err.errno == errno.EADDRINUSE:
            raise MonitorServerError(
                f"cannot serve the dashboard: port {port} on {host} is already in use — "
                "stop the other process, pass another port, or port=0 to pick a free one"
            ) from None
        raise MonitorServerError(
            f"cannot serve the dashboard on {host}:{port}: {err.strerror or err} — "
            'check the host (default "127.0.0.1") and port'
        ) from None
    return sock


def _is_loopback(host: str) -> bool:
    if host in ("localhost",):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
