"""Every ```python block in docs/*.md and README.md runs, in order, one namespace per page.

A block whose info string is ``python no-run`` is shown but not executed (use it only for code that
needs hardware this machine lacks, e.g. several GPUs, and say so next to it). One whose info string
names a torch release, ``python torch>=2.6``, runs where the installed torch is that release or
newer (say next to it why older ones cannot).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from flodl._torch_release import TORCH_RELEASE

REPO_ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted([*REPO_ROOT.glob("docs/**/*.md"), REPO_ROOT / "README.md"])
FENCE = re.compile(r"^```(?P<info>[^\n]*)\n(?P<body>.*?)^```\s*$", re.MULTILINE | re.DOTALL)


NEEDS_TORCH = re.compile(r"^torch>=(\d+)\.(\d+)$")


def runs_here(info: list[str], torch_release: tuple[int, int]) -> bool:
    """Whether a block with this info string runs under ``torch_release``."""
    if info[:1] != ["python"] or "no-run" in info:
        return False
    for word in info[1:]:
        needed = NEEDS_TORCH.match(word)
        if needed and torch_release < (int(needed[1]), int(needed[2])):
            return False
    return True


def python_blocks(
    page: Path, torch_release: tuple[int, int] = TORCH_RELEASE
) -> list[tuple[int, str]]:
    """(line number, source) of each python block on ``page`` that runs under ``torch_release``."""
    text = page.read_text(encoding="utf-8")
    blocks = []
    for match in FENCE.finditer(text):
        if runs_here(match.group("info").strip().split(), torch_release):
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
    page.write_text(
        "x\n```python\na = 1\n```\n```python no-run\nb\n```\n```bash\nc\n```\n"
        "```python torch>=2.6\nd = 2\n```\n"
    )
    assert python_blocks(page, (2, 6)) == [(3, "a = 1\n"), (12, "d = 2\n")]
    assert python_blocks(page, (2, 15)) == [(3, "a = 1\n"), (12, "d = 2\n")]
    assert python_blocks(page, (2, 5)) == [(3, "a = 1\n")]


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
