"""Where fdl writes, and how loudly.

Data goes to stdout, messages and progress to stderr. Colour follows, in order: ``--no-color``,
then ``NO_COLOR`` (any non-empty value: off), then ``FORCE_COLOR`` (on), then whether the stream
is a terminal. When colour is off nothing fdl prints carries an ANSI escape — not even bold.

Verbosity: ``-q`` = 0 (errors only), default = 1, ``-v`` = 2, ``-vv`` = 3 (debug), ``-vvv`` = 4
(trace). Programs fdl runs see it as ``FLODL_VERBOSITY`` on flodl's scale, one lower: ``-q`` 0
(quiet), ``-v`` 1 (info), ``-vv`` 2 (debug), ``-vvv`` 3 (trace); unset by default.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console

QUIET, NORMAL, VERBOSE, DEBUG, TRACE = 0, 1, 2, 3, 4


@dataclass
class Settings:
    """Global CLI settings resolved from flags and environment."""

    verbosity: int = NORMAL
    color: bool | None = None  # None: decide per stream (terminal or not)
    env: str | None = None  # overlay name for the fdl.yml task runner (--env / FDL_ENV)


settings = Settings()
_consoles: dict[bool, Console] = {}


def resolve_color(no_color_flag: bool, ansi_flag: bool = False) -> bool | None:
    """``False`` when colour is off for sure, ``True`` when forced on, ``None`` for auto.

    ``--ansi`` (the Rust original's flag) forces colour on, over ``NO_COLOR`` and a pipe;
    ``--no-ansi`` is ``--no-color``; the last of them on the command line wins.
    """
    if ansi_flag:
        return True
    if no_color_flag or os.environ.get("NO_COLOR", ""):
        return False
    if os.environ.get("FORCE_COLOR", ""):
        return True
    return None


def configure(*, verbosity: int, no_color: bool, env: str | None, ansi: bool = False) -> None:
    """Apply global flags; export them so nested ``fdl`` calls and child processes agree."""
    settings.verbosity = verbosity
    settings.color = resolve_color(no_color, ansi)
    settings.env = env
    if no_color:
        os.environ["NO_COLOR"] = "1"
    if ansi:
        os.environ.pop("NO_COLOR", None)
        os.environ["FORCE_COLOR"] = "1"
    if verbosity != NORMAL:  # flodl's scale has no "normal": quiet 0, info 1, debug 2, trace 3
        os.environ["FLODL_VERBOSITY"] = str(max(verbosity - 1, 0))
    if settings.color is False:
        # Typer renders help with its own rich console; no colour system means no escapes at all.
        import typer.rich_utils

        typer.rich_utils.COLOR_SYSTEM = None
    _consoles.clear()


def console(*, stderr: bool = False) -> Console:
    """The rich console for stdout (data) or stderr (messages), built on first use."""
    if stderr not in _consoles:
        from rich.console import Console

        color = settings.color
        _consoles[stderr] = Console(
            stderr=stderr,
            force_terminal=True if color else None,
            color_system=None if color is False else "auto",
            highlight=False,
            soft_wrap=not (sys.stderr if stderr else sys.stdout).isatty(),
        )
    return _consoles[stderr]


def error(what: str, hint: str | None = None) -> None:
    """Print ``error: <what> — <hint>`` on stderr (always shown, even with ``-q``)."""
    from rich.text import Text

    message = f": {what} — {hint}" if hint else f": {what}"
    console(stderr=True).print(Text.assemble(("error", "bold red"), message))


def warn(message: str) -> None:
    """Print ``warning: <message>`` on stderr unless quiet."""
    if settings.verbosity >= NORMAL:
        from rich.text import Text

        console(stderr=True).print(Text.assemble(("warning", "bold yellow"), f": {message}"))


def info(message: str) -> None:
    """A progress or status message on stderr, hidden by ``-q``. ``message`` may use rich markup."""
    if settings.verbosity >= NORMAL:
        console(stderr=True).print(message)


def detail(message: str) -> None:
    """Shown with ``-v``."""
    if settings.verbosity >= VERBOSE:
        console(stderr=True).print(message, style="dim")


def debug(message: str) -> None:
    """Shown with ``-vv``."""
    if settings.verbosity >= DEBUG:
        console(stderr=True).print(f"debug: {message}", style="dim", markup=False)


def out(text: str) -> None:
    """Write data to stdout exactly as given (no markup, no wrapping): safe for pipes and JSON."""
    sys.stdout.write(text if text.endswith("\n") else text + "\n")
    sys.stdout.flush()
