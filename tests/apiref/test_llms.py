"""The llms.txt validator accepts the llmstxt.org shape and rejects everything else."""

from __future__ import annotations

import pytest

from fdl.apiref.llms import validate_llms_txt

GOOD = """# flodl

> A summary.

Some notes, no headings.

## Graph

- [fl.FlowBuilder](llms-full.txt#flflowbuilder): Describe a network.
- [fl.Graph](llms-full.txt#flgraph)

## Optional

- [Full reference](llms-full.txt): everything
"""


def test_the_reference_shape_is_valid():
    assert validate_llms_txt(GOOD) == []


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (GOOD.replace("# flodl\n", "flodl\n", 1), "the first line must be an H1"),
        (GOOD.replace("> A summary.", "A summary."), "expected the '> summary' blockquote"),
        (GOOD.replace("## Graph", "### Graph"), "only H2 headings may follow the summary"),
        (GOOD.replace("## Graph", "# Graph"), "only one H1 is allowed"),
        (
            GOOD.replace("- [fl.Graph](llms-full.txt#flgraph)", "- fl.Graph"),
            "only '- [title](url): note' items",
        ),
        (GOOD + "\n## Late\n\n- [x](y)\n", "the 'Optional' section must come last"),
    ],
)
def test_malformed_files_are_rejected(text, problem):
    assert any(problem in p for p in validate_llms_txt(text)), validate_llms_txt(text)
