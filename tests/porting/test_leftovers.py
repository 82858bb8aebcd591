"""What an interrupted `fdl check` leaves kept: telling it from a running check, putting it back.

The leftovers here are made by the real guard, in a child Python that keeps files and then dies
without putting them back, as a smoke run does when its fdl is SIGKILLed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from fdl.porting import _file_guard, leftovers
from tests.conftest import clean_env


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def killed_check(root: Path, body: str, owner: dict | None = None) -> Path:
    """Run ``body`` in ``root`` as a smoke run does, the guard installed by the sitecustomize
    it puts on the Python processes' path, and leave its kept files there, as when its fdl
    died: returns the backup folder. ``owner``: what its owner.json says (default: an fdl that
    is gone; empty: no owner file)."""
    folder = Path(tempfile.mkdtemp(prefix=leftovers.PREFIX, dir=root))
    manifest = str(folder / leftovers.MANIFEST)
    if owner is None:
        owner = {"pid": dead_pid(), "started": 1.0}
    if owner:
        (folder / leftovers.OWNER).write_text(json.dumps({**owner, "manifest": manifest}))
    config = {"manifest": manifest, "folders": [[str(root), str(folder)]]}
    env = clean_env(
        **{
            _file_guard.ENV: json.dumps(config),
            "PYTHONPATH": _file_guard.child_site(str(folder / "site")),
        }
    )
    subprocess.run([sys.executable, "-c", body], cwd=root, env=env, check=True, timeout=60)
    return folder


def test_a_dead_checks_folder_is_found_and_put_back_keeping_what_was_in_its_place(tmp_path):
    (tmp_path / "model.pt").write_text("the real model")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "train.csv").write_text("rows")
    folder = killed_check(
        tmp_path,
        "open('model.pt', 'w').write('the smoke model')\nimport os; os.remove('data/train.csv')\n",
    )
    [found] = leftovers.find([tmp_path])
    assert found.folders == [folder]
    assert found.files == [str(tmp_path / "data" / "train.csv"), str(tmp_path / "model.pt")]
    assert found.to_dict(tmp_path)["files"] == ["data/train.csv", "model.pt"]

    results = {Path(r.path).name: r for r in leftovers.recover(found)}
    assert (tmp_path / "model.pt").read_text() == "the real model"
    assert (tmp_path / "data" / "train.csv").read_text() == "rows"
    assert results["train.csv"].restored and results["train.csv"].replaced is None
    replaced = Path(results["model.pt"].replaced or "")
    assert replaced == folder / "replaced" / "model.pt"
    assert replaced.read_text() == "the smoke model"  # nothing lost, not even the smoke's file
    # the bookkeeping is gone, so it is not found again; the folder stays for the replaced file
    assert sorted(p.name for p in folder.iterdir()) == ["replaced"]
    assert leftovers.find([tmp_path]) == []


def test_a_folder_with_nothing_replaced_is_removed_after_recovery(tmp_path):
    (tmp_path / "a.txt").write_text("original")
    folder = killed_check(tmp_path, "import os; os.remove('a.txt')\n")
    [found] = leftovers.find([tmp_path])
    [result] = leftovers.recover(found)
    assert result.restored and result.replaced is None
    assert (tmp_path / "a.txt").read_text() == "original"
    assert not folder.exists()


def test_the_earliest_of_several_kept_versions_is_the_one_put_back(tmp_path):
    (tmp_path / "model.pt").write_text("v0")
    killed_check(
        tmp_path,
        "import subprocess, sys\n"
        "open('model.pt', 'w').write('v1')\n"
        # a Python child keeps what it finds (v1) before writing v2
        "subprocess.run([sys.executable, '-c', \"open('model.pt', 'w').write('v2')\"], check=True)\n",
    )
    [found] = leftovers.find([tmp_path])
    assert len(_file_guard.kept_records(str(found.manifest))) == 2
    [result] = leftovers.recover(found)
    assert (tmp_path / "model.pt").read_text() == "v0"
    assert Path(result.replaced or "").read_text() == "v2"


def test_a_running_check_is_never_taken_for_an_interrupted_one(tmp_path):
    (tmp_path / "model.pt").write_text("the real model")
    killed_check(
        tmp_path,
        "open('model.pt', 'w').write('smoke')\n",
        owner={"pid": os.getpid(), "started": leftovers._started(os.getpid())},
    )
    assert leftovers.find([tmp_path]) == []  # its fdl (this process) is alive


def test_a_reused_pid_does_not_keep_a_folder_alive(tmp_path):
    (tmp_path / "model.pt").write_text("the real model")
    killed_check(
        tmp_path,
        "open('model.pt', 'w').write('smoke')\n",
        owner={"pid": os.getpid(), "started": 1.0},
    )
    assert len(leftovers.find([tmp_path])) == 1


def test_a_live_smoke_run_group_keeps_its_folder_after_fdl_died(tmp_path):
    (tmp_path / "model.pt").write_text("the real model")
    sleeper = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True
    )
    try:
        killed_check(
            tmp_path,
            "open('model.pt', 'w').write('smoke')\n",
            owner={"pid": dead_pid(), "started": 1.0, "run_group": sleeper.pid},
        )
        assert leftovers.find([tmp_path]) == []  # the run still writes: not for recovery yet
    finally:
        sleeper.kill()
        sleeper.wait()
    assert len(leftovers.find([tmp_path])) == 1


def test_folders_being_set_up_or_from_an_older_fdl(tmp_path):
    (tmp_path / ".fdl-check-setup").mkdir()  # no owner, no manifest yet: a check starting
    (tmp_path / "model.pt").write_text("the real model")
    killed_check(tmp_path, "open('model.pt', 'w').write('smoke')\n", owner={})  # no owner file
    [found] = leftovers.find([tmp_path])
    assert found.pid is None and found.files == [str(tmp_path / "model.pt")]


def test_a_file_that_cannot_move_aside_is_not_overwritten(tmp_path):
    (tmp_path / "model.pt").write_text("the real model")
    folder = killed_check(tmp_path, "open('model.pt', 'w').write('newer work')\n")
    (folder / "replaced").write_text("a file where the folder should go")  # mkdir fails
    [found] = leftovers.find([tmp_path])
    [result] = leftovers.recover(found)
    assert not result.restored
    assert (tmp_path / "model.pt").read_text() == "newer work"  # not lost
    [again] = leftovers.find([tmp_path])  # still kept, still found
    assert again.files == [str(tmp_path / "model.pt")]


def test_an_fdl_that_is_a_zombie_no_longer_owns_its_folder(tmp_path):
    import time

    import psutil

    fdl = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE
    )
    try:
        started = psutil.Process(fdl.pid).create_time()
        (tmp_path / "model.pt").write_text("the real model")
        owner = {"pid": fdl.pid, "started": started}
        killed_check(tmp_path, "open('model.pt', 'w').write('smoke')\n", owner=owner)
        assert leftovers.find([tmp_path]) == []  # alive
        fdl.stdin.close()  # type: ignore[union-attr]
        deadline = time.monotonic() + 10
        while psutil.Process(fdl.pid).status() != psutil.STATUS_ZOMBIE:  # exited, not reaped
            assert time.monotonic() < deadline
            time.sleep(0.02)
        assert len(leftovers.find([tmp_path])) == 1
    finally:
        fdl.kill()
        fdl.wait()


def test_a_database_log_the_killed_run_made_moves_aside_with_what_it_replaced(tmp_path):
    import sqlite3

    db = tmp_path / "runs.db"
    con = sqlite3.connect(db)
    assert con.execute("pragma journal_mode=wal").fetchone() == ("wal",)
    con.execute("create table runs (name text)")
    con.execute("insert into runs values ('yours')")
    con.commit()
    con.close()
    folder = killed_check(
        tmp_path,
        "import os, sqlite3\n"
        "con = sqlite3.connect('runs.db')\n"
        "con.execute(\"insert into runs values ('smoke')\")\n"
        "con.commit()\n"
        "os._exit(0)\n",
    )
    assert (tmp_path / "runs.db-wal").exists()  # the smoke's rows, waiting to be replayed
    [found] = leftovers.find([tmp_path])
    assert found.files == [str(db)]  # the log is not yours to get back: it goes aside
    leftovers.recover(found)
    con = sqlite3.connect(db)
    assert con.execute("select name from runs").fetchall() == [("yours",)]
    con.close()
    assert (folder / "replaced" / "runs.db-wal").exists()  # kept, in case it was yours
