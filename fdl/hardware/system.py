"""CPU, memory, operating system (and WSL), container and Docker facts."""

from __future__ import annotations

import os
import platform
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from fdl.hardware.probe_root import host_path
from fdl.hardware.tools import run_tool


@dataclass
class SystemFacts:
    cpu_model: str | None = None
    cpu_threads: int | None = None
    ram_bytes: int | None = None
    os_family: str = "linux"  # linux | windows | macos | other
    os_name: str | None = None  # "Ubuntu 24.04.1 LTS", "macOS 15.1", "Windows 11"
    kernel: str | None = None
    machine: str | None = None  # x86_64 | aarch64 | arm64
    wsl: str | None = None  # None | "wsl1" | "wsl2"
    container: str | None = None  # None | docker | podman | container
    docker_client: str | None = None
    docker_daemon: str | None = None  # server version when the daemon answers

    @property
    def platform_key(self) -> str:
        machine = {"amd64": "x86_64", "arm64": "arm64", "aarch64": "aarch64"}.get(
            (self.machine or "").lower(), (self.machine or "x86_64").lower()
        )
        if self.os_family == "macos":
            return f"macos-{'arm64' if machine in ('arm64', 'aarch64') else 'x86_64'}"
        if self.os_family == "linux" and machine == "arm64":
            machine = "aarch64"
        return f"{self.os_family}-{machine}"

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["platform"] = self.platform_key
        return data


def _cpu_model() -> str | None:
    try:
        for line in host_path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            if line.startswith(("model name", "Hardware", "Model")) and ":" in line:
                return line.split(":", 1)[1].strip() or None
    except OSError:
        pass
    if platform.system() == "Darwin":
        result = run_tool(["sysctl", "-n", "machdep.cpu.brand_string"], timeout=3)
        if result.ok:
            return result.stdout.strip() or None
    return platform.processor() or None


def _os_name(family: str) -> str | None:
    if family == "linux":
        try:
            info = platform.freedesktop_os_release()
            return info.get("PRETTY_NAME") or info.get("NAME")
        except OSError:
            return None
    if family == "macos":
        return f"macOS {platform.mac_ver()[0]}".strip()
    if family == "windows":
        return f"Windows {platform.release()}"
    return platform.system() or None


def detect_wsl(kernel_release: str, environ: Mapping[str, str] | None = None) -> str | None:
    """``"wsl2"``, ``"wsl1"`` or ``None``: the kernel release says (case-insensitively)."""
    environ = os.environ if environ is None else environ
    release = kernel_release.lower()
    if "microsoft" in release or "wsl" in release:
        return "wsl2" if ("wsl2" in release or "microsoft-standard" in release) else "wsl1"
    if environ.get("WSL_DISTRO_NAME"):
        wsl2 = host_path("/usr/lib/wsl/lib").is_dir() or environ.get("WSL_INTEROP")
        return "wsl2" if wsl2 else "wsl1"
    return None


def kernel_release() -> str | None:
    """``uname -r``, read from ``/proc`` when it can be (so a probe root can stand in for it)."""
    try:
        return host_path("/proc/sys/kernel/osrelease").read_text().strip() or None
    except OSError:
        return platform.release() or None


def detect_container() -> str | None:
    if host_path("/.dockerenv").exists():
        return "docker"
    if host_path("/run/.containerenv").exists():
        return "podman"
    try:
        cgroup = host_path("/proc/1/cgroup").read_text(errors="replace")
    except OSError:
        return None
    if re.search(r"docker|containerd|kubepods|libpod", cgroup):
        return "container"
    return None


def probe_docker() -> tuple[str | None, str | None, list[str]]:
    """(client version, daemon version, problems)."""
    problems = []
    client = None
    result = run_tool(["docker", "--version"], timeout=5)
    if result.ok:
        match = re.search(r"version\s+([^\s,]+)", result.stdout)
        client = match.group(1) if match else result.stdout.strip()[:40]
    else:
        problems.append(f"docker client: {result.reason}")
        return None, None, problems
    daemon = run_tool(["docker", "version", "--format", "{{.Server.Version}}"], timeout=5)
    server = daemon.stdout.strip() if daemon.ok else None
    if not server:
        reason = daemon.reason or "no server version"
        problems.append(f"docker daemon not answering: {reason}")
    return client, server, problems


def probe_system(*, docker: bool = True) -> tuple[SystemFacts, list[str]]:
    problems: list[str] = []
    system = platform.system()
    family = {"Linux": "linux", "Darwin": "macos", "Windows": "windows"}.get(system, "other")
    kernel = kernel_release() if family == "linux" else platform.release() or None
    facts = SystemFacts(os_family=family, kernel=kernel)
    facts.machine = platform.machine() or None
    facts.cpu_model = _cpu_model()
    if facts.cpu_model is None:
        problems.append("cpu model: not reported by this OS")
    try:
        import psutil

        facts.cpu_threads = psutil.cpu_count(logical=True)
        facts.ram_bytes = int(psutil.virtual_memory().total)
    except Exception as err:  # psutil missing or unsupported platform
        facts.cpu_threads = os.cpu_count()
        problems.append(f"ram: unknown ({err})")
    facts.os_name = _os_name(family)
    if family == "linux":
        facts.wsl = detect_wsl(facts.kernel or "")
    facts.container = detect_container()
    if docker:
        facts.docker_client, facts.docker_daemon, docker_problems = probe_docker()
        problems.extend(docker_problems)
    return facts, problems
