"""docs/getting-started.md runs as written: every ```bash block, in order, in one shell."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.scaffold.generated import saved_epoch, shell

PAGE = Path(__file__).resolve().parents[2] / "docs" / "getting-started.md"
BLOCK = re.compile(r"^```bash\n(?P<body>.*?)^```\s*$", re.MULTILINE | re.DOTALL)


def bash_blocks() -> list[str]:
    return [match.group("body") for match in BLOCK.finditer(PAGE.read_text(encoding="utf-8"))]


def test_the_page_walks_through_init_train_resume_and_ci():
    script = "".join(bash_blocks())
    for step in ("fdl init my-model", "--resume", "fdl --env ci test", "fdl config show ci"):
        assert step in script


@pytest.mark.slow
def test_getting_started_runs(tmp_path):
    result = shell("".join(bash_blocks()), tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    checkpoints = tmp_path / "my-model" / "checkpoints"
    assert saved_epoch(checkpoints) == 2
    assert "resumed from checkpoints" in result.stdout
    assert "# fdl.ci.yml:" in result.stdout  # config show ci: provenance of the overlay


def test_the_page_starts_with_the_library_then_the_cli():
    # The python blocks run in tests/test_docs.py; here: the walkthrough comes first, and
    # covers a graph, the Monitor and a checkpoint round-trip, before any fdl command.
    text = PAGE.read_text(encoding="utf-8")
    first_python, first_bash = text.index("```python"), text.index("```bash")
    assert first_python < first_bash
    library = text[:first_bash]
    for step in ("fl.FlowBuilder(", ".build()", "fl.Monitor(", "monitor.log(",
                 ".save_checkpoint(", ".load_checkpoint(", "start_epoch="):  # fmt: skip
        assert step in library, step
