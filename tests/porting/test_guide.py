"""The porting guide and the corpus ports name only flodl APIs that exist, and every guide
snippet runs against this build."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from fdl.porting.static import check_source
from tests.conftest import clean_env
from tests.porting.support import (
    CORPUS,
    GUIDE,
    findings_for,
    live_api,
    page_as_script,
    python_blocks,
)


def test_guide_names_only_existing_apis():
    findings = findings_for(page_as_script(GUIDE), "porting_skill/guide.md", live_api())
    problems = [f.render() for f in findings]
    assert not problems, "the guide uses flodl APIs that do not exist:\n" + "\n".join(problems)


@pytest.mark.parametrize("case", sorted(p.name for p in CORPUS.iterdir() if p.is_dir()))
def test_corpus_ports_name_only_existing_apis(case):
    port = CORPUS / case / "port.py"
    problems = [f.render() for f in findings_for(port.read_text(), str(port), live_api())]
    assert not problems, "\n".join(problems)


def test_an_invented_name_is_reported():
    # The guards above can fail: a name that does not exist is a finding.
    findings, _ = check_source("import flodl as fl\nfl.TotallyInvented()\n", "x.py", live_api())
    assert [f.render() for f in findings] == [
        "x.py:2:4: error[unknown-name]: `fl.TotallyInvented` does not exist: "
        "fl has no name 'TotallyInvented'"
    ]


def test_guide_snippets_run_in_order(tmp_path, monkeypatch):
    """Every block executes, in page order, in one namespace (``torchrun`` blocks are whole
    scripts: the test below launches them)."""
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": "__guide__"}
    executed = 0
    for first, info, body in python_blocks(GUIDE):
        assert "no-run" not in info, f"guide.md:{first}: every block runs; say why if one cannot"
        if "torchrun" in info:
            continue
        exec(compile(body, f"guide.md:{first}", "exec"), namespace)
        executed += 1
    assert executed >= 10


def torchrun_blocks() -> list[tuple[int, str]]:
    return [(first, body) for first, info, body in python_blocks(GUIDE) if "torchrun" in info]


def test_the_guide_has_a_torchrun_script():
    assert len(torchrun_blocks()) == 1


@pytest.mark.slow
@pytest.mark.multiproc
@pytest.mark.parametrize(
    ("first", "body"), torchrun_blocks(), ids=[f"line{first}" for first, _ in torchrun_blocks()]
)
def test_torchrun_script_trains_on_two_cpu_ranks(tmp_path, first, body):
    script = tmp_path / "train_ddp.py"
    script.write_text(body)
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    result = subprocess.run(
        [*launcher, "--nproc-per-node", "2", str(script)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=clean_env(OMP_NUM_THREADS="1"),  # one thread per rank: 2 ranks on 2 shared cores
        timeout=400,  # a hang guard, not a speed requirement
        check=False,
    )
    assert result.returncode == 0, f"guide.md:{first}\n{result.stderr[-3000:]}"
    ranks = re.findall(r"rank (\d) of (\d): trained", result.stdout)
    assert sorted(ranks) == [("0", "2"), ("1", "2")], result.stdout


@pytest.mark.parametrize(
    "needle",
    [
        # per-class scheduler table
        "`StepLR(opt, step_size, gamma)`",
        "`CosineAnnealingLR(opt, T_max, eta_min)`",
        "`OneCycleLR(opt, max_lr, total_steps, pct_start)`",
        "`ReduceLROnPlateau(opt, patience=, factor=, min_lr=)`",
        "`ExponentialLR(opt, gamma)`",
        # DDP translation table
        "`sampler.set_epoch(epoch)`",
        "`dist.all_reduce(loss)`",
        "`dist.barrier()`",
        "`torchrun --nproc-per-node N script.py`",
        "Resuming from a snapshot",
        # the other gaps
        "### Devices",
        "### Custom datasets",
        "### Graph or manual loop?",
        "### Common errors",
        "### Tuple outputs",
        "### A forward returning several values",
        "### Optional forward arguments",
        "### Per-time-step cells",
        "### Learned tensors",
        "### Per-layer initialisation inside a chain",
        "### Reaching a layer's parameters",
        "### LBFGS and other closures",
        "### `torch.save(model)` and pickling",
        "### Loops with no fixed epoch count",
        "### Defaults that differ from the torch idiom",
        "fdl check my_model_flodl.py -- ",
        "a parity test next to the port",
    ],
)
def test_the_guide_covers_each_gap(needle):
    assert needle in GUIDE.read_text(encoding="utf-8")


def test_the_instructions_say_to_pass_arguments_and_write_a_parity_test():
    text = (GUIDE.parent / "instructions.md").read_text(encoding="utf-8")
    assert "fdl check <port.py> -- <the script's arguments>" in text
    assert "write a parity test against the original model" in text
    for adapter in (GUIDE.parent / "adapters").iterdir():
        body = adapter.read_text(encoding="utf-8")
        assert "-- <the script's arguments>" in body and "parity test" in body, adapter.name
