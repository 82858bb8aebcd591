"""A file fdl cannot read or write, in code that did not expect it, is still one ``error:`` line
(exit 1), never a traceback; ``-vv`` shows the traceback. Other exceptions stay tracebacks."""

from __future__ import annotations

import pytest
import typer

from fdl import console
from fdl.app import app
from fdl.main import main


@pytest.fixture(autouse=True)
def _restore_console(monkeypatch):
    """``main`` applies -vv process-wide (settings, FLODL_VERBOSITY): undone after each test."""
    monkeypatch.setattr(console.settings, "verbosity", console.settings.verbosity)
    monkeypatch.delenv("FLODL_VERBOSITY", raising=False)
    yield
    console._consoles.clear()


def _run(callback, *flags: str) -> int:
    info = typer.models.CommandInfo(name="_probe", callback=callback)
    app.registered_commands.append(info)
    try:
        return main([*flags, "_probe"])
    finally:
        app.registered_commands.remove(info)


def _unwritable(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")

    def write() -> None:
        (blocker / "out.txt").write_text("x")  # a path beneath a file: ENOTDIR, even for root

    return blocker, write


def test_an_os_error_with_a_file_name_is_one_error_line(tmp_path, capsys):
    blocker, write = _unwritable(tmp_path)
    code = _run(write)
    err = capsys.readouterr().err
    assert code == 1
    assert "Traceback" not in err
    assert " ".join(err.split()).startswith(f"error: Not a directory: {blocker}/out.txt — ")
    assert "-vv" in err


def test_the_traceback_is_there_with_vv(tmp_path, capsys):
    _blocker, write = _unwritable(tmp_path)
    assert _run(write, "-vv") == 1
    err = capsys.readouterr().err
    assert "Traceback" in err and "NotADirectoryError" in err and "error: Not a directory" in err


def test_a_real_bug_is_still_a_traceback():
    def broken() -> None:
        raise OSError("no file involved")  # not about a path: a bug to report, not to hide

    try:
        _run(broken)
    except OSError as err:
        assert str(err) == "no file involved"
    else:
        raise AssertionError("the error was swallowed")


def test_home_that_is_a_file_for_autocomplete(run_fdl, tmp_path):
    # a real command that writes under $HOME without expecting it to fail
    home = tmp_path / "home-file"
    home.write_text("")
    result = run_fdl("autocomplete", env={"HOME": str(home), "SHELL": "/bin/bash"})
    assert result.returncode != 0 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.startswith("error: ")
