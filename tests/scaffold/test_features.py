"""``fdl add``: the flodl extra goes into the dependency TOML parses, the rest of the file as it
was, or the edit is refused."""

from __future__ import annotations

import tomllib

import pytest

from fdl.errors import FdlError
from fdl.scaffold.features import add_extra


def edited(tmp_path, text: str) -> str:
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text(text)
    assert add_extra(pyproject, "hf")
    result = pyproject.read_text()
    assert not add_extra(pyproject, "hf")  # once is enough
    return result


def test_a_comment_quoting_the_requirement_is_left_alone(tmp_path):
    text = (
        '[project]\nname = "x"\ndependencies = [\n'
        '  # "flodl>=0.1" pinned below\n'
        '  "numpy",\n'
        '  "flodl>=0.1",  # the real one\n'
        "]\n"
    )
    assert edited(tmp_path, text) == text.replace('  "flodl>=0.1",', '  "flodl[hf]>=0.1",')


def test_only_the_project_tables_dependencies_are_edited(tmp_path):
    text = (
        '[tool.other]\ndependencies = ["flodl>=0.1"]\n\n'
        "[project]\nname = 'x'\n"
        "dependencies = ['flodl[gpu] >=0.1 ; python_version > \"3.10\"']\n"
    )
    result = edited(tmp_path, text)
    assert result == text.replace("'flodl[gpu] >=0.1", "'flodl[gpu,hf] >=0.1")
    assert tomllib.loads(result)["tool"]["other"]["dependencies"] == ["flodl>=0.1"]


@pytest.mark.parametrize(
    ("before", "after"),
    [
        ("dependencies = []\n", 'dependencies = ["flodl[hf]"]\n'),
        ('dependencies = ["numpy"]\n', 'dependencies = ["flodl[hf]", "numpy"]\n'),
        (
            'dependencies = [\n    # mine\n    "numpy",  # "flodl"\n]\n',
            'dependencies = [\n    # mine\n    "flodl[hf]",\n    "numpy",  # "flodl"\n]\n',
        ),
    ],
)
def test_flodl_is_added_first_in_the_lists_own_layout(tmp_path, before, after):
    head = '[project]\nname = "x"\n'
    assert edited(tmp_path, head + before) == head + after


@pytest.mark.parametrize(
    "text",
    [
        # dotted keys and multi-line strings: TOML fdl does not edit by hand
        'project.name = "x"\nproject.dependencies = ["flodl>=0.1"]\n',
        '[project]\nname = "x"\ndependencies = ["""flodl>=0.1"""]\n',
    ],
)
def test_what_cannot_be_edited_safely_is_refused_and_left_as_it_was(tmp_path, text):
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text(text)
    with pytest.raises(FdlError) as info:
        add_extra(pyproject, "hf")
    assert "cannot find its [project] dependencies to edit" in info.value.what
    assert "'flodl>=0.1' -> 'flodl[hf]>=0.1'" in info.value.hint
    assert pyproject.read_text() == text


def test_fdl_add_reports_the_refusal(run_fdl, tmp_path):
    (tmp_path / "pyproject.toml").write_text(
        'project.name = "x"\nproject.dependencies = ["flodl>=0.1"]\n'
    )
    result = run_fdl("add", "hf", cwd=tmp_path)
    assert result.returncode == 1
    assert "cannot find its [project] dependencies to edit" in result.stderr
    assert not (tmp_path / "examples").exists()
