"""The live dashboard over real loopback HTTP: routes, SSE backfill, resume, limits, shutdown."""

from __future__ import annotations

import http.client
import json
import logging
import os
import random
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from urllib.parse import urlsplit

import pytest
import torch

import flodl as fl
from flodl.monitor import server as server_module
from flodl.monitor.server import DashboardServer
from tests.conftest import clean_env, require


def request(url: str, path: str, method: str = "GET", headers: dict[str, str] | None = None):
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=5)
    try:
        conn.request(method, path, headers=headers or {})
        response = conn.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        conn.close()


def log_epochs(mon: fl.Monitor, start: int, stop: int) -> None:
    for epoch in range(start, stop):
        mon.log(epoch, 0.01, {"loss": 1.0 / (epoch + 1)})


def wait_for(condition: Callable[[], bool], timeout: float = 30.0) -> bool:
    """Poll ``condition`` until it holds or ``timeout`` passes (a hang guard, not a timing test)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def boot_in(page: bytes) -> dict:
    """The JSON a dashboard page (live or archived) boots from."""
    match = re.search(
        rb'<script type="application/json" id="flodl-boot">(.*?)</script>', page, re.S
    )
    assert match is not None
    return json.loads(match[1].decode())


def page_boot(url: str) -> dict:
    status, _, body = request(url, "/")
    assert status == 200
    return boot_in(body)


def test_serve_binds_loopback_by_default_and_reports_the_url(served):
    assert served._server.host == "127.0.0.1"
    # the address bound, not "localhost": a browser may resolve that to ::1 first
    assert served.url == f"http://127.0.0.1:{served._server.port}"


def test_the_url_reaches_the_dashboard_when_another_program_holds_the_ipv6_port():
    try:
        other = socket.socket(socket.AF_INET6)
        other.bind(("::1", 0))
    except OSError as err:
        pytest.skip(f"no IPv6 loopback here: {err}")
    other.listen()  # another program on [::1]:PORT, where "localhost" may lead first
    port = other.getsockname()[1]
    mon = fl.Monitor(2, stream=None)
    v6 = fl.Monitor(2, stream=None)
    try:
        url = mon.serve(port=port)
        assert url == f"http://127.0.0.1:{port}"
        assert request(url, "/api/history")[0] == 200  # flodl answers, not the other program
        other.close()
        v6_url = v6.serve(port=0, host="::1")
        assert v6_url == f"http://[::1]:{v6._server.port}"
        assert request(v6_url, "/api/history")[0] == 200
    finally:
        other.close()
        mon.close()
        v6.close()


@pytest.mark.parametrize(("host", "shown"), [("0.0.0.0", "all interfaces"), ("", "all interfaces")])
def test_binding_every_interface_warns_through_the_logger_even_when_silent(host, shown, caplog):
    mon = fl.Monitor(2, stream=None)
    try:
        with caplog.at_level(logging.WARNING, logger="flodl.monitor"):
            mon.serve(port=0, host=host)
        warned = [r.getMessage() for r in caplog.records if r.name == "flodl.monitor"]
        assert len(warned) == 1, warned
        assert f"listens on {shown} (port {mon._server.port}) with no authentication" in warned[0]
    finally:
        mon.close()


def test_serve_after_close_is_refused_and_leaves_no_server(sse):
    before = {t for t in threading.enumerate() if t.name.startswith("flodl-dashboard")}
    mon = fl.Monitor(2, stream=None)
    url = mon.serve(port=0)
    mon.close()
    with pytest.raises(fl.MonitorError, match="the monitor is closed"):
        mon.serve(port=0)
    with pytest.raises(fl.MonitorError, match="the monitor is closed"):
        mon.attach_timeline()  # its sampling thread would never be stopped either
    assert mon.url is None
    now = {t for t in threading.enumerate() if t.name.startswith("flodl-dashboard")}
    assert now <= before  # no dashboard thread was started
    with pytest.raises(OSError):
        request(url, "/api/history")


def test_after_a_burst_of_epochs_the_next_one_is_sent_at_once(sse):
    """A lost wake-up (a publish racing the loop's drain) used to leave every later event
    waiting for the loop's 1 s timeout: a long run's page lagged a second per epoch."""
    mon = fl.Monitor(3000, stream=None)
    try:
        mon.serve(port=0)
        client = sse(mon.url, timeout=30)
        events = client.events()
        log_epochs(mon, 0, 2000)  # published while the loop sends them: the race
        for _ in range(2000):
            next(events)
        delays = []
        for epoch in range(2000, 2005):
            started = time.monotonic()
            log_epochs(mon, epoch, epoch + 1)
            assert next(events).json["epoch"] == epoch + 1
            delays.append(time.monotonic() - started)
        assert sorted(delays)[2] < 0.5, delays  # the median: milliseconds, not the 1 s timeout
        client.close()
    finally:
        mon.close()


def test_meta_route_and_history_carry_the_run_token_and_last_resumes(served, sse):
    log_epochs(served, 0, 3)
    status, _, body = request(served.url, "/api/meta")
    meta = json.loads(body)
    assert status == 200 and meta["total"] == 5 and meta["mode"] == "live"
    history_headers = request(served.url, "/api/history")[1]
    assert history_headers["X-Flodl-Run"] == meta["run"] == served._server.log.run_token
    # a page that had to open a new EventSource (after a 503) resumes with ?last=<id>
    parts = urlsplit(served.url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=5)
    conn.request("GET", f"/events?last={meta['run']}-2")
    response = conn.getresponse()
    line = b""
    while not line.startswith(b"data:"):
        line = response.readline()
    assert json.loads(line[5:])["epoch"] == 3  # epochs 1 and 2 are not sent again
    conn.close()


def test_a_slow_timeline_page_never_blocks_the_other_requests(served):
    """/timeline.html is rendered off the loop thread, once for the requests waiting on it."""
    calls, release = [], threading.Event()

    def slow_page() -> tuple[str, str]:
        calls.append(1)
        release.wait(10)  # a timeline of hours takes seconds to render
        return "<p>timeline</p>", "nonce"

    served._server.timeline_page = slow_page
    answers: list[int] = []
    readers = [
        threading.Thread(target=lambda: answers.append(request(served.url, "/timeline.html")[0]))
        for _ in range(2)
    ]
    for reader in readers:
        reader.start()
    assert wait_for(lambda: len(served._server._renders) == 2)  # both wait for one render
    assert calls == [1]
    started = time.monotonic()
    assert request(served.url, "/api/history")[0] == 200  # answered while the render runs
    assert time.monotonic() - started < 2.0
    release.set()
    for reader in readers:
        reader.join(10)
    assert answers == [200, 200] and len(calls) == 1  # one render served both

    def broken_page() -> tuple[str, str]:
        raise KeyError("duration_ms")

    served._server.timeline_page = broken_page
    assert request(served.url, "/timeline.html")[0] == 500  # an answer, not a dropped socket
    assert request(served.url, "/api/history")[0] == 200


def test_page_history_and_graph_routes(served, tiny_graph):
    status, headers, body = request(served.url, "/api/history")
    assert (status, json.loads(body)) == (200, [])
    assert request(served.url, "/graph.svg")[0] == 404  # nothing watched yet

    served.watch(tiny_graph)
    log_epochs(served, 0, 2)
    status, headers, body = request(served.url, "/")
    assert status == 200 and headers["Content-Type"] == "text/html; charset=utf-8"
    assert "script-src 'nonce-" in headers["Content-Security-Policy"]
    assert "Access-Control-Allow-Origin" not in headers
    assert b'id="flodl-boot"' in body

    status, headers, body = request(served.url, "/api/history?pretty=no")  # query strings work
    assert status == 200
    assert [r["epoch"] for r in json.loads(body)] == [1, 2]

    status, headers, body = request(served.url, "/graph.svg")
    assert status == 200 and headers["Content-Type"] == "image/svg+xml"
    assert (
        "sandbox" in headers["Content-Security-Policy"]
    )  # opened directly, its scripts stay inert
    assert b"tiny v1" in body

    assert request(served.url, "/nope")[0] == 404
    assert request(served.url, "/", method="POST")[0] == 501
    status, _, body = request(served.url, "/", method="HEAD")
    assert status == 200 and body == b""


def test_late_join_gets_the_full_history_then_live_epochs(served, sse):
    log_epochs(served, 0, 3)
    client = sse(served.url)
    backfill = client.take(3)
    assert [e.event for e in backfill] == ["epoch"] * 3
    assert [e.json["epoch"] for e in backfill] == [1, 2, 3]

    log_epochs(served, 3, 5)
    served.finish()
    rest = list(client.events())  # the stream ends after `complete`
    assert [(e.event, e.json.get("epoch")) for e in rest] == [
        ("epoch", 4),
        ("epoch", 5),
        ("complete", None),
    ]
    assert rest[-1].json["text"].startswith("Complete (")
    client.close()


def test_reconnect_with_last_event_id_does_not_repeat_epochs(served, sse):
    log_epochs(served, 0, 2)
    first = sse(served.url)
    seen = first.take(2)
    first.close()  # the browser lost the connection
    log_epochs(served, 2, 4)
    served.finish()

    again = sse(served.url, last_event_id=seen[-1].id)
    resumed = list(again.events())
    again.close()
    assert [e.json.get("epoch") for e in resumed if e.event == "epoch"] == [3, 4]
    assert resumed[-1].event == "complete"


def test_an_id_from_another_run_replays_everything(served, sse):
    log_epochs(served, 0, 2)
    served.finish()
    stranger = sse(served.url, last_event_id="deadbeef-1")
    assert [e.event for e in stranger.events()] == ["epoch", "epoch", "complete"]
    stranger.close()


def test_several_clients_with_abrupt_disconnects(served, sse):
    log_epochs(served, 0, 1)
    clients = [sse(served.url) for _ in range(6)]
    for c in clients:
        assert c.take(1)[0].json["epoch"] == 1
    for c in clients[:3]:  # vanish without a word: reset the TCP connection
        c.response.fp.raw._sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\1\0\0\0\0\0\0\0")
        c.close()
    log_epochs(served, 1, 3)
    served.finish()
    for c in clients[3:]:
        assert [e.json.get("epoch") for e in c.events()] == [2, 3, None]
        c.close()
    late = sse(served.url)  # the dead clients broke nothing for later ones
    assert [e.event for e in late.events()] == ["epoch"] * 3 + ["complete"]
    late.close()


def test_number_of_stream_clients_is_bounded(sse):
    mon = fl.Monitor(2, stream=None)
    try:
        mon.serve(port=0, max_clients=2)
        held = [sse(mon.url) for _ in range(2)]
        assert [c.response.status for c in held] == [200, 200]
        status, headers, _ = request(mon.url, "/events")
        assert status == 503 and headers["Retry-After"] == "5"
        held[0].close()
    finally:
        mon.close()


def test_a_closed_tab_frees_its_stream_slot_without_waiting_for_a_keepalive(sse, monkeypatch):
    monkeypatch.setattr(server_module, "KEEPALIVE_SECS", 3600.0)  # only the hang-up check helps
    mon = fl.Monitor(2, stream=None)
    try:
        mon.serve(port=0, max_clients=1)
        tab = sse(mon.url)
        assert tab.response.status == 200
        assert request(mon.url, "/events")[0] == 503  # the one slot is taken
        tab.close()  # the browser closes the tab: a FIN, no further event is ever written
        assert wait_for(lambda: mon._server.active_streams == 0)
        again = sse(mon.url)
        assert again.response.status == 200
        again.close()
    finally:
        mon.close()


@pytest.mark.slow  # waits through a few hang-up checks
def test_a_quiet_stream_survives_the_hang_up_check_past_descriptor_1024(served, sse):
    """select() cannot watch descriptors past 1024; a busy process has them, and a quiet
    client must not be taken for gone because of it."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1200:
        pytest.skip(f"the descriptor limit ({hard}) is too low to reach descriptor 1024")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1200), hard))
    fillers = []
    try:
        with open(os.devnull) as devnull:
            while len(fillers) < 1100:
                fillers.append(os.dup(devnull.fileno()))
        log_epochs(served, 0, 1)
        client = sse(served.url, timeout=60)  # the server's end of it gets a descriptor > 1024
        assert client.take(1)[0].json["epoch"] == 1
        time.sleep(3 * server_module.PEER_CHECK_SECS)  # several hang-up checks on a quiet stream
        log_epochs(served, 1, 2)
        assert client.take(1)[0].json["epoch"] == 2  # still connected
        client.close()
    finally:
        for fd in fillers:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_foreign_host_header_is_refused_on_loopback(served):
    """A DNS-rebinding page reaches 127.0.0.1 under its own name: refuse it."""
    assert request(served.url, "/api/history", headers={"Host": "evil.example:80"})[0] == 403
    for host in ("localhost", f"127.0.0.1:{served._server.port}", "[::1]:1"):
        assert request(served.url, "/api/history", headers={"Host": host})[0] == 200


