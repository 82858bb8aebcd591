"""The live dashboard over real loopback HTTP: routes, SSE backfill, resume, limits, shutdown."""

from __future__ import annotations

import http.client
import json
import socket
import threading
from urllib.parse import urlsplit

import pytest

import flodl as fl
from flodl.monitor.server import DashboardServer


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


def test_serve_binds_loopback_by_default_and_reports_the_url(served):
    assert served._server.host == "127.0.0.1"
    assert served.url == f"http://localhost:{served._server.port}"


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
    assert events[0].json["label"] == "net" and events[0].json["graph"] == 1
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
