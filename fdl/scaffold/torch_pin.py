"""The torch build a generated project installs: the resolver's answer for this machine.

``torch>=2.4`` alone lets pip take PyPI's default Linux wheel, a CUDA build of several GB, even on
a machine without a GPU. ``fdl init`` therefore writes the project's ``constraints.txt`` with the
build ``fdl setup`` would choose for this machine's hardware (the CPU build when there is no
NVIDIA GPU) and the wheel index that has it. The release is the one flodl runs with here (the
combination this flodl was installed and tested with, and often already in pip's cache) when fdl's
table knows its line, or when the machine needs only the CPU build (every release has one); else
the newest release in the table that fits.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urlparse

if TYPE_CHECKING:
    from fdl.hardware.machine import Machine
    from fdl.variants import Release, Target, VariantTable


@dataclass(frozen=True)
class TorchPin:
    requirement: str  # torch==2.13.0+cpu
    index_url: str  # "" on macOS: PyPI's default wheel is the right one
    reason: str  # one line, written into constraints.txt

    @property
    def trusted_host(self) -> str:
        """The host of a plain-http index (a local mirror), which pip otherwise refuses.

        >>> TorchPin("torch==2.13.0+cpu", "http://mirror.lan/whl/cpu", "").trusted_host
        'mirror.lan'
        """
        parsed = urlparse(self.index_url)
        return (parsed.hostname or "") if parsed.scheme == "http" else ""


def choose_torch(machine: Machine | None = None) -> TorchPin:
    """The torch pin for a project generated on ``machine`` (default: this one)."""
    from fdl.errors import FdlError
    from fdl.variants import load_table, resolve

    if machine is None:
        from fdl.hardware import detect

        machine = detect(docker=False)
    table = load_table()
    target = machine.target()
    running = machine.torch.public_version if machine.torch else None
    release = _running_release(table, running, target) if running else None
    plan = None
    if release is not None:
        try:
            plan = resolve(target, torch=release.torch, table=table.with_release(release))
        except FdlError:
            plan = None  # e.g. no wheels of that release for this Python: the resolver's newest
    if plan is None:
        plan = resolve(target, table=table)
    why = plan.reasons[0] if plan.reasons else plan.status
    if running == plan.torch:
        why += f"; torch {plan.torch} is the release flodl runs with where this project was made"
    elif running and release is None:
        why += (
            f"; torch {running} runs here, but fdl's release table does not know its line "
            f"(it has {table.releases[-1].minor} to {table.newest.minor})"
        )
    return TorchPin(plan.requirement, plan.index_url or "", why)


def _running_release(table: VariantTable, running: str, target: Target) -> Release | None:
    """The release of the torch installed here, as the resolver should see it, or None.

    A patch release the table does not list has its line's builds. A release of a line the table
    does not know (newer than the table, or older) is offered as its CPU build only, and only to
    a machine without an NVIDIA GPU: every release has a CPU build, but which CUDA builds it has
    is not known here.
    """
    release = table.installed_release(running)
    if release is not None or target.gpus:
        return release
    python = (target.python, target.python) if target.python else None
    return table.newest.as_cpu_only(running, python)
