"""Walk ``fdl <name> <tail...>`` down the manifests to one outcome (pure: it only reads files).

- run command: ``-h``/``--help`` before ``--`` shows its help; other tokens before ``--`` are an
  error (user arguments go after ``--``); the tokens after ``--`` are forwarded.
- path command: the next token may name a command of the child manifest (descend), else
  ``-h`` shows the child's help, else the child's ``entry:`` runs with the whole tail.
- preset: the enclosing manifest's ``entry:`` runs with the preset's ``options:`` and the tail.

``-h`` after ``--`` is forwarded to the program, not taken as fdl's help: everything after ``--``
belongs to the program (the Rust fdl took it as its own help).

``--refresh-schema`` before ``--`` (any kind) re-asks the program for its ``--fdl-schema`` first.
A run command with a ``schema:`` takes its declared options before ``--`` too
(``fdl train --epochs 5``): they are checked against the schema and forwarded.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Any

from fdl.errors import FdlError, FdlUsageError
from fdl.tasks.discover import example_in, manifest_in
from fdl.tasks.layers import overlay_path
from fdl.tasks.manifest import Command, Manifest, load_manifest

HELP_FLAGS = ("-h", "--help")
NO_APPEND = "--no-append"  # before a run command's '--': drop its 'append:' this time
REFRESH_SCHEMA = "--refresh-schema"  # before '--': probe the program's --fdl-schema again


@dataclass
class RunScript:
    """Run ``command.run`` (a shell script) with ``args`` forwarded after ``--``."""

    command: Command
    args: list[str]
    qualified: str
    no_append: bool = False
    refresh_schema: bool = False
    own: list[str] = field(default_factory=list)  # typed options before '--' (with a schema)


@dataclass
class ExecEntry:
    """Run ``manifest.entry`` (with ``preset``'s options, if any) followed by ``args``."""

    manifest: Manifest
    preset: Command | None
    args: list[str]
    qualified: str
    refresh_schema: bool = False


@dataclass
class ShowHelp:
    """Print help for a run command, a child manifest, or a preset."""

    manifest: Manifest
    command: Command | None
    qualified: str
    enclosing: Manifest | None = field(default=None)
    refresh_schema: bool = False


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
    refresh = REFRESH_SCHEMA in before_separator(tail)
    if refresh:
        tail.remove(REFRESH_SCHEMA)
    current, enclosing_entry = manifest, manifest.entry is not None  # presets run an entry
    qualified = name
    if name not in current.commands:
        raise unknown_command(current, name, "")
    while True:
        command = current.commands[name]
        own_args = before_separator(tail)
        if command.kind == "run":
            if any(flag in own_args for flag in HELP_FLAGS):
                return ShowHelp(current, command, qualified, refresh_schema=refresh)
            no_append = NO_APPEND in own_args
            own_args = [token for token in own_args if token != NO_APPEND]
            forwarded = tail[tail.index("--") + 1 :] if "--" in tail else []
            if own_args and command.schema is None and not command.probe_schema:
                shown = " ".join(own_args)
                raise FdlUsageError(
                    f"command '{qualified}' takes no arguments of its own (got: {shown})",
                    f"forward them to the script after '--': fdl {qualified} -- {shown}",
                )
            return RunScript(command, forwarded, qualified, no_append, refresh, own_args)
        if command.kind == "preset":
            if not enclosing_entry:
                raise FdlError(
                    f"preset '{qualified}' has no enclosing entry to run",
                    "top-level commands need 'run:' or 'path:'; presets ('options:') belong "
                    "in a child fdl.yml that has an 'entry:'",
                )
            if any(flag in own_args for flag in HELP_FLAGS):
                return ShowHelp(current, command, qualified, refresh_schema=refresh)
            return ExecEntry(current, command, _strip_leading_separator(tail), qualified, refresh)
        child = load_child(command, env)
        if tail and tail[0] in child.commands:
            name, tail = tail[0], tail[1:]
            current, enclosing_entry = child, True
            qualified = f"{qualified} {name}"
            continue
        if any(flag in own_args for flag in HELP_FLAGS) or (
            not tail and child.entry is None and child.commands
        ):
            return ShowHelp(child, None, qualified, enclosing=current, refresh_schema=refresh)
        return ExecEntry(child, None, _strip_leading_separator(tail), qualified, refresh)


def entry_target(manifest: Manifest) -> Any:
    """The schema-cache target of a child manifest's ``entry:`` (named after its directory)."""
    from fdl.tasks.schema_cache import Target

    assert manifest.entry is not None
    return Target(
        manifest.root.name or "root",
        manifest.root,
        manifest.entry,
        manifest.docker,
        manifest.layer_files,
        compile=manifest.compile,
        env=_env(manifest.python),
    )


def _env(python: Any) -> dict[str, str]:
    import os

    from fdl.tasks.interpreter import task_env

    try:
        return task_env(python, dict(os.environ))
    except FdlError:
        return dict(os.environ)  # reported when the command runs


def run_target(command: Command) -> Any:
    """The schema-cache target of a run command marked ``schema: probe``."""
    from fdl.tasks.schema_cache import Target

    assert command.run is not None
    from fdl.tasks.discover import manifest_in

    manifest = manifest_in(command.declared_in)
    return Target(
        command.name,
        command.declared_in,
        command.run,
        command.docker,
        [manifest] if manifest else [],
        env=_env(command.python),
    )


def entry_schema(manifest: Manifest, *, refresh: bool = False, probe: bool = True) -> Any:
    """The typed options of ``manifest``'s entry: its own ``--fdl-schema`` (cached; probed when
    ``probe``), else the inline ``schema:``."""
    from fdl.tasks import schema_cache

    if manifest.entry is None:
        return manifest.schema
    target = entry_target(manifest)
    if not probe:
        return schema_cache.cached_schema(target) or manifest.schema
    return schema_cache.schema_for(target, manifest.schema, refresh=refresh)


def run_schema(command: Command, *, refresh: bool = False, probe: bool = True) -> Any:
    """The typed options of a run command: inline ``schema:``, or probed for ``schema: probe``."""
    from fdl.tasks import schema_cache

    if not command.probe_schema:
        return command.schema
    target = run_target(command)
    if not probe:
        return schema_cache.cached_schema(target)
    return schema_cache.schema_for(target, None, refresh=refresh)


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


def completion_schema(manifest: Manifest, tokens: list[str], env: str | None = None) -> Any:
    """The typed options where ``tokens`` lead (cache only: completion never runs a program)."""
    current, command = manifest, None
    for token in tokens:
        if token.startswith("-"):
            continue
        command = current.commands.get(token)
        if command is None:
            break
        if command.kind == "path":
            current, command = load_child(command, env), None
        elif command.kind == "run":
            return run_schema(command, probe=False)
    return entry_schema(current, probe=False) if current is not manifest else None


def _strip_leading_separator(tail: list[str]) -> list[str]:
    return tail[1:] if tail[:1] == ["--"] else tail


def entry_args(manifest: Manifest, preset: Command | None, args: list[str]) -> list[str]:
    """The arguments after a child's ``entry:``: its ``ddp:``/``training:``/``output:`` defaults
    merged with the preset's, the preset's ``options:``, then ``args`` (last, so they win) — the
    flags, in the order, that programs written for the Rust fdl expect (see
    :mod:`fdl.tasks.config_args`)."""
    from fdl.tasks import config_args

    sections = {
        name: config_args.merge(
            manifest.sections.get(name, {}), preset.sections.get(name, {}) if preset else {}
        )
        for name in config_args.SECTIONS
    }
    options = preset.options if preset else {}
    return [*config_args.config_to_args(**sections, options=options), *args]


def entry_argv(manifest: Manifest, preset: Command | None, args: list[str]) -> list[str]:
    """The argv of a child's ``entry:`` for a preset and user args (see :func:`entry_args`).

    Option ``batch_size: 32`` becomes ``--batch-size 32``; ``true`` a bare flag; ``false`` and
    ``null`` nothing; a list one JSON string (``["a","b"]``), the form programs written for the
    Rust fdl parse.
    """
    import shlex

    if manifest.entry is None:
        raise FdlError(
            f"{manifest.file} has no 'entry:' to run",
            "add 'entry: <program>' to it, or call one of its commands",
        )
    return shlex.split(manifest.entry) + entry_args(manifest, preset, args)
