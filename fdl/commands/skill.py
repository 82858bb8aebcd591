"""``fdl skill``: install the ``/port`` skill for AI coding assistants."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer

from fdl.errors import FdlUsageError

_TOOL_HELP = (
    "claude (alias: claude-code), cursor, codex or copilot (repeatable). Default: the tools "
    "found in the project."
)
_DIR_HELP = "The project directory (default: the current directory)."


def _skill(name: str):
    from fdl.porting.skills import SKILLS

    if name not in SKILLS:
        raise FdlUsageError(f"unknown skill '{name}'", f"available: {', '.join(SKILLS)}")
    return SKILLS[name]


def _project(directory: Path) -> Path:
    """``--dir``, checked before anything is printed or written."""
    if directory.is_dir():
        return directory
    if directory.exists():
        raise FdlUsageError(
            f"--dir {directory}: not a directory", "pass the project directory, not a file in it"
        )
    raise FdlUsageError(
        f"--dir {directory}: no such directory", "pass an existing project directory"
    )


def _version() -> str:
    from fdl.apiref.source import find_source
    from fdl.errors import FdlError

    try:
        return find_source().version()
    except FdlError:
        return "unknown"


TOOL_ALIASES = {"claude-code": "claude"}  # the Rust fdl's name for the tool, kept for its users


def list_(
    directory: Annotated[Path, typer.Option("--dir", metavar="PATH", help=_DIR_HELP)] = Path(),
    json_out: Annotated[bool, typer.Option("--json", help="One JSON document on stdout.")] = False,
) -> None:
    from fdl import console
    from fdl.porting.skills import SKILLS, TOOLS, detect_tools, status

    directory = _project(directory)
    version = _version()
    detected = detect_tools(directory)
    rows = {
        tool: {name: status(directory, tool, skill, version) for name, skill in SKILLS.items()}
        for tool in TOOLS
    }
    if json_out:
        import json

        document = {
            "skills": [{"name": s.name, "summary": s.summary} for s in SKILLS.values()],
            "tools": [
                {"tool": t, "name": TOOLS[t], "detected": t in detected, "skills": rows[t]}
                for t in TOOLS
            ],
        }
        console.out(json.dumps(document, indent=2))
        return
    lines = ["Available skills:"]
    lines += [f"  {s.name:<12} {s.summary}" for s in SKILLS.values()]
    lines.append("")
    lines.append("Assistants:")
    for tool, name in TOOLS.items():
        seen = "detected" if tool in detected else "not detected"
        states = ", ".join(f"{k}: {v}" for k, v in rows[tool].items())
        lines.append(f"  {tool:<8} {name:<20} {seen:<13} {states}")
    console.out("\n".join(lines))
    missing = [t for t in detected if any(v != "installed" for v in rows[t].values())]
    if missing:
        console.info(f"Run: fdl skill install --tool {' --tool '.join(missing)}")
    elif not detected:
        console.info("No assistant configuration found here. Run: fdl skill install --tool NAME")


def install(
    tool: Annotated[
        list[str] | None, typer.Option("--tool", metavar="NAME", help=_TOOL_HELP)
    ] = None,
    skill: Annotated[
        str, typer.Option("--skill", metavar="NAME", help="The skill to install.")
    ] = "port",
    directory: Annotated[Path, typer.Option("--dir", metavar="PATH", help=_DIR_HELP)] = Path(),
) -> None:
    from fdl import console
    from fdl.porting import skills

    chosen = _skill(skill)
    directory = _project(directory)
    # 'claude-code' is the Rust original's name for the tool: accepted as an alias of 'claude'
    tools = list(dict.fromkeys(TOOL_ALIASES.get(t, t) for t in tool or []))
    for name in tools:
        if name not in skills.TOOLS:
            raise FdlUsageError(f"unknown tool '{name}'", f"supported: {', '.join(skills.TOOLS)}")
    if not tools:
        tools = skills.detect_tools(directory)
        if not tools:
            console.info(
                "No assistant configuration found; installing for Claude Code "
                "(choose with --tool claude|cursor|codex|copilot)."
            )
            tools = ["claude"]
    version = _version()
    shown: set[Path] = set()
    for name in tools:
        for path, state in skills.install(directory, name, chosen, version):
            if path not in shown:  # files shared by several tools are listed once
                shown.add(path)
                console.out(f"{state:<9} {path}")
        console.info(f"/{chosen.name} skill ready for {skills.TOOLS[name]}.")
    if "claude" in tools:
        console.info("Try: /port my_model.py")


def register(app: typer.Typer, make_group: Callable[[str, str], typer.Typer]) -> None:
    group = make_group("skill", "Install the /port skill for AI coding assistants.")
    app.add_typer(group)
    group.command("list", help="Show the available skills and the assistants found here.")(list_)
    group.command("install", help="Install or update a skill for AI coding assistants.")(install)
