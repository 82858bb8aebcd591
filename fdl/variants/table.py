"""The torch release table (``torch_releases.json``), loaded into small immutable records.

>>> table = load_table()
>>> release = table.release("2.8")
>>> release.torch, [b.tag for b in release.builds][:3]
('2.8.0', ['cu126', 'cu128', 'cu129'])
>>> table.libtorch_file(table.release("2.6"), "cu126", "linux-x86_64")
'libtorch-cxx11-abi-shared-with-deps-2.6.0%2Bcu126.zip'
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from fdl.errors import ExitCode, FdlError, FdlUsageError
from fdl.variants.archs import ComputeCapability, format_cc, parse_cc

MIRROR_ENV = "FDL_TORCH_MIRROR"
DEFAULT_CUDA_PLATFORMS = ("linux-x86_64", "windows-x86_64")


@dataclass(frozen=True)
class Build:
    """One installable build of one torch release: ``cpu`` or a CUDA tag such as ``cu128``."""

    torch: str
    tag: str
    stable: bool = True
    cuda: str | None = None  # "12.8"; None for the CPU build
    sass: tuple[ComputeCapability, ...] = ()
    ptx: tuple[ComputeCapability, ...] = ()
    platforms: tuple[str, ...] | None = None  # None: every platform (the CPU build)

    def available_on(self, platform: str) -> bool:
        return self.platforms is None or platform in self.platforms

    @property
    def is_cuda(self) -> bool:
        return self.cuda is not None

    @property
    def cuda_major(self) -> int | None:
        return int(self.cuda.split(".")[0]) if self.cuda else None

    @property
    def arch_list(self) -> str:
        """``"7.5 8.0 … 12.0+PTX"`` — the archs as a human reads them (``"cpu"`` for CPU)."""
        if not self.is_cuda:
            return "cpu"
        ptx = set(self.ptx)
        return " ".join(format_cc(a) + ("+PTX" if a in ptx else "") for a in self.sass)


@dataclass(frozen=True)
class Release:
    torch: str  # full version, "2.9.1"
    python: tuple[str, str]  # oldest and newest supported CPython, "3.10"
    libtorch_naming: str  # "cxx11-abi" or "plain"
    pypi_default: str | None
    builds: tuple[Build, ...]  # CUDA builds in table order, then "cpu"
    libtorch_sha256: dict[str, str] = field(default_factory=dict)

    @property
    def minor(self) -> str:
        return ".".join(self.torch.split(".")[:2])

    def build(self, tag: str) -> Build | None:
        return next((b for b in self.builds if b.tag == tag), None)

    def supports_python(self, version: str) -> bool:
        key = _version_key(version)[:2]
        return _version_key(self.python[0]) <= key <= _version_key(self.python[1])

    def as_patch(self, version: str) -> Release:
        """This release's builds under another patch ``version`` of the same line (PyTorch's
        patch releases keep their line's CUDA builds and archs); the archive hashes are left
        out: they belong to this version's files.

        >>> load_table().release("2.9").as_patch("2.9.0").build("cu128").torch
        '2.9.0'
        """
        builds = tuple(dataclasses.replace(b, torch=version) for b in self.builds)
        return dataclasses.replace(self, torch=version, builds=builds, libtorch_sha256={})

    def as_cpu_only(self, version: str, python: tuple[str, str] | None = None) -> Release:
        """A release of a line this table does not know, as far as can be said without its
        wheel index: its CPU build (every release has one), this release's libtorch naming,
        ``python`` (default: this release's range), no PyPI default and no hashes.

        >>> [(b.torch, b.tag) for b in load_table().newest.as_cpu_only("2.99.0").builds]
        [('2.99.0', 'cpu')]
        """
        return Release(
            torch=version,
            python=python or self.python,
            libtorch_naming=self.libtorch_naming,
            pypi_default=None,
            builds=(Build(torch=version, tag="cpu"),),
        )


@dataclass(frozen=True)
class VariantTable:
    releases: tuple[Release, ...]  # newest first
    wheel_index: str
    libtorch_url_form: str
    default_mirror: str
    cuda_driver_floors: dict[str, dict[str, str]]
    arch_driver_floors: dict[str, dict[str, str]]
    libtorch_files: dict[str, dict[str, str]]
    source: str = ""

    @property
    def newest(self) -> Release:
        return self.releases[0]

    def release(self, version: str) -> Release:
        """The release ``"2.9"`` or ``"2.9.1"`` names; a usage error listing the known ones if none."""
        wanted = version.strip().lstrip("v").split("+")[0]
        for release in self.releases:
            if wanted in (release.torch, release.minor):
                return release
        known = ", ".join(r.torch for r in self.releases)
        raise FdlUsageError(
            f"torch {version} is not in fdl's release table",
            f"choose one of {known} (or update fdl for newer releases)",
        )

    def installed_release(self, version: str) -> Release | None:
        """The release of an installed torch ``version``, which exists since it is installed:
        its own entry, else its line's builds under that version (``2.9.0`` where the table
        lists ``2.9.1``, see ``Release.as_patch``); None for a line the table does not know.

        >>> table = load_table()
        >>> table.installed_release("2.9.0+cu128").torch, table.installed_release("1.13.1")
        ('2.9.0', None)
        """
        wanted = version.strip().lstrip("v").split("+")[0]
        line = ".".join(wanted.split(".")[:2])
        for release in self.releases:
            if release.torch == wanted:
                return release
        for release in self.releases:
            if release.minor == line:
                return release.as_patch(wanted)
        return None

    def with_release(self, release: Release) -> VariantTable:
        """This table with ``release`` in it (in place of one of the same version; kept newest
        first). The shipped table is shared, so it is never changed."""
        others = (r for r in self.releases if r.torch != release.torch)
        releases = sorted((*others, release), key=lambda r: _version_key(r.torch), reverse=True)
        return dataclasses.replace(self, releases=tuple(releases))

    def mirror(self, override: str | None = None) -> str:
        if override:
            return check_mirror(override, "--mirror")
        if os.environ.get(MIRROR_ENV):
            return check_mirror(os.environ[MIRROR_ENV], MIRROR_ENV)
        return self.default_mirror.rstrip("/")

    def wheel_index_url(self, tag: str, mirror: str | None = None) -> str:
        return self.wheel_index.format(mirror=self.mirror(mirror), tag=tag)

    def cuda_driver_floor(self, cuda_major: int, os_family: str) -> str | None:
        return self.cuda_driver_floors.get(str(cuda_major), {}).get(os_family)

    def arch_driver_floor(self, cc_major: int, os_family: str) -> str | None:
        return self.arch_driver_floors.get(str(cc_major), {}).get(os_family)

    def libtorch_file(self, release: Release, tag: str, platform: str) -> str:
        """The archive name on download.pytorch.org for this release, build and platform."""
        forms = self.libtorch_files.get(platform)
        if forms is None:
            supported = ", ".join(sorted(self.libtorch_files))
            raise FdlError(
                f"no pre-built libtorch for {platform}",
                f"pre-built archives exist for {supported}; build from source otherwise",
                ExitCode.UNAVAILABLE,
            )
        if platform.startswith("macos") and tag != "cpu":
            raise FdlUsageError("libtorch for macOS is CPU-only", "use --cpu")
        return forms[release.libtorch_naming].format(ver=release.torch, tag=tag)

    def libtorch_url(
        self, release: Release, tag: str, platform: str, mirror: str | None = None
    ) -> str:
        file = self.libtorch_file(release, tag, platform)
        return self.libtorch_url_form.format(mirror=self.mirror(mirror), tag=tag, file=file)


def check_mirror(url: str, source: str = "--mirror") -> str:
    """A mirror's base URL without its trailing ``/``; a usage error unless it is an http(s) URL
    with a host (the downloader and pip speak nothing else), so a typo fails before anything
    is fetched.

    >>> check_mirror("http://mirror.lan:8080/pytorch/")
    'http://mirror.lan:8080/pytorch'
    """
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url.strip())
        host = parts.hostname
    except ValueError:  # e.g. a malformed port or IPv6 literal
        parts, host = None, None
    if parts is None or parts.scheme not in ("http", "https") or not host:
        raise FdlUsageError(
            f"{source} {url!r} is not an http(s) URL",
            "give the base URL of a PyTorch mirror, e.g. https://mirror.example/pytorch",
        )
    return url.strip().rstrip("/")


def _version_key(version: str) -> tuple[int, ...]:
    parts = []
    for piece in version.split("+")[0].split("."):
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


def version_key(version: str) -> tuple[int, ...]:
    """``"575.57.08"`` → ``(575, 57, 8)``: numeric ordering for driver and torch versions."""
    return _version_key(version)


def _release(raw: dict[str, Any], tags: dict[str, Any]) -> Release:
    builds = []
    for tag, spec in raw["tags"].items():
        archs = tags[spec.get("archs", tag)]
        builds.append(
            Build(
                torch=raw["torch"],
                tag=tag,
                stable=bool(spec.get("stable", True)),
                cuda=archs["cuda"],
                sass=tuple(parse_cc(a) for a in archs["sass"]),
                ptx=tuple(parse_cc(a) for a in archs["ptx"]),
                platforms=tuple(archs.get("platforms", DEFAULT_CUDA_PLATFORMS)),
            )
        )
    builds.append(Build(torch=raw["torch"], tag="cpu"))
    return Release(
        torch=raw["torch"],
        python=(raw["python"][0], raw["python"][1]),
        libtorch_naming=raw["libtorch_naming"],
        pypi_default=raw.get("pypi_default"),
        builds=tuple(builds),
        libtorch_sha256=dict(raw.get("libtorch_sha256", {})),
    )


def parse_table(data: dict[str, Any], source: str = "") -> VariantTable:
    """Build a table from the JSON document (strict: a malformed table fails loudly here)."""

    def strip(d: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in d.items() if not k.startswith("_")}

    tags = strip(data["cuda_tags"])
    releases = sorted(
        (_release(r, tags) for r in data["releases"]),
        key=lambda r: _version_key(r.torch),
        reverse=True,
    )
    return VariantTable(
        releases=tuple(releases),
        wheel_index=data["wheel_index"],
        libtorch_url_form=data["libtorch_url"],
        default_mirror=data["default_mirror"],
        cuda_driver_floors=strip(data["cuda_driver_floors"]),
        arch_driver_floors=strip(data["arch_driver_floors"]),
        libtorch_files=strip(data["libtorch_files"]),
        source=source,
    )


@functools.cache
def load_table(path: str | None = None) -> VariantTable:
    """The shipped table, or the one at ``path`` (also ``FDL_TORCH_TABLE``) for a local override."""
    from_env = path is None and bool(os.environ.get("FDL_TORCH_TABLE"))
    path = path or os.environ.get("FDL_TORCH_TABLE")
    if path:
        source = str(path)
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as err:
            why = err.strerror if isinstance(err, OSError) and err.strerror else str(err)
            named = " (FDL_TORCH_TABLE)" if from_env else ""
            raise FdlError(
                f"cannot read the torch release table {source}{named}: {why}",
                "point FDL_TORCH_TABLE at a readable copy of fdl/variants/torch_releases.json, "
                "or unset it",
                ExitCode.UNAVAILABLE,
            ) from err
    else:
        ref = resources.files("fdl.variants") / "torch_releases.json"
        text, source = ref.read_text(encoding="utf-8"), "fdl/variants/torch_releases.json"
    try:
        return parse_table(json.loads(text), source)
    except (KeyError, ValueError, TypeError, IndexError) as err:
        raise FdlError(
            f"the torch release table {source} is malformed ({type(err).__name__}: {err})",
            "fix the file or unset FDL_TORCH_TABLE",
        ) from err
