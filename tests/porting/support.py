"""Shared helpers for the porting tests: the live API and the guide's code blocks."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

from fdl.apiref import ApiReference, load_reference
from fdl.porting.static import Finding, check_source

REPO = Path(__file__).resolve().parents[2]
GUIDE = REPO / "porting_skill" / "guide.md"
CORPUS = Path(__file__).resolve().parent / "corpus"
FENCE = re.compile(r"^```(?P<info>[^\n]*)\n(?P<body>.*?)^```\s*$", re.MULTILINE | re.DOTALL)


@cache
def live_api() -> ApiReference:
    """The flodl of this checkout, extracted fresh (what users of this build get)."""
    return load_reference(REPO, use_cache=False)


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
