"""Install a pre-built libtorch variant: download (resumable), verify, extract, record, activate."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path

from fdl.errors import FdlError
from fdl.libtorch_home.layout import LibtorchHome, read_arch, write_atomic
from fdl.variants.table import Build, Release, VariantTable

LIBRARIES = ("libtorch.so", "libtorch.dylib", "torch.lib")


@dataclass
class InstallResult:
    variant: str
    path: Path
    url: str
    sha256: str | None
    skipped: bool  # already installed, not re-downloaded
    activated: bool
    resumed_from: int = 0


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
    mirror: str | None = None,
    progress: bool = True,
) -> InstallResult:
    from fdl.downloads import download, extract_zip

    variant = f"precompiled/{build.tag}"
    target = home.variant_dir(variant)
    url = table.libtorch_url(release, build.tag, platform, mirror)
    existing = read_arch(target)
    if home.is_installed(variant) and existing.get("torch") == release.torch and not force:
        if activate:
            home.activate(variant)  # the original returned without activating
        return InstallResult(variant, target, url, existing.get("sha256"), True, activate)

    pinned = release.libtorch_sha256.get(f"{platform}/{build.tag}") if verify else None
    cache = home.path / ".downloads"
    archive = cache / Path(url).name.replace("%2B", "+")
    if force:
        for stale in (archive, archive.with_name(archive.name + ".part")):
            with contextlib.suppress(FileNotFoundError):
                stale.unlink()
    label = f"libtorch {release.torch}+{build.tag}"
    result = download(url, archive, expected_sha256=pinned, progress=progress, label=label)
    extract_zip(archive, target, strip="libtorch")
    if not any((target / "lib" / lib).exists() for lib in LIBRARIES):
        raise FdlError(
            f"no libtorch library in {target / 'lib'} after extracting {url}",
            "the archive layout is not libtorch's; check the mirror",
        )
    arch = {
        "cuda": build.cuda or "none",
        "torch": release.torch,
        "archs": build.arch_list.replace("+PTX", "") if build.is_cuda else "cpu",
        "source": "precompiled",
        "variant": build.tag,
        "url": url,
        "sha256": result.sha256,
        "sha256_pinned": "yes" if pinned else "no",
    }
    write_atomic(target / ".arch", "".join(f"{k}={v}\n" for k, v in arch.items()))
    archive.unlink(missing_ok=True)
    if activate:
        home.activate(variant)
    return InstallResult(variant, target, url, result.sha256, False, activate, result.resumed_from)
