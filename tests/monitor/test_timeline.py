"""fl.monitor.Timeline: sampling, events, idle gaps, summaries, exports, the Monitor's dashboard."""

from __future__ import annotations

import csv
import http.client
import json
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest

import flodl as fl
from flodl.monitor import timeline as tlmod
from flodl.monitor.timeline import GpuTimelineSample, Timeline, TimelineSample
from tests import fake_nvml

FIXTURE = Path(__file__).parent / "fixtures" / "fake_nvml.c"


def wait_for_samples(tl: Timeline, n: int, limit: float = 10.0) -> None:
    deadline = time.monotonic() + limit
    while len(tl.samples) < n and time.monotonic() < deadline:
        time.sleep(0.01)


def gpu_samples(utils: list[int], step_ms: float = 100.0) -> list[TimelineSample]:
    return [
        TimelineSample(i * step_ms, 50.0, 10**9, 8 * 10**9, (GpuTimelineSample(0, u, 2, 1, 8),))
        for i, u in enumerate(utils)
    ]


def test_start_samples_in_the_background_and_stop_ends_it():
    tl = Timeline(poll_interval_ms=5, gpu=False)
    assert not tl.running and tl.samples == []
    assert tl.start() is tl and tl.start() is tl  # idempotent
    wait_for_samples(tl, 3)
    tl.stop()
    tl.stop()
    count = len(tl.samples)
    assert count >= 3 and not tl.running
    time.sleep(0.05)
    assert len(tl.samples) == count  # nothing after stop
    s = tl.samples[-1]
    assert 0 <= s.cpu_pct <= 100 and 0 < s.ram_used < s.ram_total and s.gpus == ()
    times = [x.t_ms for x in tl.samples]
    assert times == sorted(times)


def test_library_events_reach_started_timelines_only():
    tlmod.emit("sync_start", mode="graph")  # nobody listening: nothing, no error
    with Timeline(poll_interval_ms=50, gpu=False) as a:
        tlmod.emit("sync_start", mode="graph")
        tlmod.emit("sync_end", mode="graph", duration_ms=2.5)
    tlmod.emit("sync_start", mode="graph")  # after stop: not recorded
    assert [e.kind for e in a.events] == ["sync_start", "sync_end"]
    assert a.events[1].data == {"mode": "graph", "duration_ms": 2.5}
    assert a.events[0].rank is None  # a single process


def test_event_validation():
    tl = Timeline(gpu=False)
    with pytest.raises(fl.MonitorError, match="lower_snake_case"):
        tl.event("Sync Start")
    with pytest.raises(fl.MonitorError, match="JSON values"):
        tl.event("custom", value=object())
    with pytest.raises(fl.MonitorError, match="at least 1 ms"):
        Timeline(poll_interval_ms=0)
    ev = tl.event("custom", label="warmup done", step=3)
    assert tl.events == [ev] and ev.data == {"label": "warmup done", "step": 3}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"poll_interval_ms": float("nan")}, r"poll_interval_ms=nan\): need a finite number"),
        ({"poll_interval_ms": float("inf")}, r"poll_interval_ms=inf\): need a finite number"),
        ({"poll_interval_ms": 1e300}, "need a finite number"),  # beyond what a thread can wait
        ({"poll_interval_ms": -5}, "at least 1 ms"),
        ({"max_samples": -1}, r"max_samples=-1\): need an int >= 0"),
        ({"max_samples": 10.0}, r"max_samples=10.0\): need an int >= 0"),
        ({"max_events": True}, r"max_events=True\): need an int >= 0"),
    ],
)
def test_a_bad_interval_or_bound_is_refused_by_the_constructor(kwargs, message):
    # nan once busy-looped the sampler (and stop() raised), inf killed it while `running` said
    # True, a negative bound was deque's bare ValueError.
    with pytest.raises(fl.MonitorError, match=message):
        Timeline(gpu=False, **kwargs)


def test_numpy_numbers_are_an_interval_and_bounds():
    import numpy as np

    tl = Timeline(poll_interval_ms=np.float32(50), max_samples=np.int64(3), gpu=False)
    assert tl.poll_interval_ms == 50.0 and tl._samples.maxlen == 3
    with pytest.raises(fl.MonitorError, match="need a number"):
        Timeline(poll_interval_ms="50", gpu=False)  # was a bare TypeError


