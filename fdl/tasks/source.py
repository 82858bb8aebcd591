"""Read a manifest file into plain Python data, remembering where every key was written.

PyYAML's composer gives nodes with positions; we build the data ourselves so that every error
about the manifest can say ``fdl.yml:12: commands.test.run: ...`` — and so duplicate keys, which
PyYAML silently accepts (the last one wins), become an error instead of a surprise.

Loading is bounded, because any cloned repository can ship a manifest and ``fdl --help`` reads it:

- a file larger than :data:`MAX_BYTES` (``FDL_MANIFEST_MAX_BYTES``, default 256 KiB) is refused
  before it is parsed;
- YAML anchors and aliases (``&a`` / ``*a``, and ``<<: *a`` merge keys) are expanded while the
  data is built (at most :data:`MAX_DEPTH` levels deep), and every node built counts against a budget of :data:`MAX_NODES`
  (``FDL_MANIFEST_MAX_NODES``, default 100,000): a few hundred bytes of nested aliases (a
  "billion laughs" document) stop at the budget with an error instead of growing without end.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fdl.errors import FdlError
from fdl.tasks.errors import ManifestError

KeyPath = tuple[str | int, ...]

MAX_BYTES = 256 * 1024
MAX_NODES = 100_000
MAX_DEPTH = 64


def _limit(variable: str, default: int) -> int:
    import os

    raw = os.environ.get(variable, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:  # never silently a limit of 1, which refuses every manifest
        raise FdlError(
            f"{variable}={raw!r} is not a positive whole number", f"unset it or give e.g. {default}"
        )
    return value


@dataclass
class Source:
    """One manifest file: its data and the 1-based line of each key path."""

    path: Path
    data: Any
    lines: dict[KeyPath, int] = field(default_factory=dict)

    def where(self, key: KeyPath = ()) -> str:
        """``fdl.yml:12`` for the line that wrote ``key`` (or its closest written parent)."""
        while key and key not in self.lines:
            key = key[:-1]
        line = self.lines.get(key)
        return f"{self.path}:{line}" if line else str(self.path)


def dotted_key(key: KeyPath) -> str:
    """``("commands", "test", "run")`` -> ``commands.test.run``; list indices as ``[0]``."""
    text = ""
    for part in key:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def read_source(path: Path) -> Source:
    """Parse ``path`` (YAML, or JSON — a subset of YAML) into a :class:`Source`.

    An empty file is an empty mapping. Syntax errors and duplicate keys raise
    :class:`ManifestError` with the line number.
    """
    import yaml

    max_bytes = _limit("FDL_MANIFEST_MAX_BYTES", MAX_BYTES)
    try:
        size = path.stat().st_size
        if size > max_bytes:
            raise FdlError(
                f"{path}: {size:,} bytes is too large for a manifest (limit {max_bytes:,})",
                "a manifest describes commands and is a few kilobytes; raise the limit with "
                "FDL_MANIFEST_MAX_BYTES=N if this file is really meant to be that large",
            )
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise FdlError(
            f"cannot read {path}: {err.strerror}", "check the file's permissions"
        ) from err
    except UnicodeDecodeError as err:
        raise ManifestError(path, (), "is not UTF-8 text", "save it as UTF-8") from err
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)(text)
    try:
        node = loader.get_single_node()
        source = Source(path, None)
        budget = _Budget(_limit("FDL_MANIFEST_MAX_NODES", MAX_NODES), source)
        source.data = {} if node is None else _build(loader, node, (), source, budget)
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        problem = " ".join(filter(None, [err.context, err.problem]))
        raise FdlError(f"{where}: invalid YAML: {problem}", "fix the syntax and run again") from err
    except yaml.YAMLError as err:
        raise FdlError(f"{path}: invalid YAML: {err}", "fix the syntax and run again") from err
    finally:
        loader.dispose()
    return source


class _Budget:
    """Counts the nodes built (aliases count each time they are expanded)."""

    def __init__(self, limit: int, source: Source):
        self.left = limit
        self.limit = limit
        self.source = source

    def spend(self, node: Any) -> None:
        self.left -= 1
        if self.left < 0:
            raise ManifestError(
                self.source,
                (),
                f"line {node.start_mark.line + 1}: expanding YAML aliases gives more than "
                f"{self.limit:,} values",
                "nested anchors/aliases multiply (each '*alias' copies its anchor); write the "
                "values out, or raise FDL_MANIFEST_MAX_NODES=N if this is intended",
            )


def _build(
    loader: Any, node: Any, key: KeyPath, source: Source, budget: _Budget, depth: int = 0
) -> Any:
    import yaml

    budget.spend(node)
    if depth > MAX_DEPTH:
        line = node.start_mark.line + 1
        raise ManifestError(
            source,
            (),
            f"line {line}: nested more than {MAX_DEPTH} levels deep (or an alias refers to itself)",
            "flatten the structure",
        )
    if isinstance(node, yaml.MappingNode):
        result: dict[str, Any] = {}
        merged: dict[str, Any] = {}  # values from '<<' merge keys: explicit keys win over them
        for key_node, value_node in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                sources = (
                    value_node.value if isinstance(value_node, yaml.SequenceNode) else [value_node]
                )
                for merge_node in sources:
                    if not isinstance(merge_node, yaml.MappingNode):
                        line = merge_node.start_mark.line + 1
                        raise ManifestError(source, key, f"line {line}: '<<' merges only mappings")
                    for name, value in _build(
                        loader, merge_node, key, source, budget, depth + 1
                    ).items():
                        merged.setdefault(name, value)  # the first merged mapping wins (YAML spec)
                continue
            name = loader.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            if isinstance(name, bool):  # YAML 1.1: unquoted on/off/yes/no are booleans
                written = str(key_node.value)
                source.lines[(*key, written)] = line
                raise ManifestError(
                    source,
                    (*key, written),
                    f"YAML reads the key '{written}' as the boolean {str(name).lower()}",
                    f'quote it: "{written}":',
                )
            if not isinstance(name, str | int | float):
                raise ManifestError(source, key, f"line {line}: keys must be plain names")
            name = str(name)
            if name in result:
                first = source.lines[(*key, name)]
                raise ManifestError(
                    source,
                    (),
                    f"line {line}: duplicate key {dotted_key((*key, name))!r} "
                    f"(first set on line {first})",
                    "keep one of them",
                )
            source.lines[(*key, name)] = line
            result[name] = _build(loader, value_node, (*key, name), source, budget, depth + 1)
        return {**{k: v for k, v in merged.items() if k not in result}, **result}
    if isinstance(node, yaml.SequenceNode):
        items = []
        for index, item in enumerate(node.value):
            source.lines[(*key, index)] = item.start_mark.line + 1
            items.append(_build(loader, item, (*key, index), source, budget, depth + 1))
        return items
    return loader.construct_object(node, deep=True)
