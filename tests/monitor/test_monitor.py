"""Monitor behaviour a user relies on: what it prints, what it accepts, what it writes."""

from __future__ import annotations

import csv
import importlib
import io
import json
import logging
import re
from html.parser import HTMLParser

import pytest
import torch

import flodl as fl
from flodl.monitor.page import render_page

monitor_module = importlib.import_module("flodl.monitor.monitor")

HOSTILE = [
    '</script><script>alert("x")</script>',
    "<img src=x onerror=alert(1)>",
    "{{SCRIPT}}",
    "a\u2028b",
    "quote\"'`${x}",
    "<!--",
]
RESOURCE_COLUMNS = [
    "cpu_pct",
    "ram_used",
    "ram_total",
    "rss",
    "gpu_pct",
    "vram_alloc",
    "vram_total",
]


class TTY(io.StringIO):
    def isatty(self) -> bool:
        return True


def quiet(n: int = 3, **kw) -> fl.Monitor:
    return fl.Monitor(n, stream=None, **kw)


def test_one_line_per_epoch_then_the_summary(monkeypatch):
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    out = io.StringIO()
    mon = fl.Monitor(3, stream=out)
    for epoch in range(3):
        mon.log(epoch, 0.25, {"loss": 1.0 / (epoch + 1), "lr": 1e-4})
    mon.finish()
    mon.close()
    lines = out.getvalue().splitlines()
    assert len(lines) == 4
    assert re.fullmatch(
        r"  epoch 1/3  loss=1\.0000  lr=1\.00e-4  \[250ms  ETA \S+\]  CPU: \d+%  RSS: .+", lines[0]
    )
    assert re.fullmatch(
        r"  epoch 3/3  loss=0\.3333  lr=1\.00e-4  \[250ms\]  CPU: \d+%  RSS: .+", lines[2]
    )
    assert re.fullmatch(r"  training complete in \S+  \| loss: 0\.3333  \| lr: 1\.00e-4", lines[3])
    assert "\x1b" not in out.getvalue()  # not a TTY: no control codes


def test_color_on_a_tty_unless_no_color(monkeypatch):
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm")
    tty = TTY()
    fl.Monitor(1, stream=tty).log(0, 0.1, {"loss": 1.0})
    assert "\x1b[" in tty.getvalue()

    monkeypatch.setenv("NO_COLOR", "1")
    tty = TTY()
    fl.Monitor(1, stream=tty).log(0, 0.1, {"loss": 1.0})
    assert "\x1b" not in tty.getvalue()

    monkeypatch.delenv("NO_COLOR")
    monkeypatch.setenv("FORCE_COLOR", "1")
    piped = io.StringIO()
    fl.Monitor(1, stream=piped).log(0, 0.1, {"loss": 1.0})
    assert "\x1b[" in piped.getvalue()


def test_default_stream_is_stdout_at_call_time(capsys):
    mon = fl.Monitor(1)
    mon.log(0, 0.1, {"loss": 2.0})
    assert "epoch 1/1  loss=2.0000" in capsys.readouterr().out
    mon.close()


def test_metrics_from_a_graph_tensors_and_numbers(graph_cls):
    mon = quiet()
    graph = graph_cls(metrics={"enc.loss": 0.5, "head.acc": 0.25})
    assert mon.log(0, 0.1, graph).metrics == {"enc.loss": 0.5, "head.acc": 0.25}
    record = mon.log(1, 0.1, {"loss": torch.tensor(0.75), "n": 3, "flag": True})
    assert record.metrics == {"loss": 0.75, "n": 3.0, "flag": 1.0}
    assert [r.epoch for r in mon.history] == [0, 1]


