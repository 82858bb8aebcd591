"""Split a docstring into prose and examples (fenced code blocks and doctest runs)."""

from __future__ import annotations

import re
import textwrap

_FENCE = re.compile(r"^[ \t]*```[^\n]*\n(.*?)^[ \t]*```[ \t]*$\n?", re.MULTILINE | re.DOTALL)
_EXAMPLE_HEADER = re.compile(r"^\s*Examples?:\s*$")


def split_examples(docstring: str) -> tuple[str, list[str]]:
    """``(prose, examples)``: examples are fenced blocks and ``>>>`` runs with their output.

    >>> split_examples("Add.\\n\\n>>> 1 + 1\\n2\\n")
    ('Add.', ['>>> 1 + 1\\n2'])
    """
    examples = [textwrap.dedent(m.group(1)).rstrip() for m in _FENCE.finditer(docstring)]
    prose: list[str] = []
    block: list[str] = []
    indent = 0
    for line in [*_FENCE.sub("", docstring).splitlines(), ""]:
        stripped = line.strip()
        if stripped.startswith(">>>") and not block:
            indent = len(line) - len(line.lstrip())
            block.append(line[indent:])
        elif block and stripped:
            block.append(line[indent:] if not line[:indent].strip() else stripped)
        elif block:
            examples.append("\n".join(block))
            block = []
        else:
            prose.append(line)
    kept = [line for line in prose if not _EXAMPLE_HEADER.match(line)]
    text = re.sub(r"\n{3,}", "\n\n", "\n".join(kept)).strip()
    return text, examples
