"""Run every benchmark suite (each `benchmarks/<name>.py` with a `main()`), or the ones named.

Reports land in benchmarks/results/ (JSON + Markdown, not tracked); `--collect` (also done after a
full run) gathers every Markdown report into benchmarks/RESULTS.md, the tracked record.
"""

from __future__ import annotations

import datetime
import importlib
import os
import platform
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

NOT_SUITES = {"harness", "run"}
RESULTS = HERE / "results"
RECORD = HERE / "RESULTS.md"


def suites() -> list[str]:
    return sorted(p.stem for p in HERE.glob("*.py") if p.stem not in NOT_SUITES)


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def collect() -> Path:
    """Write RESULTS.md: where and when, then every suite's Markdown report."""
    import torch

    commit = subprocess.run(
        ["git", "-C", str(HERE), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    head = [
        "# Benchmark results",
        "",
        "Written by `python benchmarks/run.py` (`make bench`). Every ratio is measured against its",
        "baseline in the same run, interleaved; see each suite's docstring for what is timed.",
        "",
        f"- date: {datetime.date.today().isoformat()}; commit: {commit or 'unknown'}",
        f"- machine: {_cpu_model()}, {os.cpu_count()} cores; {platform.system()} "
        f"{platform.release()}; Python {platform.python_version()}; torch {torch.__version__}",
        "",
    ]
    body = []
    for report in sorted(RESULTS.glob("*.md")):
        text = report.read_text().strip()
        body += ["#" + text if text.startswith("# ") else text, ""]  # suite titles become ##
    RECORD.write_text("\n".join(head + body))
    return RECORD


if __name__ == "__main__":
    args = sys.argv[1:]
    if args == ["--collect"]:
        print(collect())
        sys.exit(0)
    for name in args or suites():
        print(f"== {name}", flush=True)
        importlib.import_module(name).main()
    if not args:
        print(collect())
