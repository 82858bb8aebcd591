"""Shared helpers for the porting tests: the pending-API list and the guide's code blocks."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

from fdl.apiref import ApiReference, load_reference
from fdl.porting.static import ApiIndex, Finding, check_source

REPO = Path(__file__).resolve().parents[2]
GUIDE = REPO / "porting_skill" / "guide.md"
PENDING = REPO / "porting_skill" / "pending_api.txt"
CORPUS = Path(__file__).resolve().parent / "corpus"
FENCE = re.compile(r"^```(?P<info>[^\n]*)\n(?P<body>.*?)^```\s*$", re.MULTILINE | re.DOTALL)


@cache
def live_api() -> ApiReference:
    """The flodl of this checkout, extracted fresh (what users of this build get)."""
    return load_reference(REPO, use_cache=False)


def pending_names() -> list[str]:
    lines = PENDING.read_text(encoding="utf-8").splitlines()
    return [line.split("#", 1)[0].strip() for line in lines if line.split("#", 1)[0].strip()]


def python_blocks(page: Path) -> list[tuple[int, list[str], str]]:
    """(first line, info words, source) of every ```python block."""
    text = page.read_text(encoding="utf-8")
    blocks = []
    for match in FENCE.finditer(text):
        info = match.group("info").split()
        if info[:1] == ["python"]:
            blocks.append((text.count("\n", 0, match.start()) + 2, info, match.group("body")))
    return blocks


def page_as_script(page: Path) -> str:
    """The page's python blocks as one script whose line numbers are the page's."""
    lines = [""] * (page.read_text(encoding="utf-8").count("\n") + 1)
    for first, _, body in python_blocks(page):
        for i, line in enumerate(body.splitlines()):
            lines[first - 1 + i] = line
    return "\n".join(lines)


def findings_for(source: str, name: str, ref: ApiReference) -> list[Finding]:
    return check_source(source, name, ref)[0]


def pending_used_by(path: Path) -> list[str]:
    """The pending names ``path`` uses (a test of it waits for them)."""
    used = {f.target for f in findings_for(path.read_text(), str(path), live_api())}
    return sorted(used & set(pending_names()))


def api_has(ref: ApiReference, path: str) -> bool:
    """Whether ``path`` (a module, a public name, or Class.member) exists in ``ref``."""
    index = ApiIndex(ref)
    if path in index.modules:  # a module counts once `import flodl` makes it reachable
        return path in index.loaded
    if path in index.entries:
        return True
    parent, _, name = path.rpartition(".")
    if parent in index.modules:
        return name in index.modules[parent]
    entry = index.entries.get(parent)
    return entry is not None and name in entry.members()
