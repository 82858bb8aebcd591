"""The original's manifest keys: schema:, ddp:/training:/output:, compile:; typed validation;
--fdl-schema probing and its cache; fdl schema list|clear|refresh; completion of typed options."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import clean_env
from tests.tasks.test_runner_cli import complete

# A manifest written for this project exercising every key the original's parser knows.
ROOT = """\
description: every key
x-defaults: &defaults {docker: dev}
commands:
  train:
    description: Train (typed options before '--')
    run: python3 {log} train
    schema:
      strict: true
      options:
        epochs: {type: int, short: n, description: Epoch count, default: 10}
        model: {type: string, choices: [mlp, cnn], env: MODEL}
        lr: {type: float}
        fast: {type: bool}
        tag: {type: "list[string]"}
  bench:
    path: ./bench/
  inside:
    <<: *defaults
    run: echo in
"""
BENCH = """\
description: benchmarks
entry: python3 {log} entry
arg-name: suite
compile: false
schema:
  options:
    model: {type: string, short: m, choices: [mlp, resnet, all], default: all}
    epochs: {type: int}
  args:
    - {name: run-id, type: string, required: false}
ddp: {mode: cpu-sync, anchor: 3, speed_hint: {slow_rank: 1, ratio: 0.5}, partition_ratios: [0.6, 0.4], timeline: true, max_grad_norm: 1.0}
training: {epochs: 5, lr: 0.001, seed: 42, batches_per_epoch: 100}
output: {dir: runs/, monitor: 8080, timeline: true}
commands:
  quick:
    description: one epoch
    training: {epochs: 1}
    output: {dir: quick/}
    options: {model: mlp, tags: [a, b], validate: true, skip: false, batch_size: 32}
  bad:
    options: {model: lenet}
"""
LOGGER = """\
import json, os, sys
if "--fdl-schema" in sys.argv:
    sys.exit("unrecognized arguments: --fdl-schema")  # as an argparse script without the helper
with open(os.environ["ARGV_LOG"], "a") as out:
    out.write(json.dumps(sys.argv[1:]) + "\\n")
