"""Install the ``/port`` skill for AI coding assistants, from the files bundled with fdl.

Targets (relative to the project directory):

| tool | files |
|---|---|
| claude | ``.claude/skills/port/{SKILL.md, guide.md, instructions.md}`` |
| cursor | ``.cursor/rules/flodl-port.mdc`` + ``.flodl/skills/port/{guide.md, instructions.md}`` |
| codex | a marked section in ``AGENTS.md`` + ``.flodl/skills/port/...`` |
| copilot | a marked section in ``.github/copilot-instructions.md`` + ``.flodl/skills/port/...`` |

Content always comes from the installed fdl (``fdl.resources.bundled_dir``) and the installed
adapter points at the *installed* guide and instructions (the original pointed at a repository
checkout). Files are written only when their content changes (temp file + rename); shared files
(AGENTS.md, copilot-instructions.md) change only between their markers.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from fdl.apiref.atomic import atomic_write, newline_of
from fdl.errors import ExitCode, FdlError, FdlUsageError
from fdl.porting.frontmatter import validate_mdc, validate_skill_md
from fdl.resources import bundled_dir


@dataclass(frozen=True)
class Skill:
    name: str
    summary: str
    files: tuple[str, ...] = ("guide.md", "instructions.md")


SKILLS = {"port": Skill("port", "Port PyTorch scripts to flodl")}
TOOLS = {
    "claude": "Claude Code",
    "cursor": "Cursor",
    "codex": "Codex (AGENTS.md)",
    "copilot": "GitHub Copilot",
}
SHARED_DIR = ".flodl/skills"


def read_skill_file(name: str, skill: str = "port") -> str:
    """A file of the bundled skill (``guide.md``, ``instructions.md``, ``adapters/...``)."""
    del skill  # one skill today; its files live at the top of porting_skill/
    return (bundled_dir("porting_skill") / name).read_text(encoding="utf-8")


def detect_tools(project: Path) -> list[str]:
    """Tools whose configuration exists in ``project`` (no walking up: the project is explicit)."""
    found = []
    if (project / ".claude").is_dir() or (project / "CLAUDE.md").is_file():
        found.append("claude")
    if (project / ".cursor").is_dir() or (project / ".cursorrules").is_file():
        found.append("cursor")
    if (project / "AGENTS.md").is_file() or (project / ".codex").is_dir():
        found.append("codex")
    github = project / ".github"
    if (github / "copilot-instructions.md").is_file() or (github / "instructions").is_dir():
        found.append("copilot")
    return found


# -- what each tool gets --------------------------------------------------------------------
@dataclass(frozen=True)
class Planned:
    """One file an install writes: whole (``section`` None) or one marked section of it."""

    path: Path  # relative to the project
    content: str
    section: str | None = None  # marker id for shared files


def _markers(section: str) -> tuple[str, str]:
    return (
        f"<!-- {section}:begin (managed by `fdl skill install`; edits inside are replaced) -->",
        f"<!-- {section}:end -->",
    )


def plan(tool: str, skill: Skill, version: str) -> list[Planned]:
    """Every file ``tool`` needs for ``skill``, rendered."""
    if tool == "claude":
        skill_dir = f".claude/skills/{skill.name}"
        files = [Planned(Path(skill_dir) / f, read_skill_file(f)) for f in skill.files]
        adapter = _render("adapters/claude-SKILL.md", version, skill_dir)
        problems = validate_skill_md(adapter, skill.name)
        if problems:
            raise AssertionError(f"bundled SKILL.md is invalid: {problems}")  # our bug
        return [Planned(Path(skill_dir) / "SKILL.md", adapter), *files]
    shared_dir = f"{SHARED_DIR}/{skill.name}"
    shared = [Planned(Path(shared_dir) / f, read_skill_file(f)) for f in skill.files]
    if tool == "cursor":
        rule = _render("adapters/cursor-flodl-port.mdc", version, shared_dir)
        problems = validate_mdc(rule)
        if problems:
            raise AssertionError(f"bundled .mdc rule is invalid: {problems}")
        return [Planned(Path(".cursor/rules/flodl-port.mdc"), rule), *shared]
    section = _render("adapters/agents-section.md", version, shared_dir)
    target = "AGENTS.md" if tool == "codex" else ".github/copilot-instructions.md"
    return [Planned(Path(target), section, f"flodl:{skill.name}"), *shared]


def _render(adapter: str, version: str, skill_dir: str) -> str:
    text = read_skill_file(adapter)
    return text.replace("{flodl_version}", version).replace("{skill_dir}", skill_dir)


# -- applying a plan ------------------------------------------------------------------------
def merged_text(current: str | None, planned: Planned, path: Path) -> str:
    """The file's new text: the whole content, or ``current`` with the section replaced/added."""
    if planned.section is None:
        return planned.content
    begin, end = _markers(planned.section)
    block = f"{begin}\n{planned.content.rstrip()}\n{end}\n"
    if not current:
        return block
    begin_re = re.compile(rf"^<!-- {re.escape(planned.section)}:begin\b.*$", re.MULTILINE)
    end_re = re.compile(rf"^<!-- {re.escape(planned.section)}:end -->[ \t]*\n?", re.MULTILINE)
    starts, ends = list(begin_re.finditer(current)), list(end_re.finditer(current))
    if not starts and not ends:
        separator = "" if current.endswith("\n\n") else ("\n" if current.endswith("\n") else "\n\n")
        return current + separator + block
    if len(starts) != 1 or len(ends) != 1 or ends[0].start() < starts[0].start():
        raise FdlError(
            f"{path}: the flodl section markers are damaged "
            f"({len(starts)} begin, {len(ends)} end marker(s))",
            f"restore or delete the lines '{begin.split(' (')[0]} ...' and '{end}', then re-run",
        )
    return current[: starts[0].start()] + block + current[ends[0].end() :]


