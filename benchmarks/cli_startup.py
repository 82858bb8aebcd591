"""`fdl --help` / `fdl --version` wall time as a ratio to `python -c pass` (same run, interleaved)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import command_report, interleaved, subprocess_case


def main(rounds: int = 11) -> list[dict[str, object]]:
    py = sys.executable
    results = interleaved(
        {
            "python -c pass": subprocess_case([py, "-c", "pass"]),
            "fdl --version": subprocess_case([py, "-m", "fdl", "--version"]),
            "fdl --help": subprocess_case([py, "-m", "fdl", "--help"]),
        },
        rounds=rounds,
        inner=3,
        warmup=1,
    )
    return command_report(
        "fdl start-up", "cli_startup", results, {"ratio_vs_python": "python -c pass"}, rounds
    )


if __name__ == "__main__":
    main()
