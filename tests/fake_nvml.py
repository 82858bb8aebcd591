"""A fake NVIDIA driver library for the NVML code paths: the real nvidia-ml-py loads it.

``build(source, out_dir)`` compiles a C file that stands in for ``libnvidia-ml.so.1`` (the
monitor's and the hardware probe's fixtures replay captured readings) and returns the folder to
put on ``LD_LIBRARY_PATH`` of a subprocess: only the driver is simulated, never the code under test.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from tests.conftest import require


def build(source: Path, out_dir: Path) -> Path:
    """``out_dir`` holding ``libnvidia-ml.so.1`` built from ``source`` (a skip, or in CI a failure,
    when nvidia-ml-py or a C compiler is missing)."""
    try:
        import pynvml  # noqa: F401  (the real package; only the driver is fake)
    except ImportError as err:
        require("nvml", f"nvidia-ml-py is not installed ({err}); it is in the dev extra")
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        require("nvml", "no C compiler (cc/gcc) to build the fake NVML driver library")
    library = out_dir / "libnvidia-ml.so.1"
    subprocess.run(
        [compiler, "-shared", "-fPIC", "-O1", "-o", str(library), str(source)], check=True
    )
    return out_dir
