"""`fdl skill list | install`: the right files for each assistant, valid, idempotent, and never
touching the user's own content."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fdl.porting.frontmatter import split_frontmatter, validate_mdc, validate_skill_md

REPO = Path(__file__).resolve().parents[2]


def listing(result) -> dict[str, str]:
    """`state path` lines of `fdl skill install` -> {path: state}."""
    return {line.split()[1]: line.split()[0] for line in result.stdout.splitlines()}


def test_claude_install_writes_a_self_contained_skill(run_fdl, tmp_path):
    (tmp_path / ".claude").mkdir()
    result = run_fdl("skill", "install", "--dir", str(tmp_path))
    assert result.returncode == 0, result.stderr
    skill_dir = tmp_path / ".claude/skills/port"
    assert listing(result) == {
        str(skill_dir / "SKILL.md"): "created",
        str(skill_dir / "guide.md"): "created",
        str(skill_dir / "instructions.md"): "created",
    }
    text = (skill_dir / "SKILL.md").read_text()
    assert validate_skill_md(text, "port") == []
    data, body, _ = split_frontmatter(text)
    assert data["name"] == "port" and len(data["description"]) <= 1024
    assert data["allowed-tools"].startswith("Bash(fdl:*)")
    # The adapter points at the installed copies (the original pointed at a repo checkout).
    assert (
        "`.claude/skills/port/instructions.md`" in body and "`.claude/skills/port/guide.md`" in body
    )
    assert (skill_dir / "guide.md").read_text() == (REPO / "porting_skill/guide.md").read_text()
    assert "Try: /port my_model.py" in result.stderr
    # the installed skill says to check with the script's arguments and to prove parity
    assert "-- <the script's arguments>" in body and "parity test" in body
    instructions = (skill_dir / "instructions.md").read_text()
    assert "write a parity test against the original model" in instructions


def test_reinstall_is_idempotent_and_updates_stale_files(run_fdl, tmp_path):
    run_fdl("skill", "install", "--tool", "claude", "--dir", str(tmp_path))
    again = run_fdl("skill", "install", "--tool", "claude", "--dir", str(tmp_path))
    assert set(listing(again).values()) == {"unchanged"}
    guide = tmp_path / ".claude/skills/port/guide.md"
    guide.write_text("old guide\n")
    third = run_fdl("skill", "install", "--tool", "claude", "--dir", str(tmp_path))
    assert listing(third)[str(guide)] == "updated"
    assert guide.read_text() == (REPO / "porting_skill/guide.md").read_text()


def test_cursor_rule_has_valid_frontmatter(run_fdl, tmp_path):
    result = run_fdl("skill", "install", "--tool", "cursor", "--dir", str(tmp_path))
    assert result.returncode == 0, result.stderr
    rule = (tmp_path / ".cursor/rules/flodl-port.mdc").read_text()
    assert validate_mdc(rule) == []
    assert "`.flodl/skills/port/instructions.md`" in rule
    assert (tmp_path / ".flodl/skills/port/guide.md").is_file()


@pytest.mark.parametrize(
    ("tool", "target"), [("codex", "AGENTS.md"), ("copilot", ".github/copilot-instructions.md")]
)
def test_shared_files_change_only_between_markers(run_fdl, tmp_path, tool, target):
    path = tmp_path / target
    path.parent.mkdir(parents=True, exist_ok=True)
    mine = "# Project rules\n\nUse tabs. Never push to main.\n"
    path.write_text(mine)
    run_fdl("skill", "install", "--tool", tool, "--dir", str(tmp_path))
    first = path.read_text()
    assert first.startswith(mine)
    assert first.count("<!-- flodl:port:begin") == 1 and first.count("<!-- flodl:port:end -->") == 1
    # The user edits around the section; a re-install keeps their edits and one section.
    edited = first.replace("Use tabs.", "Use spaces.") + "\n## Later notes\n\nKeep me.\n"
    path.write_text(edited)
    result = run_fdl("skill", "install", "--tool", tool, "--dir", str(tmp_path))
    assert listing(result)[str(path)] == "unchanged"
    assert path.read_text() == edited
    # A stale section is replaced in place.
    path.write_text(edited.replace("Porting PyTorch code to flodl", "Old title"))
    run_fdl("skill", "install", "--tool", tool, "--dir", str(tmp_path))
    assert path.read_text() == edited


def test_damaged_markers_are_an_error_and_nothing_is_written(run_fdl, tmp_path):
    agents = tmp_path / "AGENTS.md"
    agents.write_text("# Mine\n<!-- flodl:port:begin (managed) -->\nhalf a section\n")
    result = run_fdl("skill", "install", "--tool", "codex", "--dir", str(tmp_path))
    assert result.returncode == 1
    assert "flodl section markers are damaged (1 begin, 0 end marker(s))" in result.stderr
    assert agents.read_text() == "# Mine\n<!-- flodl:port:begin (managed) -->\nhalf a section\n"


def test_detection_and_default(run_fdl, tmp_path):
    result = run_fdl("skill", "install", "--dir", str(tmp_path))
    assert "No assistant configuration found; installing for Claude Code" in result.stderr
    assert (tmp_path / ".claude/skills/port/SKILL.md").is_file()
    (tmp_path / "AGENTS.md").write_text("# agents\n")
    (tmp_path / ".cursor").mkdir()
    status = json.loads(run_fdl("skill", "list", "--json", "--dir", str(tmp_path)).stdout)
    tools = {t["tool"]: t for t in status["tools"]}
    assert [s["name"] for s in status["skills"]] == ["port"]
    assert tools["claude"]["detected"] and tools["claude"]["skills"]["port"] == "installed"
    assert tools["codex"]["detected"] and tools["codex"]["skills"]["port"] == "not installed"
    assert tools["cursor"]["detected"] and not tools["copilot"]["detected"]
    text = run_fdl("skill", "list", "--dir", str(tmp_path))
    assert "port         Port PyTorch scripts to flodl" in text.stdout
    assert "Run: fdl skill install --tool cursor --tool codex" in text.stderr
    (tmp_path / ".claude/skills/port/guide.md").write_text("edited\n")
    status = json.loads(run_fdl("skill", "list", "--json", "--dir", str(tmp_path)).stdout)
    assert {t["tool"]: t for t in status["tools"]}["claude"]["skills"]["port"] == "outdated"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--tool", "vim"],
            "error: unknown tool 'vim' — supported: claude, cursor, codex, copilot",
        ),
        (["--skill", "train"], "error: unknown skill 'train' — available: port"),
    ],
)
def test_bad_choices_are_usage_errors(run_fdl, tmp_path, args, message):
    result = run_fdl("skill", "install", *args, "--dir", str(tmp_path))
    assert result.returncode == 2 and message in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_missing_project_directory(run_fdl, tmp_path):
    result = run_fdl("skill", "install", "--tool", "claude", "--dir", str(tmp_path / "nope"))
    assert result.returncode == 2 and "no such directory" in result.stderr


@pytest.mark.parametrize("command", [["install"], ["install", "--tool", "codex"], ["list"]])
def test_a_file_as_project_directory_fails_before_anything_is_printed(run_fdl, tmp_path, command):
    afile = tmp_path / "notes.md"
    afile.write_text("x")
    result = run_fdl("skill", *command, "--dir", str(afile))
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr == (
        f"error: --dir {afile}: not a directory — pass the project directory, not a file in it\n"
    )


def test_a_directory_where_a_shared_file_goes_is_an_error(run_fdl, tmp_path):
    (tmp_path / "AGENTS.md").mkdir()
    result = run_fdl("skill", "install", "--tool", "codex", "--dir", str(tmp_path))
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert f"error: {tmp_path / 'AGENTS.md'} exists but is not a file" in result.stderr


def test_a_shared_file_that_is_not_utf8_is_an_error_and_kept(run_fdl, tmp_path):
    agents = tmp_path / "AGENTS.md"
    agents.write_bytes(b"# R\xe8gles\n")
    result = run_fdl("skill", "install", "--tool", "codex", "--dir", str(tmp_path))
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "is not UTF-8 text — convert it to UTF-8" in result.stderr
    assert agents.read_bytes() == b"# R\xe8gles\n"


def test_an_unwritable_project_is_an_error(monkeypatch, tmp_path, capsys):
    # Simulated: the suite may run as root, for whom no directory is unwritable.
    from fdl.apiref import atomic
    from fdl.main import main

    def refuse(*args, dir=None, **kwargs):
        raise PermissionError(13, "Permission denied", str(dir))

    monkeypatch.setattr(atomic.tempfile, "mkstemp", refuse)
    code = main(["skill", "install", "--tool", "claude", "--dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 1 and "Traceback" not in err
    assert "error: cannot write " in err and "Permission denied — check the directory" in err


def test_shared_files_keep_their_mode_and_crlf_line_endings(run_fdl, tmp_path):
    agents = tmp_path / "AGENTS.md"
    agents.write_bytes(b"# Project rules\r\n\r\nUse tabs.\r\n")
    agents.chmod(0o644)
    run_fdl("skill", "install", "--tool", "codex", "--dir", str(tmp_path))
    data = agents.read_bytes()
    assert data.startswith(b"# Project rules\r\n\r\nUse tabs.\r\n")
    assert b"<!-- flodl:port:begin" in data
    assert data.count(b"\n") == data.count(b"\r\n")  # one style: the user's
    assert agents.stat().st_mode & 0o777 == 0o644
    # a re-install sees no change (the comparison ignores line endings)
    again = run_fdl("skill", "install", "--tool", "codex", "--dir", str(tmp_path))
    assert f"unchanged {agents}" in again.stdout
    assert agents.read_bytes() == data


# -- the validators themselves ------------------------------------------------------------
GOOD_SKILL = "---\nname: port\ndescription: Port things.\n---\nbody\n"


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (GOOD_SKILL.replace("name: port", "name: Port"), "name must be 1-64 characters"),
        (GOOD_SKILL.replace("name: port", "name: port-"), "name must be 1-64 characters"),
        (GOOD_SKILL.replace("name: port", "name: a--b"), "name must be 1-64 characters"),
        (GOOD_SKILL.replace("name: port", "name: other"), "must equal the skill directory name"),
        (GOOD_SKILL.replace("Port things.", "x" * 1025), "at most 1024 characters (has 1025)"),
        (GOOD_SKILL.replace("description: Port things.\n", ""), "description is required"),
        (
            GOOD_SKILL.replace("---\nbody", "colour: red\n---\nbody"),
            "unknown frontmatter keys: colour",
        ),
        ("name: port\n", "must start with a '---'"),
        ("---\nname: [\n---\nbody\n", "not valid YAML"),
    ],
)
def test_skill_md_rules(text, problem):
    assert validate_skill_md(GOOD_SKILL, "port") == []
    assert any(problem in p for p in validate_skill_md(text, "port")), validate_skill_md(
        text, "port"
    )


@pytest.mark.parametrize(
    ("frontmatter", "problem"),
    [
        ("description: d\nglobs: '[*.py]'\nalwaysApply: false", "without brackets"),
        ("description: d\nalwaysApply: 'no'", "alwaysApply must be true or false"),
        ("globs: '*.py'\nalwaysApply: true", "description must be a non-empty string"),
        ("description: d\nalwaysApply: true\nmode: x", "unknown frontmatter keys: mode"),
    ],
)
def test_mdc_rules(frontmatter, problem):
    assert (
        validate_mdc("---\ndescription: d\nglobs: '*.py, src/**'\nalwaysApply: false\n---\nx\n")
        == []
    )
    assert any(problem in p for p in validate_mdc(f"---\n{frontmatter}\n---\nbody\n"))