def test_non_finite_values_are_kept_and_become_null_in_json():
    mon = quiet()
    record = mon.log(0, 0.1, {"loss": float("nan"), "grad": float("inf")})
    assert json.dumps(record.to_json(), allow_nan=False)
    assert record.to_json()["metrics"] == {"loss": None, "grad": None}
    # which null was which, for the page to show "NaN" / "inf" rather than a stale value
    assert record.to_json()["nonfinite"] == {"loss": "NaN", "grad": "inf"}
    assert "nonfinite" not in mon.log(1, 0.1, {"loss": -1.0}).to_json()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((-1, 0.1, {}), "epoch must be a zero-based int"),
        ((1.0, 0.1, {}), "epoch must be a zero-based int"),
        ((0, "fast", {}), "elapsed must be the epoch's duration in seconds"),
        ((0, -5.0, {"loss": 1.0}), r"a number >= 0, got -5\.0"),
        ((0, float("nan"), {"loss": 1.0}), "a number >= 0, got nan"),
        ((0, 0.1, {"big": 10**400}), "metric 'big' is an int too large for a float"),
        ((0, 0.1, [("loss", 1.0)]), "metrics must be a mapping"),
        ((0, 0.1, {"loss": "low"}), "metric 'loss' must be a number"),
        ((0, 0.1, {"loss": torch.ones(3)}), "metric 'loss' is a tensor with 3 elements"),
        ((0, 0.1, {1: 1.0}), "metric names must be strings"),
    ],
)
def test_bad_input_is_a_clear_error_and_records_nothing(args, message):
    mon = quiet()
    with pytest.raises(fl.MonitorError, match=message):
        mon.log(*args)
    assert mon.history == []


def test_log_times_the_epoch_when_elapsed_is_omitted(graph_cls):
    import time

    mon = quiet()
    time.sleep(0.05)  # "the first epoch": timed from the Monitor's creation
    first = mon.log(0, {"loss": 1.0})
    assert first.duration >= 0.05
    before = time.monotonic()
    time.sleep(0.02)
    second = mon.log(1, graph_cls())  # a graph works in the two-argument form too
    after = time.monotonic()
    assert 0.02 <= second.duration <= after - before + 1e-6  # since the previous log, not before
    assert second.metrics == {"loss": 1.0, "enc.acc": 0.5}
    third = mon.log(2, 0.25, graph_cls())  # the explicit three-argument form keeps working
    assert third.duration == 0.25
    mon.close()


def test_log_keywords_and_a_missing_metrics_argument():
    mon = quiet()
    assert mon.log(0, metrics={"loss": 1.0}).metrics == {"loss": 1.0}
    assert mon.log(1, elapsed=2.0, metrics={"loss": 0.5}).duration == 2.0
    with pytest.raises(fl.MonitorError, match=r"no metrics — call mon.log\(epoch, "):
        mon.log(2, 0.5)
    assert [r.epoch for r in mon.history] == [0, 1]  # nothing added by the failed call
    mon.close()


@pytest.mark.parametrize(
    ("start", "epoch", "message"),
    [
        (0, 3, r"epoch 3 is outside \[0, 3\) .* epochs are zero-based"),
        (0, 7, r"epoch 7 is outside \[0, 3\) .* pass num_epochs"),
        (2, 1, r"epoch 1 is outside \[2, 3\) \(Monitor\(num_epochs=3, start_epoch=2\)\)"),
    ],
)
def test_an_epoch_outside_the_run_is_an_error_that_records_nothing(start, epoch, message):
    out = io.StringIO()
    mon = fl.Monitor(3, start_epoch=start, stream=out)
    with pytest.raises(fl.MonitorError, match=message):
        mon.log(epoch, 0.1, {"loss": 1.0})
    assert mon.history == [] and out.getvalue() == ""  # no line, no record
    mon.log(2, 0.1, {"loss": 1.0})  # the last epoch of the run is fine
    assert "epoch 3/3" in out.getvalue()
    mon.close()


