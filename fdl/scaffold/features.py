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
    flodl dependency); True when the file changed."""
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
    current = next((d for d in deps if isinstance(d, str) and _is_flodl(d)), None)
    if current is not None:
        new = with_extra(current, extra)
        if new == current:
            return False
        for quote in ('"', "'"):
            literal = f"{quote}{current}{quote}"
            if literal in text:
                text = text.replace(literal, f"{quote}{new}{quote}", 1)
                break
        else:
            raise FdlError(f"{pyproject}: cannot find {current!r} to edit", "add the extra by hand")
    else:
        m = re.search(r"^dependencies\s*=\s*\[", text, re.MULTILINE)
        if m is None:
            raise FdlError(f"{pyproject}: cannot find the dependencies list", "add it by hand")
        closing = text.index("]", m.end())
        inner = text[m.end() : closing].strip()
        addition = f'"flodl[{extra}]"'
        text = text[: m.end()] + (f"{addition}, " if inner else addition) + text[m.end() :]
    pyproject.write_text(text, encoding="utf-8")
    return True


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


def report(name: str, changes: list[Change], say: Reporter, root: Path) -> None:
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
        say("Next:\n" + "\n".join(f"  {step}" for step in steps))
