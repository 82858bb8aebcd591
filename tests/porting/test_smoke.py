"""The smoke run of `fdl check`: real subprocesses, FLODL_SMOKE, timeouts, exception reports."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from fdl.porting.smoke import SmokeResult, run_smoke
from tests.conftest import clean_env


def script(tmp_path: Path, body: str, name: str = "s.py") -> Path:
    path = tmp_path / name
    path.write_text(body)
    return path


def passed_here(tmp_path: Path, monkeypatch, body: str, timeout: float = 60) -> SmokeResult:
    """The smoke run of ``body`` as a script in ``tmp_path``, run from there; it must pass."""
    monkeypatch.chdir(tmp_path)
    result = run_smoke(script(tmp_path, body), timeout=timeout)
    assert result.status == "passed", result.output_tail
    return result


def test_a_passing_script_sees_flodl_smoke_and_its_own_directory(tmp_path):
    (tmp_path / "helper.py").write_text("VALUE = 7\n")
    path = script(
        tmp_path,
        "import os, sys\nimport helper\nprint(os.environ['FLODL_SMOKE'], helper.VALUE, sys.argv[1:])\n"
        "assert 'FDL_CHECK_REPORT' not in os.environ\n",
    )
    result = run_smoke(path, timeout=60, args=["--epochs", "3"])
    assert result.status == "passed", result.output_tail
    assert result.output_tail == ["1 7 ['--epochs', '3']"]


@pytest.mark.parametrize(("chosen", "seen"), [(None, "PASSIVE"), ("ACTIVE", "ACTIVE")])
def test_idle_openmp_threads_sleep_unless_the_user_chose(tmp_path, monkeypatch, chosen, seen):
    # a spinning wait is CPU time the limit counts: under load it grew a 3.5 s run past 120 s
    if chosen is None:
        monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    else:
        monkeypatch.setenv("OMP_WAIT_POLICY", chosen)
    path = script(tmp_path, "import os\nprint(os.environ['OMP_WAIT_POLICY'])\n")
    result = run_smoke(path, timeout=60)
    assert result.status == "passed" and result.output_tail == [seen]


def test_an_exception_is_reported_with_notes_and_the_scripts_line(tmp_path):
    path = script(
        tmp_path,
        "def layer(x):\n"
        "    err = RuntimeError('mat1 and mat2 shapes cannot be multiplied (4x16 and 32x2)')\n"
        "    err.add_note('flodl: raised in graph node linear_2 (Linear; tags: head)')\n"
        "    raise err\n"
        "\n"
        "layer(1)\n",
    )
    result = run_smoke(path, timeout=60)
    assert result.status == "failed" and result.returncode == 1
    assert result.exception["type"] == "RuntimeError"
    assert result.exception["notes"] == [
        "flodl: raised in graph node linear_2 (Linear; tags: head)"
    ]
    assert result.location == {
        "file": str(path),
        "line": 4,
        "function": "layer",
        "code": "raise err",
    }
    assert any("Traceback" in line for line in result.output_tail)  # the real traceback too


def test_sys_exit_with_an_error_code_is_a_failure(tmp_path):
    result = run_smoke(script(tmp_path, "import sys\nsys.exit(3)\n"), timeout=60)
    assert result.status == "failed" and result.returncode == 3


def test_a_hanging_script_times_out_and_its_children_are_killed(tmp_path):
    marker = tmp_path / "child.pid"
    path = script(
        tmp_path,
        "import subprocess, sys, time\n"
        f"child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\n"
        f"open({str(marker)!r}, 'w').write(str(child.pid))\n"
        "time.sleep(120)\n",
    )
    start = time.monotonic()
    result = run_smoke(path, timeout=3, wall_timeout=3)  # it sleeps: the wall backstop ends it
    assert result.status == "timeout" and result.returncode is None and result.limit == "wall"
    assert time.monotonic() - start < 60
    child = int(marker.read_text())
    for _ in range(50):  # the whole process group was killed; give the kernel a moment
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        raise AssertionError("the script's child process survived the timeout")


MONITORED_LOOP = (
    "import flodl as fl\n"
    "mon = fl.Monitor(50, stream=None, gpu=False)\n"
    "for epoch in range(50):\n"
    "    print('epoch', epoch)\n"
    "    mon.log(epoch, 0.0, {'loss': 1.0})\n"
    "print('after the loop')\n"
)


def test_the_budget_shortens_a_monitored_loop_and_the_script_runs_on(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", clean_env()["PYTHONPATH"])  # the child imports this flodl
    result = run_smoke(script(tmp_path, MONITORED_LOOP), timeout=300)
    assert result.status == "passed" and result.returncode == 0, result.output_tail
    assert result.shortened_loops == [3]
    assert "epoch 1" in result.output_tail and "epoch 2" not in result.output_tail
    assert "after the loop" in result.output_tail  # code after the training loop runs
    assert 6 in result.lines


def test_a_plain_exit_0_is_a_pass_without_a_budget_note(tmp_path):
    result = run_smoke(script(tmp_path, "import sys\nsys.exit(0)\n"), timeout=60)
    assert result.status == "passed" and result.shortened_loops == []


def test_a_src_layout_script_imports_its_own_package(tmp_path):
    project = tmp_path / "proj"
    package = project / "src" / "mypkg"
    package.mkdir(parents=True)
    (project / "pyproject.toml").write_text('[project]\nname = "mypkg"\nversion = "0.1"\n')
    (package / "__init__.py").write_text("")
    (package / "model.py").write_text("WIDTH = 5\n")
    train = script(package, "from mypkg.model import WIDTH\nprint('width', WIDTH)\n", "train.py")
    result = run_smoke(train, timeout=60)
    assert result.status == "passed", result.output_tail
    assert result.output_tail == ["width 5"]


def test_without_a_src_dir_nothing_is_added(tmp_path):
    # the nearest pyproject.toml decides: a project without src/ gets nothing extra on the path
    outer = tmp_path / "outer"
    (outer / "src" / "mypkg").mkdir(parents=True)
    (outer / "src" / "mypkg" / "__init__.py").write_text("")
    (outer / "pyproject.toml").write_text("")
    inner = outer / "inner"
    inner.mkdir()
    (inner / "pyproject.toml").write_text("")
    result = run_smoke(script(inner, "import mypkg\n"), timeout=60)
    assert result.status == "failed"
    assert result.exception["type"] == "ModuleNotFoundError"


def test_the_monitor_leaves_a_shortened_loop_alone(monkeypatch):
    import flodl as fl

    monkeypatch.setenv("FLODL_SMOKE", "1")
    monitor = fl.Monitor(50, stream=None, gpu=False)
    monkeypatch.setenv("FLODL_SMOKE_LOOPS_CAPPED", "1")  # what fdl check's runner sets
    for epoch in range(3):
        monitor.log(epoch, 0.0, {"loss": 1.0})  # no SmokeBudgetReached: the runner cuts loops
    assert len(monitor.history) == 3
    monkeypatch.delenv("FLODL_SMOKE_LOOPS_CAPPED")
    with pytest.raises(fl.monitor.SmokeBudgetReached):  # by hand, the monitor ends the run
        monitor.log(3, 0.0, {"loss": 1.0})
    monitor.close()


WRITER = """
import os, pathlib, tempfile
pathlib.Path("model.pt").write_text("the smoke model")  # overwrites the real one, for a while
pathlib.Path("runs").mkdir()
pathlib.Path("runs/log.csv").write_text("epoch,loss")
os.remove("old.txt")
pathlib.Path("__pycache__").mkdir(exist_ok=True)
pathlib.Path("__pycache__/x.pyc").write_text("")  # Python's own: not reported
pathlib.Path(tempfile.gettempdir(), "elsewhere.txt").write_text("")
pathlib.Path(__file__).with_name("beside.txt").write_text("")  # the script's folder counts too
"""


def test_what_a_smoke_run_overwrites_or_deletes_is_put_back_and_what_it_creates_is_listed(
    tmp_path, monkeypatch
):
    # The run is for real, in the working directory: a script's default output paths are
    # written. The existing files come back as they were; the new ones stay, and are listed.
    work, scripts = tmp_path / "work", tmp_path / "scripts"
    work.mkdir()
    scripts.mkdir()
    (work / "model.pt").write_text("the real model")
    (work / "old.txt").write_text("old")
    (work / "data.csv").write_text("untouched")
    old = time.time() - 60
    os.utime(work / "model.pt", (old, old))
    monkeypatch.chdir(work)
    result = run_smoke(script(scripts, WRITER), timeout=60)
    assert result.status == "passed", result.output_tail
    assert result.restored_files == [
        {"path": "model.pt", "change": "modified"},
        {"path": "old.txt", "change": "deleted"},
    ]
    assert (work / "model.pt").read_text() == "the real model"
    assert (work / "model.pt").stat().st_mtime == pytest.approx(old)  # the file itself, back
    assert (work / "old.txt").read_text() == "old"
    assert result.changed_files == [
        {"path": str(scripts / "beside.txt"), "change": "created"},
        {"path": str(Path("runs") / "log.csv"), "change": "created"},
    ]
    assert (work / "runs" / "log.csv").read_text() == "epoch,loss"  # what it made stays
    assert result.changed_files_skipped is None and result.kept_in is None
    assert not list(work.glob(".fdl-check-*")) and not list(scripts.glob(".fdl-check-*"))


KEEPERS = """
import os, pathlib, shutil, subprocess, sys
import h5py
import torch
from safetensors.torch import save_file


