"""Run every benchmark; reports land in benchmarks/results/ (JSON + Markdown)."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

SUITES = ["cli_startup", "data_loader", "ddp_cadence"]

if __name__ == "__main__":
    for name in sys.argv[1:] or SUITES:
        print(f"== {name}", flush=True)
        importlib.import_module(name).main()