def test_metrics_logged_again_for_an_epoch_are_merged_into_its_row(tmp_path):
    import time
    import urllib.request

    out = io.StringIO()
    mon = fl.Monitor(3, stream=out)
    url = mon.serve(port=0)
    mon.log(0, 0.5, {"loss": 1.0})
    mon.log(0, {"val_loss": 1.2})  # after validation, Lightning-style; the given time stays
    assert mon.history[0].metrics == {"loss": 1.0, "val_loss": 1.2}
    assert mon.history[0].duration == 0.5
    trained = mon.log(1, {"loss": 0.5}).duration
    time.sleep(0.03)
    merged = mon.log(1, {"val_loss": 0.6, "loss": 0.4})  # timed: the epoch runs to this call
    assert merged.metrics == {"loss": 0.4, "val_loss": 0.6}  # a name logged again: the later
    assert merged.duration >= trained + 0.03
    assert [r.epoch for r in mon.history] == [0, 1]

    with pytest.raises(
        fl.MonitorError, match=r"epoch 0 comes after epoch 1 was logged .* in order"
    ):
        mon.log(0, 0.1, {"loss": 9.0})
    assert [r.metrics["loss"] for r in mon.history] == [1.0, 0.4]  # nothing recorded

    lines = out.getvalue().splitlines()
    assert "  epoch 2/3  loss=0.4000  val_loss=0.6000  [" in lines[-1]  # the merged line
    rows = list(csv.reader(mon.export_csv(tmp_path / "run.csv").open()))
    assert [r[:2] + r[3:5] for r in rows] == [
        ["epoch", "duration_s", "loss", "val_loss"],
        ["1", "0.500000", "1.0", "1.2"],
        ["2", f"{merged.duration:.6f}", "0.4", "0.6"],
    ]
    text = mon.write_log(tmp_path / "run.log").read_text().splitlines()
    assert [line for line in text if line.startswith("epoch")][1].startswith(
        "epoch 2/3  loss=0.4000  val_loss=0.6000"
    )
    history = json.load(urllib.request.urlopen(url + "/api/history", timeout=5))
    assert [(e["epoch"], e["metrics"]) for e in history] == [
        (1, {"loss": 1.0, "val_loss": 1.2}),
        (2, {"loss": 0.4, "val_loss": 0.6}),
    ]
    mon.finish()
    assert out.getvalue().splitlines()[-1].endswith("| loss: 0.4000  | val_loss: 0.6000")
    mon.close()


def test_start_epoch_must_lie_in_the_run():
    with pytest.raises(fl.MonitorError, match=r"start_epoch must lie in \[0, num_epochs\]"):
        fl.Monitor(3, start_epoch=4)
    fl.Monitor(3, start_epoch=3, stream=None).close()  # a finished run resumed: nothing to log


def test_bad_num_epochs():
    with pytest.raises(fl.MonitorError, match="positive integer"):
        fl.Monitor(0)


def test_csv_has_every_metric_that_ever_appeared(tmp_path):
    mon = quiet(3)
    mon.log(0, 0.5, {"loss": 1.0})
    mon.log(1, 0.5, {"loss": 0.5, "val,acc": 0.8})  # appears later; a comma in the name
    mon.log(2, 0.5, {"val,acc": 0.9, "loss": float("nan")})
    path = mon.export_csv(tmp_path / "run.csv")
    rows = list(csv.reader(path.open()))
    assert rows[0][:5] == ["epoch", "duration_s", "elapsed_s", "loss", "val,acc"]
    assert rows[0][5:] == RESOURCE_COLUMNS
    assert [r[0] for r in rows[1:]] == ["1", "2", "3"]
    assert rows[1][3:5] == ["1.0", ""]
    assert rows[2][3:5] == ["0.5", "0.8"]
    assert rows[3][3:5] == ["nan", "0.9"]
    assert int(rows[1][6]) > 0 and rows[1][9] == ""  # RAM known, no GPU here