def overwrite(name):
    torch.save({"w": torch.ones(2)}, name)


def main():
    torch.save({"w": torch.zeros(2)}, "model.pt")  # torch.save opens its file from C
    save_file({"w": torch.zeros(2)}, "model.safetensors")  # so does safetensors
    with open("log.txt", "a") as log:  # appended to in place
        log.write("smoke line\\n")
    pathlib.Path("tmp.ckpt").write_text("smoke")
    os.replace("tmp.ckpt", "best.ckpt")  # an atomic save over the best checkpoint
    with open("tmp2.ckpt", "x") as fresh:  # made by the run, then renamed: not kept
        fresh.write("smoke")
    os.replace("tmp2.ckpt", "last.ckpt")
    shutil.rmtree("data")  # a whole folder removed
    os.truncate("notes.txt", 0)
    with h5py.File("features.h5", "w") as h5:  # HDF5 opens its file from C too
        h5["x"] = [1.0]
    with h5py.File("metrics.h5", "a") as h5:  # and writes into it in place
        h5["loss"] = [0.5]
    with h5py.File("features.h5", "r") as h5:  # (read back: nothing more kept)
        assert list(h5) == ["x"]
    # Python processes the script starts keep what they overwrite too: a subprocess, and a
    # multiprocessing "spawn" worker overwriting what the script itself overwrote first
    subprocess.run([sys.executable, "-c", "open('child.txt', 'w').write('child')"], check=True)
    worker = multiprocessing.get_context("spawn").Process(target=overwrite, args=("model.pt",))
    worker.start()
    worker.join()
    assert worker.exitcode == 0
    # a process that is not Python writes where no guard sees it: still listed, not put back
    subprocess.run(["sh", "-c", "echo shell > elsewhere.txt"], check=True)
    print("wrote everything")


