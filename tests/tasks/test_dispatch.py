"""The dispatch walk: from ``fdl a b c`` to one outcome (no process is started here)."""

from __future__ import annotations

import pytest

from fdl.errors import FdlError, FdlUsageError
from fdl.tasks.dispatch import ExecEntry, RunScript, ShowHelp, entry_argv, walk
from fdl.tasks.manifest import load_manifest

FILES = {
    "fdl.yml": """
    description: root
    commands:
      test: {run: pytest, append: -q, docker: dev}
      bench:
        description: benchmarks
      tools: {path: ./elsewhere}
      nested:
      quick: {options: {epochs: 1}}
    """,
    "bench/fdl.yml": """
    description: bench child
    entry: python -m bench
    docker: dev
    commands:
      quick:
        description: a quick run
        options: {epochs: 1, batch_size: 8, fast: true, slow: false, skip: null, layers: [1, 2]}
      list: {run: ls}
    """,
    "elsewhere/fdl.yml": "entry: ./tool.sh\n",
    "nested/fdl.yml": "commands:\n  inner:\n",
    "nested/inner/fdl.yml": "commands:\n  deep: {options: {x: 1}}\nentry: python deep.py\n",
    "fdl.ci.yml": "commands:\n  test: {run: pytest --ci}\n",
    "bench/fdl.ci.yml": "entry: python -m bench --ci\n",
}


@pytest.fixture
def root(project):
    return load_manifest(project(FILES) / "fdl.yml")


def test_run_command_forwards_what_follows_the_separator(root):
    outcome = walk(root, ["test", "--", "-k", "x", "--", "--pdb"])
    assert isinstance(outcome, RunScript)
    assert outcome.args == ["-k", "x", "--", "--pdb"]
    assert outcome.command.docker == "dev"
    assert outcome.command.declared_in == root.root.resolve()


def test_run_command_rejects_its_own_arguments(root):
    with pytest.raises(FdlUsageError) as info:
        walk(root, ["test", "-k", "x", "--", "y"])
    assert "takes no arguments of its own (got: -k x)" in info.value.what
    assert "fdl test -- -k x" in info.value.hint


@pytest.mark.parametrize("flag", ["-h", "--help"])
def test_help_before_the_separator_is_fdls(root, flag):
    outcome = walk(root, ["test", flag])
    assert isinstance(outcome, ShowHelp)
    assert outcome.command is root.commands["test"]


def test_help_after_the_separator_belongs_to_the_script(root):
    outcome = walk(root, ["test", "--", "-h"])
    assert isinstance(outcome, RunScript)
    assert outcome.args == ["-h"]


def test_no_append_before_the_separator(root):
    outcome = walk(root, ["test", "--no-append", "--", "-x"])
    assert isinstance(outcome, RunScript)
    assert outcome.no_append and outcome.args == ["-x"]
    kept = walk(root, ["test", "--", "--no-append"])
    assert not kept.no_append and kept.args == ["--no-append"]


def test_path_command_descends_into_child_commands(root):
    outcome = walk(root, ["bench", "list"])
    assert isinstance(outcome, RunScript)
    assert outcome.qualified == "bench list"
    assert outcome.command.declared_in.name == "bench"


def test_path_command_runs_the_child_entry_with_the_tail(root):
    outcome = walk(root, ["bench", "--epochs", "3"])
    assert isinstance(outcome, ExecEntry)
    assert entry_argv(outcome.manifest, outcome.preset, outcome.args) == [
        "python",
        "-m",
        "bench",
        "--epochs",
        "3",
    ]


def test_preset_options_become_flags_and_user_args_come_last(root):
    outcome = walk(root, ["bench", "quick", "--epochs", "5"])
    assert isinstance(outcome, ExecEntry)
    assert outcome.preset is not None
    # options sorted by name; a list is one JSON string (what programs for the Rust fdl parse)
    assert entry_argv(outcome.manifest, outcome.preset, outcome.args) == [
        "python", "-m", "bench", "--batch-size", "8", "--epochs", "1", "--fast",
        "--layers", "[1,2]", "--epochs", "5",
    ]  # fmt: skip


def test_explicit_path_and_three_levels(root):
    tools = walk(root, ["tools"])
    assert isinstance(tools, ExecEntry) and tools.manifest.root.name == "elsewhere"
    deep = walk(root, ["nested", "inner", "deep", "--y"])
    assert isinstance(deep, ExecEntry)
    assert deep.qualified == "nested inner deep"
    assert entry_argv(deep.manifest, deep.preset, deep.args) == [
        "python",
        "deep.py",
        "--x",
        "1",
        "--y",
    ]


def test_child_without_entry_but_with_commands_shows_help(root):
    outcome = walk(root, ["nested"])
    assert isinstance(outcome, ShowHelp) and outcome.command is None


def test_help_on_path_and_preset(root):
    assert walk(root, ["bench", "-h"]).command is None
    preset_help = walk(root, ["bench", "quick", "--help"])
    assert isinstance(preset_help, ShowHelp) and preset_help.command.kind == "preset"


def test_preset_at_the_top_level_is_an_error(root):
    with pytest.raises(FdlError, match="preset 'quick' has no enclosing entry"):
        walk(root, ["quick"])


def test_unknown_command_suggests(root):
    with pytest.raises(FdlUsageError) as info:
        walk(root, ["tset"])
    assert info.value.hint == "did you mean 'fdl test'?"


def test_missing_child_manifest(project):
    root = load_manifest(project({"fdl.yml": "commands:\n  ghost:\n"}) / "fdl.yml")
    with pytest.raises(FdlError, match=r"points at .*ghost, which has no fdl\.yml"):
        walk(root, ["ghost"])


def test_entry_is_required_to_exec(project):
    root = load_manifest(
        project({"fdl.yml": "commands:\n  c:\n", "c/fdl.yml": "description: x\n"}) / "fdl.yml"
    )
    outcome = walk(root, ["c", "arg"])
    with pytest.raises(FdlError, match="has no 'entry:' to run"):
        entry_argv(outcome.manifest, outcome.preset, outcome.args)


def test_the_env_reaches_child_manifests_that_have_it(project):
    base = project(FILES) / "fdl.yml"
    with_ci = walk(load_manifest(base, "ci"), ["bench"], env="ci")
    assert with_ci.manifest.entry == "python -m bench --ci"
    assert walk(load_manifest(base), ["bench"]).manifest.entry == "python -m bench"
    # children without the overlay are fine
    assert walk(load_manifest(base, "ci"), ["tools"], env="ci").manifest.entry == "./tool.sh"