def test_csv_of_an_empty_run_has_the_header(tmp_path):
    rows = list(csv.reader(quiet().export_csv(tmp_path / "e.csv").open()))
    assert rows == [["epoch", "duration_s", "elapsed_s", *RESOURCE_COLUMNS]]


def test_text_log(tmp_path):
    mon = quiet(10)
    mon.log(0, 1.5, {"loss": 0.25})
    text = mon.write_log(tmp_path / "run.log").read_text()
    lines = text.splitlines()
    assert lines[:2] == ["# flodl training log", "epoch  1/10  loss=0.2500  [1.5s]"]
    assert lines[2].startswith("# total: ")


class ScriptsAndBoot(HTMLParser):
    """Collects every <script> element (attributes and text) of a page."""

    def __init__(self) -> None:
        super().__init__()
        self.scripts: list[tuple[dict[str, str | None], str]] = []
        self._current: dict[str, str | None] | None = None
        self.tags: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        if tag == "script":
            self._current = dict(attrs)
            self.scripts.append((self._current, ""))

    def handle_data(self, data):
        if self._current is not None:
            attrs, text = self.scripts[-1]
            self.scripts[-1] = (attrs, text + data)

    def handle_endtag(self, tag):
        if tag == "script":
            self._current = None


def boot_of(page: str) -> dict:
    parser = ScriptsAndBoot()
    parser.feed(page)
    # exactly the two scripts of the template: a hostile name cannot open or close one
    assert [attrs.get("type") for attrs, _ in parser.scripts] == ["application/json", None]
    benign = ScriptsAndBoot()
    benign.feed(render_page({"mode": "live"}, title="t")[0])
    assert parser.tags == benign.tags  # the same elements as a harmless page: nothing injected
    return json.loads(parser.scripts[0][1])


def test_archive_is_self_contained_and_escapes_hostile_names(tmp_path, graph_cls):
    mon = quiet(len(HOSTILE))
    graph = graph_cls(label=HOSTILE[1], metrics=dict.fromkeys(HOSTILE, 1.0))
    mon.watch(graph)
    mon.set_metadata({"note": HOSTILE[0], "path": tmp_path})
    for epoch in range(2):
        mon.log(epoch, 0.1, graph)
    path = mon.save_html(tmp_path / "report.html")
    page = path.read_text()
    assert "http://" not in page and "https://" not in page  # no CDN, nothing remote
    boot = boot_of(page)
    assert boot["mode"] == "archive" and boot["complete"] is None
    assert list(boot["history"][0]["metrics"]) == HOSTILE
    assert boot["label"] == HOSTILE[1]
    assert boot["meta"]["note"] == HOSTILE[0] and boot["meta"]["path"] == str(tmp_path)
    assert boot["svg"].startswith("data:image/svg+xml;base64,")
    assert f"<title>flodl {HOSTILE[1]}" not in page  # the title is escaped too

    mon.finish()  # rewrites the archive with the final state
    final = boot_of(path.read_text())
    assert final["complete"]["text"].startswith("Complete (")


def test_a_run_ended_by_an_error_says_failed_where_and_why_everywhere(tmp_path, sse):
    out = io.StringIO()
    mon = fl.Monitor(5, stream=out)
    url = mon.serve(port=0)
    archive = mon.save_html(tmp_path / "report.html")
    for epoch in range(2):
        mon.log(epoch, 0.1, {"loss": 1.0})
    mon.finish(error=ValueError("NaN loss in batch 7\nsecond line"))
    mon.finish()  # the first call decided how the run ended
    last = out.getvalue().splitlines()[-2]  # then "saved: ..."
    assert re.fullmatch(
        r"  training failed at epoch 3/5 after \S+ \(ValueError: NaN loss in batch 7\)"
        r"  \| loss: 1\.0000",
        last,
    )
    assert "training complete" not in out.getvalue()
    ended = boot_of(archive.read_text())["complete"]
    assert ended["status"] == "failed" and ended["error"] == "ValueError: NaN loss in batch 7"
    assert re.fullmatch(
        r"Failed at epoch 3/5 \(\S+\): ValueError: NaN loss in batch 7", ended["text"]
    )
    client = sse(url)
    events = list(client.events())
    client.close()
    assert [e.event for e in events] == ["epoch", "epoch", "complete"]
    assert events[-1].json == ended
    mon.close()


