"""Every ```python block in docs/*.md and README.md runs, in order, one namespace per page.

A block whose info string is ``python no-run`` is shown but not executed (use it only for code that
needs hardware this machine lacks, e.g. several GPUs, and say so next to it).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted([*REPO_ROOT.glob("docs/**/*.md"), REPO_ROOT / "README.md"])
FENCE = re.compile(r"^```(?P<info>[^\n]*)\n(?P<body>.*?)^```\s*$", re.MULTILINE | re.DOTALL)


def python_blocks(page: Path) -> list[tuple[int, str]]:
    """(line number, source) of each runnable python block on ``page``."""
    text = page.read_text(encoding="utf-8")
    blocks = []
    for match in FENCE.finditer(text):
        info = match.group("info").strip().split()
        if info[:1] == ["python"] and "no-run" not in info:
            blocks.append((text.count("\n", 0, match.start()) + 2, match.group("body")))
    return blocks


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_page_examples_run(page, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # examples that write files write them here
    monkeypatch.setenv("FLODL_DOCS_TEST", "1")
    namespace: dict[str, object] = {"__name__": "__docs__"}
    for line, source in python_blocks(page):
        code = compile(source, f"{page.relative_to(REPO_ROOT)}:{line}", "exec")
        exec(code, namespace)
    assert os.getcwd() == str(tmp_path)


def test_the_harness_finds_blocks(tmp_path):
    page = tmp_path / "p.md"
    page.write_text("x\n```python\na = 1\n```\n```python no-run\nb\n```\n```bash\nc\n```\n")
    assert python_blocks(page) == [(3, "a = 1\n")]


LINK = re.compile(r"\[[^\]]*\]\((?P<target>[^)\s]+)\)")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_relative_links_resolve(page):
    """Every relative link on the page names a file or folder of the repository."""
    text = FENCE.sub("", page.read_text(encoding="utf-8"))  # code blocks hold no links
    broken = []
    for match in LINK.finditer(text):
        target = match.group("target").split("#", 1)[0]
        if not target or re.match(r"^[a-z][a-z0-9+.-]*:", target):  # an anchor or a URL
            continue
        if not (page.parent / target).exists():
            broken.append(match.group(0))
    assert not broken, f"links to nothing: {broken}"


def test_the_link_check_sees_a_broken_link(tmp_path):
    page = tmp_path / "p.md"
    page.write_text("[ok](p.md) [gone](nowhere.md) [web](https://example.org)\n")
    with pytest.raises(AssertionError, match=r"nowhere\.md"):
        test_relative_links_resolve(page)