"""


@pytest.fixture
def proj(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    (root / "bench").mkdir(parents=True)
    logger = tmp_path / "log.py"
    logger.write_text(LOGGER)
    (root / "fdl.yml").write_text(ROOT.replace("{log}", str(logger)))
    (root / "bench" / "fdl.yml").write_text(BENCH.replace("{log}", str(logger)))
    return root


def fdl(cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fdl", *args],
        cwd=cwd,
        env=clean_env(ARGV_LOG=str(cwd.parent / "argv.jsonl"), **env),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def logged(proj: Path) -> list[list[str]]:
    path = proj.parent / "argv.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_training_output_ddp_become_flags_as_the_original(proj):
    result = fdl(proj, "bench", "quick", "--epochs", "3")
    assert result.returncode == 0, result.stderr
    assert logged(proj) == [
        [
            "entry",
            # ddp, in the original's order
            "--mode", "cpu-sync", "--anchor", "3", "--max-grad-norm", "1",
            "--speed-hint", "1:0.5", "--partition-ratios", "0.6,0.4", "--timeline",
            # training (the preset's epochs over the defaults), then output
            "--epochs", "1", "--batches", "100", "--lr", "0.001", "--seed", "42",
            "--output", "quick/", "--monitor", "8080",
            # options sorted by name; a list is one JSON string; false is dropped
            "--batch-size", "32", "--model", "mlp", "--tags", '["a","b"]', "--validate",
            # the user's arguments last
            "--epochs", "3",
        ]
    ]  # fmt: skip


def test_no_preset_passes_the_defaults(proj):
    assert fdl(proj, "bench", "run-7").returncode == 0
    flags = logged(proj)[0]
    assert (
        flags[-1] == "run-7" and "--epochs" in flags and flags[flags.index("--epochs") + 1] == "5"
    )


def test_wrong_values_are_usage_errors_naming_option_and_allowed_values(proj):
    bad_choice = fdl(proj, "bench", "--model", "lenet")
    assert bad_choice.returncode == 2
    assert "invalid value 'lenet' for --model — allowed: mlp, resnet, all" in bad_choice.stderr
    bad_short = fdl(proj, "bench", "-m", "x")
    assert bad_short.returncode == 2 and "for --model" in bad_short.stderr
    bad_int = fdl(proj, "bench", "--epochs=many")
    assert bad_int.returncode == 2 and "'many' for --epochs: expected an integer" in bad_int.stderr
    bad_preset = fdl(proj, "bench", "bad")
    assert bad_preset.returncode == 2
    assert "preset 'bad' sets option 'model' to 'lenet'" in bad_preset.stderr
    assert "allowed: mlp, resnet, all" in bad_preset.stderr
    # non-strict schema: unknown flags are the program's business
    assert fdl(proj, "bench", "--extra", "1").returncode == 0
    assert logged(proj) == [[*logged(proj)[0][:-3], "--extra", "1"]] or logged(proj)
    # nothing ran for the refused command lines
    assert len(logged(proj)) == 1


def test_run_command_with_a_schema_takes_typed_options(proj):
    ok = fdl(proj, "train", "-n", "3", "--fast", "--tag", "a", "--tag", "b", "--", "--raw")
    assert ok.returncode == 0, ok.stderr
    assert logged(proj) == [["train", "-n", "3", "--fast", "--tag", "a", "--tag", "b", "--raw"]]
    strict = fdl(proj, "train", "--epoch", "3")
    assert strict.returncode == 2
    assert "unknown option '--epoch' — did you mean '--epochs'?" in strict.stderr
    assert fdl(proj, "train", "--lr", "fast").returncode == 2
    assert fdl(proj, "train", "--fast=maybe").returncode == 2
    from_env = fdl(proj, "train", MODEL="cnn")
    assert from_env.returncode == 0
    assert logged(proj)[-1] == ["train", "--model", "cnn"]  # env fallback passed explicitly
    bad_env = fdl(proj, "train", MODEL="rnn")
    assert bad_env.returncode == 2 and "--model (from $MODEL)" in bad_env.stderr


def test_help_shows_typed_options_defaults_and_effective_config(proj):
    train = fdl(proj, "train", "--help").stdout
    assert "-n, --epochs <INT>" in train and "Epoch count (default: 10)" in train
    assert "--model <STRING>" in train and "[mlp|cnn]" in train and "[env: MODEL]" in train
    assert "--tag <STRING>..." in train and "unknown options are errors" in train
    bench = fdl(proj, "bench", "-h").stdout
    assert "[<run-id>]" in bench and "-m, --model <STRING>" in bench
    assert "training.epochs: 5" in bench and "ddp.mode: cpu-sync" in bench
    assert "Usage: fdl bench [suite] [ARGS...]" in bench  # arg-name
    quick = fdl(proj, "bench", "quick", "-h").stdout
    assert "Effective config:" in quick and "training.epochs: 1" in quick
    assert "output.dir: quick/" in quick


def test_completion_offers_typed_options_and_their_choices(proj):
    assert {"--model", "--epochs"} <= set(complete(proj, "fdl bench -"))
    assert complete(proj, "fdl bench --model ") == ["mlp", "resnet", "all"]
    assert complete(proj, "fdl train --model ") == ["mlp", "cnn"]
    assert "--fast" in complete(proj, "fdl train --")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("schema: {options: {e: {type: integer}}}", "unknown type 'integer'"),
        ("schema: {options: {help: {type: bool}}}", "--help shadows a reserved fdl flag"),
        ("schema: {options: {a: {type: int, short: h}}}", "-h shadows a reserved fdl flag"),
        ("schema: {options: {a: {type: int, short: x}, b: {type: int, short: x}}}", "both use -x"),
        ("schema: {args: [{name: a, type: string, variadic: true}, {name: b, type: int}]}", "last"),
        ("schema: {args: [{name: a, type: int, required: false}, {name: b, type: int}]}", "follow"),
        ("training: {epochs: -1}", "training.epochs: must be a whole number"),
        ("training: {epoch: 1}", "did you mean 'epochs'"),
        ("ddp: {speed_hint: 3}", "slow_rank"),
        ("output: {timeline: maybe}", "must be true or false"),
        ("compile: yes please", "compile: must be true or false"),
    ],
)
def test_bad_keys_are_manifest_errors(proj, text, message):
    (proj / "bench" / "fdl.yml").write_text("entry: 'true'\n" + text + "\n")
    result = fdl(proj, "bench")
    assert result.returncode == 1
    assert message in result.stderr, result.stderr
    assert "bench/fdl.yml:2" in result.stderr


# --- --fdl-schema probing -----------------------------------------------------------------------

PROBED = """\
import json, os, sys
if "--fdl-schema" in sys.argv:
    with open(os.environ["PROBE_LOG"], "a") as out:
        out.write("probed\\n")
    print("noise before the JSON")
    print(json.dumps({"options": {"size": {"type": "int", "choices": [1, 2]}}}))
    sys.exit(0)
