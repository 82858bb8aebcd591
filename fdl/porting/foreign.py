"""Member names of classes outside flodl (``torch.nn.Module``), read from source, not imported.

A flodl Graph is a ``torch.nn.Module``; ``graph.state_dict()`` is real even though flodl's
reference does not list it. This module finds the base class's source file from the installed
package (without importing it), parses it, follows re-exports (``from .module import Module``,
star imports) and inherits through bases in the same package.
"""

from __future__ import annotations

import ast
import importlib.util
from dataclasses import dataclass
from functools import cache
from pathlib import Path

MAX_DEPTH = 6


@dataclass(frozen=True)
class ForeignClass:
    names: frozenset[str]
    dynamic: bool  # defines __getattr__: any attribute may exist at run time


@cache
def foreign_class(path: str) -> ForeignClass | None:
    """Members of the class at dotted ``path`` (e.g. ``torch.nn.Module``), or None if unknown."""
    module, _, name = path.rpartition(".")
    return _find_class(module, name, MAX_DEPTH) if module else None


@cache
def _module_file(module: str) -> Path | None:
    top, _, rest = module.partition(".")
    spec = importlib.util.find_spec(top)  # a top-level lookup executes nothing
    if spec is None or not spec.submodule_search_locations:
        if spec is not None and spec.origin and not rest:
            return Path(spec.origin)
        return None
    base = Path(next(iter(spec.submodule_search_locations)))
    for part in rest.split(".") if rest else []:
        base = base / part
    for candidate in (base / "__init__.py", base.with_suffix(".py")):
        if candidate.is_file():
            return candidate
    return None


@cache
def _parse(module: str) -> ast.Module | None:
    path = _module_file(module)
    if path is None:
        return None
    try:
        return ast.parse(path.read_text(encoding="utf-8", errors="replace"))
    except (OSError, SyntaxError, ValueError):
        return None


def _absolute(module: str, node: ast.ImportFrom, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    parts = module.split(".")
    keep = len(parts) - node.level + (1 if is_package else 0)
    base = ".".join(parts[:keep])
    return f"{base}.{node.module}" if node.module else base


def _find_class(module: str, name: str, depth: int) -> ForeignClass | None:
    tree = _parse(module)
    if tree is None or depth <= 0:
        return None
    file = _module_file(module)
    is_package = file is not None and file.name == "__init__.py"
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            return _members(module, node, depth)
    for node in tree.body:
        if isinstance(node, ast.ImportFrom):
            source = _absolute(module, node, is_package)
            for alias in node.names:
                if (alias.asname or alias.name) == name:
                    found = _find_class(source, alias.name, depth - 1)
                    if found is None:  # ``from pkg import submodule``-style ambiguity
                        found = _find_class(f"{source}.{alias.name}", name, depth - 1)
                    return found
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and any(a.name == "*" for a in node.names):
            found = _find_class(_absolute(module, node, is_package), name, depth - 1)
            if found is not None:
                return found
    return None


def _members(module: str, node: ast.ClassDef, depth: int) -> ForeignClass:
    names: set[str] = set()
    for item in node.body:
        if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
            names.add(item.name)
        elif isinstance(item, ast.Assign):
            names.update(t.id for t in item.targets if isinstance(t, ast.Name))
        elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
            names.add(item.target.id)
    dynamic = "__getattr__" in names
    for base in node.bases:
        if isinstance(base, ast.Name) and base.id != "object":
            inherited = _find_class(module, base.id, depth - 1)
            if inherited is not None:
                names |= inherited.names
                dynamic = dynamic or inherited.dynamic
    return ForeignClass(frozenset(names), dynamic)
