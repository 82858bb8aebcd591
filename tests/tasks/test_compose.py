"""Composing a run-command's shell line: run + append + the user's arguments."""

from __future__ import annotations

import pytest

from fdl.tasks.compose import compose_run, quote, split_append


@pytest.mark.parametrize(
    ("run", "append", "user", "expected"),
    [
        (
            "cargo test live",
            "-- --nocapture --ignored",
            ["-p", "flodl-hf"],
            "cargo test live -p flodl-hf -- --nocapture --ignored",
        ),
        (
            "cargo test",
            "-- --nocapture",
            ["-p", "foo", "--", "--ignored"],
            "cargo test -p foo -- --nocapture --ignored",
        ),
        ("cmd", "--no-ansi", ["--ansi"], "cmd --no-ansi --ansi"),
        (
            "cargo test",
            "--release -- --nocapture",
            ["-p", "foo", "--", "--ignored"],
            "cargo test --release -p foo -- --nocapture --ignored",
        ),
        ("cargo test", None, ["--", "--list"], "cargo test -- --list"),
        ("pytest", "   ", [], "pytest"),
        ("pytest", None, [], "pytest"),
        ("pytest", None, ["-k", "a and b", ""], "pytest -k 'a and b' ''"),
        ("pytest", "-q", ["-v"], "pytest -q -v"),
        ("pytest", "--", [], "pytest --"),
    ],
)
def test_composition(run, append, user, expected):
    assert compose_run(run, append, user) == expected


def test_no_append_drops_the_defaults():
    assert compose_run("pytest", "-q -- -x", ["-k", "a"], no_append=True) == "pytest -k a"


def test_quoting_is_posix_and_minimal():
    assert quote("plain-token_1.2/x:y=z+@,") == "plain-token_1.2/x:y=z+@,"
    assert quote("$HOME") == "'$HOME'"
    assert quote("it's") == "'it'\\''s'"  # an embedded ' closes, escapes and reopens
    assert quote("50%") == "'50%'"  # '%' is not a safe character: quoted
    assert quote('say "hi"') == "'say \"hi\"'"


@pytest.mark.parametrize(
    ("append", "expected"),
    [
        ("-- a", ("", "a", True)),
        ("a --", ("a", "", True)),
        ("--", ("", "", True)),
        ("a b", ("a b", "", False)),
        ("", ("", "", False)),
    ],
)
def test_split_append(append, expected):
    assert split_append(append) == expected
