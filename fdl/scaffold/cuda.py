"""Which torch build a Docker project's GPU image installs: the resolver's answer for this machine.

The image runs on this host's NVIDIA driver, so the host's GPUs and driver decide the build, as
for ``fdl setup`` — but for the image's Python (``python:3.12-slim``), and with the torch release
pinned, so an index that lacks the newest release cannot silently give an older torch.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING

from fdl.errors import FdlUsageError
from fdl.scaffold.render import DOCKER_PYTHON, normalize_cuda

if TYPE_CHECKING:
    from fdl.hardware.machine import Machine
    from fdl.variants import Release, VariantTable


@dataclass(frozen=True)
class CudaChoice:
    tag: str  # cu126, cu132…
    torch: str  # the pinned release, e.g. 2.14.0
    reason: str  # one line: why (recorded in the answers file and the Dockerfile)


def choose_cuda(
    requested: str | None,
    *,
    machine: Machine | None = None,
    table: VariantTable | None = None,
) -> CudaChoice:
    """``--cuda TAG`` if given (the newest release that has it), else what fits this machine."""
    from fdl.variants import load_table

    table = table or load_table()
    releases = [r for r in table.releases if r.supports_python(DOCKER_PYTHON)]
    if requested is not None:
        tag = normalize_cuda(requested)
        release = _newest_with(releases, tag)
        return CudaChoice(
            tag,
            release.torch,
            f"chosen with --cuda; torch {release.torch} is the newest release with a {tag} build",
        )
    if machine is None:
        from fdl.hardware import detect

        machine = detect(docker=False)
    target = _image_target(machine)
    if not target.gpus:
        return _default(releases[0], "no NVIDIA GPU on this machine")
    from fdl.variants import resolve, sm_name

    plan = resolve(target, table=table)
    gpus = ", ".join(f"{g.name} ({sm_name(g.cc) if g.cc else 'sm unknown'})" for g in target.gpus)
    driver = f"driver {target.driver}" if target.driver else "driver unknown"
    if plan.chosen is None or not plan.chosen.build.is_cuda:
        return _default(releases[0], f"no CUDA build runs on this machine ({gpus}, {driver})")
    reason = f"fits this machine: {gpus}, {driver}"
    if plan.visible_devices is not None:
        reason += f"; runs on GPU {plan.visible_devices} only (no build fits every GPU)"
    return CudaChoice(plan.tag, plan.torch, reason)


def pin_torch(tag: str, table: VariantTable | None = None) -> str:
    """The newest release with a ``tag`` build (for answers recorded before torch was pinned)."""
    from fdl.variants import load_table

    table = table or load_table()
    releases = [r for r in table.releases if r.supports_python(DOCKER_PYTHON)]
    return _newest_with(releases, tag).torch


def _newest_with(releases: list[Release], tag: str) -> Release:
    for release in releases:
        build = release.build(tag)
        if build is not None and build.is_cuda:
            return release
    known = sorted({b.tag for r in releases for b in r.builds if b.is_cuda})
    raise FdlUsageError(
        f"no torch release in fdl's table has a {tag} build",
        "choose one of: " + ", ".join(known),
    )


def _default(newest: Release, why: str) -> CudaChoice:
    cuda = [b for b in newest.builds if b.is_cuda]
    default = newest.pypi_default
    tag = default if default and newest.build(default) else cuda[-1].tag
    return CudaChoice(
        tag,
        newest.torch,
        f"{why}: torch {newest.torch}'s default CUDA build; "
        "change it with fdl init --update --cuda TAG",
    )


def _image_target(machine: Machine):
    """The resolver's target for a Linux container on this host (its driver, its GPUs)."""
    target = machine.target()
    arch = machine.system.platform_key.rsplit("-", 1)[-1]
    platform = "linux-aarch64" if arch in ("arm64", "aarch64") else "linux-x86_64"
    os_family = target.os_family if target.os_family == "windows" else "linux"
    return dataclasses.replace(target, os_family=os_family, platform=platform, python=DOCKER_PYTHON)
