"""The smoke run of ``fdl check``: the script, for real, on a tiny budget, to its end.

The child runs with ``FLODL_SMOKE=1`` under a runner that shortens the script's training-shaped
loops (epochs, batches, steps) to 2 iterations instead of stopping the script, so evaluation
and saving code after the training loop runs too (see ``_smoke_runner.py`` for which loops).
``fl.data.DataLoader`` also caps the batches of every epoch and ``fl.Trainer`` its own loop.
The runner reports which lines of the script ran; ``fdl check`` uses them to tell which flodl
call sites the run verified.

The time limit counts the CPU time of the script's whole process tree (the script and every
process it starts), so a correct script on a loaded machine does not fail for waiting on a
core; wall time is only a generous backstop (``wall_timeout``, default 4x the limit plus 30 s)
for a script that hangs without computing. On a limit the whole process group is killed. Idle
OpenMP threads are told to sleep rather than spin (``OMP_WAIT_POLICY=PASSIVE``, unless the
environment sets it): spinning is CPU time spent waiting, which a loaded machine multiplies.

Stopping ``fdl check`` stops the smoke run too: SIGINT (Ctrl-C), SIGTERM, SIGHUP and SIGQUIT
sent to fdl are passed on to the script's process group, which gets the task runner's grace
period to exit before it is killed (``fdl.tasks.child``); then :class:`SmokeStopped` tells the
command to end with 128 + the signal's number, as shells report it. Nothing the run started is
left running when ``run_smoke`` returns or raises.

The script runs as ``python SCRIPT ARGS`` would, from its own directory on ``sys.path``; in a
src layout (the nearest ``pyproject.toml`` has a ``src/`` beside it) ``src/`` is on the path
too, so ``src/<pkg>/train.py`` can import its own package without being installed.

It runs for real, in fdl's working directory (so the script's relative data paths work), and
what it overwrites, deletes or renames over there is put back afterwards: the run keeps each
existing file under the working directory and the script's own before changing it, in a
``.fdl-check-*`` folder beside them, and :func:`run_smoke` moves it back when the run ends,
however it ends (``_file_guard``; :attr:`SmokeResult.restored_files`). What the run created
stays. The files there (``__pycache__`` and dot folders aside, at most :data:`WALK_CAP`
entries) are also compared before and after, and :attr:`SmokeResult.changed_files` lists what
is still created, modified or deleted once the kept files are back: new files, and changes the
guard cannot see (a process the script starts that is not Python, a C library writing on its
own), for ``fdl
check`` to warn about.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from fdl.porting import _file_guard, leftovers

RUNNER = Path(__file__).with_name("_smoke_runner.py")
SMOKE_ENV = "FLODL_SMOKE"
LOOP_CAP = 2  # iterations of each training-shaped loop (flodl.smoke.SMOKE_EPOCHS)
TAIL_LINES = 20
POLL_S = 0.2
WALK_CAP = 20_000  # entries looked at to find the files a run changed; a bigger tree is skipped


class SmokeStopped(KeyboardInterrupt):
    """fdl got ``signum`` during the smoke run, which was stopped with it.

    A KeyboardInterrupt, so a caller that does not look for it still ends as interrupted.
    """

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


@dataclass
class SmokeResult:
    status: str  # passed | failed | timeout
    seconds: float
    returncode: int | None
    exception: dict | None = None  # type, module, message, notes, frames (from the runner)
    location: dict | None = None  # the innermost frame inside the script
    output_tail: list[str] = field(default_factory=list)
    cpu_seconds: float = 0.0  # CPU time of the script's process tree
    lines: list[int] = field(default_factory=list)  # the script's lines that ran
    shortened_loops: list[int] = field(default_factory=list)  # lines of loops the budget cut
    limit: str = ""  # on a timeout: "cpu" or "wall"
    # files the run created, modified or deleted under the working directory and the script's:
    # {"path": relative to the working directory when under it, "change": ...}
    changed_files: list[dict] = field(default_factory=list)
    changed_files_skipped: str | None = None  # why they were not compared (a tree too big)
    # files the run modified or deleted and fdl check put back: {"path", "change"}
    restored_files: list[dict] = field(default_factory=list)
    # the folder still holding kept files that could not be put back (None: all were)
    kept_in: str | None = None

    def to_dict(self) -> dict:
        return asdict(self)


def default_wall_timeout(cpu_timeout: float) -> float:
    return 4 * cpu_timeout + 30


def run_smoke(
    script: Path,
    *,
    timeout: float,
    python: str = sys.executable,
    args: list[str] | None = None,
    wall_timeout: float | None = None,
) -> SmokeResult:
    """Run ``script`` with ``FLODL_SMOKE=1`` in its own process group; never raises on failure.

    ``timeout`` is CPU seconds of the process tree; ``wall_timeout`` the wall-clock backstop.
    Raises :class:`SmokeStopped` when fdl was signalled meanwhile (the run is stopped too).
    """
    from fdl.tasks.child import child_setup, forwarding_signals

    script = script.resolve()
    wall = wall_timeout if wall_timeout is not None else default_wall_timeout(timeout)
    with tempfile.TemporaryDirectory(prefix="fdl-check-") as tmp:
        report = Path(tmp) / "report.json"
        out_path = Path(tmp) / "output.txt"
        env = {
            # idle OpenMP threads sleep instead of spinning, unless the user chose: a spinning
            # wait counts as CPU time without doing work, and on a loaded machine it grew a
            # 3.5 s run (an LBFGS loop) past a 120 s limit
            "OMP_WAIT_POLICY": "PASSIVE",
            **os.environ,
            SMOKE_ENV: "1",
            "FDL_CHECK_REPORT": str(report),
            "FDL_SMOKE_LOOP_CAP": str(LOOP_CAP),
            "PYTHONUNBUFFERED": "1",
        }
        roots = smoke_roots(Path.cwd(), script.parent)
        before = _snapshot(roots, Path(tmp))
        with _guarded(roots, env) as guard:
            start = time.perf_counter()
            with open(out_path, "w+", encoding="utf-8", errors="replace") as sink:
                proc = subprocess.Popen(
                    [python, str(RUNNER), str(script), *(args or [])],
                    stdout=sink,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    env=env,
                    start_new_session=True,  # one group: DDP workers it spawns die with it
                    preexec_fn=child_setup(),  # takes the SIGINT fdl forwards, even from `... &`
                )
                guard.started(proc.pid)
                with forwarding_signals(proc) as forwarded:
                    limit, cpu = _wait(proc, timeout, wall)
                seconds = time.perf_counter() - start
                sink.flush()
        if forwarded.signum is not None:
            raise SmokeStopped(forwarded.signum)
        output = out_path.read_text(encoding="utf-8", errors="replace")
        document = _read(report) or {}
        after = _snapshot(roots, Path(tmp)) if before is not None else None
    ran = [int(n) for n in document.get("lines", []) if isinstance(n, int)]
    shortened = [int(n) for n in document.get("shortened_loops", []) if isinstance(n, int)]
    result = SmokeResult(
        "failed",
        seconds,
        proc.returncode,
        output_tail=_tail(output),
        cpu_seconds=cpu,
        lines=ran,
        shortened_loops=shortened,
        restored_files=[
            {"path": leftovers.shown_path(item["path"], Path.cwd()), "change": item["change"]}
            for item in guard.results
            if item["restored"]
        ],
        kept_in=guard.kept_in,
    )
    if before is None or after is None:
        where = " and ".join(str(root) for root in roots)
        result.changed_files_skipped = f"more than {WALK_CAP} entries under {where}"
    else:
        result.changed_files = _changes(before, after, Path.cwd())
    if limit:
        return replace(result, status="timeout", returncode=None, limit=limit)
    if proc.returncode == 0:
        return replace(result, status="passed", returncode=0)
    exception = document.get("exception")
    location = None
    if exception:
        inside = [f for f in exception["frames"] if _same(f["file"], script)]
        location = inside[-1] if inside else None
    return replace(result, exception=exception, location=location)


def _same(file: str, script: Path) -> bool:
    try:
        return Path(file).resolve() == script
    except (OSError, ValueError):
        return False


def _wait(proc: subprocess.Popen, cpu_limit: float, wall_limit: float) -> tuple[str, float]:
    """Wait for ``proc``; kill its group past a limit. Returns (limit hit or "", CPU seconds)."""
    tree = _Tree(proc.pid)
    deadline = time.monotonic() + wall_limit
    while True:
        try:
            proc.wait(timeout=POLL_S)
            finished = True
        except subprocess.TimeoutExpired:
            finished = False
        cpu = tree.cpu_seconds()
        if finished:
            return "", cpu
        if cpu > cpu_limit:
            _kill_group(proc)
            proc.wait()
            return "cpu", cpu
        if time.monotonic() > deadline:
            _kill_group(proc)
            proc.wait()
            return "wall", cpu


class _Tree:
    """CPU time of a process and all its descendants, live and finished."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.last: dict[int, float] = {}  # pid -> CPU seconds last seen (finished ones keep it)

    def cpu_seconds(self) -> float:
        try:
            import psutil
        except ImportError:  # pragma: no cover - psutil is a dependency of fdl
            return 0.0
        try:
            root = psutil.Process(self.pid)
            procs = [root, *root.children(recursive=True)]
        except psutil.Error:
            procs = []
        for proc in procs:
            try:
                times = proc.cpu_times()
            except psutil.Error:
                continue
            self.last[proc.pid] = times.user + times.system
        return sum(self.last.values())


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()


