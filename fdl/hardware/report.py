"""The ``fdl diagnose`` report: machine facts, installed builds, compatibility, recommendation.

Its JSON form follows ``diagnose.schema.json`` (shipped next to this module, documented in
docs/cli.md). ``schema`` carries the version; fields are only ever added within a version.
"""

from __future__ import annotations

from typing import Any

from fdl.hardware.machine import Machine, machine_dict
from fdl.variants.archs import coverage, parse_cc

SCHEMA_ID = "fdl.diagnose/1"


def _archs_from_arch_file(text: str) -> list[tuple[int, int]] | None:
    if not text or text == "cpu":
        return [] if text == "cpu" else None
    out = []
    for item in text.replace(";", " ").split():
        try:
            out.append(parse_cc(item))
        except ValueError:
            continue
    return out


def torch_build_archs(machine: Machine):
    """The installed torch's compiled archs from the release table (``None``: a line the table
    does not know; a patch release it does not list has its line's)."""
    from fdl.variants import load_table

    if machine.torch is None or machine.torch.tag is None:
        return None
    release = load_table().installed_release(machine.torch.public_version)
    return release.build(machine.torch.tag) if release else None


def build_report(machine: Machine, home, plan) -> dict[str, Any]:
    """The whole report as plain data (see ``diagnose.schema.json``)."""
    from fdl.errors import FdlError
    from fdl.libtorch_home import read_arch

    try:
        build = torch_build_archs(machine)
    except FdlError as err:  # an unreadable release table: diagnose reports it, never fails
        build = None
        machine.unknown["torch_archs"] = str(err)
    data: dict[str, Any] = {"schema": SCHEMA_ID}
    data["context"] = {"mode": home.mode, "libtorch_home": str(home.path)}
    data.update(machine_dict(machine))
    if data["torch"] is not None:
        data["torch"]["archs"] = build.arch_list if build else None
    active = home.active()
    variants = []
    for variant in home.variants():
        arch = read_arch(home.variant_dir(variant))
        variants.append(
            {
                "id": variant,
                "active": variant == active,
                "torch": arch.get("torch"),
                "cuda": arch.get("cuda"),
                "archs": arch.get("archs"),
                "source": arch.get("source"),
            }
        )
    data["libtorch"] = {"active": active, "variants": variants}
    active_archs = None
    if active:
        active_archs = _archs_from_arch_file(read_arch(home.variant_dir(active)).get("archs", ""))
    compat = []
    for gpu in machine.nvidia.gpus:
        entry: dict[str, Any] = {"gpu": gpu.index, "sm": gpu.sm}
        if gpu.cc is None:
            entry["torch"] = entry["libtorch"] = "unknown"
        else:
            if build is None:
                entry["torch"] = "unknown" if machine.torch else "not-installed"
            else:
                entry["torch"] = (
                    coverage(gpu.cc, build.sass, build.ptx)[0] if build.is_cuda else "cpu-build"
                )
            if active is None:
                entry["libtorch"] = "no-active-variant"
            elif active_archs is None:
                entry["libtorch"] = "unknown"
            else:
                entry["libtorch"] = coverage(gpu.cc, active_archs, [])[0]
        compat.append(entry)
    data["compatibility"] = compat
    data["recommendation"] = plan.to_dict() if plan is not None else None
    data["verdict"] = verdict(machine, plan, compat)
    return data


def verdict(machine: Machine, plan, compat: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Whether the installed torch suits this machine — judged on the hardware, not on age.

    ``status``: ``fine`` (the right kind of build: nothing to do), ``works`` (runs, but another
    build suits the machine better: optional), ``fix`` (a GPU cannot be used, or no torch:
    ``fdl setup`` fixes it), ``driver`` (an NVIDIA driver is installed but lists no GPU — a
    version mismatch after an upgrade —: the driver needs fixing first, and no build can be
    judged until it answers). ``newer``: a newer release of the same build, always optional.
    """
    from fdl.hardware.nvidia import broken_driver
    from fdl.variants.table import version_key

    if plan is None:
        return None
    installed = machine.torch
    gpus = machine.nvidia.gpus
    problem = broken_driver(machine.nvidia)
    if problem:
        now = f"torch {installed.version}" if installed else "torch"
        return _verdict("driver", f"{problem}; until then {now} sees no GPU", None)
    if installed is None:
        return _verdict("fix", f"torch is not installed: fdl setup installs torch {plan.torch} + "
                        f"{plan.tag}", None)  # fmt: skip
    newer = plan.torch if version_key(plan.torch) > version_key(installed.public_version) else None
    cpu_build = installed.tag == "cpu" or (installed.tag or "").startswith(("rocm", "xpu"))
    if not gpus:
        if cpu_build or installed.tag is None:
            return _verdict(
                "fine",
                f"torch {installed.version} is the right build: no NVIDIA GPU here, and it runs "
                "on the CPU",
                newer,
            )
        return _verdict(
            "works",
            f"torch {installed.version} is a CUDA build on a machine without an NVIDIA GPU: it "
            "runs on the CPU, but carries GBs of CUDA libraries; the CPU build is smaller "
            "(fdl setup)",
            newer,
        )
    if cpu_build:
        return _verdict(
            "fix",
            f"torch {installed.version} is a CPU build: the GPUs stay unused; fdl setup installs "
            f"torch {plan.torch} + {plan.tag}",
            None,
        )
    missing = [str(c["gpu"]) for c in compat if c["torch"] in ("none", "cpu-build")]
    if missing:
        return _verdict(
            "fix",
            f"torch {installed.version} has no kernels for GPU {', '.join(missing)}: fdl setup "
            f"installs torch {plan.torch} + {plan.tag}",
            None,
        )
    return _verdict(
        "fine", f"torch {installed.version} runs on every GPU here ({len(gpus)})", newer
    )


def _verdict(status: str, summary: str, newer: str | None) -> dict[str, Any]:
    return {"status": status, "summary": summary, "newer": newer}
