"""``fdl diagnose``: CPU, RAM, OS, container, Docker, GPUs, torch build, compatibility."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

import typer

_VERDICT = {
    "sass": "OK",
    "ptx": "OK (PTX JIT, slow first launch)",
    "none": "MISSING",
    "cpu-build": "MISSING (a CPU build)",
    "unknown": "unknown",
    "not-installed": "not installed",
    "no-active-variant": "no active variant",
}


def _gb(n: int | None) -> str:
    return f"{n / 1024**3:.0f} GB" if n else "unknown"


def vram_gb(mib: int) -> str:
    """A card's memory as it is sold: nvidia-smi reports what is usable (24564 MiB on a 24 GB
    RTX 4090, 11178 on an 11 GB 1080 Ti), a little under the size, so round to the nearest GB
    instead of down.

    >>> vram_gb(24564), vram_gb(11178), vram_gb(32607), vram_gb(512)
    ('24 GB', '11 GB', '32 GB', '512 MiB')
    """
    if mib < 1024:
        return f"{mib} MiB"
    return f"{(mib + 512) // 1024} GB"


def render_text(report: dict[str, Any]) -> list[str | tuple[str, str]]:
    """The human report, one line per item: plain text, or ``(text, style)`` (never markup, so
    GPU names, paths and error messages print verbatim)."""
    s, nv, py, torch, lt = (report[k] for k in ("system", "nvidia", "python", "torch", "libtorch"))
    unknown = report["unknown"]
    lines: list[str | tuple[str, str]] = [("System", "bold")]
    cpu = s["cpu_model"] or "unknown CPU"
    lines.append(
        f"  CPU:         {cpu} ({s['cpu_threads'] or '?'} threads, {_gb(s['ram_bytes'])} RAM)"
    )
    os_line = s["os_name"] or s["os_family"]
    if s["wsl"]:
        os_line += f" ({s['wsl'].upper()})"
    lines.append(f"  OS:          {os_line}, kernel {s['kernel'] or '?'}, {s['platform']}")
    if s["container"]:
        lines.append(f"  Container:   yes ({s['container']})")
    if s["docker_client"]:
        daemon = f"daemon {s['docker_daemon']}" if s["docker_daemon"] else "daemon not answering"
        lines.append(f"  Docker:      {s['docker_client']} ({daemon})")
    else:
        lines.append(f"  Docker:      not found ({unknown.get('docker_client', 'not on PATH')})")
    lines += [
        "",
        ("Python", "bold"),
        f"  Python:      {py['version']} ({py['kind']}: {py['prefix']})",
    ]
    if torch:
        cuda = f"CUDA {torch['cuda']}" if torch["cuda"] else "CPU build"
        lines.append(f"  torch:       {torch['version']} ({cuda})")
        archs = torch["archs"] or (
            f"unknown ({unknown['torch_archs']})"
            if "torch_archs" in unknown
            else "not in fdl’s release table"
        )
        lines.append(f"  Archs:       {archs}")
        for name, version in torch["companions"].items():
            lines.append(f"  {name + ':':<12} {version}")
    else:
        lines.append(f"  torch:       not installed ({unknown.get('torch', '')})".rstrip(" ()"))
    lines += ["", ("CUDA", "bold")]
    if nv["gpus"]:
        driver = nv["driver"] or "unknown"
        max_cuda = f" (supports CUDA ≤ {nv['cuda_driver_max']})" if nv["cuda_driver_max"] else ""
        lines.append(f"  Driver:      {driver}{max_cuda}")
        lines.append(f"  Devices:     {len(nv['gpus'])} (via {nv['source']})")
        for g in nv["gpus"]:
            sm = g["sm"] or "sm unknown"
            vram = f"{vram_gb(g['vram_mib'])} VRAM" if g["vram_mib"] else "VRAM unknown"
            lines.append(f"  [{g['index']}] {g['name']} -- {sm}, {vram}")
    else:
        lines.append("  No NVIDIA GPU found")
    for problem in nv["problems"]:
        lines.append((f"  note: {problem}", "dim"))
    lines += [
        "",
        ("libtorch", "bold"),
        f"  Home:        {report['context']['libtorch_home']} ({report['context']['mode']})",
    ]
    if lt["active"]:
        lines.append(f"  Active:      {lt['active']}")
    else:
        lines.append("  Active:      none (run 'fdl libtorch download')")
    if lt["variants"]:
        lines.append("  Variants:    " + ", ".join(v["id"] for v in lt["variants"]))
    if report["compatibility"]:
        lines += ["", ("Compatibility", "bold")]
        for c in report["compatibility"]:
            lines.append(
                f"  GPU {c['gpu']} ({c['sm'] or 'sm ?'}):  torch {_VERDICT[c['torch']]}, "
                f"libtorch {_VERDICT[c['libtorch']]}"
            )
    rec, judged = report["recommendation"], report.get("verdict")
    if judged:
        lines += ["", ("Verdict", "bold")]
        style = {"fine": "green", "works": "yellow", "fix": "red", "driver": "red"}[
            judged["status"]
        ]
        lines.append((f"  {judged['status']}: {judged['summary']}", style))
    if not rec and unknown.get("recommendation"):
        lines += ["", ("Recommendation", "bold"), f"  unknown: {unknown['recommendation']}"]
    if rec and judged is not None and judged["status"] == "driver":
        lines += ["", ("Recommendation", "bold")]
        lines.append(
            "  Fix the NVIDIA driver first (see the verdict), then run fdl diagnose again:"
        )
        lines.append(
            "  until it answers, fdl setup refuses to choose a build (the GPUs are unknown); "
            "'fdl setup --variant cpu' installs the CPU build on purpose"
        )
    elif rec:
        needed = judged is None or judged["status"] == "fix"
        title = "Recommendation" if needed else "The build fdl setup would install (optional)"
        lines += ["", (title, "bold")]
        lines.append(f"  torch {rec['torch']} + {rec['tag']} ({rec['status']})")
        lines += [f"  - {r}" for r in rec["reasons"]]
        lines += [(f"  ! {w}", "yellow") for w in rec["warnings"]]
        lines += [f"  alternative: {a}" for a in rec["alternatives"]]
        if needed:
            lines.append("  Fix it: fdl setup")
        elif judged is not None and judged["newer"]:
            lines.append(
                f"  torch {judged['newer']} is newer than the installed release: an optional "
                "upgrade, not a fix (fdl setup installs it)"
            )
        else:
            lines.append("  Nothing to do.")
    return lines


def diagnose(
    json_out: Annotated[
        bool,
        typer.Option("--json", help="One JSON document on stdout (schema fdl.diagnose/1)."),
    ] = False,
) -> None:
    import json

    from fdl import console
    from fdl.errors import FdlError
    from fdl.hardware import detect
    from fdl.hardware.report import build_report
    from fdl.libtorch_home import find_home
    from fdl.variants import resolve

    machine = detect()
    try:
        plan = resolve(machine.target())
    except FdlError as err:  # e.g. a Python no torch release supports: report, don't fail
        machine.unknown["recommendation"] = str(err)
        plan = None
    report = build_report(machine, find_home(), plan)
    if json_out:
        console.out(json.dumps(report, indent=2))
        return
    out = console.console()
    for line in render_text(report):
        text, style = line if isinstance(line, tuple) else (line, None)
        out.print(text, style=style, markup=False, highlight=False)


def register(app: typer.Typer, make_group: Callable[[str, str], typer.Typer]) -> None:
    app.command("diagnose", help="System and GPU diagnostics, and the torch build that fits.")(
        diagnose
    )
