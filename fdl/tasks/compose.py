"""The shell command a run-command executes: ``run`` + ``append:`` + the user's arguments.

``append:`` and the user's arguments (those after fdl's ``--``) may each hold a ``--`` of their
own; both halves are threaded so defaults come first and the user's flags last (the last flag
wins for most tools)::

    run: pytest            append: -q -- -p no:cacheprovider
    fdl test -- -k slow -- --pdb   ->   pytest -q -k slow -- -p no:cacheprovider --pdb
"""

from __future__ import annotations

import re

_SAFE = re.compile(r"^[A-Za-z0-9_\-./:=+@,]+$")


def quote(token: str) -> str:
    """POSIX-quote ``token`` only when it needs it, exactly as the Rust original did (the same
    safe characters; an embedded ``'`` becomes ``'\\''``), so command lines match it.

    >>> [quote(t) for t in ["-k", "a b", ""]]
    ['-k', "'a b'", "''"]
    >>> print(quote("it's"))
    'it'\\''s'
    """
    if _SAFE.match(token):
        return token
    return "'" + token.replace("'", "'\\''") + "'"


def split_append(append: str | None) -> tuple[str, str, bool]:
    """``append`` split on its first standalone ``--``: (before, after, had a ``--``)."""
    if append is None or not append.strip():
        return "", "", False
    words = append.split()
    if "--" not in words:
        return append.strip(), "", False
    index = words.index("--")
    return " ".join(words[:index]), " ".join(words[index + 1 :]), True


def compose_run(
    run: str, append: str | None, user_args: list[str], *, no_append: bool = False
) -> str:
    """The full shell command for a run-command (see the module docstring).

    >>> compose_run("pytest", "-- -x", ["-k", "a b"])
    "pytest -k 'a b' -- -x"
    >>> compose_run("pytest", "-q", [], no_append=True)
    'pytest'
    """
    pre, post, had_separator = split_append(None if no_append else append)
    if "--" in user_args:
        index = user_args.index("--")
        user_pre, user_post = user_args[:index], user_args[index + 1 :]
    else:
        user_pre, user_post = user_args, []
    parts = [run.strip(), pre, *(quote(t) for t in user_pre)]
    if had_separator or post or user_post:  # a bare trailing "--" passes nothing: leave it out
        parts += ["--", post, *(quote(t) for t in user_post)]
    return " ".join(part for part in parts if part)