def test_non_finite_event_data_is_kept_and_exported_as_null_by_both_exports(tmp_path):
    # The Trainer's epoch_end of a diverged run carries loss=nan: save_json once raised on it.
    tl = Timeline(gpu=False).start()
    try:
        tlmod.emit("epoch_end", epoch=0, loss=float("nan"))
        mine = tl.event("probe", value=float("inf"), nested=[float("-inf"), 1.0])  # one rule
    finally:
        tl.stop()
    assert mine.data["value"] == float("inf")
    loss = tl.events_of("epoch_end")[0].data["loss"]
    assert loss != loss  # NaN, kept in memory
    data = json.loads(tl.save_json(tmp_path / "t.json").read_text())
    saved = {e["kind"]: e["data"] for e in data["events"]}
    assert saved == {
        "epoch_end": {"epoch": 0, "loss": None},
        "probe": {"value": None, "nested": [None, 1.0]},
    }
    page = tl.save_html(tmp_path / "t.html").read_text()
    embedded = re.search(r'id="timeline-data">(.*?)</script>', page, re.S)
    assert embedded is not None
    assert {e["kind"]: e["data"] for e in json.loads(embedded[1])["events"]} == saved


def test_idle_gaps_as_the_original_defines_them():
    tl = Timeline(gpu=False)
    utils = [80] * 5 + [2] * 10 + [80] * 5  # idle from sample 5 to 14
    tl._samples.extend(gpu_samples(utils))
    assert tl.idle_gaps(0, 5, 500) == [(500.0, 1500.0)]  # ends at the first busy sample
    assert tl.idle_gaps(0, 5, 1001) == []  # shorter than min_ms
    assert tl.idle_gaps(1, 5, 0) == []  # no such device: never idle
    trailing = Timeline(gpu=False)
    trailing._samples.extend(gpu_samples([80, 1, 1, 1]))
    assert trailing.idle_gaps(0, 5, 100) == [(100.0, 300.0)]  # closed at the last sample


def test_summary_counts_events_and_idle_share():
    tl = Timeline(gpu=False)
    tl._samples.extend(gpu_samples([0, 0, 50, 90]))
    tl.event("sync_start")
    tl.event("sync_end", duration_ms=2.0)
    tl.event("sync_start")
    tl.event("sync_end", duration_ms=4.0)
    tl.event("anchor_changed", **{"from": 10, "to": 12})
    tl.event("epoch_end", epoch=0, loss=0.5)
    s = tl.summary()
    assert (s.sync_count, s.avg_sync_ms, s.anchor_change_count, s.epoch_count) == (2, 3.0, 1, 1)
    assert s.gpu_idle_pct == {0: 50.0} and s.sample_count == 4 and s.event_count == 6
    assert "2 syncs, 3.0 ms on average" in str(s)


def test_forwarded_events_land_at_the_time_they_happened():
    tl = Timeline(gpu=False)
    now = time.time()
    tl.add_events([{"wall": now + 1.0, "kind": "sync_end", "rank": 1, "data": {"duration_ms": 1}}])
    tl.add_events([{"wall": now, "kind": "sync_start", "rank": 1, "data": {}}])
    events = tl.events
    assert [e.kind for e in events] == ["sync_start", "sync_end"]
    assert events[1].t_ms - events[0].t_ms == pytest.approx(1000.0, abs=1.0)


def test_exports_json_csv_and_a_self_contained_html_page(tmp_path):
    tl = Timeline(gpu=False)
    tl._samples.extend(gpu_samples([80, 1]))
    tl.event("epoch_end", epoch=0, loss=0.25)
    data = json.loads(tl.save_json(tmp_path / "t.json").read_text())
    assert [s["t"] for s in data["samples"]] == [0.0, 100.0]
    assert data["samples"][1]["gpus"] == [{"d": 0, "u": 1, "vu": 2, "va": 1, "vt": 8}]
    assert data["events"][0]["kind"] == "epoch_end" and data["events"][0]["data"]["loss"] == 0.25
    rows = list(csv.reader(tl.save_csv(tmp_path / "t.csv").open()))
    assert rows[0] == [
        "elapsed_ms", "cpu_pct", "ram_used", "ram_total",
        "gpu0_util", "gpu0_vram_alloc", "gpu0_vram_used", "gpu0_vram_total",
    ]  # fmt: skip
    assert rows[2] == ["100.0", "50.0", "1000000000", "8000000000", "1", "1", "2", "8"]
    page = tl.save_html(tmp_path / "t.html").read_text()
    assert "Content-Security-Policy" in page and "epoch_end" in page
    assert not re.search(r'(src|href)="(?!data:)', page)  # nothing to fetch: opens offline
    assert not list(tmp_path.glob(".*.tmp"))


@pytest.mark.slow  # a subprocess importing torch
def test_nvml_samples_per_device_with_a_fake_driver(tmp_path, repo_root):
    driver = fake_nvml.build(FIXTURE, tmp_path)
    code = (
        "import json, time, flodl as fl\n"
        "tl = fl.monitor.Timeline(poll_interval_ms=10).start()\n"
        "time.sleep(0.3); tl.stop()\n"
        "print(json.dumps({'gpus': tl.samples[-1].to_json()['gpus'],\n"
        "  'gaps': [tl.idle_gaps(d, 70, 0) for d in (0, 1)], 'n': len(tl.samples)}))\n"
    )
    env = {"LD_LIBRARY_PATH": str(driver), "PYTHONPATH": str(repo_root), "PATH": "/usr/bin:/bin"}
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert [(g["d"], g["u"]) for g in report["gpus"]] == [(0, 87), (1, 64)]
    assert report["gpus"][0]["vt"] == 24152899584
    assert report["gaps"][0] == [] and len(report["gaps"][1]) == 1  # GPU1 is under 70% throughout


