"""Install a pre-built libtorch variant: download (resumable), check its sha256 when one is known,
extract (bounded), record, activate.

What "verified" means is recorded, never implied: a sha256 is checked only when one is known for
the exact file — pinned in fdl's release table, or given by the user (``--sha256``). PyTorch
publishes no checksums for its libtorch archives, so most downloads are not verified; the digest of
what was installed is recorded either way, and ``require_verified`` refuses to download a file
that has no known hash.
"""

from __future__ import annotations

import contextlib
import os
import re
from dataclasses import dataclass
from pathlib import Path

from fdl.errors import FdlError, FdlUsageError
from fdl.libtorch_home.layout import LibtorchHome, read_arch, write_atomic
from fdl.variants.table import Build, Release, VariantTable

LIBRARIES = ("libtorch.so", "libtorch.dylib", "torch.lib")
REQUIRE_VERIFIED_ENV = "FDL_REQUIRE_VERIFIED"
# where an expected sha256 came from (``.arch`` ``sha256_source`` and ``--json``)
SOURCE_TABLE = "release-table"
SOURCE_USER = "user"


@dataclass(frozen=True)
class Verification:
    """Whether the archive's sha256 was checked, against what, and what it was."""

    checked: bool
    source: str | None  # SOURCE_TABLE, SOURCE_USER, or None when nothing was checked
    expected: str | None
    sha256: str | None  # the digest of the installed archive (None if unknown)

    def to_json(self) -> dict[str, object]:
        return {
            "checked": self.checked,
            "source": self.source,
            "expected": self.expected,
            "sha256": self.sha256,
        }

    def describe(self) -> str:
        """One line for a human."""
        if self.checked:
            against = "fdl's release table" if self.source == SOURCE_TABLE else "--sha256"
            return f"sha256 checked against {against}: {self.sha256}"
        return (
            f"NOT verified (no known sha256 for this file; PyTorch publishes none); "
            f"its sha256 is {self.sha256 or 'unknown'}"
        )

    @classmethod
    def from_arch(cls, arch: dict[str, str]) -> Verification:
        """What an installed variant's ``.arch`` says (older files: ``sha256_pinned``)."""
        source = arch.get("sha256_source")
        if source is None:
            source = SOURCE_TABLE if arch.get("sha256_pinned") == "yes" else "none"
        checked = arch.get("sha256_verified", "yes" if source != "none" else "no") == "yes"
        return cls(
            checked,
            source if checked else None,
            arch.get("sha256") if checked else None,
            arch.get("sha256"),
        )


@dataclass
class InstallResult:
    variant: str
    path: Path
    url: str
    sha256: str | None
    skipped: bool  # already installed, not re-downloaded
    activated: bool
    resumed_from: int = 0
    verification: Verification | None = None


def check_sha256(value: str) -> str:
    """A user-supplied sha256: 64 hex digits (``sha256:`` prefix allowed), lower-cased."""
    text = value.strip().lower().removeprefix("sha256:")
    if not re.fullmatch(r"[0-9a-f]{64}", text):
        raise FdlUsageError(
            f"--sha256 {value!r} is not a sha256", "give the 64 hex digits of the archive's sha256"
        )
    return text


