"""Global-flag pre-processing: global flags may stand before or after the command.

``fdl diagnose -v`` and ``fdl -v diagnose`` mean the same. Scanning stops at the first
standalone ``--``: everything after it belongs to the command (``fdl test -- -v`` forwards
``-v``; the Rust original stripped it, a bug not copied).

``-V``/``--version`` is the exception: it is fdl's only before the command word (``fdl -V``).
After it, it belongs to the command, so ``fdl libtorch download --version 2.9`` cannot print
fdl's version and succeed; commands that take a release call it ``--torch``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fdl.errors import FdlUsageError

_VERBOSITY = {"-q": 0, "--quiet": 0, "-v": 2, "-vv": 3, "-vvv": 4, "--verbose": 2}


@dataclass
class GlobalFlags:
    """The global flags found on a command line, and the remaining arguments."""

    verbosity: int | None = None
    version: bool = False
    no_color: bool = False
    ansi: bool = False  # --ansi: colour even when not a terminal (the Rust fdl's flag)
    env: str | None = None
    rest: list[str] = field(default_factory=list)


def split_global_flags(argv: list[str]) -> GlobalFlags:
    """Pull the global flags out of ``argv`` (up to ``--``); the last verbosity flag wins.

    >>> g = split_global_flags(["diagnose", "-v", "--json", "--", "-q"])
    >>> g.verbosity, g.rest
    (2, ['diagnose', '--json', '--', '-q'])
    """
    flags = GlobalFlags()
    args = iter(enumerate(argv))
    command_seen = False
    for i, arg in args:
        if arg == "--":
            flags.rest.extend(argv[i:])
            break
        if arg in _VERBOSITY:
            flags.verbosity = _VERBOSITY[arg]
        elif arg in ("-V", "--version") and not command_seen:
            flags.version = True
        elif arg in ("--no-color", "--no-ansi"):  # --no-ansi: the Rust fdl's spelling
            flags.no_color, flags.ansi = True, False
        elif arg == "--ansi":
            flags.ansi, flags.no_color = True, False
        elif arg == "--env" or arg.startswith("--env="):
            if arg == "--env":
                value = next(args, (None, None))[1]
            else:
                value = arg.removeprefix("--env=")
            if not value or value.startswith("-"):
                raise FdlUsageError("--env needs an environment name", "e.g. fdl --env ci test")
            if flags.env is not None:
                raise FdlUsageError("--env specified more than once", "pass a single --env NAME")
            flags.env = value
        else:
            command_seen = command_seen or not arg.startswith("-")
            flags.rest.append(arg)
    return flags
