"""The data model of an API reference, and its stable JSON form.

One :class:`ApiEntry` per public class, function or attribute; one module record per importable
module. ``to_dict``/``from_dict`` round-trip exactly, so a cached reference is the same object
as a fresh one. The schema lives next to this file (``schema.json``); bump :data:`SCHEMA_ID`
when a key changes meaning or disappears (adding optional keys is compatible).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from typing import Any

SCHEMA_ID = "flodl-api-ref/1"

# Subsystems in reading order; anything else sorts after them, alphabetically.
CATEGORY_ORDER = ("graph", "nn", "optim", "checkpoint", "monitor", "train", "data", "hf", "core")
CATEGORY_TITLES = {
    "graph": "Graph",
    "nn": "Modules (nn)",
    "optim": "Optimization",
    "checkpoint": "Checkpoints",
    "monitor": "Monitor",
    "train": "Training",
    "data": "Data",
    "hf": "HuggingFace (hf)",
    "core": "Core",
}


def category_title(category: str) -> str:
    return CATEGORY_TITLES.get(category, category)


def category_rank(category: str) -> tuple[int, str]:
    rank = CATEGORY_ORDER.index(category) if category in CATEGORY_ORDER else len(CATEGORY_ORDER)
    return rank, category


@dataclass
class Member:
    """A method, constructor or attribute of a class.

    ``returns_type`` is the canonical path of the class the call returns when that class belongs
    to the package (what lets ``fdl check`` follow ``FlowBuilder(...).through(...).build()``).
    """

    name: str
    kind: str  # method | classmethod | staticmethod | constructor | property | attribute
    sig: str = ""
    doc: str = ""
    returns: str | None = None
    returns_type: str | None = None


@dataclass
class ApiEntry:
    """One public class, function or attribute."""

    name: str
    path: str  # how users reach it: "flodl.FlowBuilder", "flodl.nn.StateAdd"
    kind: str  # class | function | attribute
    category: str
    defined_at: str  # canonical path: "flodl.graph.builder.FlowBuilder"
    file: str  # relative to the directory holding the package: "flodl/graph/builder.py"
    line: int | None
    doc: str  # docstring summary (first line)
    docstring: str = ""
    signature: str = ""  # functions: the call signature; classes: the constructor's
    aliases: list[str] = field(default_factory=list)
    bases: list[str] = field(default_factory=list)
    constructors: list[Member] = field(default_factory=list)
    builder_methods: list[Member] = field(default_factory=list)
    methods: list[Member] = field(default_factory=list)
    attributes: list[Member] = field(default_factory=list)
    examples: list[str] = field(default_factory=list)
    returns_type: str | None = None
    exported: bool = True  # False: not exported itself, but returned by an exported API
    dynamic_attributes: bool = False  # defines __getattr__: attributes beyond the listed ones

    def members(self) -> dict[str, Member]:
        """Every member reachable by attribute access, by name."""
        found: dict[str, Member] = {}
        for group in (self.attributes, self.methods, self.builder_methods, self.constructors):
            for member in group:
                if member.kind != "constructor" or member.name != self.name:
                    found.setdefault(member.name, member)
        return found


@dataclass
class ModuleInfo:
    """An importable module and the names it makes accessible."""

    path: str
    file: str
    doc: str
    names: list[str]
    exported: bool  # part of the public surface (reached through __all__ from the root)
    loaded: bool = True  # ``import <package>`` imports it, so attribute access works


@dataclass
class ApiReference:
    """A package's public API at one version."""

    package: str
    version: str
    source_hash: str
    entries: list[ApiEntry]
    modules: list[ModuleInfo]
    api_hash: str = ""

    def __post_init__(self) -> None:
        if not self.api_hash:
            self.api_hash = compute_api_hash(self.entries, self.modules)

    def categories(self) -> list[str]:
        return sorted({e.category for e in self.entries}, key=category_rank)

    def by_category(self, *, exported_only: bool = False) -> dict[str, list[ApiEntry]]:
        groups: dict[str, list[ApiEntry]] = {c: [] for c in self.categories()}
        for entry in self.entries:
            if entry.exported or not exported_only:
                groups[entry.category].append(entry)
        return {c: v for c, v in groups.items() if v}

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA_ID,
            "package": self.package,
            "version": self.version,
            "api_hash": self.api_hash,
            "source_hash": self.source_hash,
            "categories": self.categories(),
            "types": [asdict(e) for e in self.entries],
            "modules": [asdict(m) for m in self.modules],
        }

    def to_json(self, *, indent: int | None = None) -> str:
        return json.dumps(self.to_dict(), indent=indent, ensure_ascii=False)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ApiReference:
        if data.get("schema") != SCHEMA_ID:
            raise ValueError(f"unsupported API reference schema {data.get('schema')!r}")
        entries = []
        for raw in data["types"]:
            groups = {
                key: [Member(**m) for m in raw[key]]
                for key in ("constructors", "builder_methods", "methods", "attributes")
            }
            entries.append(ApiEntry(**{**raw, **groups}))
        return cls(
            package=data["package"],
            version=data["version"],
            source_hash=data["source_hash"],
            entries=entries,
            modules=[ModuleInfo(**m) for m in data["modules"]],
            api_hash=data["api_hash"],
        )


def compute_api_hash(entries: list[ApiEntry], modules: list[ModuleInfo]) -> str:
    """A hash of the API *surface*: names, kinds, signatures, bases and members.

    Prose (docstrings, examples) and locations (file, line) are left out, so moving code or
    rewording a docstring does not change it; renaming a parameter does.
    """
    surface: list[Any] = [
        [
            e.path,
            e.kind,
            e.signature,
            e.bases,
            sorted(
                (m.kind, m.name, m.sig)
                for m in (*e.constructors, *e.builder_methods, *e.methods, *e.attributes)
            ),
        ]
        for e in sorted(entries, key=lambda e: e.path)
    ]
    surface.append(sorted((m.path, sorted(m.names)) for m in modules))
    digest = hashlib.sha256(json.dumps(surface, sort_keys=True).encode()).hexdigest()
    return f"sha256:{digest[:16]}"