def test_port_in_use_gives_a_clear_error_and_port_zero_picks_a_free_one():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        mon = fl.Monitor(1, stream=None)
        with pytest.raises(
            fl.MonitorServerError, match=f"port {port} on 127.0.0.1 is already in use"
        ):
            mon.serve(port=port)
        assert isinstance(fl.MonitorServerError("x"), fl.FlodlError)
        url = mon.serve(port=0)
        assert int(urlsplit(url).port) not in (0, port)
        mon.close()


def test_close_ends_streams_frees_the_port_and_leaves_no_threads(sse):
    before = set(threading.enumerate())
    mon = fl.Monitor(3, stream=None)
    mon.serve(port=0)
    port = mon._server.port
    log_epochs(mon, 0, 1)
    clients = [sse(mon.url) for _ in range(3)]
    for c in clients:
        c.take(1)
    idle = socket.create_connection(("127.0.0.1", port))  # connected, never sends a request
    mon.close()
    for c in clients:
        assert list(c.events()) == []  # stream ended cleanly, no hang
        c.close()
    idle.close()
    assert [t for t in threading.enumerate() if t not in before] == []
    mon.close()  # idempotent
    again = fl.Monitor(1, stream=None)  # the port is free for the next run
    assert again.serve(port=port).endswith(f":{port}")
    again.close()