def require_verified_default() -> bool:
    """``FDL_REQUIRE_VERIFIED`` set to 1/true/yes/on."""
    return os.environ.get(REQUIRE_VERIFIED_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def expected_hash(
    release: Release,
    build: Build,
    platform: str,
    *,
    verify: bool = True,
    sha256: str | None = None,
) -> tuple[str | None, str | None]:
    """(expected sha256, its source) for this file: the user's, else the table's pin."""
    if sha256:
        return check_sha256(sha256), SOURCE_USER
    pinned = release.libtorch_sha256.get(f"{platform}/{build.tag}") if verify else None
    return (pinned.lower(), SOURCE_TABLE) if pinned else (None, None)


def already_installed(home: LibtorchHome, variant: str, release: Release, force: bool) -> bool:
    """Whether ``install_prebuilt`` would keep the installed variant (same torch, no force)."""
    return (
        not force
        and home.is_installed(variant)
        and read_arch(home.variant_dir(variant)).get("torch") == release.torch
    )


def refuse_unverified(url: str, expected: str | None, require_verified: bool) -> None:
    """Refuse, before any download, a file with no known sha256 when one is required (shared by
    the real run and ``--dry-run``, so both give the same answer)."""
    if expected is None and require_verified:
        raise FdlError(
            f"no sha256 is known for {Path(url).name.replace('%2B', '+')} and unverified "
            f"downloads are refused (--require-verified or {REQUIRE_VERIFIED_ENV})",
            "pass --sha256 HEX with a hash from a source you trust; nothing was downloaded",
        )


def _libtorch_layout(url: str):
    def check(root: Path) -> None:
        if not any((root / "lib" / lib).exists() for lib in LIBRARIES):
            raise FdlError(
                f"no libtorch library in the archive's lib/ ({url})",
                "the archive layout is not libtorch's; check the mirror",
            )

    return check


def _forget(archive: Path) -> None:
    """Remove a refused archive (and ``.downloads`` itself when that leaves it empty)."""
    part = archive.with_name(archive.name + ".part")
    for path in (archive, part, part.with_name(part.name + ".json")):
        with contextlib.suppress(OSError):  # cleanup: never hide the error that led here
            path.unlink()
    with contextlib.suppress(OSError):
        archive.parent.rmdir()


def _drop_unresumable(archive: Path, url: str) -> None:
    """``--force``: start from a fresh download, except a partial one of the same URL whose
    server validator is recorded — resuming it is safe (``If-Range``: a changed file restarts),
    and it is what the interrupted run told the user a re-run would do."""
    from fdl.downloads.engine import partial

    found = partial(archive)
    resumable = found is not None and found[1].get("url") == url and found[1].get("validator")
    part = archive.with_name(archive.name + ".part")
    for stale in (archive, *(() if resumable else (part, part.with_name(part.name + ".json")))):
        try:
            stale.unlink()
        except FileNotFoundError:
            pass
        except OSError as err:
            from fdl.downloads.errors import unwritable

            raise unwritable(stale, err, "remove") from err


def _device(path: Path) -> int | None:
    """The filesystem ``path`` is on (its nearest existing ancestor's)."""
    for candidate in (path, *path.parents):
        with contextlib.suppress(OSError):
            return candidate.stat().st_dev
    return None


def _room_to_unpack(
    url: str, cache: Path, target_parent: Path, stall_timeout: float | str | None, limits
) -> int:
    """What the archive will unpack to, when its index can be read ahead (``Range``), so the
    free-space check before downloading counts it: returned as the download's ``reserve`` when
    both land on one filesystem, else checked here on the target's (0: not known, or over the
    limits, which the extraction refuses anyway)."""
    from fdl.downloads import ExtractLimits
    from fdl.downloads import stall_timeout as resolve_stall
    from fdl.downloads.archive import check_room, remote_unpacked_size

    unpacked = remote_unpacked_size(url, timeout=min(10.0, resolve_stall(stall_timeout) / 3))
    limits = limits or ExtractLimits.resolve()
    if unpacked is None or unpacked > limits.max_size:
        return 0
    if _device(cache) == _device(target_parent):
        return unpacked
    existing = next(p for p in (target_parent, *target_parent.parents) if p.exists())
    check_room(existing, unpacked, Path(url).name.replace("%2B", "+"))
    return 0


def install_prebuilt(
    home: LibtorchHome,
    table: VariantTable,
    release: Release,
    build: Build,
    platform: str,
    *,
    force: bool = False,
    activate: bool = True,
    verify: bool = True,
    sha256: str | None = None,
    require_verified: bool = False,
    mirror: str | None = None,
    progress: bool = True,
    stall_timeout: float | str | None = None,
    limits=None,
) -> InstallResult:
    """Download, check, extract and record one pre-built variant (see the module docstring).

    Nothing is left behind when the archive is refused (a wrong sha256, over the extraction
    limits, an unsafe member, not libtorch's layout): no staging directory, no file in
    ``.downloads``, and an installed variant is left as it was. An archive that does not fit on
    the disk once unpacked is kept (as a complete ``.part``) for the next run. ``force``
    replaces the installed variant but resumes a partial download of the same URL.
    """
    from fdl.downloads import download, extract_zip
    from fdl.downloads.archive import remove_stale_staging
    from fdl.downloads.engine import keep_resumable
    from fdl.downloads.errors import ChecksumMismatchError, InsufficientSpaceError

    variant = f"precompiled/{build.tag}"
    target = home.variant_dir(variant)
    url = table.libtorch_url(release, build.tag, platform, mirror)
    expected, source = expected_hash(release, build, platform, verify=verify, sha256=sha256)
    remove_stale_staging(target.parent)  # trees of runs killed mid-extraction
    existing = read_arch(target)
    if already_installed(home, variant, release, force):
        if activate:
            home.activate(variant)  # --activate holds even when nothing needs installing
        return InstallResult(
            variant,
            target,
            url,
            existing.get("sha256"),
            True,
            activate,
            verification=Verification.from_arch(existing),
        )
    refuse_unverified(url, expected, require_verified)

    cache = home.path / ".downloads"
    archive = cache / Path(url).name.replace("%2B", "+")
    if force:
        _drop_unresumable(archive, url)
    reserve = _room_to_unpack(url, cache, target.parent, stall_timeout, limits)
    label = f"libtorch {release.torch}+{build.tag}"
    try:
        result = download(
            url,
            archive,
            expected_sha256=expected,
            progress=progress,
            label=label,
            stall_timeout=stall_timeout,
            reserve=reserve,
            resume_hint="re-run the same command to resume",
        )
    except ChecksumMismatchError:
        _forget(archive)
        raise
    # Unpacked from a complete ``.part``: whatever stops the extraction (no room, Ctrl-C, a
    # kill) leaves the archive (GBs) for the next run, which checks it again instead of
    # fetching it; a refused archive is deleted below.
    part = keep_resumable(result, url)
    try:
        extract_zip(part, target, strip="libtorch", limits=limits, check=_libtorch_layout(url))
    except InsufficientSpaceError as err:
        raise InsufficientSpaceError(
            err.what,
            f"free some space, then re-run the same command: the downloaded archive is kept "
            f"({part}) and is checked, not downloaded, again",
            err.code,
        ) from err
    except FdlError:
        _forget(archive)
        raise
    verification = Verification(expected is not None, source, expected, result.sha256)
    arch = {
        "cuda": build.cuda or "none",
        "torch": release.torch,
        "archs": build.arch_list.replace("+PTX", "") if build.is_cuda else "cpu",
        "source": "precompiled",
        "variant": build.tag,
        "url": url,
        "sha256": result.sha256,
        "sha256_verified": "yes" if verification.checked else "no",
        "sha256_source": source or "none",
        "sha256_pinned": "yes" if source == SOURCE_TABLE else "no",
    }
    write_atomic(target / ".arch", "".join(f"{k}={v}\n" for k, v in arch.items()))
    _forget(archive)
    if activate:
        home.activate(variant)
    return InstallResult(
        variant, target, url, result.sha256, False, activate, result.resumed_from, verification
    )
