"""Comments, docstrings and docs are self-contained: nothing points to a file outside the repository.

The project was written against design notes that are not part of the repository (a design
contract, behavioural notes with numbered sections and checklists, seed files). A sentence such
as "see DESIGN.md §3.5" or "reference §7, items 56-88" tells a reader nothing, so the text must
say the thing itself. This test scans every text file of the repository for such pointers and
names each one by file and line.
"""

from __future__ import annotations

import re
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
# Everything shipped or read by people: the packages, their tests, docs, examples, benchmarks,
# templates and the top-level files.
SCANNED = (
    "flodl",
    "fdl",
    "benchmarks",
    "examples",
    "docs",
    "tests",
    "porting_skill",
    "scaffold_templates",
    ".ci",
    "README.md",
    "Makefile",
    "pyproject.toml",
)
# This file must spell the patterns it looks for.
SKIPPED = {"tests/test_self_contained.py"}

POINTERS = re.compile(
    r"DESIGN\.md"  # the design contract
    r"|(?<![\w/.-])reference/"  # behavioural notes: reference/<name>.md
    r"|(?<![\w/.-])seeds/"  # seed files
    r"|§\s*\d"  # a numbered section of one of those documents
    r"|\bchecklist(?: items?)? \d",  # a numbered checklist item of the behavioural notes
    re.IGNORECASE,
)

# Lines allowed to point outside the repository, as (path, the line's text without surrounding
# whitespace). Empty: an entry needs a reason, and one that no longer matches a line fails.
ALLOWED: set[tuple[str, str]] = set()


def text_files(root: Path):
    """Every readable text file under the scanned paths of ``root`` (relative path, text)."""
    for name in SCANNED:
        top = root / name
        paths = [top] if top.is_file() else sorted(top.rglob("*")) if top.is_dir() else []
        for path in paths:
            if not path.is_file() or "__pycache__" in path.parts:
                continue
            data = path.read_bytes()
            if b"\0" in data:  # binary: images, archives
                continue
            yield path.relative_to(root).as_posix(), data.decode("utf-8", errors="replace")


def pointers(root: Path) -> list[tuple[str, int, str]]:
    """Each line of ``root`` that points outside the repository: (path, line number, text)."""
    found = []
    for rel, text in text_files(root):
        if rel in SKIPPED:
            continue
        for number, line in enumerate(text.splitlines(), 1):
            if POINTERS.search(line):
                found.append((rel, number, line.strip()))
    return found


def test_no_comment_or_doc_points_outside_the_repository():
    found = pointers(REPO_ROOT)
    problems = [
        f"{path}:{number}: {line}" for path, number, line in found if (path, line) not in ALLOWED
    ]
    assert problems == [], "say the thing itself instead of pointing to:\n" + "\n".join(problems)
    stale = ALLOWED - {(path, line) for path, _, line in found}
    assert stale == set(), f"no longer in the repository, remove from ALLOWED: {sorted(stale)}"


def test_each_kind_of_pointer_is_found(tmp_path):
    (tmp_path / "flodl").mkdir()
    (tmp_path / "flodl" / "a.py").write_text(
        '"""Contract: DESIGN.md section 3."""\n'
        "# behaviour: see reference/original-training.md\n"
        "x = 1  # from seeds/monitor.md\n"
        "# the original's worker (reference §2.10)\n"
        "y = 2  # a reference to the tensor, seeds of a generator: fine\n"
    )
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "b.md").write_text("Outputs (checklist 32-33) are per rank.\n")
    (tmp_path / "docs" / "logo.png").write_bytes(b"\x89PNG\0DESIGN.md")  # binary: skipped
    assert pointers(tmp_path) == [
        ("flodl/a.py", 1, '"""Contract: DESIGN.md section 3."""'),
        ("flodl/a.py", 2, "# behaviour: see reference/original-training.md"),
        ("flodl/a.py", 3, "x = 1  # from seeds/monitor.md"),
        ("flodl/a.py", 4, "# the original's worker (reference §2.10)"),
        ("docs/b.md", 1, "Outputs (checklist 32-33) are per rank."),
    ]