def test_dashboard_started_mid_run_shows_earlier_epochs(sse):
    mon = fl.Monitor(4, stream=None)
    log_epochs(mon, 0, 2)
    mon.serve(port=0)
    try:
        client = sse(mon.url)
        assert [e.json["epoch"] for e in client.take(2)] == [1, 2]
        client.close()
    finally:
        mon.close()


def test_graph_and_metadata_updates_are_pushed_as_meta_events(served, sse, graph_cls):
    graph = graph_cls(label="net")
    client = sse(served.url)
    served.watch(graph)
    served.set_metadata({"lr": 0.1})
    events = client.take(2)
    assert [e.event for e in events] == ["meta", "meta"]
    assert events[0].json["label"] == "net"
    assert events[0].json["graph"] == {"kind": "svg", "version": 1}
    assert events[1].json["meta"]["lr"] == 0.1
    served.finish_with(graph)  # takes a fresh SVG at the end
    assert request(served.url, "/graph.svg")[2].endswith(b"net v2</text></svg>")
    client.close()


def test_server_rejects_a_bad_host_clearly():
    with pytest.raises(fl.MonitorServerError, match="cannot serve the dashboard on"):
        DashboardServer(lambda: ("", ""), host="256.0.0.1", port=0)


def test_non_finite_values_anywhere_never_break_the_stream_or_the_archive(served, sse, tmp_path):
    served.add_rank_resources(1, {"cpu": float("nan"), "rss": 10})  # as received from a rank
    served.log(0, float("inf"), {"loss": float("nan")})
    served.set_metadata({"best": float("-inf")})
    client = sse(served.url)
    epoch, meta = client.take(2)
    assert epoch.json["ranks"]["1"] == {"cpu": None, "rss": 10}
    assert epoch.json["duration"] is None and epoch.json["metrics"] == {"loss": None}
    assert meta.json["meta"]["best"] == "-inf"
    client.close()
    assert "flodl-boot" in served.save_html(tmp_path / "r.html").read_text()