def smoke_roots(cwd: Path, script_dir: Path) -> list[Path]:
    """The folders to watch: the working directory and the script's, one if inside the other."""
    cwd = cwd.resolve()
    if script_dir == cwd or cwd in script_dir.parents:
        return [cwd]
    if script_dir in cwd.parents:
        return [script_dir]
    return [cwd, script_dir]


def _snapshot(roots: list[Path], skip: Path) -> dict[str, tuple[int, int]] | None:
    """(mtime, size) of each file under ``roots``, ``__pycache__``, dot folders and ``skip``
    aside; ``None`` past :data:`WALK_CAP` entries (too big to compare cheaply)."""
    files: dict[str, tuple[int, int]] = {}
    skip = skip.resolve()
    stack = [str(root) for root in roots]
    seen = 0
    while stack:
        try:
            with os.scandir(stack.pop()) as entries:
                listed = list(entries)
        except OSError:
            continue
        seen += len(listed)
        if seen > WALK_CAP:
            return None
        for entry in listed:
            try:
                if entry.is_dir(follow_symlinks=False):
                    hidden = entry.name == "__pycache__" or entry.name.startswith(".")
                    if not hidden and Path(entry.path) != skip:
                        stack.append(entry.path)
                elif entry.is_file(follow_symlinks=False):
                    stat = entry.stat(follow_symlinks=False)
                    files[entry.path] = (stat.st_mtime_ns, stat.st_size)
            except OSError:
                continue
    return files


