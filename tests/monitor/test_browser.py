"""The dashboard in real headless Chromium: charts draw, live updates, late join, archive, no XSS.

Needs Debian's ``chromium`` (.ci/run installs it) and the ``playwright`` Python package; Playwright's
own browser download is never used. Screenshots go to $FLODL_ARTIFACTS (or the test's tmp dir).
"""

from __future__ import annotations

import os
import shutil
import socket
import time
from pathlib import Path

import pytest
import torch

import flodl as fl
from flodl.monitor import GpuSnapshot, ResourceSample
from tests.conftest import require

pytestmark = [pytest.mark.browser, pytest.mark.slow]

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]
# a metric name and a graph label that would run script if the page ever parsed them as HTML
HOSTILE = "<img src=x onerror=alert(1)>"
WAIT_MS = 30_000  # a hang guard: the page normally updates within milliseconds
GiB = 1024**3


class TinyRun:
    """A real (small) training run: a FlowBuilder regressor, MSE, Adam with a decaying lr.

    Each epoch logs the graph itself, so the monitor reads the metrics the graph recorded and
    flushed: ``loss`` (mean over batches), ``lr``, and a hit rate under a hostile name.
    """

    def __init__(self, label: str = HOSTILE) -> None:
        torch.manual_seed(0)
        self.model = (
            fl.FlowBuilder(torch.nn.Linear(4, 16))
            .through(torch.nn.Tanh())
            .through(torch.nn.Linear(16, 1))
            .label(label)
            .build()
        )
        self.opt = torch.optim.Adam(self.model.parameters(), lr=0.05)
        self.schedule = torch.optim.lr_scheduler.ExponentialLR(self.opt, gamma=0.8)
        self.x = torch.randn(256, 4)
        self.y = (self.x @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]])).sin()

    def epoch(self, mon: fl.Monitor, epoch: int) -> None:
        started = time.perf_counter()
        for xb, yb in zip(self.x.split(32), self.y.split(32), strict=True):
            loss = torch.nn.functional.mse_loss(self.model(xb), yb)
            self.opt.zero_grad()
            loss.backward()
            self.opt.step()
            self.model.record_scalar("loss", loss)
        self.model.record_scalar("lr", self.opt.param_groups[0]["lr"])
        with torch.no_grad():
            hits = (self.model(self.x) - self.y).abs().lt(0.25).float().mean()
        self.model.record_scalar(HOSTILE, hits)
        self.model.flush()
        self.schedule.step()
        mon.log(epoch, time.perf_counter() - started, self.model)


@pytest.fixture(scope="module")
def browser():
    try:
        from playwright import sync_api
    except ImportError as err:
        require("browser", f"the playwright package is not installed ({err})")
    if not Path(CHROMIUM).exists():
        require("browser", "chromium is not installed (apt-get install chromium)")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()


@pytest.fixture
def artifacts(tmp_path) -> Path:
    root = Path(os.environ.get("FLODL_ARTIFACTS", tmp_path))
    root.mkdir(parents=True, exist_ok=True)
    return root


def open_page(browser, url: str):
    page = browser.new_page(viewport={"width": 1280, "height": 1000})
    problems: list[str] = []
    page.on(
        "console", lambda m: problems.append(m.text) if m.type in ("error", "warning") else None
    )
    page.on("pageerror", lambda e: problems.append(str(e)))
    page.on("dialog", lambda d: (problems.append("dialog: " + d.message), d.dismiss()))
    page.goto(url)
    return page, problems


def inked_pixels(page, selector: str) -> int:
    """How many pixels of a canvas are drawn on (0 for a blank chart)."""
    return page.eval_on_selector(
        selector,
        """c => { const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
                  let n = 0; for (let i = 3; i < d.length; i += 4) if (d[i] > 0) n++; return n; }""",
    )


def chart(page, selector: str) -> tuple[int, str]:
    """(points drawn, the picture) of a chart canvas."""
    return (
        int(page.get_attribute(selector, "data-points")),
        page.eval_on_selector(selector, "c => c.toDataURL()"),
    )


def rows(n: int) -> str:
    return f"() => document.querySelectorAll('#epoch-table tbody tr').length === {n}"


