"""``fdl <command>`` end to end, in a subprocess, as a user runs it."""

from __future__ import annotations

import json
import os
import pty
import shutil
import subprocess
import sys

import pytest

from tests.conftest import clean_env

MANIFEST = """
description: demo project
commands:
  hello:
    description: say hello
    run: echo hello
    append: --from-append
  args:
    description: print each argument in brackets
    run: "printf '[%s]' "
  fail:
    run: exit 7
  where:
    run: pwd; echo "$FDL_PROJECT_ROOT"
  bench:
    description: benchmarks
"""
BENCH = """
description: the bench child
entry: python3 -c "import sys; print('ENTRY', *sys.argv[1:])"
commands:
  quick:
    description: a quick run
    options: {epochs: 1, fast: true}
"""


@pytest.fixture
def proj(project):
    return project(
        {
            "fdl.yml": MANIFEST,
            "fdl.ci.yml": "commands:\n  hello:\n    run: echo ci-hello\n",
            "bench/fdl.yml": BENCH,
        }
    )


def test_run_command_output_and_append(run_fdl, proj):
    result = run_fdl("hello", cwd=proj)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "hello --from-append\n"


def test_child_exit_code_is_propagated(run_fdl, proj):
    assert run_fdl("fail", cwd=proj).returncode == 7


def test_arguments_after_separator_reach_the_script_untouched(run_fdl, proj):
    # -v, -q, --env and -h after `--` belong to the script (the Rust original stripped them).
    result = run_fdl("args", "--", "-v", "--env", "x", "-h", "a b", "-q", cwd=proj)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "[-v][--env][x][-h][a b][-q]"


def test_arguments_before_separator_are_refused(run_fdl, proj):
    result = run_fdl("args", "oops", cwd=proj)
    assert result.returncode == 2
    assert "error: command 'args' takes no arguments of its own (got: oops)" in result.stderr
    assert "fdl args -- oops" in result.stderr


def test_global_flags_before_the_separator_still_work(run_fdl, proj):
    result = run_fdl("hello", "--no-color", "-q", cwd=proj)
    assert result.returncode == 0
    assert result.stdout == "hello --from-append\n"


def test_no_append(run_fdl, proj):
    assert run_fdl("hello", "--no-append", cwd=proj).stdout == "hello\n"
    assert run_fdl("args", "--", "--no-append", cwd=proj).stdout == "[--no-append]"


def test_scripts_run_in_the_manifest_directory_from_anywhere_below(run_fdl, proj):
    deep = proj / "src" / "deeper"
    deep.mkdir(parents=True)
    result = run_fdl("where", cwd=deep)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [str(proj.resolve()), str(proj.resolve())]


