"""The pip (or uv) command that installs a torch build from its index."""

from __future__ import annotations

import shlex
import shutil
from dataclasses import dataclass
from urllib.parse import urlparse


@dataclass
class InstallCommand:
    argv: list[str]
    installer: str  # pip | uv

    def __str__(self) -> str:
        return shlex.join(self.argv)


def install_command(
    python: str,
    requirement: str,
    index_url: str | None,
    *,
    companions: list[str] | tuple[str, ...] = (),
    force: bool = False,
    installer: str | None = None,
) -> InstallCommand:
    """``uv pip install`` when uv is on PATH (``installer`` forces one), else ``python -m pip``.

    Companions (torchvision, torchaudio) already installed move with torch to the same index;
    ``force`` re-installs even an identical version (a variant switch needs it).
    """
    uv = shutil.which("uv") if installer in (None, "uv") else None
    if installer == "uv" and uv is None:
        from fdl.errors import ExitCode, FdlError

        raise FdlError(
            "uv is not on PATH", "install uv or use --installer pip", ExitCode.UNAVAILABLE
        )
    packages = [requirement, *companions]
    if uv:
        argv = [uv, "pip", "install", "--python", python, *packages]
        if index_url:
            argv += ["--index-url", index_url]
        if force:
            for name in ("torch", *companions):
                argv += ["--reinstall-package", name]
        return InstallCommand(argv, "uv")
    argv = [python, "-m", "pip", "install", "--disable-pip-version-check", *packages]
    if index_url:
        argv += ["--index-url", index_url]
        parsed = urlparse(index_url)
        if parsed.scheme == "http" and parsed.hostname:  # a local mirror: pip ignores it otherwise
            argv += ["--trusted-host", parsed.hostname]
    if force:
        argv += ["--force-reinstall"]
    return InstallCommand(argv, "pip")
