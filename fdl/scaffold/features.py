"""Optional features ``fdl add FEATURE`` puts into an existing project (and ``fdl init
--with-FEATURE`` into a new one): a dependency extra in ``pyproject.toml`` plus example files.

Adding is idempotent: a feature already present changes nothing, and an existing file is never
overwritten.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from fdl.errors import ExitCode, FdlError, FdlUsageError
from fdl.resources import bundled_dir


@dataclass(frozen=True)
class Feature:
    name: str
    summary: str
    extra: str  # the flodl extra it needs ("" for none)
    files: dict[str, str]  # project path -> path under scaffold_templates/features/<name>/
    next_steps: tuple[str, ...] = ()  # "{install}": the project's install command


FEATURES: dict[str, Feature] = {
    "hf": Feature(
        name="hf",
        summary="HuggingFace encoders as flodl graphs (BERT, RoBERTa, DistilBERT, ALBERT, "
        "XLM-R, DeBERTa-v2): the flodl[hf] extra and examples/hf_classify.py",
        extra="hf",
        files={"examples/hf_classify.py": "hf_classify.py"},
        next_steps=(
            "{install}  # installs flodl[hf] (safetensors, huggingface_hub, tokenizers)",
            'python examples/hf_classify.py MODEL_DIR_OR_HUB_ID "a text to classify"',
        ),
    ),
}


@dataclass
class Change:
    path: str
    status: str  # "updated", "created", "unchanged", "kept" (exists, left as it is)


def feature(name: str) -> Feature:
    if name not in FEATURES:
        raise FdlUsageError(
            f"unknown feature '{name}'", f"available: {', '.join(sorted(FEATURES))}"
        )
    return FEATURES[name]


def find_project(start: Path) -> Path:
    """The nearest directory at or above ``start`` with a ``pyproject.toml``."""
    start = start.resolve()
    for folder in (start, *start.parents):
        if (folder / "pyproject.toml").is_file():
            return folder
    raise FdlError(
        f"no pyproject.toml at or above {start}",
        "run 'fdl add' inside a Python project (e.g. one made by 'fdl init')",
        ExitCode.UNAVAILABLE,
    )


_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(\[([^\]]*)\])?")


def with_extra(requirement: str, extra: str) -> str:
    """``requirement`` with ``extra`` among its extras (``flodl>=0.1`` → ``flodl[hf]>=0.1``).

    >>> with_extra("flodl>=0.1,<0.2", "hf"), with_extra("flodl[gpu]", "hf")
    ('flodl[hf]>=0.1,<0.2', 'flodl[gpu,hf]')
    """
    m = _NAME.match(requirement)
    assert m is not None
    extras = [e.strip() for e in (m.group(3) or "").split(",") if e.strip()]
    if extra in extras:
        return requirement
    extras.append(extra)
    return f"{m.group(1)}[{','.join(extras)}]{requirement[m.end() :]}"


def _is_flodl(requirement: str) -> bool:
    m = _NAME.match(requirement)
    return m is not None and m.group(1).lower().replace("_", "-") == "flodl"


def add_extra(pyproject: Path, extra: str) -> bool:
    """Give the project's flodl dependency ``extra`` (adding ``flodl[extra]`` when it has no
    flodl dependency); True when the file changed.

    The entry edited is the one TOML parses in ``[project] dependencies``, not the first text
    that looks like it (a comment may quote it): the array is found in the text, its strings
    are matched one by one with what ``tomllib`` reads, and only that string's text changes,
    the rest of the file as it was. The result is parsed again; anything else is refused.
    """
    text = pyproject.read_text(encoding="utf-8")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise FdlError(f"{pyproject}: not valid TOML ({err})", "fix the file first") from err
    deps = data.get("project", {}).get("dependencies")
    if not isinstance(deps, list):
        raise FdlError(
            f"{pyproject} has no [project] dependencies list",
            'add one, e.g. dependencies = ["flodl"], then run again',
        )
    index = next((i for i, d in enumerate(deps) if isinstance(d, str) and _is_flodl(d)), None)
    if index is not None:
        new = with_extra(deps[index], extra)
        if new == deps[index]:
            return False
        wanted = [*deps[:index], new, *deps[index + 1 :]]
        what = f"add the extra by hand: {deps[index]!r} -> {new!r}"
    else:
        new = f"flodl[{extra}]"
        wanted = [new, *deps]
        what = f"add {new!r} to [project] dependencies by hand"
    edited = _edit_dependencies(text, deps, index, extra)
    if edited is None or _dependencies(edited) != wanted:
        raise FdlError(f"{pyproject}: cannot find its [project] dependencies to edit", what)
    pyproject.write_text(edited, encoding="utf-8")
    return True


def _dependencies(text: str) -> object:
    try:
        return tomllib.loads(text).get("project", {}).get("dependencies")
    except tomllib.TOMLDecodeError:
        return None


_TABLE = re.compile(r"^[ \t]*\[(\[)?[ \t]*([^\]]*?)[ \t]*\]")
_DEPENDENCIES = re.compile(r"^[ \t]*dependencies[ \t]*=[ \t]*\[")


def _edit_dependencies(text: str, deps: list, index: int | None, extra: str) -> str | None:
    """``text`` with entry ``index`` of ``[project] dependencies`` given ``extra`` (or, with
    ``index`` None, ``flodl[extra]`` put first), or None when the array's text is not as
    ``tomllib`` read it."""
    table, offset, found = "", 0, None
    for line in text.splitlines(keepends=True):
        header = _TABLE.match(line)
        if header:
            table = "" if header.group(1) else header.group(2)
        elif table == "project" and (match := _DEPENDENCIES.match(line)):
            found = offset + match.end()
            break
        offset += len(line)
    if found is None:
        return None
    strings = _array_strings(text, found)
    if strings is None or len(strings) != len(deps):
        return None
    for (a, b), dep in zip(strings, deps, strict=True):
        try:
            if tomllib.loads(f"v = {text[a:b]}")["v"] != dep:
                return None
        except tomllib.TOMLDecodeError:
            return None
    if index is not None:
        a, b = strings[index]
        quote = text[a]
        if text.startswith(quote * 3, a):
            return None  # a multi-line string: leave it to a person
        return text[:a] + quote + with_extra(text[a + 1 : b - 1], extra) + text[b - 1 :]
    new = f'"flodl[{extra}]"'
    if not strings:
        return text[:found] + new + text[found:]
    a = strings[0][0]
    line_start = text.rfind("\n", found, a)
    separator = "\n" + text[line_start + 1 : a] if line_start >= 0 else " "
    return text[:a] + new + "," + separator + text[a:]


def _array_strings(text: str, start: int) -> list[tuple[int, int]] | None:
    """The (start, end) of each string literal in the TOML array whose ``[`` ends at ``start``,
    skipping comments; None when the array does not close or holds something else."""
    spans: list[tuple[int, int]] = []
    i = start
    while i < len(text):
        char = text[i]
        if char == "]":
            return spans
        if char == "#":
            newline = text.find("\n", i)
            i = len(text) if newline < 0 else newline
        elif char in "\"'":
            quote = char * 3 if text.startswith(char * 3, i) else char
            j = i + len(quote)
            while j < len(text) and not text.startswith(quote, j):
                if char == '"' and text[j] == "\\":
                    j += 1  # an escape: the next character never ends the string
                elif len(quote) == 1 and text[j] == "\n":
                    return None
                j += 1
            if j >= len(text):
                return None
            spans.append((i, j + len(quote)))
            i = j + len(quote)
        elif char in " \t\r\n,":
            i += 1
        else:
            return None  # not a string: not a dependencies array fdl edits
    return None


def add(root: Path, name: str) -> list[Change]:
    """Add feature ``name`` to the project at ``root``; what changed, file by file."""
    spec = feature(name)
    changes = []
    if spec.extra:
        changed = add_extra(root / "pyproject.toml", spec.extra)
        changes.append(Change("pyproject.toml", "updated" if changed else "unchanged"))
    source = bundled_dir("scaffold_templates") / "features" / spec.name
    for target, template in spec.files.items():
        path = root / target
        content = (source / template).read_bytes()
        if path.exists():
            changes.append(Change(target, "unchanged" if path.read_bytes() == content else "kept"))
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
        changes.append(Change(target, "created"))
    return changes


Reporter = Callable[[str], None]


def install_command(root: Path) -> str:
    """The project's editable install, as its README gives it: with ``constraints.txt`` (the
    torch build for the machine, a bundled flodl) when it has one, which a bare
    ``pip install -e .`` would ignore."""
    if (root / "constraints.txt").is_file():
        return "pip install -c constraints.txt -e ."
    return "pip install -e ."


# The images install the project when built, and fdl builds one only when it is missing
# (fdl.tasks.docker): new dependencies reach the containers once the images are rebuilt.
REBUILD_COMMAND = "docker compose build  # rebuilds the images with the new dependencies"


def is_docker_project(root: Path) -> bool:
    """Whether the project runs its tasks in Docker images: the mode ``fdl init`` recorded in
    ``.fdl/project.toml``, or, without that file, a ``docker-compose.yml``."""
    answers = root / ".fdl" / "project.toml"
    try:
        mode = tomllib.loads(answers.read_text(encoding="utf-8"))["answers"]["mode"]
    except (OSError, tomllib.TOMLDecodeError, KeyError, TypeError):
        return (root / "docker-compose.yml").is_file()
    return mode == "docker"


def report(
    name: str, changes: list[Change], say: Reporter, root: Path, *, images_built: bool = True
) -> None:
    """Say what changed and what to run next; ``images_built`` False: a new project, whose
    Docker images are built on first use with the feature already in."""
    spec = feature(name)
    if all(c.status in ("unchanged", "kept") for c in changes):
        say(f"'{name}' is already in this project: nothing to do")
    for c in changes:
        note = "  (exists with your edits; left as it is)" if c.status == "kept" else ""
        if c.status != "unchanged":
            say(f"  {c.status:<8} {c.path}{note}")
    if any(c.status in ("updated", "created") for c in changes) and spec.next_steps:
        install = install_command(root)
        steps = [step.format(install=install) for step in spec.next_steps]
        new_dependency = any(c.path == "pyproject.toml" and c.status == "updated" for c in changes)
        if images_built and new_dependency and is_docker_project(root):
            steps.insert(1, REBUILD_COMMAND)
        say("Next:\n" + "\n".join(f"  {step}" for step in steps))
