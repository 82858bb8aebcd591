"""Prove an installed torch works: in a fresh interpreter, import it, compare its compiled archs
with every GPU, launch one tiny kernel per GPU, and check NCCL when there are two or more."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fdl.variants.archs import ComputeCapability, coverage, parse_cc

if TYPE_CHECKING:
    from fdl.variants import Plan

SCRIPT = r"""
import json, sys
out = {"ok": False}
try:
    import torch
    out["version"] = torch.__version__
    out["cuda"] = getattr(torch.version, "cuda", None)
    out["cpu_op"] = float(torch.ones(4).sum().item())
    out["cuda_available"] = bool(torch.cuda.is_available())
    out["arch_list"] = list(torch.cuda.get_arch_list()) if out["cuda_available"] else []
    out["devices"] = []
    if out["cuda_available"]:
        for i in range(torch.cuda.device_count()):
            dev = {"index": i, "name": torch.cuda.get_device_name(i),
                   "capability": list(torch.cuda.get_device_capability(i))}
            try:
                x = torch.ones(16, device=f"cuda:{i}") * 2
                torch.cuda.synchronize(i)
                dev["kernel"] = float(x.sum().item()) == 32.0
            except Exception as err:
                dev["kernel"] = False
                dev["error"] = str(err).splitlines()[0][:300]
            out["devices"].append(dev)
        if torch.cuda.device_count() >= 2:
            import torch.distributed as dist
            out["nccl"] = bool(dist.is_available() and dist.is_nccl_available())
    out["ok"] = True
except Exception as err:
    out["error"] = f"{type(err).__name__}: {err}".splitlines()[0][:500]
