"""What a failed training run must not leave behind: processes, shared memory, temp files."""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from pathlib import Path

import psutil

MARKER = "FLODL_TEST_RUN"
SHM = Path("/dev/shm")
# Not the run's to remove: torch's compile cache, kept on purpose for every later process, and
# the log directory torchrun's agent leaves behind after every job, successful or not.
CACHES = ("torchinductor_", "torchelastic_")
# torch before 2.10 makes a directory for this file when torch.distributed.nn is imported (as
# building an optimizer does), and removes it only at a normal exit: never the run's to remove.
TORCH_IMPORT_DIR_FILE = "_remote_module_non_scriptable.py"


def _shm() -> set[str]:
    return set(os.listdir(SHM)) if SHM.is_dir() else set()


def _resource_tracker(proc: psutil.Process) -> bool:
    """The test process's own multiprocessing helper: started by its first spawn (inheriting
    that run's environment), shared by every later one, and ending with the test process."""
    return proc.ppid() == os.getpid() and "multiprocessing.resource_tracker" in " ".join(
        proc.cmdline()
    )


def _torch_import_dir(path: Path) -> bool:
    """Whether ``path`` is torch's own import-time directory (see TORCH_IMPORT_DIR_FILE)."""
    return [p.name for p in path.iterdir()] == [TORCH_IMPORT_DIR_FILE]


class Leftovers:
    """A run's processes carry a marker in their environment and a temp directory of their own
    (both from :meth:`env`), so whatever they leave — orphaned grandchildren of a launcher too —
    is found by that, not confused with other programs'. :meth:`check` fails on any of it."""

    def __init__(self, tmp_path: Path) -> None:
        self.marker = uuid.uuid4().hex
        self.tmpdir = tmp_path / "run-tmp"
        self.tmpdir.mkdir()
        self.shm = _shm()

    def env(self) -> dict[str, str]:
        return {MARKER: self.marker, "TMPDIR": str(self.tmpdir)}

    def processes(self) -> list[psutil.Process]:
        """Live processes started with this run's marker (this test's own process excluded)."""
        found = []
        for proc in psutil.process_iter():
            if proc.pid == os.getpid():
                continue
            with contextlib.suppress(psutil.Error):
                if (
                    proc.environ().get(MARKER) == self.marker
                    and proc.status() != psutil.STATUS_ZOMBIE
                    and not _resource_tracker(proc)
                ):
                    found.append(proc)
        return found

    def _mapped_by_others(self) -> set[str]:
        """Shared memory that live processes outside this run have mapped (other programs on
        the machine create theirs meanwhile)."""
        held = set()
        for proc in psutil.process_iter():
            with contextlib.suppress(psutil.Error, OSError):
                if proc.environ().get(MARKER) == self.marker:
                    continue
                maps = Path(f"/proc/{proc.pid}/maps").read_text()
                held |= {line.rsplit("/", 1)[-1] for line in maps.splitlines() if str(SHM) in line}
        return held

    def check(self) -> None:
        # A process may still be leaving when the failure is reported: it gets a bounded moment.
        _, alive = psutil.wait_procs(self.processes(), timeout=10)
        running = []
        for proc in alive:
            with contextlib.suppress(psutil.Error):
                if proc.status() != psutil.STATUS_ZOMBIE:
                    running.append(" ".join(proc.cmdline()))
        assert not running, f"processes left running: {running}"
        files = sorted(
            str(p.relative_to(self.tmpdir))
            for p in self.tmpdir.rglob("*")
            if not p.relative_to(self.tmpdir).parts[0].startswith(CACHES)
            and not _torch_import_dir(p if p.is_dir() else p.parent)
        )
        assert not files, f"temp files left: {files}"
        segments = self._new_segments()
        # Another test running meanwhile (``make test`` runs several at once) may have closed a
        # segment it made and not yet removed it: a leftover is one still there a moment later.
        deadline = time.monotonic() + 3
        while segments and time.monotonic() < deadline:
            time.sleep(0.2)
            segments &= self._new_segments()
        assert not segments, f"shared memory left in {SHM}: {sorted(segments)}"

    def _new_segments(self) -> set[str]:
        return _shm() - self.shm - self._mapped_by_others()
