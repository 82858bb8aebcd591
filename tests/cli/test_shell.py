"""`fdl version`, `fdl completions SHELL`, `fdl autocomplete` (a temp HOME)."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from fdl import __version__
from fdl.commands.shell import BEGIN, END


def test_version_command(run_fdl):
    result = run_fdl("version")
    assert result.returncode == 0 and result.stdout == f"fdl {__version__} (flodl {__version__})\n"
    assert run_fdl("--version").stdout == result.stdout


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_completions_print_a_script_that_calls_fdl_back(run_fdl, shell):
    result = run_fdl("completions", shell)
    assert result.returncode == 0
    assert f"_FDL_COMPLETE=complete_{shell}" in result.stdout
    assert result.stderr == ""


def test_completions_refuse_an_unknown_shell(run_fdl):
    result = run_fdl("completions", "tcsh")
    assert result.returncode == 2 and "unsupported shell 'tcsh'" in result.stderr
    assert result.stdout == ""


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_bash_script_is_valid_bash(run_fdl):
    script = run_fdl("completions", "bash").stdout
    checked = subprocess.run(["bash", "-n"], input=script, text=True, capture_output=True)
    assert checked.returncode == 0, checked.stderr


def test_autocomplete_installs_once_in_a_marked_block(run_fdl, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    rc = home / ".bashrc"
    rc.write_text("export KEEP=1\n")
    env = {"HOME": str(home), "SHELL": "/bin/bash"}
    first = run_fdl("autocomplete", env=env)
    assert first.returncode == 0 and "installed in" in first.stderr
    text = rc.read_text()
    assert text.startswith("export KEEP=1\n")
    assert text.count(BEGIN) == 1 and text.count(END) == 1
    assert "_FDL_COMPLETE=complete_bash" in text
    again = run_fdl("autocomplete", env=env)
    assert again.returncode == 0 and "already up to date" in again.stderr
    assert rc.read_text() == text  # idempotent
    rc.write_text(text + "alias ll='ls -l'\n")  # the user's own lines after the block survive
    run_fdl("autocomplete", env=env)
    assert rc.read_text().endswith("alias ll='ls -l'\n") and rc.read_text().count(BEGIN) == 1


def test_autocomplete_other_shells_and_unknown(run_fdl, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    zsh = run_fdl("autocomplete", "--shell", "zsh", env={"HOME": str(home), "ZDOTDIR": ""})
    assert zsh.returncode == 0
    assert "compinit" in (home / ".zshrc").read_text()
    fish = run_fdl("autocomplete", env={"HOME": str(home), "SHELL": "/usr/bin/fish"})
    assert fish.returncode == 0
    assert "complete_fish" in (home / ".config/fish/completions/fdl.fish").read_text()
    unknown = run_fdl("autocomplete", env={"HOME": str(home), "SHELL": "/bin/tcsh"})
    assert unknown.returncode == 2 and "--shell bash|zsh|fish" in unknown.stderr
