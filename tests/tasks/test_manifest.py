"""The manifest model: command kinds and validation errors with file, line and key."""

from __future__ import annotations

import pytest

from fdl.tasks.manifest import load_manifest
from fdl.tasks.source import ManifestError


def test_kinds(project):
    root = project(
        {
            "fdl.yml": """
            description: demo
            commands:
              test: {run: pytest, append: -q, docker: dev}
              bench: {path: tools/bench}
              sub:
              quick: {options: {epochs: 1}}
            """
        }
    )
    m = load_manifest(root / "fdl.yml")
    kinds = {name: c.kind for name, c in m.commands.items()}
    assert kinds == {"test": "run", "bench": "path", "sub": "path", "quick": "preset"}
    assert m.commands["test"].docker == "dev"
    assert m.commands["bench"].path == (root / "tools" / "bench").resolve()
    assert m.commands["sub"].path == (root / "sub").resolve()  # the convention directory
    assert m.description == "demo"


@pytest.mark.parametrize(
    ("spec", "line", "message"),
    [
        ("t: {run: a, path: b}", 2, "commands.t: sets both 'run:' and 'path:'"),
        ("t: {docker: dev}", 2, "commands.t.docker: 'docker:' only applies to a 'run:' script"),
        ("t: {append: -q}", 2, "commands.t.append: 'append:' only applies to a 'run:' script"),
        ("t: just a string", 2, "commands.t: must be a mapping, got str"),
        ("t: {run: a, options: {x: 1}}", 2, "commands.t.options: 'options:' belongs to presets"),
        ("t: {options: [1, 2]}", 2, "commands.t.options: must be a mapping"),
        ("t: {run: [a, b]}", 2, "commands.t.run: must be a string, got list"),
    ],
)
def test_bad_commands_name_file_line_and_key(project, spec, line, message):
    root = project({"fdl.yml": f"commands:\n  {spec}\n"})
    with pytest.raises(ManifestError) as info:
        load_manifest(root / "fdl.yml")
    assert info.value.what.startswith(f"{root / 'fdl.yml'}:{line}: {message}")


def test_unknown_keys_suggest_the_right_one(project):
    root = project({"fdl.yml": "commands:\n  t:\n    run: a\n    descripton: typo\n"})
    with pytest.raises(ManifestError) as info:
        load_manifest(root / "fdl.yml")
    assert info.value.what == f"{root / 'fdl.yml'}:4: commands.t.descripton: unknown key"
    assert info.value.hint == "did you mean 'description'?"


def test_x_keys_at_the_top_hold_yaml_anchors(project):
    root = project({"fdl.yml": "x-gpu: &gpu {docker: cuda}\ncommands:\n  t: {<<: *gpu, run: a}\n"})
    assert load_manifest(root / "fdl.yml").commands["t"].docker == "cuda"


def test_commands_must_be_a_mapping(project):
    root = project({"fdl.yml": "commands: [a, b]\n"})
    with pytest.raises(ManifestError, match=r"fdl\.yml:1: commands: must be a mapping"):
        load_manifest(root / "fdl.yml")


def test_top_level_must_be_a_mapping(project):
    root = project({"fdl.yml": "- a\n- b\n"})
    with pytest.raises(ManifestError, match="the top level must be a mapping"):
        load_manifest(root / "fdl.yml")
