"""The torch build a generated project installs: the resolver's answer for this machine.

``torch>=2.4`` alone lets pip take PyPI's default Linux wheel, a CUDA build of several GB, even on
a machine without a GPU. ``fdl init`` therefore writes the project's ``constraints.txt`` with the
build ``fdl setup`` would choose for this machine's hardware (the CPU build when there is no
NVIDIA GPU) and the wheel index that has it. The release is the one flodl runs with here when
fdl's table knows it (the combination this flodl was installed and tested with, and often already
in pip's cache), else the newest that fits.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urlparse

if TYPE_CHECKING:
    from fdl.hardware.machine import Machine


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
    plan = None
    if running is not None:
        try:
            table.release(running)
            plan = resolve(target, torch=running, table=table)
        except FdlError:
            plan = None  # a release fdl's table does not know: take the resolver's newest
    if plan is None:
        plan = resolve(target, table=table)
    why = plan.reasons[0] if plan.reasons else plan.status
    if running == plan.torch:
        why += f"; torch {plan.torch} is the release flodl runs with where this project was made"
    return TorchPin(plan.requirement, plan.index_url or "", why)
