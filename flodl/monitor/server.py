"""The live dashboard server: stdlib HTTP on a daemon thread, Server-Sent Events from an event log.

Every event (an epoch, new metadata, a new graph, completion) is appended to one log and numbered.
Each SSE client keeps a cursor into the log and sends what lies past it, so a client that joins
late replays the whole history, a reconnecting browser (``Last-Event-ID``) resumes exactly where it
stopped, and no event can fall between "replay" and "subscribe" (the Rust original lost those and
replayed everything again on reconnect). Ids carry a per-run token so an id from another run (the
same port, a previous script) triggers a full replay instead of a wrong resume.

Hardening over the original: binds loopback unless told otherwise, checks the ``Host`` header when
bound to loopback (DNS rebinding), no CORS header, a content security policy, a bounded number of
connections and SSE clients, request timeouts, and ``close()`` really closes the port and ends every
stream.
"""

from __future__ import annotations

import contextlib
import errno
import ipaddress
import secrets
import select
import socket
import sys
import threading
import time
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from flodl.monitor.errors import MonitorServerError
from flodl.monitor.page import content_security_policy, strict_json

__all__ = ["DashboardServer", "EventLog"]

KEEPALIVE_SECS = 15.0
# How often an idle stream checks whether its client hung up: a closed tab frees its slot (the
# number of streams is bounded) within this, not at the next keepalive write.
PEER_CHECK_SECS = 1.0
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
        self._cond = threading.Condition()
        self._complete = False
        self._closed = False

    def publish(self, event: str, data: Any) -> int:
        payload = strict_json(data)
        with self._cond:
            self._events.append((event, payload))
            if event == "complete":
                self._complete = True
            self._cond.notify_all()
            return len(self._events)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()

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
        with self._cond:
            return [d for e, d in self._events if e == event]

    def frame(self, number: int, event: str, data: str) -> bytes:
        return f"id: {self.run_token}-{number}\nevent: {event}\ndata: {data}\n\n".encode()


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True  # only lets a new server reuse a port in TIME_WAIT, never share it

    def __init__(self, address: tuple[str, int], handler: type, dashboard: DashboardServer):
        self.dashboard = dashboard
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        # the listen() backlog (socketserver's default is 5): a page load opens several
        # connections at once, and past the backlog the kernel drops SYNs, so clients stall a
        # second or more before retrying. As many as we would serve at once.
        self.request_queue_size = dashboard.max_connections
        super().__init__(address, handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self.dashboard._enter_connection(request):
            # over the limit: refuse at once rather than park a thread per connection
            with contextlib.suppress(OSError):
                request.sendall(
                    b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n"
                    b"Retry-After: 5\r\nConnection: close\r\n\r\n"
                )
            self.shutdown_request(request)
            return
        thread = threading.Thread(
            target=self.process_request_thread,
            args=(request, client_address),
            name="flodl-dashboard-conn",
            daemon=True,
        )
        self.dashboard._track(thread)
        thread.start()

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A browser closing a tab mid-response is normal; anything else gets one line on stderr
        (never a traceback in the middle of the training output)."""
        err = sys.exc_info()[1]
        if isinstance(err, ConnectionError | TimeoutError):
            return
        print(f"  warning: dashboard request failed: {err!r}", file=sys.stderr)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.dashboard._leave_connection(request)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"
    timeout = 10  # seconds an idle or slow client may hold its thread
    server_version = "flodl-monitor"
    sys_version = ""

    def log_message(self, format: str, *args: Any) -> None:  # quiet: training output is on stdout
        pass

    def do_HEAD(self) -> None:
        self._dispatch(head=True)

    def do_GET(self) -> None:
        self._dispatch(head=False)

    def _dispatch(self, *, head: bool) -> None:
        dash = self.server.dashboard
        if not dash.host_allowed(self.headers.get("Host")):
            self._send(HTTPStatus.FORBIDDEN, b"forbidden host\n", "text/plain; charset=utf-8", head)
            return
        path = urlsplit(self.path).path
        if path == "/events" and not head:
            self._stream_events()
        elif path in ("/", "/index.html"):
            page, nonce = dash.render()
            self._send(
                HTTPStatus.OK,
                page.encode(),
                "text/html; charset=utf-8",
                head,
                {"Content-Security-Policy": content_security_policy(nonce)},
            )
        elif path == "/api/history":
            body = ("[" + ",".join(dash.log.history("epoch")) + "]").encode()
            self._send(HTTPStatus.OK, body, "application/json", head)
        elif path == "/graph.svg" and (svg := dash.svg) is not None:
            # opened directly, an SVG is a document: keep any script in it inert
            self._send(HTTPStatus.OK, svg.encode(), "image/svg+xml", head, _INERT_DOCUMENT)
        elif path == "/timeline.html" and (timeline := dash.timeline_page) is not None:
            page, nonce = timeline()  # the Monitor's Timeline as it is now
            csp = {"Content-Security-Policy": content_security_policy(nonce)}
            self._send(HTTPStatus.OK, page.encode(), "text/html; charset=utf-8", head, csp)
        elif path == "/graph.html" and (view := dash.graph_html) is not None:
            self._send(
                HTTPStatus.OK, view.encode(), "text/html; charset=utf-8", head, _INERT_DOCUMENT
            )
        else:
            self._send(HTTPStatus.NOT_FOUND, b"not found\n", "text/plain; charset=utf-8", head)

    def _common_headers(self) -> None:
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Referrer-Policy", "no-referrer")
        self.send_header("Cache-Control", "no-store")

    def _send(
        self,
        status: HTTPStatus,
        body: bytes,
        content_type: str,
        head: bool,
        extra: dict[str, str] | None = None,
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")  # no idle keep-alive threads to wait for
        self.close_connection = True
        self._common_headers()
        for key, value in (extra or {}).items():
            self.send_header(key, value)
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def _stream_events(self) -> None:
        dash = self.server.dashboard
        if not dash._enter_stream():
            self._send(
                HTTPStatus.SERVICE_UNAVAILABLE,
                b"too many dashboard clients; close another tab\n",
                "text/plain; charset=utf-8",
                False,
                {"Retry-After": "5"},
            )
            return
        self.close_connection = True
        try:
            self.send_response(HTTPStatus.OK)
            self.send_header("Content-Type", "text/event-stream")
            self._common_headers()
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(b"retry: 2000\n\n")
            self.wfile.flush()
            cursor = dash.log.resume_point(self.headers.get("Last-Event-ID"))
            idle_since = time.monotonic()
            while True:
                batch, complete, closed = dash.log.wait_past(cursor, PEER_CHECK_SECS)
                if batch:
                    self.wfile.write(b"".join(dash.log.frame(*event) for event in batch))
                    cursor = batch[-1][0]
                    idle_since = time.monotonic()
                elif complete or closed:
                    self.wfile.flush()
                    return
                elif self._peer_hung_up():
                    return
                elif time.monotonic() - idle_since >= KEEPALIVE_SECS:
                    # keeps proxies from timing out, and notices a client that vanished
                    # without a FIN (a reset or a dead network)
                    self.wfile.write(b": keepalive\n\n")
                    idle_since = time.monotonic()
                self.wfile.flush()
        except (OSError, ValueError):
            return  # the client went away (reset, broken pipe, timeout, closed file)
        finally:
            dash._leave_stream()

    def _peer_hung_up(self) -> bool:
        """Whether the client closed its end (an SSE client never sends after its request, so a
        readable socket means end-of-file or an error)."""
        try:
            return (
                _readable_now(self.connection) and self.connection.recv(1, socket.MSG_PEEK) == b""
            )
        except (OSError, ValueError):
            return True


class DashboardServer:
    """Serves the dashboard page, ``/events``, ``/api/history``, ``/graph.svg`` and ``/graph.html``.

    ``render`` builds the page (live mode) on each request; the monitor publishes into ``log``.
    """

    def __init__(
        self,
        render: Callable[[], tuple[str, str]],
        *,
        host: str = "127.0.0.1",
        port: int = 3000,
        max_clients: int = 16,
        max_connections: int = 64,
        log: EventLog | None = None,
    ) -> None:
        self.render = render
        self.log = log or EventLog()
        self.svg: str | None = None
        self.graph_html: str | None = None  # the graph's HTML view, when there is no SVG
        self.timeline_page: Callable[[], tuple[str, str]] | None = None  # /timeline.html
        self.max_clients = max_clients
        self.max_connections = max_connections
        self._counts_lock = threading.Lock()
        self._streams = 0
        self._sockets: set[socket.socket] = set()
        self._threads: set[threading.Thread] = set()  # handler threads, joined by close()
        self._closed = False
        try:
            self._httpd = _Server((host, port), _Handler, self)
        except OSError as err:
            if err.errno == errno.EADDRINUSE:
                raise MonitorServerError(
                    f"cannot serve the dashboard: port {port} on {host} is already in use — "
                    "stop the other process, pass another port, or port=0 to pick a free one"
                ) from None
            raise MonitorServerError(
                f"cannot serve the dashboard on {host}:{port}: {err.strerror or err} — "
                'check the host (default "127.0.0.1") and port'
            ) from None
        self.host = host
        self.port = int(self._httpd.server_address[1])
        self.loopback = _is_loopback(host)
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.2},
            name=f"flodl-dashboard:{self.port}",
            daemon=True,
        )
        self._thread.start()

    @property
    def url(self) -> str:
        host = "localhost" if self.loopback else self.host
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

    def _enter_stream(self) -> bool:
        with self._counts_lock:
            if self._streams >= self.max_clients or self._closed:
                return False
            self._streams += 1
            return True

    def _leave_stream(self) -> None:
        with self._counts_lock:
            self._streams -= 1

    def _enter_connection(self, sock: socket.socket) -> bool:
        with self._counts_lock:
            if len(self._sockets) >= self.max_connections:
                return False
            self._sockets.add(sock)
            return True

    def _leave_connection(self, sock: socket.socket) -> None:
        with self._counts_lock:
            self._sockets.discard(sock)
            self._threads.discard(threading.current_thread())

    def _track(self, thread: threading.Thread) -> None:
        with self._counts_lock:
            self._threads.add(thread)

    @property
    def active_streams(self) -> int:
        with self._counts_lock:
            return self._streams

    def close(self, timeout: float = 5.0) -> None:
        """Stop accepting, end every SSE stream, free the port; idempotent."""
        if self._closed:
            return
        self._closed = True
        self.log.close()
        self._httpd.shutdown()
        self._thread.join(timeout)
        self._httpd.server_close()
        with self._counts_lock:  # serve_forever has stopped: no new handler thread can start
            handlers = list(self._threads)
            for sock in self._sockets:  # wake threads blocked reading from idle clients
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
        for thread in handlers:
            thread.join(timeout)


def _readable_now(sock: socket.socket) -> bool:
    """Whether ``sock`` has data, end-of-file or an error pending (without waiting). poll(), not
    select(): select() fails on descriptors past 1024, which a busy training process can reach."""
    if hasattr(select, "poll"):
        poller = select.poll()
        poller.register(sock, select.POLLIN)
        return bool(poller.poll(0))
    return bool(select.select([sock], [], [], 0)[0])  # Windows: no poll(), and no such limit


def _is_loopback(host: str) -> bool:
    if host in ("localhost",):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
