"""`fdl --help` / `fdl --version` wall time as a ratio to `python -c pass` (same run, interleaved)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import interleaved, ratio, write_report


def command(*args: str):
    def run() -> None:
        subprocess.run([sys.executable, *args], check=True, capture_output=True)

    return run


def main(rounds: int = 11) -> list[dict[str, object]]:
    results = interleaved(
        {
            "python -c pass": command("-c", "pass"),
            "fdl --version": command("-m", "fdl", "--version"),
            "fdl --help": command("-m", "fdl", "--help"),
        },
        rounds=rounds,
        inner=3,
        warmup=1,
    )
    rows = [
        {
            "command": name,
            "median_ms": m.median_s * 1e3,
            "ratio_vs_python": ratio(results, name, "python -c pass"),
        }
        for name, m in results.items()
    ]
    path = write_report(
        "fdl start-up",
        rows,
        "cli_startup",
        f"median of per-round medians over {rounds} interleaved rounds; baseline `python -c pass`",
    )
    print(path.read_text())
    return rows


if __name__ == "__main__":
    main()