if __name__ == "__main__":
    import multiprocessing

    main()
"""


def test_every_kind_of_write_the_run_makes_is_put_back(tmp_path, monkeypatch):
    pytest.importorskip("safetensors")
    h5py = pytest.importorskip("h5py")
    for name, key in (("features.h5", "real"), ("metrics.h5", "epochs")):
        with h5py.File(tmp_path / name, "w") as h5:
            h5[key] = [1.0, 2.0]
    h5_files = {name: (tmp_path / name).read_bytes() for name in ("features.h5", "metrics.h5")}
    files = {
        "model.pt": b"real weights",
        "model.safetensors": b"real tensors",
        "log.txt": b"line 1\n",
        "best.ckpt": b"the best one",
        "last.ckpt": b"the last one",
        "data/train/a.bin": b"sample a",
        "data/b.bin": b"sample b",
        "notes.txt": b"notes",
        "child.txt": b"the child's file",
        "elsewhere.txt": b"mine",
    }
    for name, data in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(data)
    result = passed_here(tmp_path, monkeypatch, KEEPERS, timeout=120)
    files.update(h5_files)
    for name, data in files.items():
        if name != "elsewhere.txt":
            assert (tmp_path / name).read_bytes() == data, name
    assert {item["path"] for item in result.restored_files} == set(files) - {"elsewhere.txt"}
    assert (tmp_path / "elsewhere.txt").read_bytes() == b"shell\n"
    assert result.changed_files == [{"path": "elsewhere.txt", "change": "modified"}]
    assert not list(tmp_path.glob(".fdl-check-*"))


@pytest.mark.parametrize("wal", [False, True])
def test_a_sqlite_database_the_run_writes_is_put_back_with_no_log_left(tmp_path, monkeypatch, wal):
    # SQLite writes from C (an experiment tracker's runs.db): the database is kept on connect;
    # in WAL mode a run that exits without closing leaves its log, which would replay its rows
    # into the database put back: a log the run made goes with it
    import sqlite3

    db = tmp_path / "runs.db"
    con = sqlite3.connect(db)
    if wal:  # (outside a transaction, or SQLite keeps its mode)
        assert con.execute("pragma journal_mode=wal").fetchone() == ("wal",)
    con.execute("create table runs (name text)")
    con.execute("insert into runs values ('yours')")
    con.commit()
    con.close()
    assert not (tmp_path / "runs.db-wal").exists()
    body = (
        "import os, sqlite3\n"
        "con = sqlite3.connect('runs.db')\n"
        "con.execute(\"insert into runs values ('smoke')\")\n"
        "con.commit()\n"
        f"assert os.path.exists('runs.db-wal') == {wal}\n"
        "os._exit(0)  # no close: the log stays\n"
    )
    result = passed_here(tmp_path, monkeypatch, body)
    con = sqlite3.connect(db)
    assert con.execute("select name from runs").fetchall() == [("yours",)]
    con.close()
    # in WAL mode the rows the run wrote were in the log only: the database file is as it was
    restored = [] if wal else [{"path": "runs.db", "change": "modified"}]
    assert result.restored_files == restored
    assert result.changed_files == []  # no log, journal or index left behind
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("runs")) == ["runs.db"]


def test_a_run_stopped_on_its_time_limit_still_gets_its_files_back(tmp_path, monkeypatch):
    (tmp_path / "model.pt").write_text("the real model")
    monkeypatch.chdir(tmp_path)
    body = "open('model.pt', 'w').write('half written')\nwhile True:\n    pass\n"
    result = run_smoke(script(tmp_path, body), timeout=2)
    assert result.status == "timeout" and result.limit == "cpu"
    assert (tmp_path / "model.pt").read_text() == "the real model"
    assert result.restored_files == [{"path": "model.pt", "change": "modified"}]


def test_a_file_that_cannot_go_back_stays_kept_and_its_folder_is_named(tmp_path, monkeypatch):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "x.bin").write_text("sample")
    # the folder it lived in is now a file: x.bin has nowhere to go back to
    body = "import shutil\nshutil.rmtree('data')\nopen('data', 'w').write('now a file')\n"
    result = passed_here(tmp_path, monkeypatch, body)
    (kept,) = tmp_path.glob(".fdl-check-*")
    assert result.kept_in == str(kept)
    bookkeeping = {"manifest.jsonl", "owner.json"}
    originals = [f for f in kept.iterdir() if f.is_file() and f.name not in bookkeeping]
    assert [f.read_text() for f in originals] == ["sample"]


def test_a_file_that_cannot_be_kept_is_written_all_the_same_and_listed(tmp_path, monkeypatch):
    # keeping fails (here: a file size limit, as a full disk would): the script's own write
    # goes ahead as it would unwatched, nothing half-kept is put back, and the file is listed
    (tmp_path / "big.bin").write_text("y" * 200_000)
    body = (
        "import resource\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, resource.RLIM_INFINITY))\n"
        "with open('big.bin', 'r+') as f:\n"
        "    f.write('X')\n"
    )
    result = passed_here(tmp_path, monkeypatch, body)
    assert (tmp_path / "big.bin").read_text() == "X" + "y" * 199_999
    assert result.restored_files == [] and result.kept_in is None
    assert result.changed_files == [{"path": "big.bin", "change": "modified"}]


def test_the_environments_own_sitecustomize_still_runs_in_the_script_and_its_children(
    tmp_path, monkeypatch
):
    theirs = tmp_path / "site"
    theirs.mkdir()
    (theirs / "sitecustomize.py").write_text("import os\nos.environ['THEIRS'] = 'ran'\n")
    monkeypatch.setenv("PYTHONPATH", str(theirs))
    body = (
        "import os, subprocess, sys\n"
        "print('script', os.environ.get('THEIRS'))\n"
        'code = \'import os, sys; print("child", os.environ.get("THEIRS"), '
        'hasattr(sys, "_fdl_file_guard"))\'\n'
        "os.environ.pop('THEIRS')\n"
        "subprocess.run([sys.executable, '-c', code], check=True)\n"
    )
    result = passed_here(tmp_path, monkeypatch, body)
    assert result.output_tail == ["script ran", "child ran True"]


def test_a_file_read_while_the_run_writes_it_reads_as_unwatched(tmp_path, monkeypatch):
    # keeping a file never changes what the script sees: appends extend it, reads read it
    (tmp_path / "log.txt").write_text("one\n")
    body = (
        "open('log.txt', 'a').write('two\\n')\n"
        "assert open('log.txt').read() == 'one\\ntwo\\n'\n"
        "open('log.txt', 'w').write('three')\n"
        "assert open('log.txt').read() == 'three'\n"
    )
    passed_here(tmp_path, monkeypatch, body)
    assert (tmp_path / "log.txt").read_text() == "one\n"


def test_a_tree_too_big_is_not_compared(tmp_path, monkeypatch):
    import fdl.porting.smoke as smoke

    for n in range(5):
        (tmp_path / f"f{n}").write_text("")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(smoke, "WALK_CAP", 3)
    result = run_smoke(script(tmp_path, "open('f0', 'w').write('x')\n"), timeout=60)
    assert result.status == "passed" and result.changed_files == []
    assert result.changed_files_skipped == f"more than 3 entries under {tmp_path.resolve()}"