print("ran", *sys.argv[1:])
"""


@pytest.fixture
def probed(tmp_path: Path) -> Path:
    root = tmp_path / "p"
    (root / "tool").mkdir(parents=True)
    (root / "fdl.yml").write_text(
        "commands:\n  tool:\n  direct: {run: python3 direct.py, schema: probe}\n"
    )
    (root / "tool" / "fdl.yml").write_text("entry: python3 main.py\n")
    (root / "tool" / "main.py").write_text(PROBED)
    (root / "direct.py").write_text(PROBED)
    return root


def probes(root: Path) -> int:
    log = root.parent / "probes.txt"
    return len(log.read_text().splitlines()) if log.exists() else 0


def test_entry_schema_is_probed_once_cached_and_refreshed_on_change(probed):
    env = {"PROBE_LOG": str(probed.parent / "probes.txt")}
    first = fdl(probed, "tool", "--size", "2", **env)
    assert first.returncode == 0 and first.stdout == "ran --size 2\n", first.stderr
    assert probes(probed) == 1
    cache = probed / "tool" / ".fdl" / "schema-cache" / "tool.json"
    assert json.loads(cache.read_text())["schema"]["options"]["size"]["type"] == "int"
    bad = fdl(probed, "tool", "--size", "3", **env)
    assert bad.returncode == 2 and "allowed: 1, 2" in bad.stderr
    assert probes(probed) == 1  # cached
    help_text = fdl(probed, "tool", "-h", **env).stdout
    assert "--size <INT>" in help_text and probes(probed) == 1
    # the entry's script changes: asked again
    script = probed / "tool" / "main.py"
    script.write_text(PROBED.replace("[1, 2]", "[1, 2, 3]"))
    os.utime(script, ns=(time.time_ns() + 10**9, time.time_ns() + 10**9))
    assert fdl(probed, "tool", "--size", "3", **env).returncode == 0
    assert probes(probed) == 2
    assert fdl(probed, "tool", "--refresh-schema", **env).returncode == 0
    assert probes(probed) == 3


def test_run_command_marked_probe_and_schema_commands(probed):
    env = {"PROBE_LOG": str(probed.parent / "probes.txt")}
    assert fdl(probed, "direct", "--size", "9", **env).returncode == 2
    listing = fdl(probed, "schema", "list", "--json", **env)
    assert listing.returncode == 0, listing.stderr
    rows = json.loads(listing.stdout)
    assert {(r["name"], r["status"]) for r in rows} == {("direct", "fresh")}
    refreshed = fdl(probed, "schema", "refresh", **env)
    assert refreshed.returncode == 0, refreshed.stderr  # both answered
    assert {r["name"] for r in json.loads(fdl(probed, "schema", "list", "--json").stdout)} == {
        "direct",
        "tool",
    }
    assert fdl(probed, "schema", "clear", "tool", **env).returncode == 0
    assert [r["name"] for r in json.loads(fdl(probed, "schema", "list", "--json").stdout)] == [
        "direct"
    ]
    assert fdl(probed, "schema", "clear", "nope").returncode == 2
    assert fdl(probed, "schema", "clear").returncode == 0
    assert json.loads(fdl(probed, "schema", "list", "--json").stdout) == []


def test_a_program_that_does_not_answer_is_not_asked_on_every_run(tmp_path):
    root = tmp_path / "q"
    (root / "tool").mkdir(parents=True)
    (root / "fdl.yml").write_text("commands:\n  tool:\n")
    counter = tmp_path / "count.txt"
    (root / "tool" / "fdl.yml").write_text(
        f"entry: sh -c 'echo x >> {counter}; echo ran' entry\n"
        "schema: {options: {inline: {type: bool}}}\n"
    )
    for _ in range(3):
        result = fdl(root, "tool")
        assert result.returncode == 0 and result.stdout == "ran\n"
    # one probe (printed no JSON: the inline schema is used), then three runs
    assert len(counter.read_text().splitlines()) == 4
    assert "--inline" in fdl(root, "tool", "-h").stdout


def test_cargo_entries_are_probed_only_with_compile(tmp_path):
    root = tmp_path / "c"
    (root / "tool").mkdir(parents=True)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    cargo = bin_dir / "cargo"
    cargo.write_text(f'#!/bin/sh\necho "$@" >> {tmp_path / "cargo.log"}\n')
    cargo.chmod(cargo.stat().st_mode | stat.S_IEXEC)
    (root / "fdl.yml").write_text("commands:\n  tool:\n")
    (root / "tool" / "fdl.yml").write_text("entry: cargo run --\n")
    path = f"{bin_dir}{os.pathsep}{os.environ['PATH']}"
    assert fdl(root, "tool", "-h", PATH=path).returncode == 0
    assert not (tmp_path / "cargo.log").exists()
    (root / "tool" / "fdl.yml").write_text("entry: cargo run --\ncompile: true\n")
    assert fdl(root, "tool", "-h", PATH=path).returncode == 0
    assert not (tmp_path / "cargo.log").exists()  # help alone never runs the program
    assert fdl(root, "tool", "--refresh-schema", "-h", PATH=path).returncode == 0
    assert (tmp_path / "cargo.log").read_text() == "run -- --fdl-schema\n"


SLOW_JOB = """\
import sys, time
with open("ran.log", "a") as out:
    out.write(repr(sys.argv) + "\\n")
