"""``fdl libtorch``: download, list, inspect, activate and remove libtorch variants."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

import typer

PathOption = Annotated[
    str | None,
    typer.Option(
        "--path",
        metavar="DIR",
        help="The libtorch directory to manage (default: ./libtorch in a project, else $FLODL_HOME/libtorch).",
    ),
]


JsonOption = Annotated[bool, typer.Option("--json", help="JSON on stdout.")]


def _say(text: str) -> None:
    """A status line on stderr, printed verbatim (paths and URLs are not rich markup)."""
    from rich.markup import escape

    from fdl import console

    console.info(escape(text))


def _home(path: str | None):
    from fdl.libtorch_home import find_home

    return find_home(path)


def download_variant(
    version: str | None,
    tag: str,
    platform: str,
    *,
    path: str | None = None,
    activate: bool = True,
    force: bool = False,
    verify: bool = True,
    sha256: str | None = None,
    require_verified: bool | None = None,
    dry_run: bool = False,
    mirror: str | None = None,
    progress: bool = True,
    stall_timeout: str | float | None = None,
    max_extract_size: str | None = None,
    max_extract_ratio: str | None = None,
) -> dict:
    """Resolve, download and install one pre-built variant (shared with ``fdl setup --libtorch``).

    ``require_verified`` None reads ``FDL_REQUIRE_VERIFIED``. Every bad value (a malformed hash,
    stall timeout or limit) is a usage error before anything is downloaded. Returns what happened
    (the ``--json`` document of ``fdl libtorch download``).
    """
    from fdl.libtorch_home import install_prebuilt
    from fdl.libtorch_home.install import expected_hash
    from fdl.variants import load_table

    sha256, require_verified, stall, limits = _checked_options(
        verify, sha256, require_verified, stall_timeout, max_extract_size, max_extract_ratio
    )
    table = load_table()
    release, build = pick_release(table, version, tag)
    home = _home(path)
    url = table.libtorch_url(release, tag, platform, mirror)
    _say(f"libtorch {release.torch} ({tag}, {build.arch_list})")
    _say(f"  URL:  {url}")
    _say(f"  Path: {home.variant_dir('precompiled/' + tag)}")
    expected, source = expected_hash(release, build, platform, verify=verify, sha256=sha256)
    if expected:
        against = "--sha256" if sha256 else "fdl's release table"
        _say(f"  sha256 ({against}): {expected}")
    else:
        _say("  sha256: none known for this file (it will not be verified)")
    summary = {
        "torch": release.torch,
        "tag": tag,
        "archs": build.arch_list,
        "url": url,
        "path": str(home.variant_dir("precompiled/" + tag)),
        "dry_run": dry_run,
        "verification": {"checked": False, "source": source, "expected": expected, "sha256": None},
    }
    if dry_run:
        from fdl.libtorch_home.install import already_installed, refuse_unverified

        if not already_installed(home, f"precompiled/{tag}", release, force):
            refuse_unverified(url, expected, require_verified)  # as the real run would
        _say("dry run: nothing downloaded")
        return summary
    result = install_prebuilt(
        home,
        table,
        release,
        build,
        platform,
        force=force,
        activate=activate,
        verify=verify,
        sha256=sha256,
        require_verified=require_verified,
        mirror=mirror,
        progress=progress,
        stall_timeout=stall,
        limits=limits,
    )
    verification = result.verification
    summary.update(
        variant=result.variant,
        downloaded=not result.skipped,
        activated=result.activated,
        sha256=result.sha256,
        verification=verification.to_json() if verification else None,
        resumed_from=result.resumed_from,
    )
    _report_install(result, home, release.torch)
    return summary


def _checked_options(
    verify: bool,
    sha256: str | None,
    require_verified: bool | None,
    stall_timeout: str | float | None,
    max_extract_size: str | None,
    max_extract_ratio: str | None,
) -> tuple[str | None, bool, float, Any]:
    """The download options, checked before anything is downloaded: the normalised hash, whether
    a verified file is required (None reads ``FDL_REQUIRE_VERIFIED``), the stall timeout and the
    extraction limits. A contradiction or a malformed value is a usage error."""
    from fdl.downloads import ExtractLimits
    from fdl.downloads import stall_timeout as resolve_stall
    from fdl.errors import FdlUsageError
    from fdl.libtorch_home.install import check_sha256, require_verified_default

    if sha256 and not verify:
        raise FdlUsageError("--sha256 and --no-verify contradict each other", "choose one")
    if require_verified is None:
        require_verified = require_verified_default()
    if require_verified and not verify:
        raise FdlUsageError(
            "--no-verify contradicts --require-verified (or FDL_REQUIRE_VERIFIED)", "choose one"
        )
    if sha256:
        sha256 = check_sha256(sha256)
    stall = resolve_stall(stall_timeout)
    limits = ExtractLimits.resolve(max_extract_size, max_extract_ratio)
    return sha256, require_verified, stall, limits


def pick_release(table: Any, version: str | None, tag: str) -> tuple[Any, Any]:
    """The release and its ``tag`` build to download: ``version``, else the newest release in
    ``table`` that has that build. A release without the build is a usage error listing the
    builds it has."""
    from fdl.errors import FdlUsageError

    if version:
        release = table.release(version)
    else:
        release = next((r for r in table.releases if r.build(tag)), None)
        if release is None:
            raise FdlUsageError(
                f"no torch release in the table has a '{tag}' build", "try --cuda 12.6 or --cpu"
            )
    build = release.build(tag)
    if build is None:
        tags = ", ".join(b.tag for b in release.builds)
        raise FdlUsageError(f"torch {release.torch} has no '{tag}' libtorch", f"available: {tags}")
    return release, build


def _report_install(result: Any, home: Any, torch: str) -> None:
    """What ``install_prebuilt`` did, its verification and how to use the variant, on stderr."""
    verification = result.verification
    if result.skipped:
        _say(f"already installed: {result.variant} (torch {torch}); --force re-downloads")
    else:
        resumed = f" (resumed at {result.resumed_from} bytes)" if result.resumed_from else ""
        _say(f"installed {result.variant}{resumed}")
    if verification is not None:
        if verification.checked:
            _say(f"  {verification.describe()}")
        else:
            from fdl import console

            console.warn(f"{result.variant}: {verification.describe()}")
    if result.activated:
        _say(f"active: {result.variant} ({home.active_file})")
    lib = result.path / "lib"
    _say(f'  export LIBTORCH="{result.path}"  LD_LIBRARY_PATH="{lib}:$LD_LIBRARY_PATH"')


def download(
    cpu: Annotated[bool, typer.Option("--cpu", help="The CPU build.")] = False,
    cuda: Annotated[
        str | None, typer.Option("--cuda", metavar="X.Y", help="A CUDA build, e.g. 12.8.")
    ] = None,
    version: Annotated[
        str | None,
        typer.Option(
            "--torch",
            metavar="VERSION",
            help="torch release, e.g. 2.9.1 (default: newest with this build).",
        ),
    ] = None,
    path: PathOption = None,
    no_activate: Annotated[
        bool, typer.Option("--no-activate", help="Install without making it active.")
    ] = False,
    force: Annotated[
        bool, typer.Option("--force", help="Download again even if installed.")
    ] = False,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Show what would be downloaded, and where.")
    ] = False,
    mirror: Annotated[
        str | None,
        typer.Option(
            "--mirror",
            metavar="URL",
            help="Base URL instead of download.pytorch.org (also FDL_TORCH_MIRROR).",
        ),
    ] = None,
    no_verify: Annotated[
        bool,
        typer.Option("--no-verify", help="Skip the sha256 pinned in fdl's release table."),
    ] = False,
    sha256: Annotated[
        str | None,
        typer.Option(
            "--sha256",
            metavar="HEX",
            help="Check the archive against this sha256 (wins over a pinned one).",
        ),
    ] = None,
    require_verified: Annotated[
        bool,
        typer.Option(
            "--require-verified",
            help="Refuse a file with no known sha256 (also FDL_REQUIRE_VERIFIED=1).",
        ),
    ] = False,
    stall_timeout: Annotated[
        str | None,
        typer.Option(
            "--stall-timeout",
            metavar="SECONDS",
            help="Give up after this long without data, retries included "
            "(default 60; also FDL_STALL_TIMEOUT).",
        ),
    ] = None,
    max_extract_size: Annotated[
        str | None,
        typer.Option(
            "--max-extract-size",
            metavar="SIZE",
            help="Refuse an archive that unpacks to more (default 32G; also FDL_MAX_EXTRACT_SIZE).",
        ),
    ] = None,
    max_extract_ratio: Annotated[
        str | None,
        typer.Option(
            "--max-extract-ratio",
            metavar="N",
            help="Refuse an archive that unpacks to more than N times its size (default "
            "50; also FDL_MAX_EXTRACT_RATIO).",
        ),
    ] = None,
    json_out: Annotated[
        bool,
        typer.Option("--json", help="What was installed, as JSON on stdout (no progress bar)."),
    ] = False,
) -> None:
    from fdl import console
    from fdl.errors import FdlUsageError

    if cpu and cuda:
        raise FdlUsageError("--cpu and --cuda are mutually exclusive", "choose one")
    if mirror is not None:
        from fdl.variants.table import check_mirror

        mirror = check_mirror(mirror)  # before the hardware is probed or anything fetched
    if cpu:
        tag, platform = "cpu", _platform()
    elif cuda:
        digits = cuda.replace(".", "")
        if not digits.isdigit():
            raise FdlUsageError(f"--cuda {cuda} is not a CUDA version", "e.g. --cuda 12.8")
        tag, platform = f"cu{digits}", _platform()
    else:
        import dataclasses

        from fdl.hardware import detect
        from fdl.variants import resolve

        machine = detect(docker=False)
        target = machine.target()
        if target.driver_problem:  # as fdl setup: unknown GPUs are not absent ones
            from fdl.errors import ExitCode, FdlError

            raise FdlError(
                f"cannot choose a libtorch: {target.driver_problem}",
                "fix the driver first (a reboot, usually), then run this again; or pass --cpu "
                "or --cuda X.Y to choose the build yourself",
                ExitCode.UNAVAILABLE,
            )
        # a C++ libtorch does not depend on the Python running fdl: no wheel filter
        plan = resolve(dataclasses.replace(target, python=None), torch=version)
        for reason in plan.reasons:
            _say(f"  - {reason}")
        for warning in plan.warnings:
            console.warn(warning)
        tag, platform, version = plan.tag, machine.system.platform_key, plan.torch
    summary = download_variant(
        version,
        tag,
        platform,
        path=path,
        activate=not no_activate,
        force=force,
        verify=not no_verify,
        sha256=sha256,
        require_verified=True if require_verified else None,
        dry_run=dry_run,
        mirror=mirror,
        progress=not json_out,
        stall_timeout=stall_timeout,
        max_extract_size=max_extract_size,
        max_extract_ratio=max_extract_ratio,
    )
    if json_out:
        import json

        console.out(json.dumps(summary))


def list_(
    json_out: JsonOption = False,
    path: PathOption = None,
) -> None:
    import json

    from fdl import console

    home = _home(path)
    active = home.active()
    variants = home.variants()
    if json_out:
        console.out(json.dumps([{"variant": v, "active": v == active} for v in variants]))
        return
    if not variants:
        _say(f"No libtorch variants installed in {home.path}. Run: fdl libtorch download")
    for v in variants:
        console.out(f"  {v}" + (" (active)" if v == active else ""))
    _report_leftovers(home)


def _report_leftovers(home: Any) -> None:
    """Staging trees of interrupted extractions and kept partial downloads (GBs each for a real
    libtorch), on stderr."""
    from fdl.downloads.archive import human_size, staging_trees

    for tree in staging_trees(home.path / "precompiled"):
        if tree.owner_alive:
            state = "in use by a running fdl"
        elif tree.owner_alive is False:
            state = "left by an interrupted run; the next 'fdl libtorch download' removes it"
        else:
            state = "left by an interrupted run (owner unknown); delete it if no fdl is running"
        _say(f"leftover: {tree.path} ({human_size(tree.size())}): {state}")
    downloads = home.path / ".downloads"
    for part in sorted(downloads.glob("*.part")) if downloads.is_dir() else []:
        _say(
            f"kept download: {part} ({human_size(part.stat().st_size)}): the download command "
            "for it resumes it; delete it if you no longer need it"
        )


def info(
    json_out: JsonOption = False,
    path: PathOption = None,
) -> None:
    import json

    from fdl import console
    from fdl.errors import ExitCode, FdlError
    from fdl.libtorch_home import read_arch

    home = _home(path)
    active = home.active()
    if active is None:
        raise FdlError(
            f"no active libtorch variant in {home.path}",
            "run 'fdl libtorch download'",
            ExitCode.UNAVAILABLE,
        )
    arch = read_arch(home.variant_dir(active))
    if json_out:
        console.out(json.dumps({"variant": active, "path": str(home.variant_dir(active)), **arch}))
        return
    console.out(f"Active:   {active}")
    console.out(f"Path:     {home.variant_dir(active)}")
    for key, label in (
        ("torch", "Version"),
        ("cuda", "CUDA"),
        ("archs", "Archs"),
        ("source", "Source"),
        ("sha256", "sha256"),
    ):
        if key in arch:
            console.out(f"{label + ':':<9} {arch[key]}")
    if "sha256" in arch:
        from fdl.libtorch_home.install import SOURCE_TABLE, Verification

        v = Verification.from_arch(arch)
        against = "fdl's release table" if v.source == SOURCE_TABLE else "a --sha256 hash"
        console.out(f"{'Verified:':<9} " + (f"yes, against {against}" if v.checked else "no"))


def activate(
    variant: Annotated[str, typer.Argument(help="Variant id, e.g. precompiled/cu128 (or cu128).")],
    path: PathOption = None,
) -> None:

    home = _home(path)
    variant = home.check_id(variant)
    home.activate(variant)
    _say(f"active variant: {variant} ({home.active_file})")


def remove(
    variant: Annotated[str, typer.Argument(help="Variant id, e.g. precompiled/cu128 (or cu128).")],
    path: PathOption = None,
) -> None:

    home = _home(path)
    variant = home.check_id(variant)
    was_active = home.remove(variant)
    _say(f"removed {variant}")
    if was_active:
        _say("it was the active variant; run 'fdl libtorch activate <variant>' to set another")


def register(app: typer.Typer, make_group: Callable[[str, str], typer.Typer]) -> None:
    group = make_group("libtorch", "Manage pre-built libtorch (C++) installations.")
    app.add_typer(group)
    group.command(
        "download",
        help="Download a pre-built libtorch (resumable; its sha256 is checked when one is pinned "
        "or given with --sha256, and the result says which).",
    )(download)
    group.command("list", help="Show installed variants.")(list_)
    group.command("info", help="Show the active variant.")(info)
    group.command("activate", help="Set the active variant.")(activate)
    group.command("remove", help="Remove a variant.")(remove)


def _platform() -> str:
    from fdl.hardware.system import probe_system

    return probe_system(docker=False)[0].platform_key