@pytest.mark.parametrize(
    ("args", "env"),
    [
        (("--env", "ci", "hello"), {}),
        (("hello", "--env=ci"), {}),
        (("hello",), {"FDL_ENV": "ci"}),
        (("ci", "hello"), {}),
    ],
    ids=["flag", "flag-after", "FDL_ENV", "first-word"],
)
def test_environment_overlay_selection(run_fdl, proj, args, env):
    result = run_fdl(*args, cwd=proj, env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "ci-hello --from-append\n"


def test_flag_beats_fdl_env_and_missing_overlays_are_errors(run_fdl, proj):
    (proj / "fdl.other.yml").write_text("commands:\n  hello: {run: echo other}\n")
    assert (
        run_fdl("--env", "other", "hello", cwd=proj, env={"FDL_ENV": "ci"}).stdout
        == "other --from-append\n"
    )
    missing = run_fdl("--env", "prod", "hello", cwd=proj)
    assert missing.returncode == 2
    assert "--env 'prod': overlay not found (expected fdl.prod.yml" in missing.stderr
    from_env = run_fdl("hello", cwd=proj, env={"FDL_ENV": "prod"})
    assert from_env.returncode == 2 and "FDL_ENV 'prod'" in from_env.stderr


def test_a_word_that_is_both_command_and_overlay_is_ambiguous(run_fdl, proj):
    (proj / "fdl.hello.yml").write_text("{}\n")
    result = run_fdl("hello", "fail", cwd=proj)
    assert result.returncode == 2
    assert "ambiguous 'hello'" in result.stderr
    (proj / "fdl.init.yml").write_text("{}\n")
    assert run_fdl("--env", "init", "fail", cwd=proj).returncode == 7  # --env is explicit: fine


def test_path_and_preset_commands(run_fdl, proj):
    result = run_fdl("bench", "quick", "--epochs", "3", "[/x]", cwd=proj)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "ENTRY --epochs 1 --fast --epochs 3 [/x]\n"
    assert "fdl: python3 -c" in result.stderr and "[/x]" in result.stderr  # echoed verbatim


def test_help_lists_project_commands_and_environments(run_fdl, proj):
    for args in (["--help"], []):
        result = run_fdl(*args, cwd=proj)
        assert result.returncode == 0
        out = result.stdout
        assert "Project commands (fdl.yml)" in out
        assert "say hello" in out and "benchmarks" in out
        assert "Environments: ci" in out
        assert "diagnose" in out  # the built-ins are still listed


def test_command_help(run_fdl, proj):
    result = run_fdl("hello", "-h", cwd=proj)
    assert result.returncode == 0
    assert "echo hello --from-append [ARGS...]" in result.stdout
    child = run_fdl("bench", "--help", cwd=proj)
    assert "quick  a quick run" in child.stdout
    assert "Entry:" in child.stdout


def test_unknown_command_suggests_project_commands_too(run_fdl, proj):
    result = run_fdl("helo", cwd=proj)
    assert result.returncode == 2
    assert "did you mean 'fdl hello'?" in result.stderr


def test_malformed_manifest_error_names_file_line_and_key(run_fdl, project):
    root = project({"fdl.yml": "commands:\n  test:\n    run: pytest\n    dockr: dev\n"})
    result = run_fdl("test", cwd=root)
    assert result.returncode == 1
    assert (
        f"error: {root / 'fdl.yml'}:4: commands.test.dockr: unknown key — did you mean 'docker'?"
        in result.stderr
    )
    assert "Traceback" not in result.stderr
    # built-in commands keep working next to a broken manifest
    assert run_fdl("config", "--help", cwd=root).returncode == 0


def test_a_project_command_shadows_a_builtin_which_stays_reachable(run_fdl, project):
    root = project(
        {
            "fdl.yml": "commands:\n  check:\n    description: Type check (e.g. cargo check). "
            "Then more.\n    run: echo project-check\n  ok: {run: echo ok}\n"
        }
    )
    assert run_fdl("check", cwd=root).stdout == "project-check\n"
    assert run_fdl("ok", cwd=root).stdout == "ok\n"
    builtin = run_fdl("builtin", "check", "--help", cwd=root)
    assert (
        builtin.returncode == 0
        and "Usage: fdl check [OPTIONS] [script] [ARGS]..." in builtin.stdout
    )
    listing = run_fdl("--help", cwd=root).stdout
    assert "[shadowed here: 'fdl builtin check']" in listing
    flat = " ".join(listing.split())
    # the project's row keeps its whole description (never cut at "e.g.")
    assert "check [shadows the built-in 'check'] Type check (e.g. cargo check). Then more." in flat
    wrong = run_fdl("builtin", "chek", cwd=root)
    assert wrong.returncode == 2 and "did you mean 'fdl builtin check'?" in wrong.stderr


@pytest.mark.parametrize(
    "broken",
    [
        "  train:\n    run: python train.py\n    dockr: dev\n",  # loads as YAML, invalid
        "  train: {run: [python train.py\n",  # not even YAML
    ],
)
def test_a_broken_manifest_does_not_run_the_builtin_it_declares(run_fdl, project, broken):
    root = project({"fdl.yml": "commands:\n  check: {run: echo shadow}\n" + broken})
    result = run_fdl("check", cwd=root)
    assert result.returncode == 1, result.stderr
    assert result.stderr.startswith(f"error: {root / 'fdl.yml'}:"), result.stderr
    assert "'fdl builtin check' runs fdl's own check" in result.stderr
    assert "Missing argument" not in result.stderr  # the built-in check did not run
    assert run_fdl("builtin", "check", "--help", cwd=root).returncode == 0
    # a built-in the manifest does not declare keeps working
    assert run_fdl("config", "--help", cwd=root).returncode == 0


def test_builtin_is_a_reserved_command_name(run_fdl, project):
    root = project({"fdl.yml": "commands:\n  builtin: {run: echo mine}\n  ok: {run: echo ok}\n"})
    result = run_fdl("ok", cwd=root)
    assert result.returncode == 1
    assert "commands.builtin: 'builtin' is reserved" in result.stderr
    assert run_fdl("builtin", "config", "--help", cwd=root).returncode == 0  # still fdl's


def test_a_reserved_command_name_is_reported_where_commands_are_listed(run_fdl, project):
    root = project({"fdl.yml": "commands:\n  builtin: {run: echo mine}\n  ok: {run: echo ok}\n"})
    listed = run_fdl("--help", cwd=root)
    assert listed.returncode == 0
    assert listed.stderr.count("warning: project commands unavailable: ") == 1, listed.stderr
    assert "commands.builtin: 'builtin' is reserved" in listed.stderr
    assert "Project commands" not in listed.stdout  # none listed that would not run
    assert complete(root, "fdl o") == []


def test_outside_a_project_unknown_commands_stay_unknown(run_fdl, tmp_path):
    result = run_fdl("train", cwd=tmp_path)
    assert result.returncode == 2
    assert "unknown command 'train'" in result.stderr
    env_without_project = run_fdl("--env", "ci", "config", "show", cwd=tmp_path)
    assert env_without_project.returncode == 3
    assert "no fdl.yml found" in env_without_project.stderr


def test_example_is_used_as_is_when_not_on_a_terminal(run_fdl, project):
    root = project({"fdl.yml.example": "commands:\n  hi: {run: echo from-example}\n"})
    result = run_fdl("hi", cwd=root, input="")
    assert result.stdout == "from-example\n"
    assert not (root / "fdl.yml").exists()


def run_on_a_terminal(
    args: list[str], cwd, answer: bytes, timeout: float = 60, **env: str
) -> tuple[int, str]:
    """Run fdl with stdin/stdout/stderr on a pseudo-terminal, typing ``answer``; a child still
    running after ``timeout`` seconds (waiting for an answer nobody types) is killed."""
    import select
    import time

    leader, follower = pty.openpty()
    child = subprocess.Popen(
        [sys.executable, "-m", "fdl", *args], cwd=cwd, env=clean_env(**env), stdin=follower,
        stdout=follower, stderr=follower, close_fds=True,
    )  # fmt: skip
    os.close(follower)
    os.write(leader, answer)
    output = b""
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            child.kill()
            break
        if not select.select([leader], [], [], left)[0]:
            continue
        try:
            chunk = os.read(leader, 4096)
        except OSError:
            break
        if not chunk:
            break
        output += chunk
    os.close(leader)
    return child.wait(timeout=60), output.decode(errors="replace")


@pytest.mark.parametrize(("answer", "copied"), [(b"y\n", True), (b"n\n", False)])
def test_example_copy_is_offered_on_a_terminal(project, answer, copied):
    root = project({"fdl.yml.example": "commands:\n  hi: {run: echo from-example}\n"})
    code, output = run_on_a_terminal(["hi"], root, answer)
    assert code == 0, output
    assert "Copy it to create your local config?" in output
    assert "from-example" in output
    assert (root / "fdl.yml").exists() == copied


def test_a_declined_example_is_not_offered_again(project, tmp_path):
    root = project({"fdl.yml.example": "commands:\n  hi: {run: echo from-example}\n"})
    home = {"FLODL_HOME": str(tmp_path / "home")}
    code, output = run_on_a_terminal(["hi"], root, b"n\n", **home)
    assert code == 0 and "Copy it to create your local config?" in output, output
    assert "will not ask again" in output
    code, output = run_on_a_terminal(["hi"], root, b"", timeout=30, **home)  # nobody answers
    assert code == 0, output
    assert "Copy it" not in output and "from-example" in output
    assert not (root / "fdl.yml").exists()


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_the_copy_is_called_git_ignored_only_when_git_says_so(project, tmp_path):
    root = project({"fdl.yml.example": "commands:\n  hi: {run: echo from-example}\n"})
    home = {"FLODL_HOME": str(tmp_path / "home")}
    subprocess.run(["git", "init", "-q", str(root)], check=True, timeout=30)
    code, output = run_on_a_terminal(["hi"], root, b"y\n", **home)
    assert code == 0 and (root / "fdl.yml").exists(), output
    flat = " ".join(output.split())
    assert "it is not git-ignored: add it to .gitignore" in flat
    assert "; it is git-ignored" not in flat
    (root / "fdl.yml").unlink()
    (root / ".gitignore").write_text("fdl.yml\n")
    code, output = run_on_a_terminal(["hi"], root, b"y\n", **home)
    assert code == 0 and "(edit it to customise; it is git-ignored)" in " ".join(output.split())


def test_config_show_tags_every_value_with_its_file_and_line(run_fdl, proj):
    result = run_fdl("config", "show", "ci", cwd=proj)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("description: demo project") and lines[0].endswith("# fdl.yml:1")
    run_line = next(line for line in lines if "ci-hello" in line)
    assert run_line.strip().startswith("run: echo ci-hello") and run_line.endswith("# fdl.ci.yml:3")
    append_line = next(line for line in lines if "append:" in line)
    assert append_line.endswith("# fdl.yml:6")
    columns = {line.index("#") for line in lines if "# fdl" in line}
    assert len(columns) == 1  # aligned
    assert "  hello:" in lines  # a mapping header carries no tag


def test_config_show_json_and_env_from_flag(run_fdl, proj):
    result = run_fdl("--env", "ci", "config", "show", "--json", cwd=proj)
    data = json.loads(result.stdout)
    assert data["env"] == "ci"
    assert data["config"]["commands"]["hello"]["run"] == "echo ci-hello"
    assert data["sources"]["commands.hello.run"] == "fdl.ci.yml:3"
    assert data["sources"]["commands.hello.append"] == "fdl.yml:6"
    assert [p.rsplit("/", 1)[1] for p in data["files"]] == ["fdl.yml", "fdl.ci.yml"]


def test_config_show_quotes_ambiguous_strings(run_fdl, project):
    root = project({"fdl.yml": "description: 'true'\ncommands:\n  t: {run: 'echo: 1'}\n"})
    out = run_fdl("config", "show", cwd=root).stdout
    assert "description: 'true'" in out
    assert "run: 'echo: 1'" in out


def test_completion_offers_project_commands(proj):
    env = clean_env(_FDL_COMPLETE="complete_bash", COMP_WORDS="fdl he", COMP_CWORD="1")
    result = subprocess.run(
        [sys.executable, "-m", "fdl"],
        cwd=proj,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert "hello" in result.stdout.split()


@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_overlay_word_then_help_shows_the_projects_help_with_it(run_fdl, proj, flag):
    result = run_fdl("ci", flag, cwd=proj)
    assert result.returncode == 0, result.stderr
    assert "Project commands (fdl.yml)" in result.stdout
    assert "Environments: ci (active)" in result.stdout


def test_overlay_word_then_a_builtin_runs_the_builtin_with_it(run_fdl, proj):
    result = run_fdl("ci", "config", "show", cwd=proj)
    assert result.returncode == 0, result.stderr
    line = next(line for line in result.stdout.splitlines() if "ci-hello" in line)
    assert line.strip().startswith("run: echo ci-hello") and line.endswith("# fdl.ci.yml:3")
    assert run_fdl("ci", "hello", cwd=proj).stdout == "ci-hello --from-append\n"  # still a task


def test_an_empty_run_script_is_a_manifest_error_not_a_crash(run_fdl, project):
    root = project({"fdl.yml": 'commands:\n  ok: {run: echo ok}\n  blank:\n    run: "   "\n'})
    error = f"{root / 'fdl.yml'}:4: commands.blank.run: is empty"
    listed = run_fdl("--help", cwd=root)
    assert listed.returncode == 0 and "Traceback" not in listed.stderr
    assert f"warning: project commands unavailable: {error}" in listed.stderr
    result = run_fdl("blank", cwd=root)
    assert result.returncode == 1 and result.stderr.startswith(f"error: {error}")


@pytest.mark.parametrize("script", ["FOO=1", "FOO=1 BAR='a b'"])
def test_a_script_of_assignments_only_runs_as_sh_would(run_fdl, project, script):
    root = project({"fdl.yml": f'commands:\n  set:\n    run: "{script}"\n'})
    result = run_fdl("set", cwd=root)
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")


@pytest.mark.parametrize("word", ["on", "no"])
def test_a_key_yaml_reads_as_a_boolean_is_named_with_the_fix(run_fdl, project, word):
    root = project({"fdl.yml": f"commands:\n  ok: {{run: echo ok}}\n  {word}:\n    run: x\n"})
    result = run_fdl("ok", cwd=root)
    assert result.returncode == 1
    assert result.stderr == (
        f"error: {root / 'fdl.yml'}:3: commands.{word}: YAML reads the key '{word}' as the "
        f'boolean {str(word == "on").lower()} — quote it: "{word}":\n'
    )


def test_malformed_manifest_is_reported_once(run_fdl, project):
    root = project({"fdl.yml": "commands:\n  test:\n    run: pytest\n    dockr: dev\n"})
    result = run_fdl("test", cwd=root)
    assert result.returncode == 1
    assert result.stderr.count("commands.test.dockr: unknown key") == 1, result.stderr
    assert "warning" not in result.stderr
    listed = run_fdl("--help", cwd=root)  # listing commands: one warning, no error
    assert listed.returncode == 0
    assert listed.stderr.count("project commands unavailable") == 1, listed.stderr


def complete(cwd, words: str) -> list[str]:
    cword = str(len(words.split()) - (0 if words.endswith(" ") else 1))
    env = clean_env(_FDL_COMPLETE="complete_bash", COMP_WORDS=words, COMP_CWORD=cword)
    result = subprocess.run(
        [sys.executable, "-m", "fdl"], cwd=cwd, env=env, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
    return result.stdout.split()


def test_completion_descends_into_child_commands_and_presets(proj):
    (proj / "bench" / "fdl.yml").write_text(
        BENCH + "  quiet:\n    options: {verbose: false}\n  full:\n    options: {epochs: 90}\n"
    )
    assert complete(proj, "fdl bench q") == ["quick", "quiet"]
    assert complete(proj, "fdl bench ") == ["quick", "quiet", "full"]
    assert complete(proj, "fdl ci be") == ["bench"]  # after an overlay word
    assert complete(proj, "fdl ci bench f") == ["full"]
    assert complete(proj, "fdl hello ") == []  # a run script's arguments are its own
    assert complete(proj, "fdl bench quick ") == []