print("@@FDL@@" + json.dumps(out))
"""


@dataclass
class Verification:
    ok: bool
    version: str | None = None
    cuda: str | None = None
    problems: list[str] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)
    raw: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class VerifyScope:
    """What a plan promises: how many GPUs must work, and which ones torch is shown."""

    expected_gpus: int
    visible_devices: str | None = None  # CUDA_VISIBLE_DEVICES for the check; None: leave as is
    notes: tuple[str, ...] = ()


def scope_for(plan: Plan, gpus: Sequence[Any] = ()) -> VerifyScope:
    """Verify what ``plan`` installs, not every GPU in the machine.

    A CPU build (asked for, or because no CUDA build can run here) is not expected to see CUDA.
    A CUDA build that cannot serve every GPU (a mixed-generation compromise, a forced variant) is
    checked only on the GPUs it supports, the others hidden with CUDA_VISIBLE_DEVICES — exactly
    how the plan says to run it. ``gpus``: the machine's GPUs (anything with ``index`` and
    ``name``), named in the note when a CPU build leaves them unused.
    """
    chosen = plan.chosen
    if chosen is None or not chosen.build.is_cuda:
        unused = ", ".join(f"GPU {g.index} {g.name}" for g in gpus)
        note = f"{plan.tag} build: CUDA is not expected"
        return VerifyScope(0, None, (note + (f" ({unused} unused)" if unused else ""),))
    works = [f for f in chosen.fits if f.usable] if chosen.driver_ok is not False else []
    if len(works) == len(chosen.fits):
        return VerifyScope(len(works))
    notes = []
    for f in chosen.fits:
        if f in works:
            continue
        if chosen.driver_ok is False:
            why = f"the driver is too old for CUDA {chosen.build.cuda_major}"
        elif f.coverage == "driver-too-old":
            why = f"the driver is too old for {f.sm}"
        else:
            why = f"{plan.tag} has no kernels for {f.sm}"
        notes.append(f"GPU {f.index} {f.name} excluded from the check: {why}")
    visible = ",".join(str(f.index) for f in works)
    return VerifyScope(len(works), visible, tuple(notes))


def _arch_list(arch_list: list[str]) -> tuple[list[ComputeCapability], list[ComputeCapability]]:
    sass: list[ComputeCapability] = []
    ptx: list[ComputeCapability] = []
    for item in arch_list:
        try:
            (ptx if item.startswith("compute_") else sass).append(parse_cc(item))
        except ValueError:
            continue
    return sass, ptx


def verify_torch(
    python: str,
    expected_gpus: int = 0,
    timeout: float = 600,
    *,
    visible_devices: str | None = None,
) -> Verification:
    """Run the checks in ``python`` (a subprocess: a broken install cannot take fdl down).

    ``visible_devices`` (``"1"``, ``"0,2"``, ``""`` for none: nvidia-smi's indices) becomes the
    check's CUDA_VISIBLE_DEVICES, with CUDA_DEVICE_ORDER=PCI_BUS_ID so CUDA numbers the GPUs as
    nvidia-smi does; GPUs are still reported by their machine-wide index. Without it, the
    environment's own CUDA_VISIBLE_DEVICES (if any) applies, and a failure names it.
    """
    env = None
    physical: list[int] | None = None
    inherited = os.environ.get("CUDA_VISIBLE_DEVICES") if visible_devices is None else None
    if visible_devices is not None:
        env = {
            **os.environ,
            "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
            "CUDA_VISIBLE_DEVICES": visible_devices,
        }
        physical = [int(i) for i in visible_devices.split(",") if i.strip()]
    try:
        proc = subprocess.run(
            [python, "-c", SCRIPT],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            env=env,
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        return Verification(False, problems=[f"could not run {python}: {err}"])
    marker = proc.stdout.rfind("@@FDL@@")
    if marker < 0:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return Verification(False, problems=[f"the verification crashed: {tail}"])
    data = json.loads(proc.stdout[marker + 7 :].strip().splitlines()[0])
    result = Verification(bool(data.get("ok")), data.get("version"), data.get("cuda"), raw=data)
    if not data.get("ok"):
        result.problems.append(f"import torch failed: {data.get('error')}")
        return result
    result.lines.append(f"import torch {result.version} (CUDA {result.cuda or 'none'}): ok")
    result.lines.append(f"CPU tensor op: {'ok' if data.get('cpu_op') == 4.0 else 'WRONG'}")
    if data.get("cpu_op") != 4.0:
        result.problems.append("a CPU tensor op gave a wrong result")
    # an inherited CUDA_VISIBLE_DEVICES ("" or a bad index) hides GPUs from a correct install
    hidden_by = (
        f": CUDA_VISIBLE_DEVICES={inherited!r} is set in this environment and hides GPUs from "
        "CUDA — unset it (or list the GPUs to use) and check again"
        if inherited is not None
        else ""
    )
    if expected_gpus and not data.get("cuda_available"):
        result.problems.append(
            f"{expected_gpus} GPU(s) present but torch.cuda.is_available() is False "
            f"(build CUDA: {result.cuda or 'none — a CPU build'}){hidden_by}"
        )
    devices = data.get("devices", [])
    if data.get("cuda_available") and len(devices) < expected_gpus:
        result.problems.append(
            f"torch sees {len(devices)} GPU(s), {expected_gpus} expected{hidden_by}"
        )
    sass, ptx = _arch_list(data.get("arch_list", []))
    for dev in devices:
        cc = tuple(dev["capability"])
        kind, _ = coverage(cc, sass, ptx)
        index = (
            physical[dev["index"]] if physical and dev["index"] < len(physical) else dev["index"]
        )
        label = f"GPU {index} {dev['name']} (sm_{cc[0]}{cc[1]})"
        if kind == "none":
            result.problems.append(f"{label} is not in torch's arch list {data['arch_list']}")
        if not dev.get("kernel"):
            result.problems.append(f"{label}: kernel launch failed: {dev.get('error', '?')}")
        result.lines.append(
            f"{label}: archs {kind}, kernel {'ok' if dev.get('kernel') else 'FAILED'}"
        )
    if "nccl" in data:
        result.lines.append(f"NCCL: {'available' if data['nccl'] else 'MISSING'}")
        if not data["nccl"]:
            result.problems.append("NCCL is missing: multi-GPU training will not work")
    result.ok = not result.problems
    return result
