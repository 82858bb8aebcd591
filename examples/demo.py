"""`make demo`: what flodl does today, end to end, on this machine.

Grows as features land; the end state scaffolds a project with `fdl init`, trains it on CPU with
the monitor, and saves and reloads a checkpoint.
"""

from __future__ import annotations

import subprocess
import sys


def fdl(*args: str) -> None:
    print(f"\n$ fdl {' '.join(args)}", flush=True)
    subprocess.run([sys.executable, "-m", "fdl", *args], check=True)


def main() -> None:
    fdl("--version")
    fdl("--help")


if __name__ == "__main__":
    main()
