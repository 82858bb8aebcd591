"""Interleaved A/B timing: the one way flodl measures performance.

Each round runs every case once (in a rotating order, so neither side always goes first), each
case timing ``inner`` repetitions; the result per case is the median over rounds of the per-round
median. Ratios are taken against a baseline measured in the same run, never against a number
recorded elsewhere.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import platform
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

RESULTS_DIR = Path(__file__).resolve().parent / "results"
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # mallopt's parameter numbers (glibc malloc.h)
MMAP_THRESHOLD = 32 << 20  # glibc's own upper bound for its adaptive threshold
TRIM_THRESHOLD = 1 << 30
allocator = "system default"  # what the run's allocator was: steady_allocator() sets it


def steady_allocator() -> str:
    """Fix glibc malloc's mmap and trim thresholds for this process; returns what was set.

    CPU tensors come straight from ``malloc``. By default glibc serves a block over its
    *adaptive* mmap threshold with a fresh ``mmap`` (page faults on first touch, counted in
    the process CPU time) and moves that threshold up whenever such a block is freed; it also
    gives freed heap back to the system past a trim threshold. Which of a step's fresh gradient
    buffers fault then depends on the history of every earlier allocation in the process, so
    two identical models timed in the same rounds measured 0.96x and 1.77x of each other in a
    training step of 4 MiB weights. With both thresholds fixed (blocks up to 32 MiB from the
    heap, which is kept), a step costs what its kernels cost, whichever case ran before it.
    Not glibc (macOS, musl): nothing is changed, and the report says so.
    """
    global allocator
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        allocator = "system default (no mallopt here)"
        return allocator
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    if (
        mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) != 1
        or mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD) != 1
    ):
        allocator = "system default (mallopt refused the thresholds)"
        return allocator
    allocator = "glibc, mmap threshold 32 MiB and trim threshold 1 GiB fixed"
    return allocator


@dataclass
class Measurement:
    name: str
    median_s: float
    rounds: list[float] = field(default_factory=list)


def interleaved(
    cases: dict[str, Callable[[], object]],
    *,
    rounds: int = 15,
    inner: int = 5,
    warmup: int = 2,
    clock: Callable[[], float] = time.perf_counter,
) -> dict[str, Measurement]:
    """Time every case in ``cases``, interleaved; returns per-case median-of-medians in seconds.

    ``clock`` defaults to wall time; single-threaded CPU benchmarks on a shared machine can pass
    ``time.process_time`` so that time the scheduler gives other processes is not counted.
    """
    names = list(cases)
    for _ in range(warmup):
        for name in names:
            cases[name]()
    per_round: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        for name in order:
            samples = []
            for _ in range(inner):
                start = clock()
                cases[name]()
                samples.append(clock() - start)
            per_round[name].append(statistics.median(samples))
    return {
        name: Measurement(name, statistics.median(values), values)
        for name, values in per_round.items()
    }


def timing_parser(description: str) -> argparse.ArgumentParser:
    """A parser with the options of a timing suite: ``--rounds``, ``--inner``, ``--quick`` (3
    rounds of 2: a short real run), ``--smoke`` (one round of one, at the suite's tiny sizes:
    the test suite's check that the script runs) and ``--out`` (the report's directory, default
    ``results/``, ``results/smoke`` for a smoke run); a suite adds its own."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--inner", type=int, default=5)
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true", help="3 rounds x 2 (a short real run)")
    mode.add_argument("--smoke", action="store_true", help="tiny sizes, 1 round: not timed")
    parser.add_argument("--out", type=Path, help="report directory (default: results/)")
    parser.add_argument(
        "--system-allocator",
        action="store_true",
        help="keep glibc's adaptive malloc thresholds (default: fixed, see steady_allocator)",
    )
    return parser


def timing_options(
    argv: list[str] | None, parser: argparse.ArgumentParser | None = None, description: str = ""
) -> argparse.Namespace:
    """``argv`` parsed by ``parser`` (default: :func:`timing_parser`), with ``--quick`` and
    ``--smoke`` applied to the rounds and the report's directory, and the allocator's
    thresholds fixed unless ``--system-allocator``."""
    parser = parser or timing_parser(description)
    args = parser.parse_args(argv if argv is not None else [])
    if not args.system_allocator:
        steady_allocator()
    if args.quick:
        args.rounds, args.inner = 3, 2
    if args.smoke:
        args.rounds, args.inner = 1, 1
        args.out = args.out or RESULTS_DIR / "smoke"
    return args


def sgd_step(model: Any, x: Any) -> Callable[[], None]:
    """One training step of ``model`` on ``x``: forward, a loss over its output (each tensor of
    a tuple), backward, an SGD step."""
    import torch

    opt = torch.optim.SGD(model.parameters(), lr=1e-4)

    def run() -> None:
        opt.zero_grad()
        out = model(x)
        sum(v.float().pow(2).mean() for v in (out if isinstance(out, tuple) else (out,))).backward()
        opt.step()

    return run


def ratio(results: dict[str, Measurement], case: str, baseline: str) -> float:
    return results[case].median_s / results[baseline].median_s


def write_report(
    title: str,
    rows: list[dict[str, object]],
    stem: str,
    notes: str = "",
    results_dir: Path | None = None,
) -> Path:
    """Write ``<stem>.json`` and ``<stem>.md`` into ``results_dir`` (default ``results/``);
    returns the Markdown path."""
    out = RESULTS_DIR if results_dir is None else Path(results_dir)
    out.mkdir(parents=True, exist_ok=True)
    meta = {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "processor": platform.processor(),
        "time": time.strftime("%Y-%m-%d %H:%M:%S"),
        "allocator": allocator,
    }
    (out / f"{stem}.json").write_text(
        json.dumps({"title": title, "meta": meta, "rows": rows, "notes": notes}, indent=2)
    )
    columns = list(rows[0]) if rows else []
    lines = [f"# {title}", "", notes, "", f"Allocator: {allocator}.", ""]
    lines.append("| " + " | ".join(columns) + " |")
    lines.append("|" + "---|" * len(columns))
    for row in rows:
        cells = [f"{v:.4g}" if isinstance(v, float) else str(v) for v in row.values()]
        lines.append("| " + " | ".join(cells) + " |")
    md = out / f"{stem}.md"
    md.write_text("\n".join(lines) + "\n")
    return md


def dump(results: dict[str, Measurement]) -> list[dict[str, object]]:
    return [asdict(m) for m in results.values()]


def subprocess_case(
    argv: list[str], cwd: Path | None = None, env: dict[str, str] | None = None
) -> Callable[[], None]:
    """A case that runs a command to completion (output captured, failure raises)."""
    import subprocess

    def run() -> None:
        subprocess.run(argv, check=True, capture_output=True, cwd=cwd, env=env)

    return run


def command_report(
    title: str, stem: str, results: dict[str, Measurement], baselines: dict[str, str], rounds: int
) -> list[dict[str, object]]:
    """One row per command (median ms plus a ratio column per baseline); writes and prints it."""
    rows = [
        {
            "command": name,
            "median_ms": m.median_s * 1e3,
            **{column: ratio(results, name, base) for column, base in baselines.items()},
        }
        for name, m in results.items()
    ]
    first = next(iter(baselines.values()))
    path = write_report(
        title,
        rows,
        stem,
        f"median of per-round medians over {rounds} interleaved rounds; baseline `{first}`",
    )
    print(path.read_text())
    return rows