def test_finishing_twice_sends_one_complete_event(served, sse):
    log_epochs(served, 0, 1)
    served.finish()
    served.finish()
    events = list(sse(served.url).events())
    assert [e.event for e in events] == ["epoch", "complete"]


def test_max_clients_is_what_the_user_gets_and_the_page_is_always_served(sse, tiny_graph):
    """Every stream slot taken (past the old hidden cap of 64): one more stream is refused, but
    the page, the history and the graph are still answered."""
    mon = fl.Monitor(2, stream=None)
    try:
        mon.serve(port=0, max_clients=70)
        mon.watch(tiny_graph)
        log_epochs(mon, 0, 1)
        held = [sse(mon.url, timeout=30) for _ in range(70)]
        assert {c.response.status for c in held} == {200}
        assert wait_for(lambda: mon._server.active_streams == 70)
        status, headers, body = request(mon.url, "/events")
        assert (status, headers["Retry-After"]) == (503, "5") and b"too many" in body
        for _ in range(20):  # the page never waits for a stream slot
            assert request(mon.url, "/")[0] == 200
            assert json.loads(request(mon.url, "/api/history")[2])[0]["epoch"] == 1
            assert request(mon.url, "/graph.svg")[0] == 200
        held.pop().close()
        assert wait_for(lambda: mon._server.active_streams == 69)
        again = sse(mon.url)
        assert again.response.status == 200
        assert [e.event for e in again.take(2)] == ["meta", "epoch"]
        for c in [*held, again]:
            c.close()
    finally:
        mon.close()


