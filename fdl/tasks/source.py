"""Read a manifest file into plain Python data, remembering where every key was written.

PyYAML's composer gives nodes with positions; we build the data ourselves so that every error
about the manifest can say ``fdl.yml:12: commands.test.run: ...`` — and so duplicate keys, which
PyYAML silently accepts (the last one wins), become an error instead of a surprise.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fdl.errors import ExitCode, FdlError

KeyPath = tuple[str | int, ...]


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


class ManifestError(FdlError):
    """A manifest that cannot be used: names the file, the line and the key."""

    def __init__(self, source: Source | Path, key: KeyPath, problem: str, hint: str | None = None):
        where = source.where(key) if isinstance(source, Source) else str(source)
        dotted = dotted_key(key)
        what = f"{where}: {dotted}: {problem}" if dotted else f"{where}: {problem}"
        super().__init__(what, hint or "fix the manifest and run again", ExitCode.FAILURE)


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

    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise FdlError(
            f"cannot read {path}: {err.strerror}", "check the file's permissions"
        ) from err
    except UnicodeDecodeError as err:
        raise ManifestError(path, (), "is not UTF-8 text", "save it as UTF-8") from err
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        source = Source(path, None)
        source.data = {} if node is None else _build(loader, node, (), source)
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


def _build(loader: Any, node: Any, key: KeyPath, source: Source) -> Any:
    import yaml

    if isinstance(node, yaml.MappingNode):
        loader.flatten_mapping(node)  # resolve YAML merge keys (<<: *anchor)
        result: dict[str, Any] = {}
        for key_node, value_node in node.value:
            name = loader.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            if not isinstance(name, str | int | float | bool) or isinstance(name, bool):
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
            result[name] = _build(loader, value_node, (*key, name), source)
        return result
    if isinstance(node, yaml.SequenceNode):
        items = []
        for index, item in enumerate(node.value):
            source.lines[(*key, index)] = item.start_mark.line + 1
            items.append(_build(loader, item, (*key, index), source))
        return items
    return loader.construct_object(node, deep=True)