def _changes(
    before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]], cwd: Path
) -> list[dict]:
    changed = [
        {
            "path": leftovers.shown_path(path, cwd),
            "change": "created" if path not in before else "modified",
        }
        for path, stamp in after.items()
        if before.get(path) != stamp
    ]
    changed += [
        {"path": leftovers.shown_path(path, cwd), "change": "deleted"}
        for path in before
        if path not in after
    ]
    return sorted(changed, key=lambda item: item["path"])


@dataclass
class _Restoring:
    """What the run kept and what was put back (see :func:`_guarded`)."""

    results: list[dict] = field(default_factory=list)
    kept_in: str | None = None
    folders: list[str] = field(default_factory=list)
    manifest: str = ""

    def started(self, run_group: int) -> None:
        """Record the smoke run's process group as the folders' owner too: a later check does
        not take them for an interrupted one's while that group lives (fdl killed, run not)."""
        for folder in self.folders:
            with contextlib.suppress(OSError):
                leftovers.write_owner(folder, self.manifest, run_group)


@contextlib.contextmanager
def _guarded(roots: list[Path], env: dict[str, str]) -> Iterator[_Restoring]:
    """Have the run keep what it changes under ``roots`` (in ``env``), and put it back on leaving,
    however the block ends. A root where no backup folder can be made (read-only) is not kept:
    the run cannot write there either."""
    folders: list[list[str]] = []
    for root in roots:
        try:
            folders.append([str(root), tempfile.mkdtemp(prefix=leftovers.PREFIX, dir=root)])
        except OSError:
            continue
    guard = _Restoring()
    if not folders:
        yield guard
        return
    manifest = str(Path(folders[0][1]) / leftovers.MANIFEST)
    guard.folders, guard.manifest = [folder for _, folder in folders], manifest
    for folder in guard.folders:  # who uses it: a check killed before its end leaves it behind
        with contextlib.suppress(OSError):
            leftovers.write_owner(folder, manifest)
    env[_file_guard.ENV] = json.dumps({"manifest": manifest, "folders": folders})
    # the Python processes the script starts keep files too (a sitecustomize on their path)
    site = _file_guard.child_site(str(Path(folders[0][1]) / "site"))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [site, env.get("PYTHONPATH", "")]))
    try:
        yield guard
    finally:
        guard.results = _file_guard.restore(manifest)
        if any(not item["restored"] for item in guard.results):
            guard.kept_in = folders[0][1] if len(folders) == 1 else ", ".join(f for _, f in folders)
        else:
            for _, folder in folders:
                shutil.rmtree(folder, ignore_errors=True)


def _read(report: Path) -> dict | None:
    try:
        document = json.loads(report.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return document if isinstance(document, dict) else None


def _tail(output: str) -> list[str]:
    return output.rstrip("\n").splitlines()[-TAIL_LINES:] if output else []