def test_max_clients_must_be_positive():
    mon = fl.Monitor(1, stream=None)
    with pytest.raises(fl.MonitorServerError, match="max_clients=0"):
        mon.serve(port=0, max_clients=0)
    mon.close()


def test_half_open_sockets_do_not_lock_out_the_page_and_time_out(sse, monkeypatch):
    """70 connections that send nothing and 70 that dribble half a request (slow-loris) hold
    no thread: the page, the history and a stream are served at once; each is dropped after its
    own header timeout."""
    monkeypatch.setattr(server_module, "HEAD_TIMEOUT_SECS", 1.0)
    mon = fl.Monitor(2, stream=None)
    sockets: list[socket.socket] = []
    try:
        mon.serve(port=0, max_clients=4)
        log_epochs(mon, 0, 1)
        port = mon._server.port
        for k in range(140):
            s = socket.create_connection(("127.0.0.1", port), timeout=10)
            if k % 2:
                s.sendall(b"GET / HTTP/1.1\r\nHost: local")  # never finished
            sockets.append(s)
        assert request(mon.url, "/")[0] == 200
        assert request(mon.url, "/api/history")[0] == 200
        client = sse(mon.url)
        assert client.response.status == 200 and client.take(1)[0].json["epoch"] == 1
        for s in sockets:  # the server hangs up on each (a bounded wait: the socket timeout)
            assert s.recv(1) == b""
        assert client.response.status == 200
        log_epochs(mon, 1, 2)
        assert client.take(1)[0].json["epoch"] == 2  # the stream was not a casualty
        client.close()
    finally:
        for s in sockets:
            s.close()
        mon.close()


SERVE_WITH_FEW_DESCRIPTORS = """
import resource, sys
import flodl as fl
mon = fl.Monitor(3, stream=None, gpu=False)
print(mon.serve(port=0), flush=True)
mon.log(0, 0.1, {"loss": 1.0})
used = len(__import__("os").listdir("/proc/self/fd"))
resource.setrlimit(resource.RLIMIT_NOFILE, (used + 24, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
print("limited", flush=True)
sys.stdin.readline()
"""


