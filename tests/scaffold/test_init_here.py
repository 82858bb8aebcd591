"""`fdl init .` and the project-name rules (length, Windows device names)."""

from __future__ import annotations

import pytest

from fdl.errors import FdlUsageError
from fdl.scaffold.names import validate


def test_init_dot_fills_an_empty_or_vcs_only_directory(run_fdl, tmp_path):
    here = tmp_path / "my-proj"
    (here / ".git").mkdir(parents=True)
    (here / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    result = run_fdl("init", ".", "--native", cwd=here)
    assert result.returncode == 0, result.stderr
    assert (here / "src" / "my_proj" / "train.py").is_file()
    assert 'name = "my-proj"' in (here / "pyproject.toml").read_text()
    assert (here / ".git" / "HEAD").read_text() == "ref: refs/heads/main\n"  # untouched
    assert "cd my-proj" not in result.stderr
    assert not list(tmp_path.glob(".my-proj.fdl-init-*"))  # no staging left behind


def test_init_dot_refuses_a_directory_with_anything_else_touching_nothing(run_fdl, tmp_path):
    here = tmp_path / "busy"
    here.mkdir()
    (here / "notes.txt").write_text("mine\n")
    result = run_fdl("init", ".", "--native", cwd=here)
    assert result.returncode == 1
    assert "is not empty (it holds notes.txt)" in result.stderr
    assert sorted(p.name for p in here.iterdir()) == ["notes.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["busy"]


def test_init_dot_names_the_project_after_the_directory_and_checks_it(run_fdl, tmp_path):
    here = tmp_path / "con"
    here.mkdir()
    result = run_fdl("init", ".", "--native", cwd=here)
    assert result.returncode == 2 and "reserves" in result.stderr
    assert list(here.iterdir()) == []


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("a" * 65, "is 65 characters long; the limit is 64"),
        ("a" * 300, "is 300 characters long"),
        ("con", "device name Windows reserves"),
        ("NUL", "device name Windows reserves"),
        ("Com1", "device name Windows reserves"),
        ("lpt9", "device name Windows reserves"),
        ("a_b-", "must end with a letter or digit"),
        ("Dot-Proj_", "must end with a letter or digit"),
        ("x--", "must end with a letter or digit"),
    ],
)
def test_invalid_names_state_the_rule(name, message):
    with pytest.raises(FdlUsageError) as info:
        validate(name)
    assert message in info.value.what and info.value.hint


def test_long_and_reserved_names_are_usage_errors_without_traceback(run_fdl, tmp_path):
    for name in ("x" * 300, "aux"):
        result = run_fdl("init", name, "--native", cwd=tmp_path)
        assert result.returncode == 2, result.stderr
        assert result.stderr.startswith("error: project name") and "Traceback" not in result.stderr
    assert list(tmp_path.iterdir()) == []
    assert validate("a" * 64) == "a" * 64  # the limit itself is fine


@pytest.mark.parametrize("name", ["a_b-", "Dot-Proj_"])
def test_a_name_ending_in_a_separator_is_a_usage_error_here_or_new(run_fdl, tmp_path, name):
    # The name is the distribution's too: pip refuses one that ends in '-' or '_' (PEP 508).
    result = run_fdl("init", name, "--native", cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith(f"error: project name '{name}' must end with a letter or digit")
    assert "PEP 508" in result.stderr and "Traceback" not in result.stderr
    assert list(tmp_path.iterdir()) == []
    here = tmp_path / name
    here.mkdir()
    result = run_fdl("init", ".", "--native", cwd=here)
    assert result.returncode == 2 and "must end with a letter or digit" in result.stderr
    assert list(here.iterdir()) == []
