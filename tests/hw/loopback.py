"""A real HTTP server on 127.0.0.1 for download tests: Range, ETag, drops and 404s on demand."""

from __future__ import annotations

import contextlib
import hashlib
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote


@dataclass
class Served:
    body: bytes
    etag: str | None = '"v1"'
    ranges: bool = True  # honour Range requests
    drop_after: int | None = None  # close the connection after this many bytes…
    drops_left: int = 0  # …this many times
    content_type: str = "application/octet-stream"
    stall_after: int | None = None  # send this many bytes, then hang (until the server stops)
    stall_at: int | None = None  # every response hangs at this offset of the file (a dead mirror)
    announce_length: int | None = None  # lie about Content-Length (e.g. a huge file)
    content_encoding: str | None = None  # sent as Content-Encoding; ``body`` is already encoded


@dataclass
class State:
    files: dict[str, Served] = field(default_factory=dict)
    log: list[tuple[str, str, dict[str, str]]] = field(
        default_factory=list
    )  # method, path, headers


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):  # quiet
        pass

    def _serve(self, head: bool) -> None:
        state: State = self.server.state  # type: ignore[attr-defined]
        path = unquote(self.path.split("?")[0])
        state.log.append((self.command, path, dict(self.headers)))
        served = state.files.get(path)
        if served is None:
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        body, start, status = served.body, 0, 200
        wanted = self.headers.get("Range")
        if_range = self.headers.get("If-Range")
        if wanted and served.ranges and (if_range is None or if_range == served.etag):
            start = int(wanted.split("=")[1].split("-")[0])
            if start >= len(body):
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{len(body)}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            status = 206
        chunk = body[start:]
        self.send_response(status)
        self.send_header("Content-Length", str(served.announce_length or len(chunk)))
        self.send_header("Content-Type", served.content_type)
        if served.content_encoding:  # whatever the client's Accept-Encoding said, like some proxies
            self.send_header("Content-Encoding", served.content_encoding)
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
        if served.ranges:
            self.send_header("Accept-Ranges", "bytes")
        if served.etag:
            self.send_header("ETag", served.etag)
        self.end_headers()
        if head:
            return
        if served.drops_left > 0 and served.drop_after is not None:
            served.drops_left -= 1
            self.wfile.write(chunk[: served.drop_after])
            self.wfile.flush()
            self.close_connection = True
            return
        stall = served.stall_after
        if served.stall_at is not None:
            stall = max(0, served.stall_at - start)
        if stall is not None:
            self.wfile.write(chunk[:stall])
            self.wfile.flush()
            self.server.stopping.wait(60)  # type: ignore[attr-defined]
            self.close_connection = True
            return
        view = memoryview(chunk)
        for i in range(0, len(view), 1 << 20):
            self.wfile.write(view[i : i + (1 << 20)])

    def do_GET(self):
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            self._serve(head=False)

    def do_HEAD(self):
        self._serve(head=True)


class LoopbackServer:
    def __init__(self) -> None:
        self.state = State()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self.httpd.daemon_threads = True
        self.httpd.state = self.state  # type: ignore[attr-defined]
        self.httpd.stopping = threading.Event()  # type: ignore[attr-defined]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def add(self, path: str, body: bytes, **kw) -> Served:
        served = Served(body, **kw)
        self.state.files[path] = served
        return served

    def gets(self, path: str) -> list[dict[str, str]]:
        return [h for m, p, h in self.state.log if m == "GET" and p == path]

    def __enter__(self) -> LoopbackServer:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.stopping.set()  # type: ignore[attr-defined]
        self.httpd.shutdown()
        self.httpd.server_close()


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
