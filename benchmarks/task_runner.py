"""Task-runner overhead: `fdl <task>` for a trivial `run: 'true'` against the same script run by
`sh -c`, `python -c pass` (the interpreter's floor) and `fdl --help` outside a project (fdl's own
start-up), plus `fdl --help` inside one.
Interleaved in the same run; the project lives in a temp directory."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import command_report, interleaved, subprocess_case

MANIFEST = """\
description: benchmark project
commands:
  noop: {description: does nothing, run: 'true'}
  sub:
"""
CHILD = "entry: 'true'\ncommands:\n  quick: {options: {epochs: 1}}\n"


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
                "sh -c true": subprocess_case(["sh", "-c", "true"], root, env),
                "python -c pass": subprocess_case([sys.executable, "-c", "pass"], root, env),
                "fdl noop (run)": subprocess_case([*fdl, "noop"], root, env),
                "fdl sub quick (preset)": subprocess_case([*fdl, "sub", "quick"], root, env),
                "fdl --help (project)": subprocess_case([*fdl, "--help"], root, env),
                "fdl --help (no project)": subprocess_case([*fdl, "--help"], Path(elsewhere), env),
            },
            rounds=rounds,
            inner=3,
            warmup=1,
        )
    return command_report(
        "fdl task-runner overhead",
        "task_runner",
        results,
        {"ratio_vs_python": "python -c pass", "ratio_vs_fdl_help": "fdl --help (no project)"},
        rounds,
    )


if __name__ == "__main__":
    main()
