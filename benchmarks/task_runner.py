"""Task-runner overhead: `fdl <task>` for a trivial `run: 'true'` against the same script run by
`sh -c`, `python -c pass` (the interpreter's floor) and `fdl --help` outside a project (fdl's own
start-up), plus `fdl --help` inside one.
Interleaved in the same run; the project lives in a temp directory."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import interleaved, ratio, write_report

MANIFEST = """\
description: benchmark project
commands:
  noop: {description: does nothing, run: 'true'}
  sub:
"""
CHILD = "entry: 'true'\ncommands:\n  quick: {options: {epochs: 1}}\n"


def command(argv: list[str], cwd: Path, env: dict[str, str]):
    def run() -> None:
        subprocess.run(argv, check=True, capture_output=True, cwd=cwd, env=env)

    return run


def main(rounds: int = 11) -> list[dict[str, object]]:
    repo = Path(__file__).resolve().parent.parent
    env = {**os.environ, "PYTHONPATH": str(repo)}
    with tempfile.TemporaryDirectory() as tmp, tempfile.TemporaryDirectory() as elsewhere:
        root = Path(tmp)
        (root / "fdl.yml").write_text(MANIFEST)
        (root / "sub").mkdir()
        (root / "sub" / "fdl.yml").write_text(CHILD)
        fdl = [sys.executable, "-m", "fdl"]
        results = interleaved(
            {
                "sh -c true": command(["sh", "-c", "true"], root, env),
                "python -c pass": command([sys.executable, "-c", "pass"], root, env),
                "fdl noop (run)": command([*fdl, "noop"], root, env),
                "fdl sub quick (preset)": command([*fdl, "sub", "quick"], root, env),
                "fdl --help (project)": command([*fdl, "--help"], root, env),
                "fdl --help (no project)": command([*fdl, "--help"], Path(elsewhere), env),
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
            "ratio_vs_fdl_help": ratio(results, name, "fdl --help (no project)"),
        }
        for name, m in results.items()
    ]
    path = write_report(
        "fdl task-runner overhead",
        rows,
        "task_runner",
        f"median of per-round medians over {rounds} interleaved rounds; baseline `python -c pass`",
    )
    print(path.read_text())
    return rows


if __name__ == "__main__":
    main()
