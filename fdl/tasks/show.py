"""``fdl config show``: the merged manifest, each value tagged with the file and line that set it.

::

    description: demo                    # fdl.yml:1
    commands:
      test:
        run: pytest -x                    # fdl.ci.yml:3
"""

from __future__ import annotations

from typing import Any

from fdl.tasks.layers import Merged, Origin
from fdl.tasks.source import KeyPath

INLINE_WIDTH = 80


def provenance(merged: Merged, key: KeyPath, origin: Origin) -> str:
    """``fdl.ci.yml:3`` for a leaf written by layer ``origin`` at ``key``."""
    assert isinstance(origin, int)
    layer = merged.layers[origin]
    line = layer.lines.get(key)
    return f"{layer.path.name}:{line}" if line else layer.path.name


def scalar(value: Any) -> str:
    """A YAML scalar, quoted only when it would otherwise read back as something else."""
    import yaml

    text = yaml.safe_dump(value, default_flow_style=True, width=10**9, allow_unicode=True)
    return text.removesuffix("\n").removesuffix("\n...").strip()


def render(merged: Merged) -> str:
    """The merged data as YAML with aligned ``# file:line`` comments on every value."""
    rows: list[tuple[str, str | None]] = []
    _mapping(merged, merged.data, merged.origin, (), 0, rows)
    width = max([12, *(len(body) for body, note in rows if note)]) + 2
    return "\n".join(f"{body.ljust(width)}# {note}" if note else body for body, note in rows)


def _mapping(
    merged: Merged,
    data: dict[str, Any],
    origin: dict[str, Origin],
    key: KeyPath,
    indent: int,
    rows: list[tuple[str, str | None]],
) -> None:
    pad = " " * indent
    for name, value in data.items():
        path = (*key, name)
        label = f"{pad}{name if _bare(name) else scalar(name)}:"
        sub = origin.get(name, 0)
        if isinstance(value, dict) and value and isinstance(sub, dict):
            rows.append((label, None))
            _mapping(merged, value, sub, path, indent + 2, rows)
            continue
        note = provenance(merged, path, sub if isinstance(sub, int) else _first(sub))
        if isinstance(value, str) and "\n" in value:
            rows.append((f"{label} |", note))
            rows.extend((f"{pad}  {line}", None) for line in value.rstrip("\n").split("\n"))
        elif isinstance(value, list):
            inline = f"{label} [{', '.join(scalar(v) for v in value)}]"
            if all(not isinstance(v, dict | list) for v in value) and len(inline) <= INLINE_WIDTH:
                rows.append((inline, note))
            else:
                rows.append((label, note))
                rows.extend((f"{pad}  - {scalar(v)}", None) for v in value)
        else:
            rows.append((f"{label} {scalar(value)}", note))


def _first(origin: Origin) -> int:
    while isinstance(origin, dict):
        origin = next(iter(origin.values()), 0)
    return origin


def _bare(name: str) -> bool:
    return bool(name) and all(c.isalnum() or c in "_-." for c in name)


def as_json(merged: Merged) -> dict[str, Any]:
    """The merged config and, for every leaf, the ``file:line`` that set it."""
    sources: dict[str, str] = {}

    def walk(data: Any, origin: Origin, key: KeyPath) -> None:
        if isinstance(data, dict) and data and isinstance(origin, dict):
            for name, value in data.items():
                walk(value, origin.get(name, 0), (*key, name))
        else:
            dotted = ".".join(str(k) for k in key)
            sources[dotted] = provenance(
                merged, key, origin if isinstance(origin, int) else _first(origin)
            )

    walk(merged.data, merged.origin, ())
    return {
        "files": [str(layer.path) for layer in merged.layers],
        "config": merged.data,
        "sources": sources,
    }
