"""Walk ``fdl <name> <tail...>`` down the manifests to one outcome (pure: it only reads files).

- run command: ``-h``/``--help`` before ``--`` shows its help; other tokens before ``--`` are an
  error (user arguments go after ``--``); the tokens after ``--`` are forwarded.
- path command: the next token may name a command of the child manifest (descend), else
  ``-h`` shows the child's help, else the child's ``entry:`` runs with the whole tail.
- preset: the enclosing manifest's ``entry:`` runs with the preset's ``options:`` and the tail.

Unlike the Rust original, ``-h`` after ``--`` is forwarded, not taken as fdl's help.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field

from fdl.errors import FdlError, FdlUsageError
from fdl.tasks.discover import example_in, manifest_in
from fdl.tasks.layers import overlay_path
from fdl.tasks.manifest import Command, Manifest, load_manifest

HELP_FLAGS = ("-h", "--help")
NO_APPEND = "--no-append"  # before a run command's '--': drop its 'append:' this time


@dataclass
class RunScript:
    """Run ``command.run`` (a shell script) with ``args`` forwarded after ``--``."""

    command: Command
    args: list[str]
    qualified: str
    no_append: bool = False


@dataclass
class ExecEntry:
    """Run ``manifest.entry`` (with ``preset``'s options, if any) followed by ``args``."""

    manifest: Manifest
    preset: Command | None
    args: list[str]
    qualified: str


@dataclass
class ShowHelp:
    """Print help for a run command, a child manifest, or a preset."""

    manifest: Manifest
    command: Command | None
    qualified: str
    enclosing: Manifest | None = field(default=None)


Outcome = RunScript | ExecEntry | ShowHelp


def before_separator(tokens: list[str]) -> list[str]:
    """The tokens before the first standalone ``--``."""
    return tokens[: tokens.index("--")] if "--" in tokens else tokens


def load_child(command: Command, env: str | None) -> Manifest:
    """The manifest of a path command's directory, with ``env`` if that directory has it."""
    assert command.path is not None
    directory = command.path
    file = manifest_in(directory) or example_in(directory)
    if file is None:
        raise FdlError(
            f"command '{command.name}' points at {directory}, which has no fdl.yml",
            f"create {directory / 'fdl.yml'}, or give '{command.name}' a 'run:' script",
        )
    return load_manifest(file, env if env and overlay_path(file, env) else None)


def unknown_command(manifest: Manifest, name: str, qualified: str) -> FdlUsageError:
    close = difflib.get_close_matches(name, list(manifest.commands), n=1)
    prefix = f"fdl {qualified} " if qualified else "fdl "
    hint = (
        f"did you mean '{prefix}{close[0]}'?"
        if close
        else f"'{prefix.strip()} --help' lists the commands"
    )
    where = f" in {manifest.file.name}" if not qualified else f" under '{qualified}'"
    return FdlUsageError(f"unknown command '{name}'{where}", hint)


def walk(manifest: Manifest, tokens: list[str], env: str | None = None) -> Outcome:
    """Resolve ``tokens`` (``[name, *tail]``) against ``manifest``; see the module docstring."""
    name, tail = tokens[0], tokens[1:]
    current, enclosing_entry = manifest, False
    qualified = name
    if name not in current.commands:
        raise unknown_command(current, name, "")
    while True:
        command = current.commands[name]
        own_args = before_separator(tail)
        if command.kind == "run":
            if any(flag in own_args for flag in HELP_FLAGS):
                return ShowHelp(current, command, qualified)
            no_append = NO_APPEND in own_args
            own_args = [token for token in own_args if token != NO_APPEND]
            if own_args:
                shown = " ".join(own_args)
                raise FdlUsageError(
                    f"command '{qualified}' takes no arguments of its own (got: {shown})",
                    f"forward them to the script after '--': fdl {qualified} -- {shown}",
                )
            forwarded = tail[tail.index("--") + 1 :] if "--" in tail else []
            return RunScript(command, forwarded, qualified, no_append)
        if command.kind == "preset":
            if not enclosing_entry:
                raise FdlError(
                    f"preset '{qualified}' has no enclosing entry to run",
                    "top-level commands need 'run:' or 'path:'; presets ('options:') belong "
                    "in a child fdl.yml that has an 'entry:'",
                )
            if any(flag in own_args for flag in HELP_FLAGS):
                return ShowHelp(current, command, qualified)
            return ExecEntry(current, command, _strip_leading_separator(tail), qualified)
        child = load_child(command, env)
        if tail and tail[0] in child.commands:
            name, tail = tail[0], tail[1:]
            current, enclosing_entry = child, True
            qualified = f"{qualified} {name}"
            continue
        if any(flag in own_args for flag in HELP_FLAGS) or (
            not tail and child.entry is None and child.commands
        ):
            return ShowHelp(child, None, qualified, enclosing=current)
        return ExecEntry(child, None, _strip_leading_separator(tail), qualified)


def completions(manifest: Manifest, tokens: list[str], env: str | None = None) -> dict[str, str]:
    """What may follow ``tokens`` (command words typed so far) in shell completion: the child
    commands and presets of the path command they lead to, each with its description."""
    current, tail = manifest, list(tokens)
    while tail:
        command = current.commands.get(tail.pop(0))
        if command is None or command.kind != "path":
            return {}  # a run script or a preset: its arguments are free-form
        current = load_child(command, env)
    return {name: command.description or "" for name, command in current.commands.items()}


def _strip_leading_separator(tail: list[str]) -> list[str]:
    return tail[1:] if tail[:1] == ["--"] else tail


def entry_argv(manifest: Manifest, preset: Command | None, args: list[str]) -> list[str]:
    """The argv of a child's ``entry:`` for a preset (options become flags) and user args.

    Option ``batch_size: 32`` becomes ``--batch-size 32``; ``true`` a bare flag; ``false`` and
    ``null`` nothing; a list repeats the flag. User arguments come last, so they win.
    """
    import shlex

    if manifest.entry is None:
        raise FdlError(
            f"{manifest.file} has no 'entry:' to run",
            "add 'entry: <program>' to it, or call one of its commands",
        )
    argv = shlex.split(manifest.entry)
    for key, value in (preset.options if preset else {}).items():
        flag = "--" + str(key).replace("_", "-")
        values = value if isinstance(value, list) else [value]
        for item in values:
            if item is True:
                argv.append(flag)
            elif item is not None and item is not False:
                argv += [flag, str(item)]
    return argv + args