@pytest.mark.slow  # a subprocess importing torch
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/fd")
def test_out_of_descriptors_the_oldest_half_open_socket_makes_room_for_the_page():
    proc = subprocess.Popen(
        [sys.executable, "-c", SERVE_WITH_FEW_DESCRIPTORS],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=clean_env(),
    )
    guard = threading.Timer(120, proc.kill)
    guard.start()
    idle: list[socket.socket] = []
    try:
        url = proc.stdout.readline().strip()
        assert proc.stdout.readline().strip() == "limited"
        port = int(urlsplit(url).port)
        for _ in range(60):  # more half-open sockets than the server has descriptors left
            idle.append(socket.create_connection(("127.0.0.1", port), timeout=10))
        status, _, body = request(url, "/api/history")
        assert status == 200 and json.loads(body)[0]["epoch"] == 1
        assert request(url, "/")[0] == 200
    finally:
        for s in idle:
            s.close()
        guard.cancel()
        proc.kill()
        proc.wait()


@pytest.mark.slow  # waits out the slow-client deadline while 26 MB stream to the other client
def test_a_client_that_stops_reading_is_dropped_and_others_keep_up(sse, monkeypatch):
    monkeypatch.setattr(server_module, "SLOW_CLIENT_SECS", 3.0)
    mon = fl.Monitor(2, stream=None)
    try:
        mon.serve(port=0)
        server = mon._server
        stuck = socket.socket()
        stuck.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        stuck.connect(("127.0.0.1", server.port))
        stuck.sendall(b"GET /events HTTP/1.1\r\nHost: localhost\r\n\r\n")  # then never reads
        reader = sse(mon.url, timeout=30)
        assert wait_for(lambda: server.active_streams == 2)
        blob = "x" * 65536

        def publish() -> None:  # 26 MB: far more than the stuck client's socket buffers hold
            for k in range(400):
                server.log.publish("epoch", {"epoch": k + 1, "blob": blob})

        publisher = threading.Thread(target=publish)
        publisher.start()
        got = [e.json["epoch"] for e in reader.take(400)]  # read while it is published
        publisher.join()
        assert got == list(range(1, 401))  # the reader got everything, in order
        assert wait_for(lambda: server.active_streams == 1)  # the stuck one was dropped
        reader.close()
        stuck.close()
    finally:
        mon.close()


