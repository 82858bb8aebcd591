"""flodl's layering, enforced by static import analysis.

Every ``import`` in ``flodl/**.py`` counts, wherever it is written: at module level, inside a
function (a lazy import is still a dependency) or under ``if TYPE_CHECKING:``. Imports are
grouped by *unit*: a subpackage (``flodl.graph``) or a top-level module (``flodl.errors``). Each
unit has a rank in :data:`LAYERS`; a unit may import only units of a strictly lower rank, so the
unit graph has no cycles and peers on one rank (``nn``/``optim``/``data``, ``graph``/``monitor``,
``hf``/``train``) stay independent. docs/development.md draws the same picture.

A new subpackage or top-level module must be given a rank here (a test fails until it is).
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import clean_env

ROOT = Path(__file__).resolve().parents[1]

# rank: a unit imports only units of a lower rank ("flodl" is the package's __init__.py)
LAYERS: dict[str, int] = {
    "errors": 0,
    "files": 0,
    "_version": 0,
    "_torch_release": 0,
    "log": 1,
    "smoke": 1,
    "device": 1,
    "cuda_graph": 1,
    "random": 1,
    "nn": 2,
    "optim": 2,
    "data": 2,
    "checkpoint": 3,
    "graph": 4,
    "monitor": 4,
    "hf": 5,
    "train": 5,
    "flodl": 6,
}

# Upward imports that exist today, each with its reason. A test fails once one disappears, so
# the entry is removed with the import and the list only shrinks.
KNOWN_UPWARD: dict[tuple[str, str], str] = {
    # The Rust-compatible structural hash and layout walk a Graph's nodes (isinstance checks in
    # function bodies). Its place is flodl.graph; it moves there when files can move.
    ("flodl.checkpoint.rust_graph", "flodl.graph.graph"): "rust_graph walks Graph nodes",
}


@dataclass(frozen=True)
class Import:
    """``source`` (a module) imports ``target`` (a module) at ``path:line``."""

    source: str
    target: str
    path: Path
    line: int
    top_level: bool  # executed when ``source`` is imported (not inside a def or class body)

    def where(self) -> str:
        return f"{self.path.as_posix()}:{self.line}"


def _module_name(root: Path, path: Path) -> tuple[str, bool]:
    parts = list(path.relative_to(root).with_suffix("").parts)
    is_package = parts[-1] == "__init__"
    if is_package:
        parts.pop()
    return ".".join(parts), is_package


def _top_level_nodes(tree: ast.Module) -> set[int]:
    """ids of the import nodes that run at import time (not inside a function or class)."""
    found: set[int] = set()
    todo: list[ast.AST] = list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Lambda):
            continue
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.add(id(node))
        todo.extend(ast.iter_child_nodes(node))
    return found


def collect_imports(root: Path, package: str) -> list[Import]:
    """Every import of ``package``'s own modules made by a module under ``root/package``."""
    files = sorted((root / package).rglob("*.py"))
    modules = {_module_name(root, f)[0] for f in files}
    out: list[Import] = []
    for path in files:
        name, is_package = _module_name(root, path)
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        top = _top_level_nodes(tree)
        for node in ast.walk(tree):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:  # relative: resolved against the importing module's package
                    base = name.split(".") if is_package else name.split(".")[:-1]
                    base = base[: len(base) - (node.level - 1)]
                    module = ".".join([*base, *([node.module] if node.module else [])])
                else:
                    module = node.module or ""
                # ``from pkg import sub`` imports the submodule pkg.sub when there is one
                targets = [
                    f"{module}.{a.name}" if f"{module}.{a.name}" in modules else module
                    for a in node.names
                ]
            for target in targets:
                if target == package or target.startswith(package + "."):
                    rel = path.relative_to(root)
                    out.append(Import(name, target, rel, node.lineno, id(node) in top))
    return out


