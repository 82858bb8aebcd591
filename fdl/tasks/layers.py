"""Layers of a manifest: ``inherit-from`` parents, environment overlays, and their deep merge.

``fdl --env ci test`` (or ``FDL_ENV=ci``, or ``fdl ci test``) reads ``fdl.yml``, then
``fdl.ci.yml`` on top. Merge rules: mappings merge key by key, the later layer wins; scalars and
lists are replaced whole; ``null`` in an overlay deletes the key. Every leaf remembers which layer
wrote it, so ``fdl config show`` can say where each value comes from and errors can point at
the right file and line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fdl.errors import ExitCode, FdlError
from fdl.tasks.source import KeyPath, ManifestError, Source, read_source

INHERIT_KEY = "inherit-from"
OVERLAY_EXTENSIONS = ("yml", "yaml", "json")
_ENV_FILE = re.compile(r"^fdl\.(?P<env>[A-Za-z0-9_-]+)\.(?:yml|yaml|json)$")

# Where a value came from: a layer index for a leaf, a dict of origins for a mapping.
Origin = int | dict[str, "Origin"]


@dataclass
class Merged:
    """The merged data of several layers, with the layer index that wrote each leaf."""

    layers: list[Source]
    data: dict[str, Any]
    origin: dict[str, Origin]

    def source_of(self, key: KeyPath) -> Source:
        """The layer that wrote ``key`` (for a mapping: the one that wrote its first leaf)."""
        node: Origin = self.origin
        for part in key:
            if not isinstance(node, dict) or part not in node:
                break
            node = node[part]
        while isinstance(node, dict):
            if not node:
                return self.layers[0]
            node = next(iter(node.values()))
        return self.layers[node]

    def error(self, key: KeyPath, problem: str, hint: str | None = None) -> ManifestError:
        """A :class:`ManifestError` located in the file and line that wrote ``key``."""
        return ManifestError(self.source_of(key), key, problem, hint)


def overlay_path(base: Path, env: str) -> Path | None:
    """``fdl.<env>.yml`` (or ``.yaml``, ``.json``) next to the manifest ``base``, if it exists."""
    for ext in OVERLAY_EXTENSIONS:
        candidate = base.parent / f"fdl.{env}.{ext}"
        if candidate.is_file():
            return candidate
    return None


def list_envs(base: Path) -> list[str]:
    """Names of the overlays next to ``base``: ``fdl.ci.yml`` -> ``ci`` (examples and backups are not envs)."""
    envs = set()
    for entry in base.parent.iterdir():
        match = _ENV_FILE.match(entry.name)
        if match and entry.is_file():
            envs.add(match.group("env"))
    return sorted(envs)


def inherit_chain(path: Path) -> list[Source]:
    """``path`` and its ``inherit-from`` ancestors, the deepest ancestor first (key removed)."""
    chain: list[Source] = []
    seen: list[Path] = []
    current: Path | None = path
    while current is not None:
        resolved = current.resolve()
        if resolved in seen:
            cycle = " -> ".join(str(p) for p in [*seen, resolved])
            raise FdlError(f"inherit-from cycle: {cycle}", "remove one of the inherit-from keys")
        seen.append(resolved)
        source = read_source(current)
        if not isinstance(source.data, dict):
            raise ManifestError(source, (), "the top level must be a mapping (key: value lines)")
        current = None
        if INHERIT_KEY in source.data:
            parent = source.data.pop(INHERIT_KEY)
            if parent is not None:
                if not isinstance(parent, str) or not parent.strip():
                    raise ManifestError(source, (INHERIT_KEY,), "must be a file path")
                current = (source.path.parent / parent).resolve()
                if not current.is_file():
                    raise ManifestError(
                        source, (INHERIT_KEY,), f"{parent} not found (looked for {current})"
                    )
        chain.insert(0, source)
    return chain


def load_layers(base: Path, env: str | None) -> list[Source]:
    """Every layer for ``base`` with overlay ``env`` (which must exist), duplicates dropped."""
    layers = inherit_chain(base)
    if env is not None:
        overlay = overlay_path(base, env)
        if overlay is None:
            raise FdlError(
                f"environment '{env}' not found (expected fdl.{env}.yml next to {base})",
                f"create fdl.{env}.yml or pick one of: {', '.join(list_envs(base)) or '(none)'}",
                ExitCode.USAGE,
            )
        seen = {source.path.resolve() for source in layers}
        for source in inherit_chain(overlay):
            if source.path.resolve() not in seen:
                layers.append(source)
                seen.add(source.path.resolve())
    return layers


def merge(layers: list[Source]) -> Merged:
    """Deep-merge ``layers`` in order; see the module docstring for the rules.

    >>> a = Source(Path("fdl.yml"), {"x": 1, "m": {"a": 1, "b": 2}})
    >>> b = Source(Path("fdl.ci.yml"), {"m": {"b": 3, "a": None}, "y": [1]})
    >>> m = merge([a, b])
    >>> m.data, m.origin
    ({'x': 1, 'm': {'b': 3}, 'y': [1]}, {'x': 0, 'm': {'b': 1}, 'y': 1})
    """
    data: dict[str, Any] = {}
    origin: dict[str, Origin] = {}
    for index, layer in enumerate(layers):
        if index == 0:
            data = dict(layer.data)
            origin = _tag(data, 0)  # type: ignore[assignment]
        else:
            data, origin = _merge_into(data, origin, layer.data, index)
    return Merged(layers, data, origin)


def _tag(value: Any, index: int) -> Origin:
    if isinstance(value, dict):
        return {key: _tag(item, index) for key, item in value.items()}
    return index


def _merge_into(
    base: dict[str, Any], origin: dict[str, Origin], over: dict[str, Any], index: int
) -> tuple[dict[str, Any], dict[str, Origin]]:
    result, result_origin = dict(base), dict(origin)
    for key, value in over.items():
        if value is None:
            result.pop(key, None)
            result_origin.pop(key, None)
        elif isinstance(value, dict) and isinstance(result.get(key), dict):
            sub_origin = result_origin.get(key)
            result[key], result_origin[key] = _merge_into(
                result[key], sub_origin if isinstance(sub_origin, dict) else {}, value, index
            )
        else:
            result[key] = value
            result_origin[key] = _tag(value, index)
    return result, result_origin
