"""A freshly scaffolded project's training script passes `fdl check`, its loop shortened by the
smoke budget and the code after the loop run."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.scaffold.generated import saved_epoch


@pytest.mark.slow
def test_fdl_check_passes_on_a_new_projects_train_py(run_fdl, tmp_path):
    created = run_fdl("init", "demo", "--native", cwd=tmp_path)
    assert created.returncode == 0, created.stderr
    project = tmp_path / "demo"
    # 300 s is a hang guard on a loaded machine; the run itself takes seconds (2 epochs x 2 batches)
    result = run_fdl(
        "check", "--json", "--timeout", "300", "src/demo/train.py", cwd=project, timeout=400
    )
    report = json.loads(result.stdout)
    assert result.returncode == 0 and report["ok"], result.stdout
    assert report["findings"] == []
    smoke = report["smoke"]
    assert smoke["status"] == "passed"
    # the loop asked for 20 epochs: the budget shortened it to 2 (the DataLoader capped batches)
    assert smoke["shortened_loops"]
    assert sum(line.lstrip().startswith("epoch ") for line in smoke["output_tail"]) == 2
    assert report["call_sites"]["unverified"] == []
    # the script checkpointed its last epoch, into the smoke run's own directory: the
    # project's checkpoints and runs are left alone (fdl check lists nothing it changed)
    (said,) = [line for line in smoke["output_tail"] if line.startswith("FLODL_SMOKE: --")]
    scratch = Path(said.split(" redirected to ", 1)[1].split(", left there", 1)[0])
    assert saved_epoch(scratch / "checkpoints") == 1
    assert not (project / "checkpoints").exists() and not (project / "runs").exists()
    assert smoke["changed_files"] == []
    shutil.rmtree(scratch)
