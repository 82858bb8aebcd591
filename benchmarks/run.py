"""Run every benchmark suite (each `benchmarks/<name>.py` with a `main()`), or the ones named.

Reports land in benchmarks/results/ (JSON + Markdown).
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

NOT_SUITES = {"harness", "run"}


def suites() -> list[str]:
    return sorted(p.stem for p in HERE.glob("*.py") if p.stem not in NOT_SUITES)


if __name__ == "__main__":
    for name in sys.argv[1:] or suites():
        print(f"== {name}", flush=True)
        importlib.import_module(name).main()