def test_a_user_sync_end_without_a_duration_never_breaks_the_end_of_the_run(tmp_path):
    """A user's sync_end marker with no (or no usable) duration_ms counts as a sync event, is
    left out of the mean, and neither finish() nor the timeline pages fail on it."""
    mon = fl.Monitor(1, stream=None, gpu=False)
    url = mon.serve(port=0)
    tl = mon.attach_timeline(poll_interval_ms=10)
    tl.event("sync_end", note="x")
    tl.event("sync_end", duration_ms="slow")
    tl.event("sync_end", duration_ms=10**400)
    tl.event("sync_end", duration_ms=6.0)
    summary = tl.summary()
    assert summary.kinds["sync_end"] == 4 and summary.avg_sync_ms == 6.0
    assert _get(url, "/timeline.html")[0] == 200
    mon.save_html(tmp_path / "run.html")
    mon.log(0, 0.1, {"loss": 1.0})
    mon.finish()  # used to raise KeyError: no complete event, no timeline page
    assert "sync_end 4" in (tmp_path / "run.timeline.html").read_text()
    history = _get(url, "/events")[1]  # the stream ends: the run is complete
    assert "event: complete" in history
    mon.close()


def test_the_live_timeline_title_follows_the_label_and_the_archive_links_its_page(tmp_path):
    mon = fl.Monitor(1, stream=None, gpu=False)
    url = mon.serve(port=0)
    mon.attach_timeline(poll_interval_ms=10)
    mon.set_identity(label="resnet")  # named after the timeline was attached
    assert "<title>flodl resnet — Timeline</title>" in _get(url, "/timeline.html")[1]
    report = mon.save_html(tmp_path / "run.html")  # mid-run: the linked page exists already
    assert '"timeline_page":"run.timeline.html"' in report.read_text()
    assert "flodl resnet — Timeline" in (tmp_path / "run.timeline.html").read_text()
    mon.close()


def _get(url: str, path: str) -> tuple[int, str, dict[str, str]]:
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=5)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        return resp.status, resp.read().decode(), dict(resp.getheaders())
    finally:
        conn.close()


def test_monitor_owns_a_timeline_shows_it_and_archives_it(tmp_path):
    mon = fl.Monitor(2, stream=None, gpu=False)
    url = mon.serve(port=0)
    assert _get(url, "/timeline.html")[0] == 404  # no timeline yet
    tl = mon.attach_timeline(poll_interval_ms=10)
    assert mon.timeline is tl and tl.running
    tl.event("epoch_end", epoch=0, loss=1.0)
    status, page, headers = _get(url, "/timeline.html")
    assert status == 200 and "epoch_end" in page
    assert "nonce-" in headers["Content-Security-Policy"]
    assert '"timeline":true' in _get(url, "/")[1]  # the page links to it
    mon.save_html(tmp_path / "run.html")
    mon.log(0, 0.1, {"loss": 1.0})
    mon.finish()
    assert "epoch_end" in (tmp_path / "run.timeline.html").read_text()
    mon.close()
    assert not tl.running  # the monitor's own timeline stops with it


def _sampling_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "flodl-timeline" and t.is_alive()]


def test_attaching_twice_keeps_one_timeline_and_close_leaves_no_sampling_thread():
    before = set(_sampling_threads())
    mon = fl.Monitor(2, stream=None, gpu=False)
    first = mon.attach_timeline(poll_interval_ms=10)
    assert mon.attach_timeline() is first and first.running  # the same, still sampling
    assert len(set(_sampling_threads()) - before) == 1
    mine = Timeline(poll_interval_ms=10, gpu=False)
    assert mon.attach_timeline(mine) is mine and mon.timeline is mine
    assert not first.running  # replaced: the monitor's own one stopped
    mon.close()
    assert mine.running  # a given one is its owner's
    with pytest.raises(fl.MonitorError, match="the monitor is closed"):
        mon.attach_timeline()  # not the timeline attached before the close
    mine.stop()
    deadline = time.monotonic() + 5
    while set(_sampling_threads()) - before and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not set(_sampling_threads()) - before


def test_a_given_timeline_is_started_and_left_to_its_owner():
    mine = Timeline(poll_interval_ms=50, gpu=False)
    mon = fl.Monitor(1, stream=None, gpu=False)
    assert mon.attach_timeline(mine) is mine and mine.running
    mon.close()
    assert mine.running
    mine.stop()
