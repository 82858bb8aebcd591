"""flodl.files: reports, exports and pages are written whole or not at all, errors name the target."""

from __future__ import annotations

from pathlib import Path

import pytest

import flodl as fl
from flodl.files import open_atomic, replacing, write_bytes, write_text


def test_a_failed_write_leaves_the_previous_file_and_nothing_else(tmp_path):
    target = tmp_path / "report.csv"
    write_text(target, "old\n")
    with pytest.raises(ValueError, match="while rendering"), open_atomic(target) as f:
        f.write("half a ")
        raise ValueError("while rendering")
    assert target.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["report.csv"]
    with pytest.raises(RuntimeError), replacing(target) as tmp:
        tmp.write_text("new")
        raise RuntimeError
    assert target.read_text() == "old\n" and len(list(tmp_path.iterdir())) == 1


def test_a_missing_directory_is_an_error_naming_the_target_not_a_temporary_file(tmp_path):
    target = tmp_path / "absent" / "page.html"
    with pytest.raises(FileNotFoundError) as err:
        write_text(target, "x")
    assert err.value.filename == str(target) and ".tmp" not in str(err.value)
    with pytest.raises(FileNotFoundError, match=r"page\.bin'$"):
        write_bytes(tmp_path / "absent" / "page.bin", b"x")


def test_every_writer_goes_through_it(tmp_path):
    # The timeline's three exports, the monitor's archive and CSV: one failure, one message.
    timeline = fl.monitor.Timeline(gpu=False)
    timeline.event("mark")
    writers = [timeline.save_json, timeline.save_csv, timeline.save_html]
    monitor = fl.Monitor(1, stream=None, gpu=False)
    monitor.log(0, 0.1, {"loss": 1.0})
    writers += [monitor.export_csv, monitor.save_html]
    try:
        for i, write in enumerate(writers):
            target = tmp_path / "absent" / "out"
            with pytest.raises(FileNotFoundError) as err:
                write(target)
            assert err.value.filename == str(target), write
            write(tmp_path / f"{i}.out")  # and into a directory that exists
    finally:
        monitor.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"{i}.out" for i in range(5)]


@pytest.mark.parametrize("where", [".", "", "sub"])
def test_a_directory_is_an_error_naming_it_and_nothing_is_written(tmp_path, monkeypatch, where):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sub").mkdir()
    monitor = fl.Monitor(1, stream=None, gpu=False)
    monitor.log(0, 0.1, {"loss": 1.0})
    writers = [
        lambda p: write_text(p, "x"),
        monitor.save_html,
        monitor.export_csv,
        monitor.write_log,
        fl.monitor.Timeline(gpu=False).save_json,
    ]
    try:
        for write in writers:
            with pytest.raises(IsADirectoryError, match=r"Is a directory: ") as err:
                write(where)
            assert err.value.filename == str(Path(where))
    finally:
        monitor.close()
    assert [p.name for p in tmp_path.iterdir()] == ["sub"] and not any((tmp_path / "sub").iterdir())
