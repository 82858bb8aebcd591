"""NVIDIA GPUs and driver: ``nvidia-smi`` first, then NVML, ``/proc`` and a name table.

``nvidia-smi --query-gpu=compute_cap`` does not exist on drivers before ~510 (e.g. 470): then the
GPUs are listed without it and the compute capability comes from NVML or a table of GPU names.
On WSL2 ``nvidia-smi`` lives in ``/usr/lib/wsl/lib`` (often off PATH). Every value is validated as
numeric: a broken driver prints its error on *stdout* ("Failed to initialize NVML…").
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
from dataclasses import asdict, dataclass, field
from typing import Any

from fdl.hardware.probe_root import host_path
from fdl.hardware.tools import run_tool
from fdl.variants.archs import ComputeCapability, format_cc, sm_name

QUERY = "index,name,compute_cap,memory.total,driver_version"
LEGACY_QUERY = "index,name,memory.total,driver_version"
WSL_SMI = "/usr/lib/wsl/lib/nvidia-smi"  # each under the probe root (fdl.hardware.probe_root)
PROC_VERSION = "/proc/driver/nvidia/version"
SYS_VERSION = "/sys/module/nvidia/version"
DEVICE_NODES = ("/dev/nvidiactl", "/dev/nvidia0")
PCI_DEVICES = "/sys/bus/pci/devices"
NVIDIA_PCI_VENDOR = "0x10de"
NVML_ENV = "FDL_NVML"  # "0" skips NVML (used by tests that replay nvidia-smi outputs)

_DRIVER = re.compile(r"^\d{2,4}(\.\d{1,3}){1,2}$")
_CUDA = re.compile(r"CUDA Version:\s*(\d+\.\d+)")

# Fallback when neither nvidia-smi nor NVML reports compute capability (old drivers).
# First match wins, so specific names come before families.
NAME_TABLE: tuple[tuple[str, ComputeCapability], ...] = (
    (r"RTX PRO \d+ Blackwell|RTX 50\d\d|GB20\d", (12, 0)),
    (r"\bB(100|200)\b|GB200", (10, 0)),
    (r"\bH(100|200|800)\b|GH200", (9, 0)),
    (r"RTX 40\d\d|\bL4\b|\bL40|RTX \d+ Ada", (8, 9)),
    (r"RTX 30\d\d|\bA(2|10|16|40)\b|RTX A\d+", (8, 6)),
    (r"\bA(30|100|800)\b", (8, 0)),
    (r"RTX 20\d\d|GTX 16\d\d|\bT4\b|Quadro RTX|TITAN RTX", (7, 5)),
    (r"V100|TITAN V", (7, 0)),
    (r"P100", (6, 0)),
    (r"GTX 10\d\d|TITAN Xp|TITAN X \(Pascal\)|\bP(4|40)\b|Quadro P", (6, 1)),
    (r"GTX 9\d\d|TITAN X\b|\bM(40|60)\b", (5, 2)),
    (r"GTX 750|\bM10\b", (5, 0)),
    (r"K80", (3, 7)),
)


@dataclass
class Gpu:
    index: int
    name: str
    cc: ComputeCapability | None
    vram_mib: int | None
    cc_source: str | None = None  # nvidia-smi | nvml | name-table

    @property
    def sm(self) -> str | None:
        return sm_name(self.cc) if self.cc else None

    @property
    def short_name(self) -> str:
        return self.name.replace("NVIDIA ", "").replace("GeForce ", "")

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "name": self.name,
            "compute_capability": format_cc(self.cc) if self.cc else None,
            "sm": self.sm,
            "vram_mib": self.vram_mib,
            "compute_capability_source": self.cc_source,
        }


@dataclass
class NvidiaReport:
    gpus: list[Gpu] = field(default_factory=list)
    driver: str | None = None
    cuda_driver_max: str | None = None  # the newest CUDA the driver supports ("CUDA Version:")
    source: str | None = None  # what listed the GPUs
    smi_path: str | None = None
    problems: list[str] = field(default_factory=list)  # why something is unknown

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["gpus"] = [g.to_dict() for g in self.gpus]
        return data


def cc_from_name(name: str) -> ComputeCapability | None:
    """The compute capability of a GPU known by name (``None`` if not in the table)."""
    for pattern, cc in NAME_TABLE:
        if re.search(pattern, name, re.IGNORECASE):
            return cc
    return None


def find_nvidia_smi() -> str | None:
    found = shutil.which("nvidia-smi")
    if found:
        return found
    wsl = host_path(WSL_SMI)
    return str(wsl) if os.access(wsl, os.X_OK) else None


def _int(text: str) -> int | None:
    text = text.strip()
    return int(text) if text.isdigit() else None


def _cc(text: str) -> ComputeCapability | None:
    match = re.fullmatch(r"(\d{1,2})\.(\d)", text.strip())
    return (int(match.group(1)), int(match.group(2))) if match else None


def parse_query(text: str, *, with_cc: bool) -> tuple[list[Gpu], str | None]:
    """Parse ``--format=csv,noheader,nounits`` rows; malformed rows are skipped.

    Names may contain commas, so the index is the first field and the rest come from the right.
    """
    gpus, driver = [], None
    tail = 3 if with_cc else 2
    for line in text.splitlines():
        fields = [f.strip() for f in line.split(",")]
        if len(fields) < tail + 2:
            continue
        index = _int(fields[0])
        name = ", ".join(fields[1 : len(fields) - tail])
        rest = fields[len(fields) - tail :]
        cc = _cc(rest[0]) if with_cc else None
        vram = _int(rest[-2])
        drv = rest[-1] if _DRIVER.match(rest[-1]) else None
        if index is None or not name or drv is None:
            continue
        gpus.append(Gpu(index, name, cc, vram, "nvidia-smi" if cc else None))
        driver = driver or drv
    return gpus, driver


def parse_proc_version(text: str) -> str | None:
    """The driver version in ``/proc/driver/nvidia/version`` (``NVRM version: … 550.144.03 …``)."""
    match = re.search(r"NVRM version:.*?\s(\d{2,4}\.\d{1,3}(?:\.\d{1,3})?)\s", text)
    return match.group(1) if match else None


def parse_cuda_version(banner: str) -> str | None:
    match = _CUDA.search(banner)
    return match.group(1) if match else None


def _nvml() -> tuple[list[Gpu], str | None, str | None, str | None]:
    """(gpus, driver, cuda_max, problem) from NVML via nvidia-ml-py, if installed and allowed."""
    if os.environ.get(NVML_ENV, "1") == "0":
        return [], None, None, "NVML skipped (FDL_NVML=0)"
    try:
        import pynvml
    except ImportError:
        return [], None, None, "nvidia-ml-py not installed (pip install nvidia-ml-py)"
    try:
        pynvml.nvmlInit()
    except Exception as err:  # NVMLError subclasses, OSError from a missing library
        return [], None, None, f"NVML unavailable: {err}"
    try:
        driver = pynvml.nvmlSystemGetDriverVersion()
        driver = driver.decode() if isinstance(driver, bytes) else driver
        cuda = pynvml.nvmlSystemGetCudaDriverVersion_v2()
        cuda_max = f"{cuda // 1000}.{cuda % 1000 // 10}"
        gpus = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            name = pynvml.nvmlDeviceGetName(handle)
            name = name.decode() if isinstance(name, bytes) else name
            cc = tuple(pynvml.nvmlDeviceGetCudaComputeCapability(handle))
            mem = pynvml.nvmlDeviceGetMemoryInfo(handle).total // (1024 * 1024)
            gpus.append(Gpu(i, name, (int(cc[0]), int(cc[1])), int(mem), "nvml"))
        return gpus, driver, cuda_max, None
    except Exception as err:
        return [], None, None, f"NVML query failed: {err}"
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()


def probe_nvidia(timeout: float = 10.0) -> NvidiaReport:
    """Every NVIDIA GPU with index, name, compute capability, VRAM; the driver and its max CUDA.

    ``timeout``: how long nvidia-smi may take per call. One that hangs (a wedged driver) is asked
    nothing more: each further call would hang as long.
    """
    report = NvidiaReport()
    smi = find_nvidia_smi()
    report.smi_path = smi
    if smi:
        full = run_tool([smi, f"--query-gpu={QUERY}", "--format=csv,noheader,nounits"], timeout)
        if full.ok:
            report.gpus, report.driver = parse_query(full.stdout, with_cc=True)
            report.source = "nvidia-smi"
            if not report.gpus and full.stdout.strip():
                report.problems.append(
                    f"nvidia-smi output not understood: {full.stdout.strip()[:120]}"
                )
        elif "compute_cap" in (full.stdout + full.stderr):  # driver too old for compute_cap
            legacy = run_tool(
                [smi, f"--query-gpu={LEGACY_QUERY}", "--format=csv,noheader,nounits"], timeout
            )
            if legacy.ok:
                report.gpus, report.driver = parse_query(legacy.stdout, with_cc=False)
                report.source = "nvidia-smi (legacy query)"
                report.problems.append("this driver's nvidia-smi cannot report compute capability")
            else:
                report.problems.append(legacy.reason or "nvidia-smi failed")
        else:
            report.problems.append(full.reason or "nvidia-smi failed")
        if not full.timed_out:
            banner = run_tool([smi], timeout)
            if banner.ok:
                report.cuda_driver_max = parse_cuda_version(banner.stdout)
    else:
        report.problems.append("nvidia-smi not found (no NVIDIA driver, or not on PATH)")

    nvml_gpus: list[Gpu] = []
    nvml_driver: str | None = None
    nvml_cuda: str | None = None
    nvml_problem: str | None = None
    if not report.gpus or any(g.cc is None for g in report.gpus):
        nvml_gpus, nvml_driver, nvml_cuda, nvml_problem = _nvml()
        if not report.gpus and nvml_gpus:
            report.gpus, report.source = nvml_gpus, "nvml"
        by_index = {g.index: g for g in nvml_gpus}
        for gpu in report.gpus:
            if gpu.cc is None and gpu.index in by_index:
                gpu.cc, gpu.cc_source = by_index[gpu.index].cc, "nvml"
        report.driver = report.driver or nvml_driver
        report.cuda_driver_max = report.cuda_driver_max or nvml_cuda
    for gpu in report.gpus:
        if gpu.cc is None:
            gpu.cc = cc_from_name(gpu.name)
            gpu.cc_source = "name-table" if gpu.cc else None
            if gpu.cc is None:
                report.problems.append(
                    f"compute capability of GPU {gpu.index} ({gpu.name}) unknown"
                    + (f"; {nvml_problem}" if nvml_problem else "")
                )
    if report.driver is None:
        report.driver = driver_from_kernel_module()
    return report


def broken_driver(report: NvidiaReport) -> str | None:
    """Why an NVIDIA driver that is there lists no GPU, with what to do; ``None`` when GPUs are
    listed, or when nothing says a GPU is here (a CPU machine).

    Signs of a driver: an installed nvidia-smi that fails (a driver upgraded without a reboot is
    the common case: the loaded kernel module and the new user-space library disagree, "Driver/
    library version mismatch", until the machine restarts; or it hangs), or the NVIDIA kernel
    module loaded (``/sys/module/nvidia/version``) with no nvidia-smi to ask. A sign counts only
    with a GPU to go with it: the driver's device nodes (``/dev/nvidiactl``), or an NVIDIA
    display controller on the PCI bus. A container started without GPU access on a GPU host
    sees the host's module but no device node, and a CPU VM made from a GPU image has the
    driver's tools but no such controller: both are CPU machines.
    """
    if report.gpus:
        return None
    if report.smi_path is None:
        module = kernel_module_version()
        if module is None or not nvidia_device_nodes():
            return None
        return (
            f"the NVIDIA kernel module {module} is loaded but nvidia-smi was not found: "
            "install the driver's utilities (e.g. nvidia-utils), put nvidia-smi on PATH, or, "
            "in a container, start it with GPU access (docker run --gpus all)"
        )
    detail = "; ".join(report.problems) or "it listed none"
    if "did not answer" in detail:  # a tool that hangs is a driver that is there
        advice = "the driver does not respond: reboot, and check 'dmesg' for NVIDIA errors"
    elif not (nvidia_device_nodes() or nvidia_pci_gpus()):
        return None
    elif "mismatch" in detail.lower():
        advice = (
            "the driver was upgraded without a reboot: reboot (or reinstall the driver if that "
            "does not help)"
        )
    else:
        advice = "after a driver upgrade, reboot; otherwise reinstall the NVIDIA driver"
    return f"nvidia-smi is installed but reported no GPU ({detail}); {advice}"


def nvidia_device_nodes() -> bool:
    """Whether the NVIDIA driver's device nodes are here (a GPU this system can open)."""
    return any(host_path(node).exists() for node in DEVICE_NODES)


def nvidia_pci_gpus() -> bool:
    """Whether the PCI bus has an NVIDIA display controller (vendor 0x10de, class 0x03xxxx)."""
    with contextlib.suppress(OSError):
        for device in host_path(PCI_DEVICES).iterdir():
            with contextlib.suppress(OSError):
                vendor = (device / "vendor").read_text().strip().lower()
                kind = (device / "class").read_text().strip().lower()
                if vendor == NVIDIA_PCI_VENDOR and kind.startswith("0x03"):
                    return True
    return False


def kernel_module_version() -> str | None:
    """The loaded NVIDIA kernel module's version from ``/sys/module/nvidia/version``, if any."""
    with contextlib.suppress(OSError):
        text = host_path(SYS_VERSION).read_text().strip()
        if _DRIVER.match(text):
            return text
    return None


def driver_from_kernel_module() -> str | None:
    """The loaded kernel module's version (``/sys/module/nvidia/version``, ``/proc``), if any."""
    module = kernel_module_version()
    if module is not None:
        return module
    try:
        return parse_proc_version(host_path(PROC_VERSION).read_text())
    except OSError:
        return None