def test_ctrl_c_says_interrupted_and_a_with_block_left_by_an_exception_says_failed(tmp_path):
    out = io.StringIO()
    mon = fl.Monitor(4, stream=out)
    mon.log(0, 0.1, {"loss": 1.0})
    mon.finish(error=KeyboardInterrupt())
    assert re.fullmatch(
        r"  training interrupted at epoch 2/4 after \S+  \| loss: 1\.0000",
        out.getvalue().splitlines()[-1],
    )
    mon.close()

    out = io.StringIO()
    # The exception goes on unchanged.
    with pytest.raises(RuntimeError, match=r"^disk on fire$"), fl.Monitor(2, stream=out) as mon:
        archive = mon.save_html(tmp_path / "report.html")
        mon.log(0, 0.1, {"loss": 1.0})
        mon.log(1, 0.1, {"loss": 0.5})
        raise RuntimeError("disk on fire")  # after the last epoch, before finish()
    assert (
        out.getvalue()
        .splitlines()[-2]
        .startswith("  training failed at the end of epoch 2/2 after ")
    )
    assert boot_of(archive.read_text())["complete"]["status"] == "failed"
    assert mon.url is None  # and it closed

    with fl.Monitor(2, stream=None) as mon:  # a block that ends normally finishes nothing
        mon.log(0, 0.1, {"loss": 1.0})
    assert mon._finished_at is None


def test_a_failed_archive_rewrite_is_a_logged_warning_whatever_the_stream(tmp_path, caplog):
    directory = tmp_path / "reports"
    directory.mkdir()
    mon = quiet(1)
    mon.save_html(directory / "report.html")
    mon.log(0, 0.1, {"loss": 1.0})
    (directory / "report.html").unlink()
    directory.rmdir()  # the archive's directory is gone when finish() rewrites it
    with caplog.at_level(logging.WARNING, logger="flodl.monitor"):
        mon.finish()  # does not raise: the run's end is not spoiled by its report
    warned = [r for r in caplog.records if r.name == "flodl.monitor"]
    assert len(warned) == 1 and warned[0].levelno == logging.WARNING
    assert "could not rewrite the dashboard archive" in warned[0].getMessage()
    assert str(directory / "report.html") in warned[0].getMessage()
    mon.close()


def test_the_dashboard_learns_the_run_ended_even_if_the_archive_cannot_be_written(
    tmp_path, caplog, monkeypatch, sse
):
    mon = quiet(1)
    url = mon.serve(port=0)
    mon.save_html(tmp_path / "report.html")
    mon.log(0, 0.1, {"loss": 1.0})

    def broken(*args, **kwargs):
        raise RuntimeError("template bug")

    monkeypatch.setattr(monitor_module, "render_page", broken)  # not an OSError
    with caplog.at_level(logging.WARNING, logger="flodl.monitor"):
        mon.finish()
    assert any("RuntimeError('template bug')" in r.getMessage() for r in caplog.records)
    events = list(sse(url).events())
    assert [e.event for e in events] == ["epoch", "complete"]
    mon.close()


@pytest.mark.parametrize("port", ["8080", -1, 65536, 1.5, True, None])
def test_a_port_that_is_not_one_is_a_clear_error(port):
    mon = quiet(1)
    with pytest.raises(fl.MonitorServerError, match=r"port=.*: need an int in \[0, 65535\]"):
        mon.serve(port=port)
    assert mon.url is None
    mon.close()


