"""The public/internal rule of docs/development.md ("Public and internal names"), checked.

Each package of flodl and fdl, and each public top-level module of flodl, declares ``__all__``
as a literal list of names it defines; ``flodl.__all__`` is literal too and re-exports every
public name of the everyday subpackages.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

import flodl

ROOT = Path(__file__).resolve().parents[1]
PUBLIC_TOP_MODULES = [
    "flodl/cuda_graph.py",
    "flodl/device.py",
    "flodl/random.py",
    "flodl/log.py",
    "flodl/smoke.py",
]
# Subpackages whose public names are also ``fl.<name>``; the others stay namespaces.
RE_EXPORTED = ["checkpoint", "cuda_graph", "device", "graph", "monitor", "random", "train"]


def declaring_files() -> list[Path]:
    inits = sorted(ROOT.glob("flodl/**/__init__.py")) + sorted(ROOT.glob("fdl/**/__init__.py"))
    return inits + [ROOT / m for m in PUBLIC_TOP_MODULES]


def literal_all(path: Path) -> list[str] | str:
    """The module's ``__all__`` as written, or why it is not a literal list of names."""
    for stmt in ast.parse(path.read_text()).body:
        targets = (
            [stmt.target]
            if isinstance(stmt, ast.AnnAssign)
            else stmt.targets
            if isinstance(stmt, ast.Assign)
            else []
        )
        if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
            value = stmt.value
            if not isinstance(value, ast.List) or not all(
                isinstance(e, ast.Constant) and isinstance(e.value, str) for e in value.elts
            ):
                return "__all__ is not a literal list of strings"
            return [e.value for e in value.elts]  # type: ignore[union-attr]
    return "no __all__"


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@pytest.mark.parametrize("path", declaring_files(), ids=module_name)
def test_all_is_a_literal_list_of_defined_names(path: Path) -> None:
    names = literal_all(path)
    assert isinstance(names, list), f"{path.relative_to(ROOT)}: {names}"
    assert len(names) == len(set(names)), f"{module_name(path)}.__all__ repeats a name"
    module = importlib.import_module(module_name(path))
    missing = [n for n in names if not hasattr(module, n)]
    assert missing == [], f"{module_name(path)}.__all__ lists undefined names {missing}"


def test_the_top_level_re_exports_every_everyday_name() -> None:
    top = set(flodl.__all__)
    for package in RE_EXPORTED:
        public = importlib.import_module(f"flodl.{package}").__all__
        absent = sorted(set(public) - top)
        assert absent == [], f"flodl.{package} names {absent} are public but not fl.<name>"
        assert all(getattr(flodl, n) is getattr(getattr(flodl, package), n) for n in public)


def test_the_top_level_lists_only_public_names() -> None:
    assert [n for n in flodl.__all__ if n.startswith("_") and n != "__version__"] == []


def test_a_missing_all_is_reported(tmp_path: Path) -> None:
    # The check above must be able to fail: a star-import assembly is not a literal list.
    (tmp_path / "a.py").write_text("from x import *\n__all__ = [*x.__all__]\n")
    (tmp_path / "b.py").write_text("X = 1\n")
    assert literal_all(tmp_path / "a.py") == "__all__ is not a literal list of strings"
    assert literal_all(tmp_path / "b.py") == "no __all__"
