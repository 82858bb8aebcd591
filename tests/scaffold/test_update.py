"""``fdl init --update``: newer templates come in, your edits stay."""

from __future__ import annotations

from pathlib import Path

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
