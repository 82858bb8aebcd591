"""The dashboard in real headless Chromium: charts draw, live updates, late join, archive, no XSS.

Needs Debian's ``chromium`` (.ci/run installs it) and the ``playwright`` Python package; Playwright's
own browser download is never used. Screenshots go to $FLODL_ARTIFACTS (or the test's tmp dir).
"""

from __future__ import annotations

import math
import os
import shutil
from pathlib import Path

import pytest

import flodl as fl
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
HOSTILE = '<img src=x onerror="window.__pwned=1">'
WAIT_MS = 15_000


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


def log(mon: fl.Monitor, epoch: int) -> None:
    mon.log(
        epoch,
        0.02,
        {"loss": 2 * math.exp(-epoch / 4), "val.acc": 1 - math.exp(-epoch / 3), HOSTILE: 1.0},
    )


def inked_pixels(page, selector: str) -> int:
    """How many pixels of a canvas are drawn on (0 for a blank chart)."""
    return page.eval_on_selector(
        selector,
        """c => { const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
                  let n = 0; for (let i = 3; i < d.length; i += 4) if (d[i] > 0) n++; return n; }""",
    )


def test_live_dashboard_updates_and_late_join_backfills(browser, artifacts, graph_cls):
    mon = fl.Monitor(8, stream=None)
    mon.serve(port=0)
    mon.watch(graph_cls(label=HOSTILE))
    mon.set_metadata({"lr": 0.01, "note": HOSTILE})
    try:
        for epoch in range(3):
            log(mon, epoch)
        page, problems = open_page(browser, mon.url)
        page.wait_for_function(
            "() => document.querySelectorAll('#epoch-table tbody tr').length === 3", timeout=WAIT_MS
        )
        assert page.text_content("#epoch-counter") == "Epoch 3/8"
        assert page.text_content("#status-text") == "Training"
        titles = page.eval_on_selector_all(
            "#metric-charts h3", "els => els.map(e => e.textContent)"
        )
        assert titles == ["loss", "val.acc", HOSTILE]  # the hostile name shown as text
        before = inked_pixels(page, "canvas[data-metric='loss']")
        assert before > 0

        log(mon, 3)  # a new epoch reaches the open page
        page.wait_for_function(
            "() => document.querySelectorAll('#epoch-table tbody tr').length === 4", timeout=WAIT_MS
        )
        assert page.text_content("#epoch-counter") == "Epoch 4/8"
        assert page.text_content("#epoch-table tbody tr td") == "4/8"  # newest first

        for epoch in range(4, 6):
            log(mon, epoch)
        late, late_problems = open_page(browser, mon.url)  # joins mid-run: the whole history
        late.wait_for_function(
            "() => document.querySelectorAll('#epoch-table tbody tr').length === 6", timeout=WAIT_MS
        )
        assert inked_pixels(late, "#chart-resources") > 0
        assert late.is_visible("#graph-img")
        late.screenshot(path=str(artifacts / "monitor-live.png"), full_page=True)

        for epoch in range(6, 8):
            log(mon, epoch)
        mon.finish()
        for p in (page, late):
            p.wait_for_function(
                "() => document.getElementById('status-text').textContent.startsWith('Complete')",
                timeout=WAIT_MS,
            )
            # the table is drawn on the next animation frame, after the status changes
            p.wait_for_function(
                "() => document.querySelectorAll('#epoch-table tbody tr').length === 8",
                timeout=WAIT_MS,
            )
            assert p.text_content("#epoch-counter") == "Epoch 8/8"
            assert p.evaluate("() => window.__pwned === undefined")
        graph_ok = late.eval_on_selector(
            "#graph-img", "img => img.complete && img.naturalWidth > 0"
        )
        assert graph_ok
        assert problems == [] and late_problems == []
    finally:
        mon.close()


def test_archive_opens_offline_with_the_same_charts(browser, artifacts, tmp_path):
    mon = fl.Monitor(5, stream=None)
    for epoch in range(5):
        log(mon, epoch)
    mon.save_html(tmp_path / "report.html")
    mon.finish()
    page, problems = open_page(browser, (tmp_path / "report.html").as_uri())
    page.wait_for_function(
        "() => document.querySelectorAll('#epoch-table tbody tr').length === 5", timeout=WAIT_MS
    )
    assert page.text_content("#status-text").startswith("Complete (")
    assert page.text_content("#mode") == "archived report"
    assert inked_pixels(page, "canvas[data-metric='val.acc']") > 0
    assert page.evaluate("() => window.__pwned === undefined")
    page.screenshot(path=str(artifacts / "monitor-archive.png"), full_page=True)
    assert problems == []
