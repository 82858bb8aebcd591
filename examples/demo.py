"""`make demo`: flodl end to end on this machine, in about a minute on a CPU.

1. `fdl diagnose` — what this machine has, and which torch build fits it;
2. `fdl init` a project, train it with the monitor (one line per epoch), resume it from its
   `.fdl` checkpoint, and run its tests — all through the project's `fdl.yml` tasks;
3. the same training loop on two CPU ranks with `fl.Trainer` (El Che cadence, gloo on loopback).

Everything is written under ./demo-output (recreated on every run).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "demo-output"


def step(title: str) -> None:
    print(f"\n\033[1m== {title}\033[0m" if sys.stdout.isatty() else f"\n== {title}", flush=True)


def run(*args: str, cwd: Path = ROOT) -> None:
    print(f"$ {' '.join(args)}", flush=True)
    subprocess.run(args, cwd=cwd, check=True)


def fdl(*args: str, cwd: Path = ROOT) -> None:
    run("fdl", *args, cwd=cwd)


def main() -> None:
    shutil.rmtree(OUT, ignore_errors=True)
    OUT.mkdir()

    step("1. This machine")
    fdl("--version")
    fdl("diagnose")

    step("2. A new project: scaffold, train, resume from the checkpoint, test")
    fdl("init", "my-model", "--native", cwd=OUT)
    project = OUT / "my-model"
    fdl("train", "--", "--epochs", "3", cwd=project)
    fdl("train", "--", "--epochs", "5", "--resume", cwd=project)
    fdl("test", cwd=project)

    step("3. The same loop on two CPU ranks (fl.Trainer, El Che cadence)")
    run(sys.executable, "examples/ddp_regression.py", "--ranks", "2", "--epochs", "3")

    print(f"\ndone: the project is in {project.relative_to(ROOT)}", flush=True)


if __name__ == "__main__":
    main()
