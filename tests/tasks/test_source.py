"""Reading manifest files: data, line numbers, and errors that point at the line."""

from __future__ import annotations

import pytest

from fdl.errors import FdlError
from fdl.tasks.source import ManifestError, dotted_key, read_source


def test_every_key_remembers_its_line(tmp_path):
    path = tmp_path / "fdl.yml"
    path.write_text("description: x\ncommands:\n  test:\n    run: pytest\n  lint: ~\n")
    source = read_source(path)
    assert source.data == {
        "description": "x",
        "commands": {"test": {"run": "pytest"}, "lint": None},
    }
    assert source.lines[("commands", "test", "run")] == 4
    assert source.lines[("commands", "lint")] == 5
    assert source.where(("commands", "test", "run")) == f"{path}:4"
    assert source.where(("commands", "test", "nope")) == f"{path}:3"  # closest written parent


def test_empty_file_is_an_empty_mapping(tmp_path):
    path = tmp_path / "fdl.yml"
    path.write_text("# only a comment\n")
    assert read_source(path).data == {}


def test_syntax_error_names_file_line_and_column(tmp_path):
    path = tmp_path / "fdl.yml"
    path.write_text("commands:\n  test:\n    run: [unclosed\n")
    with pytest.raises(FdlError) as info:
        read_source(path)
    assert f"{path}:" in info.value.what
    assert "invalid YAML" in info.value.what


def test_duplicate_keys_are_an_error_not_a_silent_override(tmp_path):
    path = tmp_path / "fdl.yml"
    path.write_text("commands:\n  test:\n    run: a\n  test:\n    run: b\n")
    with pytest.raises(ManifestError) as info:
        read_source(path)
    assert "line 4: duplicate key 'commands.test' (first set on line 2)" in info.value.what


def test_json_manifests_are_read_too(tmp_path):
    path = tmp_path / "fdl.json"
    path.write_text('{"commands": {"t": {"run": "true"}}}')
    assert read_source(path).data == {"commands": {"t": {"run": "true"}}}


def test_yaml_merge_keys_are_resolved(tmp_path):
    path = tmp_path / "fdl.yml"
    path.write_text("x-base: &b {docker: dev}\ncommands:\n  t:\n    <<: *b\n    run: pytest\n")
    assert read_source(path).data["commands"]["t"] == {"docker": "dev", "run": "pytest"}


def test_dotted_key():
    assert dotted_key(("commands", "t", "options", 0)) == "commands.t.options[0]"