def _read_existing(path: Path) -> str | None:
    """The text of a file an install would write, or None when there is none yet."""
    if not path.exists():
        return None
    if not path.is_file():
        raise FdlError(
            f"{path} exists but is not a file",
            "move it out of the way (fdl skill install writes a file there), then re-run",
        )
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise FdlError(
            f"{path} is not UTF-8 text", "convert it to UTF-8 or move it aside, then re-run"
        ) from None
    except OSError as err:
        raise FdlError(
            f"cannot read {path}: {err.strerror or err}", "check the file's permissions"
        ) from err


def install(project: Path, tool: str, skill: Skill, version: str) -> list[tuple[Path, str]]:
    """Write ``tool``'s files for ``skill``; returns (path, created|updated|unchanged)."""
    if not project.is_dir():
        raise FdlUsageError(f"{project}: no such directory", "pass an existing project directory")
    results = []
    for planned in plan(tool, skill, version):
        path = project / planned.path
        current = _read_existing(path)
        new = merged_text(current, planned, path)
        if current == new:
            results.append((path, "unchanged"))
            continue
        # a shared file keeps its line endings (a CRLF AGENTS.md stays CRLF, our section too)
        newline = newline_of(path) if planned.section is not None else "\n"
        try:
            atomic_write(path, new, newline=newline)
        except OSError as err:
            raise FdlError(
                f"cannot write {path}: {err.strerror or err}",
                "check the directory's permissions",
                ExitCode.FAILURE,
            ) from err
        results.append((path, "created" if current is None else "updated"))
    return results


def status(project: Path, tool: str, skill: Skill, version: str) -> str:
    """``installed`` (up to date), ``outdated`` or ``not installed``."""
    states = []
    for planned in plan(tool, skill, version):
        path = project / planned.path
        current = _read_existing(path)
        if current is None:
            states.append("missing")
            continue
        if (
            planned.section is not None
            and _markers(planned.section)[0].split(" (")[0] not in current
        ):
            states.append("missing")
            continue
        try:
            same = merged_text(current, planned, path) == current
        except FdlError:
            same = False
        states.append("ok" if same else "stale")
    if states[0] == "missing":  # the tool's own adapter; shared files may come from another tool
        return "not installed"
    return "installed" if all(s == "ok" for s in states) else "outdated"