def screenshot(page, path: Path) -> None:
    page.screenshot(path=str(path), full_page=True)
    with open(path, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    assert path.stat().st_size > 10_000  # a page, not an empty canvas


def test_live_dashboard_follows_a_real_training_run(browser, artifacts):
    run = TinyRun()
    mon = fl.Monitor(8, stream=None)
    mon.serve(port=0)
    mon.watch(run.model)
    mon.set_metadata({"optimizer": "Adam", "note": HOSTILE})
    loss_chart = "canvas[data-metric='loss']"
    try:
        for epoch in range(3):
            run.epoch(mon, epoch)
        page, problems = open_page(browser, mon.url)
        page.wait_for_function(rows(3), timeout=WAIT_MS)
        assert page.text_content("#epoch-counter") == "Epoch 3/8"
        assert page.text_content("#status-text") == "Training"
        assert page.text_content("#run-label") == HOSTILE  # the label shown as text
        titles = page.eval_on_selector_all(
            "#metric-charts h3", "els => els.map(e => e.textContent)"
        )
        assert titles == ["loss", "lr", HOSTILE]  # the hostile name shown as text
        shown_loss = page.text_content(f"{loss_chart} >> xpath=.. >> .last")
        assert shown_loss == f"{mon.history[-1].metrics['loss']:.4f}"  # the real, flushed loss
        points, picture = chart(page, loss_chart)
        assert points == 3 and inked_pixels(page, loss_chart) > 0

        run.epoch(mon, 3)  # a new epoch reaches the open page...
        page.wait_for_function(
            f"() => document.querySelector(\"{loss_chart}\").dataset.points === '4'",
            timeout=WAIT_MS,
        )
        page.wait_for_function(rows(4), timeout=WAIT_MS)
        assert page.text_content("#epoch-counter") == "Epoch 4/8"
        assert page.text_content("#epoch-table tbody tr td") == "4/8"  # newest first
        assert chart(page, loss_chart)[1] != picture  # ...and the chart is redrawn with it

        for epoch in range(4, 6):
            run.epoch(mon, epoch)
        late, late_problems = open_page(browser, mon.url)  # joins mid-run: the whole history
        late.wait_for_function(rows(6), timeout=WAIT_MS)
        assert chart(late, loss_chart)[0] == 6
        assert inked_pixels(late, "#chart-resources") > 0
        if shutil.which("dot"):
            graph = "#graph-img"
            late.wait_for_function(
                "() => { const i = document.getElementById('graph-img');"
                " return i.complete && i.naturalWidth > 0; }",
                timeout=WAIT_MS,
            )
        else:  # no Graphviz here: the HTML tree view stands in
            graph = "#graph-frame"
        assert late.is_visible(graph)
        screenshot(late, artifacts / "monitor-live.png")

        for epoch in range(6, 8):
            run.epoch(mon, epoch)
        mon.finish()
        for p in (page, late):
            p.wait_for_function(
                "() => document.getElementById('status-text').textContent.startsWith('Complete')",
                timeout=WAIT_MS,
            )
            # the table is drawn on the next animation frame, after the status changes
            p.wait_for_function(rows(8), timeout=WAIT_MS)
            assert p.text_content("#epoch-counter") == "Epoch 8/8"
            assert p.evaluate("() => document.querySelector('img[src=x]') === null")
        losses = [r.metrics["loss"] for r in mon.history]
        assert losses[-1] < losses[0]  # it really trained
        assert problems == [] and late_problems == []
    finally:
        mon.close()


def test_per_rank_resources_show_one_bar_per_rank(browser):
    run = TinyRun(label="ranked")
    mon = fl.Monitor(2, stream=None)
    mon.serve(port=0)
    try:
        mon.add_rank_resources(0, mon.sample_resources())  # this process: no GPU here
        for rank in (1, 2, 3):  # the others, as they arrive over the wire (to_json dicts)
            gpu = GpuSnapshot(
                0,
                "NVIDIA L4",
                util_percent=20.0 * rank,
                vram_reserved=rank * GiB,
                vram_total=8 * GiB,
            )
            sample = ResourceSample(cpu_percent=10.0 * rank, rss=rank << 28, gpus=(gpu,))
            mon.add_rank_resources(rank, sample.to_json())
        run.epoch(mon, 0)
        page, problems = open_page(browser, mon.url)
        page.wait_for_function(
            "() => document.querySelectorAll('#resource-bars [data-rank]').length > 0",
            timeout=WAIT_MS,
        )
        bars = page.eval_on_selector_all(
            "#resource-bars [data-rank]",
            """els => els.map(e => [e.dataset.rank, e.querySelector('.name').textContent,
                                    e.querySelector('.val').textContent,
                                    e.querySelector('.track div').style.width])""",
        )
        assert [b[:2] for b in bars] == [[str(r), f"rank {r}"] for r in range(4)]
        assert bars[0][2].startswith("CPU ")  # the real sample of this process
        assert [b[2] for b in bars[1:]] == [
            "CPU 10%  GPU 20%  VRAM 1.0 GB",
            "CPU 20%  GPU 40%  VRAM 2.0 GB",
            "CPU 30%  GPU 60%  VRAM 3.0 GB",
        ]
        assert [b[3] for b in bars[1:]] == ["12.5%", "25%", "37.5%"]  # VRAM share of the device
        assert problems == []
    finally:
        mon.close()


def test_without_graphviz_the_graph_card_shows_the_html_view(browser, monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # no `dot`: Graphviz is not installed
    run = TinyRun(label="no-graphviz")
    mon = fl.Monitor(1, stream=None)
    mon.serve(port=0)
    try:
        mon.watch(run.model)
        run.epoch(mon, 0)
        page, problems = open_page(browser, mon.url)
        page.wait_for_function(rows(1), timeout=WAIT_MS)
        view = page.frame_locator("#graph-frame").locator("body")
        view.locator("text=linear_1").wait_for(timeout=WAIT_MS)
        assert "no-graphviz" in view.locator("h1").text_content()
        assert page.is_visible("#graph-frame") and not page.is_visible("#graph-img")
        mon.finish()
        report = mon.save_html(tmp_path / "report.html")
        offline, offline_problems = open_page(browser, report.as_uri())
        offline.frame_locator("#graph-frame").locator("text=linear_1").wait_for(timeout=WAIT_MS)
        assert problems == [] and offline_problems == []
    finally:
        mon.close()


def test_archive_opens_offline_with_the_same_charts(browser, artifacts, tmp_path):
    run = TinyRun()
    mon = fl.Monitor(5, stream=None)
    for epoch in range(5):
        run.epoch(mon, epoch)
    mon.save_html(tmp_path / "report.html")
    mon.finish()
    page, problems = open_page(browser, (tmp_path / "report.html").as_uri())
    page.wait_for_function(rows(5), timeout=WAIT_MS)
    assert page.text_content("#status-text").startswith("Complete (")
    assert page.text_content("#mode") == "archived report"
    assert chart(page, "canvas[data-metric='lr']")[0] == 5
    assert inked_pixels(page, f"canvas[data-metric='{HOSTILE}']") > 0
    assert page.evaluate("() => document.querySelector('img[src=x]') === null")
    screenshot(page, artifacts / "monitor-archive.png")
    assert problems == []


def test_axis_labels_never_repeat_and_match_the_python_rules(browser, artifacts, tmp_path):
    from flodl.monitor.axis import axis_ticks
    from tests.monitor.axis_cases import ranges

    mon = fl.Monitor(6, stream=None)
    for epoch in range(6):  # the ranges that used to read "1s / 1s / 1s" and "1% / 1% / 0%"
        metrics = {"acc %": 0.3 + 0.18 * epoch, "tiny": 2.5e-5 + 3e-6 * epoch}
        mon.log(epoch, 1.0 + 0.01 * epoch, metrics)
    mon.finish()
    page, problems = open_page(browser, mon.save_html(tmp_path / "report.html").as_uri())
    page.wait_for_function(rows(6), timeout=WAIT_MS)
    drawn = dict(
        page.eval_on_selector_all(
            "canvas", "cs => cs.map(c => [c.dataset.metric || c.id, c.dataset.yLabels])"
        )
    )
    assert set(drawn) == {"acc %", "tiny", "chart-duration", "chart-resources"}
    for name, text in drawn.items():
        labels = text.split("|")
        assert len(labels) >= 2 and len(set(labels)) == len(labels), (name, labels)
    assert all(label.endswith("s") for label in drawn["chart-duration"].split("|"))
    assert drawn["chart-resources"] == "0%|50%|100%"
    screenshot(page, artifacts / "monitor-axis-labels.png")
    # the page's JavaScript gives exactly the Python rules' ticks and labels, over 3000 ranges
    # plus the extremes of a finite float (subnormal values, a span past the largest float)
    extremes = [(1e-310, 3e-310), (-1e308, 1e308), (5e-324, 1e-323)]
    cases = ranges() + [(lo, hi, kind) for lo, hi in extremes for kind in ("value", "percent")]
    in_browser = page.evaluate(
        "cs => cs.map(([lo, hi, kind]) => window.flodlDashboard.axisTicks(lo, hi, kind, 4))", cases
    )
    expected = [[[value, label] for value, label in axis_ticks(*case)] for case in cases]
    mismatched = [
        (c, js, py) for c, js, py in zip(cases, in_browser, expected, strict=True) if js != py
    ]
    assert mismatched == [], mismatched[:3]
    assert problems == []


def test_timeline_page_draws_offline_and_from_the_dashboard(browser, artifacts, tmp_path):
    mon = fl.Monitor(2, stream=None)
    url = mon.serve(port=0)
    timeline = mon.attach_timeline(poll_interval_ms=10)
    run = TinyRun()
    for epoch in range(2):
        timeline.event("sync_start", mode="builder")
        run.epoch(mon, epoch)
        timeline.event("sync_end", mode="builder", duration_ms=3.0)
        timeline.event("custom", label=HOSTILE)  # data is text on the page, never markup
    page, problems = open_page(browser, url)
    page.wait_for_selector("#timeline-link:not([hidden])", timeout=WAIT_MS)
    live, live_problems = open_page(browser, url.rstrip("/") + "/timeline.html")
    assert inked_pixels(live, "#lanes") > 0
    assert live_problems == [] and problems == []
    timeline.stop()
    saved = timeline.save_html(tmp_path / "timeline.html")
    offline, offline_problems = open_page(browser, saved.as_uri())
    assert inked_pixels(offline, "#lanes") > 0
    assert offline.evaluate("() => document.querySelector('img[src=x]') === null")
    assert "sync_end 2" in offline.text_content("table")
    screenshot(offline, artifacts / "timeline.png")
    assert offline_problems == []
    mon.close()


def real_problems(problems: list[str]) -> list[str]:
    """Problems besides the browser's own report of a refused connection (a stopped server)."""
    return [p for p in problems if not p.startswith("Failed to load resource")]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def status_starts(text: str) -> str:
    return f"() => document.getElementById('status-text').textContent.startsWith({text!r})"


def test_a_tab_left_open_says_the_server_is_gone_then_shows_each_next_run_alone(browser):
    port = free_port()
    first = fl.Monitor(10, stream=None)
    second = fl.Monitor(3, stream=None)
    third = fl.Monitor(2, stream=None)
    try:
        first.serve(port=port)
        first.set_identity(label="run-a")
        first.set_metadata({"note": "the first run"})
        for epoch in range(3):
            first.log(epoch, 0.1, {"a_loss": 1.0 / (epoch + 1)})
        page, problems = open_page(browser, first.url)
        page.wait_for_function(rows(3), timeout=WAIT_MS)
        first.close()  # the script ended (or crashed) without finish()
        page.wait_for_function(status_starts("Disconnected — the training"), timeout=WAIT_MS)
        stopped = page.text_content("#elapsed")
        page.wait_for_timeout(1500)
        assert page.text_content("#elapsed") == stopped  # the clock stopped with the server

        second.serve(port=port)  # the script restarted on the same port
        second.set_identity(label="run-b")
        for epoch in range(2):
            second.log(epoch, 0.1, {"b_loss": 9.0 - epoch})
        page.wait_for_function(
            "() => document.getElementById('epoch-counter').textContent === 'Epoch 2/3'",
            timeout=WAIT_MS,
        )
        page.wait_for_function(rows(2), timeout=WAIT_MS)
        titles = page.eval_on_selector_all(
            "#metric-charts h3", "els => els.map(e => e.textContent)"
        )
        assert titles == ["b_loss"]  # nothing left of the first run
        assert page.text_content("#epoch-table tbody tr td") == "2/3"
        page.wait_for_function(
            "() => document.getElementById('run-label').textContent === 'run-b'", timeout=WAIT_MS
        )
        assert page.is_hidden("#meta-card")  # the first run's configuration is gone
        assert page.text_content("#status-text") == "Training"
        second.finish()
        page.wait_for_function(status_starts("Complete"), timeout=WAIT_MS)
        second.close()

        # A tab that saw its run finish follows the next run on the port too (it needed a
        # reload: its stream was closed for good).
        third.serve(port=port)
        third.set_identity(label="run-c")
        third.log(0, 0.1, {"c_loss": 0.5})
        page.wait_for_function(
            "() => document.getElementById('run-label').textContent === 'run-c'", timeout=WAIT_MS
        )
        page.wait_for_function(rows(1), timeout=WAIT_MS)
        assert page.text_content("#status-text") == "Training"
        titles = page.eval_on_selector_all(
            "#metric-charts h3", "els => els.map(e => e.textContent)"
        )
        assert titles == ["c_loss"]
        assert real_problems(problems) == []
    finally:
        first.close()
        second.close()
        third.close()


def test_a_tab_refused_past_max_clients_connects_once_a_slot_frees(browser):
    mon = fl.Monitor(5, stream=None)
    try:
        mon.serve(port=0, max_clients=1)
        first, first_problems = open_page(browser, mon.url)
        first.wait_for_function(status_starts("Waiting"), timeout=WAIT_MS)
        second, _ = open_page(browser, mon.url)  # 503: the one stream slot is taken
        second.wait_for_function(status_starts("Reconnecting"), timeout=WAIT_MS)
        mon.log(0, 0.1, {"loss": 1.0})
        first.wait_for_function(rows(1), timeout=WAIT_MS)
        first.close()  # the slot frees; the refused tab tries again by itself
        second.wait_for_function(rows(1), timeout=WAIT_MS)
        mon.log(1, 0.1, {"loss": 0.5})
        second.wait_for_function(rows(2), timeout=WAIT_MS)  # and it is live, not a one-off
        assert second.text_content("#status-text") == "Training"
        assert first_problems == []
    finally:
        mon.close()


def test_awkward_metric_values_and_names_live_archived_and_on_a_phone(browser, tmp_path):
    """NaN as the latest value; names that are Object.prototype members, missing from some
    epochs; subnormal and ±1e308 values (axes that used to hang or stay blank); large values in
    exponent form; and no sideways scrolling at 360 px."""
    proto = {"constructor": 0.25, "toString": 0.5, "valueOf": 0.75, "__proto__": 1.0}
    mon = fl.Monitor(4, stream=None)
    try:
        mon.serve(port=0)
        mon.log(0, 0.1, {"loss": 1.0, "tiny": 1e-310, "huge": -1e308, "big": 1.1e10})
        mon.log(1, 0.1, {"loss": 0.5, "tiny": 2e-310, "huge": 0.0, "big": 1.15e10, **proto})
        mon.log(2, 0.1, {"loss": float("nan"), "tiny": 3e-310, "huge": 1e308, "big": 1.2e10})
        report = mon.save_html(tmp_path / "report.html")
        live, live_problems = open_page(browser, mon.url)
        archive, archive_problems = open_page(browser, report.as_uri())
        for page in (live, archive):
            page.wait_for_function(rows(3), timeout=WAIT_MS)
            shown = dict(
                page.eval_on_selector_all(
                    "#metric-charts .card",
                    "cs => cs.map(c => [c.querySelector('h3').textContent,"
                    " [c.querySelector('.last').textContent, c.querySelector('.last').className,"
                    " c.querySelector('canvas').dataset.yLabels]])",
                )
            )
            assert list(shown) == ["loss", "tiny", "huge", "big", *proto]
            assert shown["loss"][:2] == ["NaN", "last bad"]  # not the last finite 0.5000
            assert shown["big"][0] == "1.20e10"  # as the axis writes it
            assert shown["constructor"][0] == "0.2500" and shown["__proto__"][0] == "1.0000"
            for name in ("tiny", "huge"):
                assert len(shown[name][2].split("|")) >= 2, (name, shown[name])
            cells = page.eval_on_selector_all(
                "#epoch-table tbody tr", "rs => rs.map(r => [...r.cells].map(c => c.textContent))"
            )
            assert [row[2] for row in cells] == ["NaN", "0.5000", "1.0000"]  # loss, newest first
            assert [row[6] for row in cells] == ["", "0.2500", ""]  # constructor: epoch 2 only
        assert live_problems == [] and archive_problems == []

        phone = browser.new_page(viewport={"width": 360, "height": 800})
        phone.goto(report.as_uri())
        phone.wait_for_function(rows(3), timeout=WAIT_MS)
        width = phone.evaluate(
            "() => [document.documentElement.scrollWidth, document.documentElement.clientWidth]"
        )
        assert width[0] <= width[1], width  # no horizontal scroll
    finally:
        mon.close()


def test_a_long_run_shows_its_newest_epochs_until_asked_for_all(browser, tmp_path):
    mon = fl.Monitor(600, stream=None)
    for epoch in range(600):
        mon.log(epoch, 0.01, {"loss": 1.0 / (epoch + 1)})
    page, problems = open_page(browser, mon.save_html(tmp_path / "report.html").as_uri())
    page.wait_for_function(rows(500), timeout=WAIT_MS)
    assert page.text_content("#epoch-table tbody tr td") == "600/600"  # the newest first
    assert page.text_content("#table-more") == "Show all 600 epochs"
    page.click("#table-more")
    page.wait_for_function(rows(600), timeout=WAIT_MS)
    assert page.is_hidden("#table-more")
    assert problems == []
    mon.close()


def test_the_reports_timeline_link_reaches_a_file_named_with_url_characters(browser, tmp_path):
    # "run:1" was read as a URL scheme, "#" "?" "%" as a fragment, query and escape
    from flodl.monitor.timeline import Timeline, TimelineSample

    timeline = Timeline(60, gpu=False)
    timeline._samples.extend(TimelineSample(i * 1.0, 50.0, 8 << 30, 16 << 30, ()) for i in range(5))
    mon = fl.Monitor(1, stream=None, gpu=False)
    try:
        mon.attach_timeline(timeline)
        timeline.stop()
        mon.log(0, 0.1, {"loss": 1.0})
        report = mon.save_html(tmp_path / "run:1 #2?50%.html")
        assert (tmp_path / "run:1 #2?50%.timeline.html").exists()
        page, problems = open_page(browser, report.as_uri())
        page.wait_for_function(rows(1), timeout=WAIT_MS)
        href = page.eval_on_selector("#timeline-link", "a => a.href")
        lanes, lanes_problems = open_page(browser, href)
        lanes.wait_for_function("() => document.getElementById('lanes').dataset.timeLabels")
        assert problems == [] and lanes_problems == []
    finally:
        mon.close()


def test_a_long_timeline_draws_with_its_own_event_kinds_and_is_linked_from_the_report(
    browser, tmp_path
):
    """150,000 samples (past what a Math.max(...spread) takes) over 2.5 hours, a custom event
    kind, and the report's link to its timeline page."""
    from flodl.monitor.timeline import GpuTimelineSample, Timeline, TimelineSample

    timeline = Timeline(60, gpu=False)
    gpu = (GpuTimelineSample(0, 90, 1 << 30, None, 4 << 30),)
    timeline._samples.extend(
        TimelineSample(i * 60.0, 50.0, 8 << 30, 16 << 30, gpu) for i in range(150_000)
    )
    timeline._receive(timeline._wall0 + 4000.0, "eval_done", None, {"acc": 0.9})
    mon = fl.Monitor(1, stream=None, gpu=False)
    try:
        mon.attach_timeline(timeline)
        timeline.stop()
        mon.log(0, 0.1, {"loss": 1.0})
        report = mon.save_html(tmp_path / "run.html")
        page, problems = open_page(browser, report.as_uri())
        page.wait_for_function(rows(1), timeout=WAIT_MS)
        assert page.is_visible("#timeline-link")
        assert page.get_attribute("#timeline-link", "href") == "./run.timeline.html"
        lanes, lanes_problems = open_page(browser, (tmp_path / "run.timeline.html").as_uri())
        lanes.wait_for_function("() => document.getElementById('lanes').dataset.timeLabels")
        assert inked_pixels(lanes, "#lanes") > 0
        legend = lanes.eval_on_selector_all("#legend span", "ss => ss.map(s => s.textContent)")
        assert any(item.endswith("eval_done") for item in legend), legend
        labels = lanes.get_attribute("#lanes", "data-time-labels").split("|")
        assert labels[0] == "0h 00m" and labels[-1] == "2h 30m", labels
        assert problems == [] and lanes_problems == []
    finally:
        mon.close()