def test_live_page_escapes_hostile_names(graph_cls):
    mon = quiet()
    mon.set_identity(label=HOSTILE[0], hash=HOSTILE[4])
    mon.set_metadata({HOSTILE[2]: HOSTILE[5]})
    page, nonce = mon._live_page()
    boot = boot_of(page)
    assert boot["label"] == HOSTILE[0] and boot["meta"] == {HOSTILE[2]: HOSTILE[5]}
    assert f'<script nonce="{nonce}">' in page


def test_watch_counts_parameters_and_keeps_user_metadata():
    model = torch.nn.Linear(4, 2)
    model.bias.requires_grad_(False)
    mon = quiet()
    mon.set_metadata({"lr": 0.1, "parameters": "mine"})
    mon.watch(model)  # an nn.Module without svg(): parameters only
    assert mon.metadata == {"parameters": "mine", "lr": 0.1}
    other = quiet()
    other.watch(model)
    assert other.metadata["parameters"] == {"total": 10, "trainable": 8, "frozen": 2}
    other.watch(torch.nn.Linear(2, 2))  # watching another model replaces the counts
    assert other.metadata["parameters"]["total"] == 6


def test_finish_with_warns_when_the_graph_cannot_render(capsys):
    class Broken:
        def svg(self):
            raise RuntimeError("graphviz missing")

    mon = fl.Monitor(1)
    mon.log(0, 0.1, {"loss": 1.0})
    mon.finish_with(Broken())
    captured = capsys.readouterr()
    assert "training complete" in captured.out
    assert "could not render the graph SVG: graphviz missing" in captured.err
    mon.close()


def test_finish_with_says_when_the_html_view_stands_in_for_the_svg(capsys, tmp_path):
    class NoGraphviz:
        def svg(self):
            raise RuntimeError("dot not found")

        def html_view(self):
            return "<!DOCTYPE html><p>tree</p>"

    mon = fl.Monitor(1)
    mon.finish_with(NoGraphviz())
    err = capsys.readouterr().err
    assert "could not render the graph SVG: dot not found; the dashboard shows its HTML view" in err
    boot = boot_of(mon.save_html(tmp_path / "report.html").read_text())
    assert boot["svg"] is None and boot["graph_html"] == "<!DOCTYPE html><p>tree</p>"
    mon.close()


def test_other_ranks_are_silent_and_do_not_serve(capsys, monkeypatch):
    monkeypatch.setenv("RANK", "1")
    mon = fl.Monitor(2)
    assert mon.rank == 1
    assert mon.serve(port=0) == "" and mon.url is None
    mon.log(0, 0.1, {"loss": 1.0})
    mon.finish()
    assert capsys.readouterr().out == ""
    sample = mon.sample_resources()

    rank0 = fl.Monitor(2, rank=0, stream=None)
    rank0.add_rank_resources(1, sample.to_json())  # as it arrives over the wire
    record = rank0.log(0, 0.1, {"loss": 1.0})
    assert record.to_json()["ranks"]["1"] == sample.to_json()
    assert "ranks" not in rank0.log(1, 0.1, {"loss": 1.0}).to_json()  # attached once


def test_context_manager_closes_the_server():
    with fl.Monitor(1, stream=None) as mon:
        mon.serve(port=0)
        assert mon.url
    assert mon.url is None


def test_lines_go_through_a_running_rich_progress(monkeypatch):
    """rich redirects stdout while a Progress is live; the monitor prints into it, not around it."""
    from rich.console import Console
    from rich.progress import Progress

    monkeypatch.delenv("FORCE_COLOR", raising=False)
    buffer = io.StringIO()
    mon = fl.Monitor(2)
    with Progress(console=Console(file=buffer, force_terminal=True, width=200)) as progress:
        task = progress.add_task("train", total=2)
        for epoch in range(2):
            mon.log(epoch, 0.1, {"loss": 1.0})
            progress.advance(task)
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", buffer.getvalue())
    assert "epoch 1/2  loss=1.0000" in text and "epoch 2/2  loss=1.0000" in text
