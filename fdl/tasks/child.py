"""Run a task's process the way a shell runs a job: its own process group, the terminal handed
to it, and fdl's signals passed on, so stopping ``fdl`` stops the whole task.

- The task (``sh -c SCRIPT``, an entry, ``docker compose run``) starts in a new process group,
  with everything it spawns: a training script started by ``sh`` is in it too.
- On a terminal, that group becomes the terminal's foreground group while it runs (as a shell
  does for a job), so Ctrl-C reaches the task, and interactive tasks (``bash``) can read input.
- SIGINT, SIGTERM, SIGHUP and SIGQUIT sent to ``fdl`` itself (``kill``, a CI timeout, a closed
  SSH session) are forwarded to the task's process group. After a forwarded signal, every
  process of the group gets :data:`GRACE_S` seconds to finish (a training script saving its
  state); then fdl kills what is left (a second signal: at once). No process outlives ``fdl``.
  The task takes SIGINT and SIGQUIT at their default action even when fdl was started with
  them ignored (a background job of ``sh -c '... &'``), so a forwarded Ctrl-C still stops it.
  Any other of these signals that fdl was started with ignored (SIGHUP under ``nohup fdl
  train &``) stays ignored, by fdl and by the task, which inherits that: fdl does not forward
  it, so it starts no grace period and kills nothing (the task outlives the SSH session).
- The exit code is the task's; a task killed by a signal gives 128 + the signal number
  (SIGINT → 130, SIGTERM → 143), as shells report it. A ``run:`` script that is one simple
  command is run with ``exec`` (:func:`exec_form`): ``sh`` (dash) would otherwise turn a
  Ctrl-C the program handled (a training run stopping its dashboard, exit 0) into 130.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

#: Seconds a task gets to exit after a forwarded signal before its group is killed.
GRACE_S = 10.0
FORWARDED = tuple(
    getattr(signal, name)
    for name in ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT")
    if hasattr(signal, name)
)
_POSIX = os.name == "posix"
#: Forwarded signals a task starts with at their default action even when fdl ignores them.
_RESET = tuple(getattr(signal, name) for name in ("SIGINT", "SIGQUIT") if hasattr(signal, name))


# leading `NAME=value` words; the last may end the script (`FOO=1` alone sets, runs nothing)
_ASSIGNMENTS = re.compile(
    r"""^\s*(?:[A-Za-z_][A-Za-z0-9_]*=(?:[^\s'"\\]|\\.|'[^']*'|"(?:[^"\\]|\\.)*")*(?:\s+|$))*"""
)
_OPERATORS = {";", "&", "&&", "|", "||", "|&", "(", ")", ";;", "{", "}", "!"}
_SHELL_WORDS = {
    "if", "then", "else", "elif", "fi", "for", "while", "until", "do", "done", "case", "esac",
    "exec", "cd", "export", "set", "unset", "source", ".", "eval", "exit", "return", "trap",
    "wait", "read", "alias", "ulimit", "umask", "shift", ":", "true", "false", "test", "[",
    "echo", "printf", "command", "builtin", "local", "readonly", "times", "type", "hash",
}  # fmt: skip


def exec_form(script: str) -> str:
    """``script`` with ``exec`` before its command when it is one simple command, else as is.

    >>> exec_form("PYTHONPATH=src python -m demo.train --epochs 1")
    'PYTHONPATH=src exec python -m demo.train --epochs 1'
    >>> exec_form("ruff check . && pytest")
    'ruff check . && pytest'
    """
    import shlex

    if "\n" in script or "`" in script:
        return script
    try:
        lexer = shlex.shlex(script, posix=True, punctuation_chars=";&|()")
        lexer.whitespace_split = True
        tokens = list(lexer)
    except ValueError:
        return script
    if not tokens or any(token in _OPERATORS for token in tokens):
        return script
    prefix = _ASSIGNMENTS.match(script)
    assert prefix is not None  # the pattern matches the empty string
    rest = script[prefix.end() :]
    words = rest.split(None, 1)
    if not words or words[0] in _SHELL_WORDS or words[0][0] in "<>0123456789":
        return script
    return f"{script[: prefix.end()]}exec {rest}"


def spawn(argv: list[str], **kwargs: Any) -> subprocess.Popen[Any]:
    """Start ``argv`` in a new process group that owns the terminal (when fdl owns it)."""
    if not _POSIX:
        return subprocess.Popen(argv, **kwargs)
    return subprocess.Popen(
        argv, process_group=0, preexec_fn=child_setup(_foreground_tty()), **kwargs
    )


def child_setup(tty: int | None = None) -> Callable[[], None] | None:
    """The ``preexec_fn`` of a child whose process group gets fdl's signals: it takes SIGINT and
    SIGQUIT at their default action, and the terminal ``tty`` (when given); ``None`` when there
    is nothing to do.

    A shell without job control starts a background job (``sh -c 'fdl train &'``) with SIGINT
    and SIGQUIT ignored, and an ignored signal stays ignored across exec: fdl forwards them
    anyway, so the child must not ignore them too (its Ctrl-C handling would never run).
    """
    ignored = [s for s in _RESET if signal.getsignal(s) == signal.SIG_IGN]
    if tty is None and not ignored:
        return None

    def preexec() -> None:  # in the child, after setpgid / setsid, before exec
        for signum in ignored:
            signal.signal(signum, signal.SIG_DFL)
        if tty is not None:  # claim the terminal
            signal.signal(signal.SIGTTOU, signal.SIG_IGN)
            with contextlib.suppress(OSError):
                os.tcsetpgrp(tty, os.getpgrp())
            signal.signal(signal.SIGTTOU, signal.SIG_DFL)

    return preexec


def wait(child: subprocess.Popen[Any]) -> int:
    """Wait for ``child`` (from :func:`spawn`), forwarding signals; returns its exit code."""
    if not _POSIX:
        while True:
            try:
                return _code(child.wait())
            except KeyboardInterrupt:
                continue  # the child got the Ctrl-C as well; let it decide how to exit
    tty = _foreground_tty()
    state = _Forwarded()
    with _forwarding(child, state), _terminal_given_to(child.pid, tty):
        code = child.wait()
        if state.first is not None:  # what the task left running gets the rest of its grace
            _drain_group(child.pid, state.first + GRACE_S)
    return _code(code)


@contextlib.contextmanager
def forwarding_signals(child: subprocess.Popen[Any]) -> Iterator[_Forwarded]:
    """For a caller that waits for ``child`` its own way (``fdl check`` polls its smoke run for
    a CPU limit): while the block runs, fdl's signals reach ``child``'s process group as in
    :func:`wait`. On leaving, that group gets the rest of its grace after a signal, or is
    killed at once (the block ended early, or left processes behind): none outlives fdl.
    The state says which signal came (``signum``), if any."""
    state = _Forwarded()
    if not _POSIX:  # no process groups to signal: the caller's own handling stands
        yield state
        return
    try:
        with _forwarding(child, state):
            yield state
    finally:
        if state.first is not None:
            _drain_group(child.pid, state.first + GRACE_S)
        else:
            _kill_group(child.pid)


class _Forwarded:
    first: float | None = None  # when the first signal was forwarded (time.monotonic)
    signum: int | None = None  # which signal that was


def _code(code: int) -> int:
    return 128 - code if code < 0 else code


def _foreground_tty() -> int | None:
    """fdl's stdin when it is a terminal whose foreground group is fdl's own, else None."""
    try:
        fd = sys.stdin.fileno()
        if os.isatty(fd) and os.tcgetpgrp(fd) == os.getpgrp():
            return fd
    except (OSError, ValueError, AttributeError):
        pass
    return None


@contextlib.contextmanager
def _terminal_given_to(pgid: int, tty: int | None) -> Iterator[None]:
    if tty is None:
        yield
        return
    previous = signal.signal(signal.SIGTTOU, signal.SIG_IGN)  # fdl is briefly not foreground
    try:
        with contextlib.suppress(OSError):
            os.tcsetpgrp(tty, pgid)  # the child did it too: whoever runs first wins, same result
        yield
    finally:
        with contextlib.suppress(OSError):
            os.tcsetpgrp(tty, os.getpgrp())
        signal.signal(signal.SIGTTOU, previous)


@contextlib.contextmanager
def _forwarding(child: subprocess.Popen[Any], state: _Forwarded) -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():
        yield  # signal handlers can only be set from the main thread
        return

    def forward(signum: int, _frame: object) -> None:
        if state.first is not None:  # asked twice: stop waiting
            _kill_group(child.pid)
            return
        state.first, state.signum = time.monotonic(), signum
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(child.pid, signum)
        timer = threading.Timer(GRACE_S, _kill_group, (child.pid,))  # if the task ignores it
        timer.daemon = True
        timer.start()

    saved = {signum: signal.signal(signum, forward) for signum in _forwarded_now()}
    try:
        yield
    finally:
        for signum, handler in saved.items():
            signal.signal(signum, handler)


def _forwarded_now() -> list[int]:
    """The signals to forward: :data:`FORWARDED`, less those fdl ignores (it was started with
    them ignored, as ``nohup`` does SIGHUP; the task inherits that) other than :data:`_RESET`'s,
    which the task takes at their default action (:func:`child_setup`) and so gets forwarded."""
    return [s for s in FORWARDED if s in _RESET or signal.getsignal(s) != signal.SIG_IGN]


def _drain_group(pgid: int, deadline: float) -> None:
    """Wait until no process is left in group ``pgid``, or ``deadline``; then kill the rest."""
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            return
        time.sleep(0.05)
    _kill_group(pgid)


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
