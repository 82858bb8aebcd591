"""Manifest loading is bounded: size cap, alias-expansion budget, depth limit."""

from __future__ import annotations

from pathlib import Path

import pytest

from fdl.errors import FdlError
from fdl.tasks.source import read_source


def alias_bomb(levels: int = 9, width: int = 9) -> str:
    """The classic nested-alias document: ~450 bytes that expand to width**levels values."""
    lines = ["x-a: &a [" + ", ".join(["lol"] * width) + "]"]
    previous = "a"
    for name in "bcdefghijklmnop"[: levels - 1]:
        lines.append(f"x-{name}: &{name} [" + ", ".join([f"*{previous}"] * width) + "]")
        previous = name
    return "\n".join(lines) + "\ncommands:\n  hi:\n    run: echo hi\n"


def test_alias_bomb_stops_at_the_node_budget(tmp_path: Path):
    path = tmp_path / "fdl.yml"
    path.write_text(alias_bomb())
    assert path.stat().st_size < 600
    with pytest.raises(FdlError, match=r"expanding YAML aliases gives more than 100,000 values"):
        read_source(path)


def test_budget_is_configurable_and_small_aliases_still_work(tmp_path: Path, monkeypatch):
    path = tmp_path / "fdl.yml"
    path.write_text(alias_bomb(levels=3, width=3))  # 3 + 9 + 27 values: fine
    data = read_source(path).data
    assert data["x-c"][2][1] == ["lol", "lol", "lol"]
    monkeypatch.setenv("FDL_MANIFEST_MAX_NODES", "10")
    with pytest.raises(FdlError, match="more than 10 values"):
        read_source(path)


def test_merge_keys_expand_once_with_explicit_keys_winning(tmp_path: Path):
    path = tmp_path / "fdl.yml"
    path.write_text(
        "x-base: &base {docker: dev, description: base}\n"
        "commands:\n  a:\n    <<: *base\n    run: echo a\n    description: mine\n"
    )
    assert read_source(path).data["commands"]["a"] == {
        "docker": "dev",
        "description": "mine",
        "run": "echo a",
    }


def test_self_referencing_alias_is_an_error_not_a_recursion(tmp_path: Path):
    path = tmp_path / "fdl.yml"
    path.write_text("a: &x\n  <<: *x\n")
    with pytest.raises(FdlError, match="levels deep"):
        read_source(path)
    path.write_text("a: &x [*x]\n")
    with pytest.raises(FdlError, match="levels deep"):
        read_source(path)


def test_oversized_manifest_is_refused_before_parsing(tmp_path: Path, monkeypatch):
    path = tmp_path / "fdl.yml"
    path.write_text("commands: {}\n" + "# padding\n" * 30_000)  # ~300 KB of comments
    with pytest.raises(FdlError, match=r"too large for a manifest \(limit 262,144\)") as err:
        read_source(path)
    assert "FDL_MANIFEST_MAX_BYTES" in str(err.value)
    monkeypatch.setenv("FDL_MANIFEST_MAX_BYTES", str(1 << 20))
    assert read_source(path).data == {"commands": {}}


@pytest.mark.parametrize("variable", ["FDL_MANIFEST_MAX_BYTES", "FDL_MANIFEST_MAX_NODES"])
@pytest.mark.parametrize("value", ["-1", "0", "1.5", "lots"])
def test_a_limit_that_is_not_a_positive_whole_number_is_an_error(
    tmp_path: Path, monkeypatch, variable, value
):
    path = tmp_path / "fdl.yml"
    path.write_text("commands: {}\n")
    monkeypatch.setenv(variable, value)
    with pytest.raises(FdlError, match=f"{variable}='{value}' is not a positive whole number"):
        read_source(path)
    monkeypatch.setenv(variable, "1000")
    assert read_source(path).data == {"commands": {}}


def test_help_survives_a_bomb_and_names_the_problem(run_fdl, tmp_path: Path):
    (tmp_path / "fdl.yml").write_text(alias_bomb())
    result = run_fdl("--help", cwd=tmp_path, timeout=30)
    assert result.returncode == 0
    assert "project commands unavailable" in result.stderr
    assert "FDL_MANIFEST_MAX_NODES" in result.stderr
    run = run_fdl("hi", cwd=tmp_path, timeout=30)
    assert run.returncode == 1 and "expanding YAML aliases" in run.stderr
