"""The libtorch home: variants, the ``.active`` pointer and ``.arch`` metadata."""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from fdl.errors import FdlError, FdlUsageError

KINDS = ("precompiled", "builds")


def read_arch(variant_dir: Path) -> dict[str, str]:
    """``.arch`` as a dict (missing file: empty). Unknown keys are kept; bad lines ignored."""
    try:
        text = (variant_dir / ".arch").read_text(encoding="utf-8")
    except OSError:
        return {}
    out = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip():
            out[key.strip()] = value.strip()
    return out


def write_atomic(path: Path, text: str) -> None:
    """Write ``path`` through a temporary sibling; an unwritable location is an ``FdlError``."""
    from fdl.downloads.errors import unwritable

    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(path)
    except OSError as err:
        if err.filename == str(tmp):  # name the file the user knows, not its temporary twin
            err = OSError(err.errno, err.strerror, str(path))
        raise unwritable(path, err) from err


@dataclass(frozen=True)
class LibtorchHome:
    """A ``libtorch/`` directory and how it was found (``project``, ``global`` or ``path``)."""

    path: Path
    mode: str

    @property
    def active_file(self) -> Path:
        return self.path / ".active"

    def variant_dir(self, variant: str) -> Path:
        return self.path / variant

    def check_id(self, variant: str) -> str:
        """Normalise ``cu128`` → ``precompiled/cu128``; refuse ids that leave the home."""
        variant = variant.strip().strip("/")
        if "/" not in variant:
            variant = f"precompiled/{variant}"
        kind, _, name = variant.partition("/")
        if kind not in KINDS or not name or "/" in name or name in (".", ".."):
            raise FdlUsageError(
                f"'{variant}' is not a libtorch variant id",
                "ids look like precompiled/cu128 or builds/sm61-sm120 (see 'fdl libtorch list')",
            )
        return variant

    def variants(self) -> list[str]:
        found: list[str] = []
        for kind in KINDS:
            base = self.path / kind
            if base.is_dir():
                found.extend(f"{kind}/{d.name}" for d in base.iterdir() if (d / "lib").is_dir())
        return sorted(found)

    def active(self) -> str | None:
        try:
            text = self.active_file.read_text(encoding="utf-8").strip()
        except OSError:
            return None
        return text or None

    def is_installed(self, variant: str) -> bool:
        return (self.variant_dir(variant) / "lib").is_dir()

    def activate(self, variant: str) -> None:
        variant = self.check_id(variant)
        if not self.is_installed(variant):
            raise FdlError(
                f"'{variant}' is not an installed libtorch variant in {self.path}",
                f"expected {self.variant_dir(variant) / 'lib'}; installed: "
                + (", ".join(self.variants()) or "none"),
            )
        write_atomic(self.active_file, variant + "\n")

    def remove(self, variant: str) -> bool:
        """Delete a variant; returns whether it was the active one (then ``.active`` is emptied)."""
        variant = self.check_id(variant)
        if not self.is_installed(variant):
            raise FdlError(
                f"'{variant}' is not an installed libtorch variant in {self.path}",
                "installed: " + (", ".join(self.variants()) or "none"),
            )
        was_active = self.active() == variant
        if was_active:
            write_atomic(self.active_file, "")
        try:
            shutil.rmtree(self.variant_dir(variant))
        except OSError as err:
            from fdl.downloads.errors import unwritable

            raise unwritable(self.variant_dir(variant), err, "remove") from err
        return was_active


def _uses_flodl(pyproject: Path) -> bool:
    """A Python project that depends on flodl (flodl's own checkout is not one)."""
    import tomllib

    try:
        data = tomllib.loads(pyproject.read_text(encoding="utf-8", errors="replace"))
    except (OSError, tomllib.TOMLDecodeError):
        return False
    project = data.get("project", {})
    if project.get("name") == "flodl":
        return False
    deps = list(project.get("dependencies", []))
    for extra in project.get("optional-dependencies", {}).values():
        deps.extend(extra)
    for group in data.get("dependency-groups", {}).values():
        deps.extend(d for d in group if isinstance(d, str))
    return any(re.match(r"flodl\b", d.strip(), re.IGNORECASE) for d in deps)


def _is_project(directory: Path) -> bool:
    """A flodl project: has ``libtorch/.active``, depends on flodl, or is a Rust flodl crate."""
    if (directory / "libtorch" / ".active").is_file():
        return True
    if _uses_flodl(directory / "pyproject.toml"):
        return True
    try:  # the Rust fdl's rule, so both tools agree on a shared checkout
        return "flodl" in (directory / "Cargo.toml").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False


def global_root() -> Path:
    home = os.environ.get("FLODL_HOME")
    return Path(home).expanduser() if home else Path.home() / ".flodl"


def find_home(path: str | Path | None = None, cwd: Path | None = None) -> LibtorchHome:
    """``--path`` if given, else the enclosing project's ``libtorch/``, else the global one."""
    if path:
        return LibtorchHome(Path(path).expanduser().resolve(), "path")
    here = (cwd or Path.cwd()).resolve()
    for directory in (here, *here.parents):
        if _is_project(directory):
            return LibtorchHome(directory / "libtorch", "project")
    return LibtorchHome(global_root() / "libtorch", "global")
