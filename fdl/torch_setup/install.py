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


def companion_version(name: str, torch: str) -> str:
    """The ``torchvision`` / ``torchaudio`` release built against ``torch`` (``"2.14.1"``).

    PyTorch releases them together: torchaudio carries torch's version, torchvision ``0.(minor
    + 15).patch`` (torch 2.9.1: torchvision 0.24.1, torchaudio 2.9.1).

    >>> companion_version("torchvision", "2.14.1"), companion_version("torchaudio", "2.9.1")
    ('0.29.1', '2.9.1')
    """
    major, minor, *rest = torch.split("+")[0].split(".")
    patch = rest[0] if rest else "0"
    plain = minor.isdigit() and patch.isdigit() and len(rest) <= 1
    if major != "2" or not plain or int(minor) < 1:
        # 2.0's companions carried their own patch numbers, 1.x others, nightlies a .dev date
        raise ValueError(f"no companion rule for torch {torch} (releases 2.1 and later only)")
    if name == "torchvision" and major == "2":
        return f"0.{int(minor) + 15}.{patch}"
    return f"{major}.{minor}.{patch}"


def companion_requirement(name: str, torch: str, tag: str, index_url: str | None) -> str:
    """``torchvision==0.29.1+cu126``: the release matching ``torch``, from the same build as torch
    (the local label, as for torch; PyPI's default wheels carry none)."""
    version = companion_version(name, torch)
    return f"{name}=={version}" if index_url is None else f"{name}=={version}+{tag}"


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

    ``companions``: requirements (``torchvision==0.29.1+cu126``) installed with torch from the
    same index, so a variant switch does not leave them behind. ``force`` reinstalls torch and
    the companions even when these exact builds are installed — those packages only: with pip,
    ``--force-reinstall --no-deps`` (plain ``--force-reinstall`` would reinstall every
    dependency too, gigabytes of nvidia-* wheels for a CUDA build); with uv,
    ``--reinstall-package`` for each.
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
            for package in packages:
                argv += ["--reinstall-package", _name(package)]
        return InstallCommand(argv, "uv")
    argv = [python, "-m", "pip", "install", "--disable-pip-version-check", *packages]
    if index_url:
        argv += ["--index-url", index_url]
        parsed = urlparse(index_url)
        if parsed.scheme == "http" and parsed.hostname:  # a local mirror: pip ignores it otherwise
            argv += ["--trusted-host", parsed.hostname]
    if force:
        argv += ["--force-reinstall", "--no-deps"]
    return InstallCommand(argv, "pip")


def _name(requirement: str) -> str:
    for sep in ("==", ">=", "<=", "~=", "!=", "<", ">", "["):
        requirement = requirement.split(sep)[0]
    return requirement.strip()
