"""Find the package source to describe, and fingerprint it.

Discovery (first hit wins): ``--path SRC`` — a package directory (it has ``__init__.py``) or a
directory that contains ``flodl/``; otherwise the ``flodl`` that this Python would import
(``importlib.util.find_spec``, which locates the package without executing it).
"""

from __future__ import annotations

import hashlib
import importlib.util
import re
from dataclasses import dataclass
from pathlib import Path

from fdl.errors import ExitCode, FdlError

DEFAULT_PACKAGE = "flodl"
_VERSION = re.compile(r"""^__version__\s*(?::\s*str\s*)?=\s*["']([^"']+)["']""", re.MULTILINE)


@dataclass(frozen=True)
class PackageSource:
    """A package on disk: ``root / name / __init__.py``."""

    name: str
    root: Path  # the directory on sys.path that holds the package

    @property
    def package_dir(self) -> Path:
        return self.root / self.name

    def python_files(self) -> list[Path]:
        return sorted(
            p
            for p in self.package_dir.rglob("*.py")
            if "__pycache__" not in p.parts and not any(part.startswith(".") for part in p.parts)
        )

    def content_hash(self) -> str:
        """sha256 over every module's relative path and bytes (the cache key's second half)."""
        digest = hashlib.sha256()
        for path in self.python_files():
            digest.update(path.relative_to(self.root).as_posix().encode() + b"\0")
            digest.update(path.read_bytes() + b"\0")
        return digest.hexdigest()

    def version(self) -> str:
        """``__version__`` from ``_version.py`` or ``__init__.py``, read as text; else ``unknown``."""
        for candidate in ("_version.py", "__init__.py"):
            path = self.package_dir / candidate
            if path.is_file():
                match = _VERSION.search(path.read_text(encoding="utf-8", errors="replace"))
                if match:
                    return match.group(1)
        return "unknown"


def find_source(path: str | Path | None = None, package: str = DEFAULT_PACKAGE) -> PackageSource:
    """The package to describe; raises :class:`FdlError` with what to do when there is none."""
    if path is not None:
        given = Path(path).expanduser().resolve()
        if not given.is_dir():
            problem = "not a directory" if given.exists() else "no such directory"
            raise FdlError(
                f"--path {path}: {problem}",
                f"pass the {package} package directory or the directory that contains it",
            )
        if (given / "__init__.py").is_file():
            return PackageSource(given.name, given.parent)
        if (given / package / "__init__.py").is_file():
            return PackageSource(package, given)
        raise FdlError(
            f"--path {path}: no Python package there",
            f"expected {given}/__init__.py or {given}/{package}/__init__.py",
        )
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise FdlError(
            f"the '{package}' package is not importable from this Python",
            f"install flodl (pip install flodl), or pass --path to a {package} source tree",
            ExitCode.UNAVAILABLE,
        )
    package_dir = Path(next(iter(spec.submodule_search_locations))).resolve()
    return PackageSource(package_dir.name, package_dir.parent)