def unit_of(module: str, package: str) -> str:
    """``flodl.graph.builder`` -> ``graph``; ``flodl.errors`` -> ``errors``; ``flodl`` -> ``flodl``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else package


def layering_violations(
    imports: list[Import],
    package: str,
    layers: dict[str, int],
    allowed: Collection[tuple[str, str]] = (),
) -> list[str]:
    """One line per import that does not go to a strictly lower layer."""
    problems = []
    for imp in imports:
        src, dst = unit_of(imp.source, package), unit_of(imp.target, package)
        if src == dst or (imp.source, imp.target) in allowed:
            continue
        if layers[dst] >= layers[src]:
            problems.append(
                f"{imp.where()}: {package}.{src} (layer {layers[src]}) imports {imp.target} "
                f"(layer {layers[dst]}): a unit imports only lower layers"
            )
    return problems


def unit_graph(
    imports: list[Import], package: str, allowed: Collection[tuple[str, str]] = ()
) -> dict[str, set[str]]:
    """unit -> the units it imports (allowed edges left out)."""
    graph: dict[str, set[str]] = {}
    for imp in imports:
        src, dst = unit_of(imp.source, package), unit_of(imp.target, package)
        if src != dst and (imp.source, imp.target) not in allowed:
            graph.setdefault(src, set()).add(dst)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as ``[a, b, ..., a]``, or None when it is acyclic."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (cycle := visit(start)):
            return cycle
    return None


# ------------------------------------------------------------------------------------ flodl
@pytest.fixture(scope="module")
def flodl_imports() -> list[Import]:
    return collect_imports(ROOT, "flodl")


def test_every_unit_has_a_layer(flodl_imports: list[Import]) -> None:
    units = {_module_name(ROOT, p)[0] for p in (ROOT / "flodl").glob("*.py")}
    units |= {f"flodl.{p.parent.name}" for p in (ROOT / "flodl").glob("*/__init__.py")}
    missing = sorted(u for u in (unit_of(m, "flodl") for m in units) if u not in LAYERS)
    assert not missing, f"give these units a rank in LAYERS (tests/test_layering.py): {missing}"


def test_flodl_imports_only_lower_layers(flodl_imports: list[Import]) -> None:
    problems = layering_violations(flodl_imports, "flodl", LAYERS, set(KNOWN_UPWARD))
    assert not problems, "\n".join(problems)


def test_graph_imports_nothing_above_it(flodl_imports: list[Import]) -> None:
    above = {"train", "monitor", "data", "hf", "flodl"}
    bad = [
        i.where()
        for i in flodl_imports
        if unit_of(i.source, "flodl") == "graph" and unit_of(i.target, "flodl") in above
    ]
    assert not bad, bad


def test_lower_units_never_import_train_or_monitor(flodl_imports: list[Import]) -> None:
    lower = {"checkpoint", "optim", "nn", "data", "graph"}
    bad = [
        f"{i.where()}: {i.target}"
        for i in flodl_imports
        if unit_of(i.source, "flodl") in lower
        and unit_of(i.target, "flodl") in {"train", "monitor"}
    ]
    assert not bad, bad


def test_no_cycles_between_units(flodl_imports: list[Import]) -> None:
    cycle = find_cycle(unit_graph(flodl_imports, "flodl", set(KNOWN_UPWARD)))
    assert cycle is None, " -> ".join(cycle or [])


def test_known_upward_imports_still_exist(flodl_imports: list[Import]) -> None:
    present = {(i.source, i.target) for i in flodl_imports}
    gone = [edge for edge in KNOWN_UPWARD if edge not in present]
    assert not gone, f"remove these fixed entries from KNOWN_UPWARD: {gone}"


# -------------------------------------------------------------------------------------- fdl
def test_fdl_imports_flodl_only_inside_functions() -> None:
    """Importing any flodl module runs flodl/__init__.py, which imports flodl.train (and torch):
    so fdl keeps every flodl import inside the function of the command that needs it."""
    fdl_imports = [
        i
        for i in _all_imports(ROOT, "fdl")
        if i.top_level and (i.target == "flodl" or i.target.startswith("flodl."))
    ]
    assert not fdl_imports, [f"{i.where()}: {i.target}" for i in fdl_imports]


def _all_imports(root: Path, package: str) -> list[Import]:
    """Like collect_imports, for imports of any package (here: flodl imported by fdl)."""
    out = []
    for path in sorted((root / package).rglob("*.py")):
        name, _ = _module_name(root, path)
        tree = ast.parse(path.read_text(encoding="utf-8"))
        top = _top_level_nodes(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                targets = [node.module]
            else:
                continue
            rel = path.relative_to(root)
            out += [Import(name, t, rel, node.lineno, id(node) in top) for t in targets]
    return out


@pytest.mark.slow
def test_importing_every_fdl_module_leaves_flodl_train_unloaded() -> None:
    probe = (
        "import json, pkgutil, importlib, sys, fdl\n"
        "for m in pkgutil.walk_packages(fdl.__path__, 'fdl.'):\n"
        "    if m.name != 'fdl.__main__':\n"
        "        importlib.import_module(m.name)\n"
        "print(json.dumps(sorted(n for n in sys.modules if n.startswith('flodl'))))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=ROOT,
        env={**clean_env(), "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    loaded = json.loads(result.stdout.strip().splitlines()[-1])
    assert "flodl.train" not in loaded, loaded


# ------------------------------------------------------------------- the checker can fail
def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return tmp_path


TOY_LAYERS = {"errors": 0, "low": 1, "high": 2, "pkg": 3}


def test_checker_catches_an_upward_import_inside_a_function(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "pkg/__init__.py": "from pkg import high\n",
            "pkg/errors.py": "",
            "pkg/low/__init__.py": "",
            "pkg/low/core.py": "from pkg.errors import E\n\ndef f():\n    from pkg.high import x\n",
            "pkg/high/__init__.py": "from . import x\n",
            "pkg/high/x.py": "from ..low import core\n",
        },
    )
    imports = collect_imports(root, "pkg")
    problems = layering_violations(imports, "pkg", TOY_LAYERS)
    assert len(problems) == 1
    assert problems[0].startswith("pkg/low/core.py:4: pkg.low (layer 1) imports pkg.high.x")
    lazy = next(i for i in imports if i.source == "pkg.low.core" and i.target == "pkg.high.x")
    assert not lazy.top_level
    # relative imports resolve: high.x -> low.core, high/__init__ -> high.x
    assert ("pkg.high.x", "pkg.low.core") in {(i.source, i.target) for i in imports}
    assert ("pkg.high", "pkg.high.x") in {(i.source, i.target) for i in imports}
    # an allowed edge is skipped
    assert not layering_violations(imports, "pkg", TOY_LAYERS, {("pkg.low.core", "pkg.high.x")})


def test_checker_finds_a_cycle_and_a_peer_import(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/low/__init__.py": "import pkg.high.x\n",
            "pkg/high/__init__.py": "",
            "pkg/high/x.py": "from pkg import low\n",
        },
    )
    imports = collect_imports(root, "pkg")
    assert find_cycle(unit_graph(imports, "pkg")) == ["high", "low", "high"]
    peers = layering_violations(imports, "pkg", {"low": 1, "high": 1, "pkg": 2})
    assert len(peers) == 2  # same rank: neither may import the other
    assert find_cycle({"a": {"b"}, "b": {"c"}}) is None


def test_checker_sees_imports_under_type_checking(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/low.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import pkg.high\n",
            "pkg/high.py": "",
        },
    )
    imports = collect_imports(root, "pkg")
    assert [(i.source, i.target, i.top_level) for i in imports] == [("pkg.low", "pkg.high", True)]
    assert layering_violations(imports, "pkg", TOY_LAYERS)
