"""Task-runner overhead: `fdl <task>` for a trivial `run: 'true'` against the same script run by
`sh -c`, `python -c pass` (the interpreter's floor) and `fdl --help` outside a project (fdl's own
start-up), plus `fdl --help` inside one, and `fdl --help` in two hostile projects: a 450-byte manifest of
nested YAML aliases (expands to 9**9 values unbounded) and a 10 MB manifest. Both must answer (with
a warning naming the problem) in well under 2 s. Interleaved in the same run; the projects live in
temp directories."""

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
BOMB = (
    "x-a: &a ["
    + ", ".join(["lol"] * 9)
    + "]\n"
    + "".join(
        f"x-{n}: &{n} [" + ", ".join([f"*{p}"] * 9) + "]\n"
        for p, n in zip("abcdefgh", "bcdefghi", strict=True)
    )
)
CHILD = "entry: 'true'\ncommands:\n  quick: {options: {epochs: 1}}\n"


def main(rounds: int = 11) -> list[dict[str, object]]:
    repo = Path(__file__).resolve().parent.parent
    env = {**os.environ, "PYTHONPATH": str(repo)}
    with (
        tempfile.TemporaryDirectory() as tmp,
        tempfile.TemporaryDirectory() as elsewhere,
        tempfile.TemporaryDirectory() as bomb,
        tempfile.TemporaryDirectory() as huge,
    ):
        (Path(bomb) / "fdl.yml").write_text(BOMB)
        line = "  c{i}: {{description: command number {i}, run: echo {i}}}\n"
        with open(Path(huge) / "fdl.yml", "w") as out:
            out.write("commands:\n")
            i = 0
            while out.tell() < 10_000_000:
                out.write(line.format(i=i))
                i += 1
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
                "fdl --help (alias bomb)": subprocess_case([*fdl, "--help"], Path(bomb), env),
                "fdl --help (10 MB manifest)": subprocess_case([*fdl, "--help"], Path(huge), env),
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
