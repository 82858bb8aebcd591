"""Everything fdl knows about this machine, gathered once, serialisable to JSON."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any

from fdl.hardware.nvidia import NvidiaReport, probe_nvidia
from fdl.hardware.python_env import PythonEnv, TorchInstall, probe_python, probe_torch
from fdl.hardware.system import SystemFacts, probe_system


@dataclass
class Machine:
    system: SystemFacts
    nvidia: NvidiaReport
    python: PythonEnv
    torch: TorchInstall | None
    unknown: dict[str, str] = field(default_factory=dict)  # fact -> why it is unknown

    @property
    def driver_os_family(self) -> str:
        """Whose driver floors apply: under WSL the driver is the Windows one."""
        return "windows" if self.system.wsl else self.system.os_family

    def target(self):
        """What the variant resolver needs (``fdl.variants.Target``)."""
        from fdl.hardware.nvidia import broken_driver
        from fdl.variants import GpuTarget, Target

        return Target(
            os_family=self.driver_os_family if self.system.os_family != "macos" else "macos",
            platform=self.system.platform_key,
            driver=self.nvidia.driver,
            gpus=tuple(GpuTarget(g.index, g.name, g.cc) for g in self.nvidia.gpus),
            python=".".join(self.python.version.split(".")[:2]),
            driver_problem=broken_driver(self.nvidia),
        )


def detect(*, docker: bool = True, python: str | None = None) -> Machine:
    """Probe everything; never raises (except for a ``python`` that is not an interpreter).

    ``python``: whose environment and torch to report (default: the one running fdl).
    """
    system, problems = probe_system(docker=docker)
    nvidia = probe_nvidia()
    env = probe_python()
    if python and python != sys.executable:
        env = _foreign_python(python)
    torch, why = probe_torch(python)
    unknown: dict[str, str] = {}
    for problem in problems:
        key, _, reason = problem.partition(": ")
        unknown[key.replace(" ", "_")] = reason or problem
    if nvidia.problems:
        unknown["gpus"] = "; ".join(nvidia.problems)
    if nvidia.gpus and nvidia.driver is None:
        unknown["driver"] = "no probe reported the driver version"
    if torch is None and why:
        unknown["torch"] = why
    return Machine(system, nvidia, env, torch, unknown)


def machine_dict(machine: Machine) -> dict[str, Any]:
    return {
        "system": machine.system.to_dict(),
        "nvidia": machine.nvidia.to_dict(),
        "python": machine.python.to_dict(),
        "torch": machine.torch.to_dict() if machine.torch else None,
        "unknown": machine.unknown,
    }


def _foreign_python(python: str) -> PythonEnv:
    """The environment of another interpreter (``fdl setup --python``)."""
    import json
    import subprocess

    script = (
        "import json, sys; print(json.dumps(['.'.join(map(str, sys.version_info[:3])), "
        "sys.executable, sys.prefix, 'venv' if sys.prefix != sys.base_prefix else 'system']))"
    )
    try:
        proc = subprocess.run([python, "-c", script], capture_output=True, text=True, timeout=60)
        version, exe, prefix, kind = json.loads(proc.stdout)
    except (OSError, ValueError, subprocess.TimeoutExpired) as err:
        from fdl.errors import FdlUsageError

        raise FdlUsageError(
            f"{python} is not a working Python interpreter ({err})",
            "pass the path of an environment's python",
        ) from err
    return PythonEnv(version, exe, prefix, kind)