time.sleep(60)
"""


def test_help_never_runs_the_program_and_says_how_to_list_its_options(tmp_path):
    root = tmp_path / "h"
    (root / "tool").mkdir(parents=True)
    (root / "job.py").write_text(SLOW_JOB)
    (root / "tool" / "main.py").write_text(SLOW_JOB)
    (root / "fdl.yml").write_text(
        "commands:\n  job: {run: python3 job.py, schema: probe}\n  tool:\n"
    )
    (root / "tool" / "fdl.yml").write_text(
        "entry: python3 main.py\ncommands:\n  quick: {options: {a: 1}}\n"
    )
    started = time.monotonic()
    for words, name in ((["job"], "job"), (["tool"], "tool"), (["tool", "quick"], "tool")):
        shown = subprocess.run(
            [sys.executable, "-m", "fdl", *words, "-h"], cwd=root, env=clean_env(),
            capture_output=True, text=True, timeout=30, check=False,
        )  # fmt: skip
        assert shown.returncode == 0, shown.stderr
        text = " ".join(shown.stdout.split())
        assert "it has not been asked yet, and help never runs it" in text, shown.stdout
        assert f"'fdl {' '.join(words)} --refresh-schema -h'" in text
        assert f"'fdl schema refresh {name}'" in text
    assert time.monotonic() - started < 30
    assert not (root / "ran.log").exists() and not (root / "tool" / "ran.log").exists()
