"""The fdl command skeleton: help, version, errors and exit codes, colour, global flags."""

from __future__ import annotations

import re

import pytest

import flodl as fl
from fdl.app import app
from fdl.argv import split_global_flags
from fdl.errors import FdlUsageError

ANSI = re.compile(r"\x1b\[")
DESIGN_COMMANDS = ["diagnose", "setup", "libtorch", "init", "config", "api-ref", "skill", "check"]


def test_help_lists_every_command_group(run_fdl):
    result = run_fdl("--help")
    assert result.returncode == 0, result.stderr
    for name in DESIGN_COMMANDS:
        assert re.search(rf"\b{re.escape(name)}\b", result.stdout), name


def test_no_arguments_shows_help_and_succeeds(run_fdl):
    result = run_fdl()
    assert result.returncode == 0
    assert "Usage: fdl" in result.stdout


@pytest.mark.parametrize("flag", ["--version", "-V"])
def test_version_matches_the_library(run_fdl, flag):
    result = run_fdl(flag)
    assert result.returncode == 0
    assert result.stdout.strip() == f"fdl {fl.__version__} (flodl {fl.__version__})"


def test_version_flag_is_global_only_before_the_command(run_fdl):
    # After the command word --version belongs to the command: `fdl libtorch download --version
    # 2.9` printed fdl's version and exited 0 instead of saying the option is --torch.
    assert fl.__version__ in run_fdl("-q", "-V", "diagnose").stdout
    result = run_fdl("diagnose", "-V")
    assert result.returncode == 2 and result.stdout == ""
    assert "error: 'fdl diagnose' has no -V option — fdl's own version is 'fdl --version'" in (
        result.stderr
    )
    flags = split_global_flags(["--env", "ci", "-V", "test", "--version"])
    assert flags.version and flags.rest == ["test", "--version"]


def test_unknown_command_is_a_usage_error_with_a_hint(run_fdl):
    result = run_fdl("nosuch")
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.startswith("error: unknown command 'nosuch' — ")
    assert "fdl --help" in result.stderr
    assert "Traceback" not in result.stderr


def test_typo_suggests_the_closest_command(run_fdl):
    result = run_fdl("diagnos")
    assert result.returncode == 2
    assert "did you mean 'fdl diagnose'?" in result.stderr


def test_unknown_subcommand_in_a_group(run_fdl):
    result = run_fdl("libtorch", "downlaod")
    assert result.returncode == 2
    assert "error: unknown command 'downlaod'" in result.stderr
    assert "fdl libtorch download" in result.stderr


def test_a_file_given_to_the_checkpoint_group_suggests_its_info_command(run_fdl):
    result = run_fdl("checkpoint", "model.fdl")  # as `fdl checkpoint info model.fdl` means
    assert result.returncode == 2
    assert "did you mean 'fdl checkpoint info model.fdl'?" in result.stderr
    other = run_fdl("config", "fdl.yml")  # a group with no command taking a file: no guess
    assert other.returncode == 2 and "run 'fdl config --help'" in other.stderr


def test_checkpoint_info_on_a_damaged_file_says_it_once(run_fdl, tmp_path):
    empty = tmp_path / "empty.fdl"
    empty.write_bytes(b"")
    result = run_fdl("checkpoint", "info", str(empty))
    assert result.returncode == 1
    assert (
        result.stderr == f"error: {empty}, offset 0: empty file — this is not a .fdl checkpoint\n"
    )
    junk = tmp_path / "junk.fdl"
    junk.write_bytes(b"JUNK" + bytes(40))  # a message without advice of its own gets the hint
    result = run_fdl("checkpoint", "info", str(junk))
    assert result.returncode == 1 and "bad magic" in result.stderr
    assert result.stderr.endswith(" — the file is damaged or is not a .fdl checkpoint\n")


def test_unknown_option_is_a_usage_error(run_fdl):
    result = run_fdl("config", "show", "--bogus")
    assert result.returncode == 2
    assert result.stderr.startswith("error: No such option: --bogus — ")
    assert "fdl config show --help" in result.stderr


def test_group_without_subcommand_prints_its_help(run_fdl):
    result = run_fdl("libtorch")
    assert result.returncode == 0
    for sub in ["download", "list", "info", "activate", "remove"]:
        assert sub in result.stdout


def test_every_command_answers_help(run_fdl):
    command = __import__("typer").main.get_command(app)
    for name, sub in command.commands.items():
        result = run_fdl(name, "--help")
        assert result.returncode == 0, (name, result.stderr)
        assert f"fdl {name}" in result.stdout
        for child in getattr(sub, "commands", {}):
            result = run_fdl(name, child, "-h")
            assert result.returncode == 0, (name, child, result.stderr)


def test_every_command_answers_help_through_fdl_builtin(capsys, tmp_path, monkeypatch):
    from fdl.main import main

    monkeypatch.chdir(tmp_path)  # outside any project
    command = __import__("typer").main.get_command(app)
    names = [name for name in command.commands if name != "builtin"]
    assert {"diagnose", "check", "libtorch"} <= set(names)
    for name in names:
        for flag in ("-h", "--help"):
            assert main(["builtin", name, flag]) == 0, (name, flag, capsys.readouterr().err)
            assert f"Usage: fdl {name}" in capsys.readouterr().out, (name, flag)


@pytest.mark.parametrize(
    "env", [{"NO_COLOR": "1", "FORCE_COLOR": "1"}, {"FORCE_COLOR": "1", "_flag": "--no-color"}]
)
def test_no_color_means_no_escape_sequences(run_fdl, env):
    flag = env.pop("_flag", None)
    args = [flag] if flag else []
    for argv in (["--help"], ["nosuch"], ["libtorch"]):
        result = run_fdl(*args, *argv, env=env)
        assert not ANSI.search(result.stdout + result.stderr), argv


def test_force_color_colours_the_error_prefix(run_fdl):
    # The counterpart of the test above: proves the escape check can fail.
    result = run_fdl("nosuch", env={"FORCE_COLOR": "1"})
    assert ANSI.search(result.stderr)


def test_plain_output_when_piped(run_fdl):
    result = run_fdl("--help")
    assert not ANSI.search(result.stdout)


def test_global_flags_stop_at_double_dash():
    flags = split_global_flags(["train", "-v", "--env", "ci", "--", "-q", "--env", "x"])
    assert flags.verbosity == 2
    assert flags.env == "ci"
    assert flags.rest == ["train", "--", "-q", "--env", "x"]


def test_last_verbosity_flag_wins():
    assert split_global_flags(["-vv", "diagnose", "-q"]).verbosity == 0
    assert split_global_flags(["diagnose"]).verbosity is None


@pytest.mark.parametrize(
    "argv", [["--env"], ["--env", "-v"], ["--env="], ["--env", "a", "--env=b"]]
)
def test_bad_env_flag_is_a_usage_error(argv):
    with pytest.raises(FdlUsageError):
        split_global_flags(argv)


def test_bad_env_flag_from_the_command_line(run_fdl):
    result = run_fdl("--env", "a", "--env", "b", "diagnose")
    assert result.returncode == 2
    assert "error: --env specified more than once" in result.stderr


def test_python_dash_m_and_console_script_agree(run_fdl):
    import subprocess
    import sys
    from pathlib import Path

    script = Path(sys.executable).with_name("fdl")
    if not script.exists():
        pytest.skip("the fdl console script is not installed in this environment")
    from tests.conftest import clean_env

    direct = subprocess.run([script, "--version"], capture_output=True, text=True, env=clean_env())
    assert direct.stdout == run_fdl("--version").stdout