def test_malformed_and_oversized_requests_get_clear_status_codes(served):
    port = served._server.port

    def raw(data: bytes) -> bytes:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(data)
            chunks = []
            while chunk := s.recv(65536):
                chunks.append(chunk)
            return b"".join(chunks)

    assert raw(b"HELLO\r\n\r\n").startswith(b"HTTP/1.1 400 ")
    huge = b"GET / HTTP/1.1\r\nHost: localhost\r\nX-Pad: " + b"a" * 40_000 + b"\r\n\r\n"
    assert raw(huge).startswith(b"HTTP/1.1 431 ")
    assert raw(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n").startswith(b"HTTP/1.1 200 OK")


def test_a_client_that_half_closes_after_its_request_still_gets_the_whole_answer(served):
    """``printf 'GET …' | nc -N``: the request, then end-of-file, then the answer is read."""
    blob = "x" * 65536
    for k in range(100):  # a 6.5 MB history: more than the socket buffers hold at once
        served._server.log.publish("epoch", {"epoch": k + 1, "blob": blob})
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.settimeout(30)
        s.connect(("127.0.0.1", served._server.port))
        s.sendall(b"GET /api/history HTTP/1.1\r\nHost: localhost\r\n\r\n")
        s.shutdown(socket.SHUT_WR)
        time.sleep(0.3)  # the server sees the end-of-file while most of the answer is unsent
        answer = b"".join(iter(lambda: s.recv(1 << 20), b""))
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 OK")
    assert [e["epoch"] for e in json.loads(body)] == list(range(1, 101))


def test_a_client_that_half_closes_while_the_timeline_renders_still_gets_the_page(served):
    release = threading.Event()

    def slow_page() -> tuple[str, str]:
        release.wait(10)  # the client's end-of-file arrives while the page is made
        return "<p>timeline</p>", "nonce"

    served._server.timeline_page = slow_page
    with socket.socket() as s:
        s.settimeout(30)
        s.connect(("127.0.0.1", served._server.port))
        s.sendall(b"GET /timeline.html HTTP/1.0\r\nHost: localhost\r\n\r\n")
        s.shutdown(socket.SHUT_WR)
        assert wait_for(lambda: len(served._server._renders) == 1)
        time.sleep(0.3)  # the server reads the end-of-file (it used to drop the client here)
        release.set()
        answer = b"".join(iter(lambda: s.recv(1 << 16), b""))
    assert answer.startswith(b"HTTP/1.1 200 OK")
    assert answer.endswith(b"<p>timeline</p>")
    assert request(served.url, "/api/history")[0] == 200  # the loop goes on serving


SERVE_AND_LEAVE = """
import sys
import flodl as fl
mon = fl.Monitor(3, stream=None)
print(mon.serve(port=0), flush=True)
mon.log(0, 0.1, {"loss": 1.0})
sys.stdin.readline()  # the test connects an SSE client, then lets the script end
print("leaving without close()", flush=True)
"""


@pytest.mark.slow  # a subprocess importing torch
def test_a_script_that_never_closes_the_monitor_still_exits_with_a_client_connected(sse):
    proc = subprocess.Popen(
        [sys.executable, "-c", SERVE_AND_LEAVE],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=clean_env(),
    )
    guard = threading.Timer(120, proc.kill)  # a hang fails the test below instead of the suite
    guard.start()
    try:
        url = proc.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:"), proc.stderr.read()
        client = sse(url, timeout=60)
        assert [e.json["epoch"] for e in client.take(1)] == [1]
        proc.stdin.write("\n")
        proc.stdin.flush()
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        assert out == "leaving without close()\n"
        assert "Traceback" not in err and "Exception" not in err  # no thread dying at exit
        assert list(client.events()) == []  # the stream ended; the client is not left hanging
        client.close()
    finally:
        guard.cancel()
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.slow  # a few thousand SSE reconnects
def test_clients_joining_resetting_and_resuming_while_epochs_publish(sse):
    """Every client, however often its connection drops, sees each epoch exactly once."""
    epochs, clients = 150, 8
    before = set(threading.enumerate())
    mon = fl.Monitor(epochs, stream=None)
    mon.serve(port=0)
    seen: dict[int, list[int]] = {}
    failures: list[BaseException] = []

    def follow(k: int) -> None:
        rng = random.Random(k)
        epochs_seen: list[int] = []
        last_id = None  # None: a new tab (full replay); else a browser resuming
        deadline = time.monotonic() + 120
        try:
            while time.monotonic() < deadline:
                client = sse(mon.url, last_event_id=last_id, timeout=30)
                if client.response.status == 503:  # dead streams not noticed yet: retry
                    client.close()
                    time.sleep(0.01)
                    continue
                budget, complete = rng.randint(1, 12), False
                for event in client.events():
                    last_id = event.id
                    if event.event == "epoch":
                        epochs_seen.append(event.json["epoch"])
                    complete = event.event == "complete"
                    budget -= 1
                    if complete or budget == 0:
                        break
                if rng.random() < 0.5:  # vanish abruptly: the TCP connection is reset
                    client.response.fp.raw._sock.setsockopt(
                        socket.SOL_SOCKET, socket.SO_LINGER, b"\1\0\0\0\0\0\0\0"
                    )
                client.close()
                if complete:
                    break
        except BaseException as err:
            failures.append(err)
        seen[k] = epochs_seen

    threads = [threading.Thread(target=follow, args=(k,)) for k in range(clients)]
    try:
        for k, thread in enumerate(threads):
            thread.start()
            if k == clients // 2:
                log_epochs(mon, 0, epochs // 2)  # the other half joins mid-run
        for epoch in range(epochs // 2, epochs):
            log_epochs(mon, epoch, epoch + 1)
            time.sleep(0.001)  # let readers interleave with the publisher
        mon.finish()
        for thread in threads:
            thread.join(150)
        assert not any(t.is_alive() for t in threads), "a client never saw the end"
        assert failures == []
        expected = list(range(1, epochs + 1))
        for k in range(clients):
            assert seen[k] == expected, f"client {k}: gaps or duplicates"
        assert wait_for(lambda: mon._server.active_streams == 0)
    finally:
        mon.close()
    assert [t for t in threading.enumerate() if t not in before and t.is_alive()] == []


def test_watching_a_real_graph_serves_its_svg(served):
    if shutil.which("dot") is None:
        require("graphviz", "Graphviz's dot is not on PATH (apt-get install graphviz)")
    graph = (
        fl.FlowBuilder(torch.nn.Linear(4, 8))
        .through(torch.nn.ReLU())
        .through(torch.nn.Linear(8, 1))
        .label("regressor")
        .build()
    )
    served.watch(graph)
    status, headers, body = request(served.url, "/graph.svg")
    assert status == 200 and headers["Content-Type"] == "image/svg+xml"
    svg = body.decode()
    assert "<svg" in svg and "linear_1" in svg and "relu_2" in svg
    assert request(served.url, "/graph.html")[0] == 404  # the SVG is there: no fallback
    boot = page_boot(served.url)
    assert (boot["label"], boot["hash"]) == ("regressor", graph.structural_hash())
    assert boot["graph"] == {"kind": "svg", "version": 1}
    assert boot["meta"]["parameters"] == {"total": 49, "trainable": 49, "frozen": 0}


def test_without_graphviz_the_dashboard_shows_the_html_view(served, monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # no `dot` anywhere: Graphviz is not installed
    graph = fl.FlowBuilder(torch.nn.Linear(2, 3)).through(torch.nn.ReLU()).label("mlp").build()
    served.watch(graph)
    assert request(served.url, "/graph.svg")[0] == 404
    status, headers, body = request(served.url, "/graph.html")
    assert status == 200 and headers["Content-Type"] == "text/html; charset=utf-8"
    assert "sandbox" in headers["Content-Security-Policy"]  # opened directly, still inert
    assert body.decode() == graph.html_view()
    assert page_boot(served.url)["graph"] == {"kind": "html", "version": 1}
    archive = boot_in(served.save_html(tmp_path / "report.html").read_bytes())
    assert archive["svg"] is None and archive["graph_html"] == graph.html_view()

    served.set_svg("<svg xmlns='http://www.w3.org/2000/svg'/>")  # an SVG, once there, wins
    assert request(served.url, "/graph.html")[0] == 404
    assert page_boot(served.url)["graph"] == {"kind": "svg", "version": 2}


def test_a_failing_request_is_a_flodl_monitor_warning_and_the_dashboard_goes_on(
    served, monkeypatch, caplog
):
    real = DashboardServer._ready
    failed = threading.Event()

    def ready(self, conn, mask):
        if not failed.is_set():
            failed.set()
            raise RuntimeError("handler bug")
        return real(self, conn, mask)

    monkeypatch.setattr(DashboardServer, "_ready", ready)
    with caplog.at_level("WARNING", logger="flodl.monitor"):
        with pytest.raises((ConnectionError, http.client.HTTPException)):
            request(served.url, "/api/history")  # dropped by the failing handler
        assert wait_for(lambda: any("handler bug" in r.getMessage() for r in caplog.records))
    assert request(served.url, "/api/history")[0] == 200  # the next request is served
    record = next(r for r in caplog.records if "handler bug" in r.getMessage())
    assert record.name == "flodl.monitor" and record.levelname == "WARNING"
    assert record.getMessage().startswith("dashboard request failed: RuntimeError")
