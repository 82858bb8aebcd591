"""Hardware and environment facts, without importing torch.

Every probe degrades to "unknown" with a reason (``Machine.unknown``) instead of raising.
"""

from fdl.hardware.machine import Machine, detect
from fdl.hardware.nvidia import Gpu, NvidiaReport, probe_nvidia

__all__ = ["Gpu", "Machine", "NvidiaReport", "detect", "probe_nvidia"]
