"""docs/cli.md documents every command and every option of the real Typer app."""

from __future__ import annotations

import re
from pathlib import Path

import typer

from fdl.app import app
from fdl.errors import ExitCode

CLI_DOC = Path(__file__).resolve().parents[2] / "docs" / "cli.md"


def leaf_commands() -> dict[str, object]:
    """Command path ('libtorch download') -> click command, for every leaf of the tree."""
    leaves: dict[str, object] = {}

    def walk(command, path: list[str]) -> None:
        children = getattr(command, "commands", None)
        if children:
            for name, child in children.items():
                walk(child, [*path, name])
        else:
            leaves[" ".join(path)] = command

    walk(typer.main.get_command(app), [])
    return leaves


def doc_sections() -> dict[str, str]:
    text = CLI_DOC.read_text(encoding="utf-8")
    parts = re.split(r"^#{2,4} fdl (.+)$", text, flags=re.MULTILINE)
    return {parts[i].strip(): parts[i + 1] for i in range(1, len(parts), 2)}


def test_every_command_has_a_section():
    missing = sorted(set(leaf_commands()) - set(doc_sections()))
    assert not missing, f"docs/cli.md lacks a '### fdl <command>' section for: {missing}"


def test_every_option_is_documented_in_its_section():
    sections = doc_sections()
    undocumented = []
    for path, command in leaf_commands().items():
        for param in command.params:
            longs = [o for o in param.opts if o.startswith("--")]
            if (
                longs
                and param.param_type_name == "option"
                and not any(f"`{o}" in sections.get(path, "") for o in longs)
            ):
                undocumented.append(f"fdl {path} {longs[0]}")
    assert not undocumented, f"options missing from docs/cli.md: {undocumented}"


def test_documented_sections_exist_in_the_app():
    # The other direction: no section for a command that does not exist.
    stale = sorted(set(doc_sections()) - set(leaf_commands()))
    assert not stale, f"docs/cli.md documents commands that do not exist: {stale}"


def exit_code_rows() -> dict[str, str]:
    """The rows of docs/cli.md's '## Exit codes' table: code -> meaning."""
    text = CLI_DOC.read_text(encoding="utf-8")
    section = text.split("\n## Exit codes\n", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| *([^|]+?) *\| *([^|]+?) *\|$", section, flags=re.MULTILINE)
    return {code: meaning for code, meaning in rows if code not in ("code",) and set(code) != {"-"}}


def test_the_exit_code_table_is_exactly_exit_code():
    rows = exit_code_rows()
    numeric = {int(code) for code in rows if code.isdigit()}
    assert numeric == {int(code) for code in ExitCode}, (
        f"docs/cli.md documents {sorted(numeric)}, fdl.errors.ExitCode has "
        f"{sorted(int(c) for c in ExitCode)}"
    )
    # the only other row: task-runner commands pass their child's code through
    assert set(rows) - {str(int(c)) for c in ExitCode} == {"other"}
