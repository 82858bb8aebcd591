"""``fdl <command>``: from the command line to a finished child process and its exit code.

The environment overlay is chosen in this order: ``--env NAME``, then a non-empty ``FDL_ENV``,
then a first word naming an overlay (``fdl ci test`` = ``fdl --env ci test``). A word that is
both a command (or a built-in) and an overlay is an error, never a guess.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

from rich.markup import escape

from fdl import console
from fdl.errors import ExitCode, FdlError, FdlUsageError
from fdl.tasks.discover import find_manifest
from fdl.tasks.layers import overlay_path
from fdl.tasks.manifest import Manifest, load_manifest


@dataclass
class Selection:
    """The manifest to use, the active environment and the remaining command-line words."""

    file: Path
    env: str | None
    tokens: list[str]


def select(tokens: list[str], builtins: Collection[str], start: Path | None = None) -> Selection:
    """Find the manifest and pick the environment (see the module docstring)."""
    file = find_manifest(start)
    flag_env = console.settings.env
    sources = [("--env", flag_env), ("FDL_ENV", os.environ.get("FDL_ENV") or None)]
    for origin, env in sources:
        if env is None:
            continue
        if file is None:
            raise FdlError(
                f"{origin} '{env}' is set, but no fdl.yml was found in {Path.cwd()} or its parents",
                "run fdl inside a project, or unset it",
                ExitCode.UNAVAILABLE,
            )
        if overlay_path(file, env) is None:
            raise FdlUsageError(
                f"{origin} '{env}': overlay not found (expected fdl.{env}.yml next to {file})",
                f"create fdl.{env}.yml, or choose another environment",
            )
        return Selection(file, env, tokens)
    if file is None:
        raise no_manifest()
    if tokens and not tokens[0].startswith("-") and overlay_path(file, tokens[0]) is not None:
        word = tokens[0]
        if word in builtins or word in _base_command_names(file):
            raise FdlUsageError(
                f"ambiguous '{word}': it names both a command and an environment overlay "
                f"(fdl.{word}.yml)",
                "rename one of them (use --env to select the overlay meanwhile)",
            )
        return Selection(file, word, tokens[1:])
    return Selection(file, None, tokens)


def no_manifest() -> FdlError:
    return FdlError(
        f"no fdl.yml found in {Path.cwd()} or its parents",
        "run fdl inside a project ('fdl init NAME' creates one)",
        ExitCode.UNAVAILABLE,
    )


def _base_command_names(file: Path) -> set[str]:
    from fdl.tasks.source import read_source

    data = read_source(file).data
    commands = data.get("commands") if isinstance(data, dict) else None
    return set(commands) if isinstance(commands, dict) else set()


RESERVED = ("builtin",)  # 'fdl builtin NAME' reaches a shadowed built-in: never a project command


def load_root(selection: Selection, builtins: Collection[str]) -> Manifest:
    """The root manifest with its overlay. A root command may shadow a built-in (``fdl builtin
    NAME`` still runs that one), but not take the reserved name ``builtin``."""
    manifest = load_manifest(selection.file, selection.env)
    check_reserved(manifest)
    return manifest


def check_reserved(manifest: Manifest) -> None:
    """A root manifest may not declare a command named ``builtin`` (see :data:`RESERVED`); help
    and completion check it too, so the manifest is reported where commands are listed."""
    for name in manifest.commands:
        if name in RESERVED:
            raise manifest.merged.error(
                ("commands", name),
                f"'{name}' is reserved: 'fdl builtin NAME' runs fdl's own command NAME",
                "rename the command",
            )


def run_tokens(tokens: list[str], builtins: Collection[str]) -> int:
    """Run ``fdl <tokens...>`` against the nearest manifest; returns the exit code."""
    from fdl.tasks import dispatch, help

    selection = select(tokens, builtins)
    manifest = load_root(selection, builtins)
    if not selection.tokens:
        console.out(help.render(dispatch.ShowHelp(manifest, None, "")))
        return ExitCode.OK
    outcome = dispatch.walk(manifest, selection.tokens, selection.env)
    return execute(outcome, manifest.root, manifest.python)


def execute(outcome: object, project_root: Path, root_python: Path | None = None) -> int:
    """Carry out a dispatch outcome; returns the exit code (a child's, unchanged)."""
    from fdl.tasks import dispatch, help
    from fdl.tasks.child import exec_form, spawn
    from fdl.tasks.compose import compose_run
    from fdl.tasks.docker import in_container, run_in_service, wait_child
    from fdl.tasks.interpreter import task_env
    from fdl.tasks.schema import check_argv, check_preset

    if isinstance(outcome, dispatch.ShowHelp):
        console.out(help.render(outcome))
        return ExitCode.OK
    env = {"FDL_PROJECT_ROOT": str(project_root)}
    if isinstance(outcome, dispatch.RunScript):
        command = outcome.command
        assert command.run is not None
        own = outcome.own
        schema = dispatch.run_schema(command, refresh=outcome.refresh_schema)
        if schema is not None:
            own = check_argv(own, schema, usage=f"see 'fdl {outcome.qualified} --help'")
        args = [*own, *outcome.args]
        script = compose_run(command.run, command.append, args, no_append=outcome.no_append)
        if command.docker and not in_container():
            return run_in_service(command.docker, script, command.declared_in, project_root)
        console.detail(escape(f"fdl: {script}"))
        full_env = task_env(command.python or root_python, dict(os.environ) | env)
        child = spawn(["sh", "-c", exec_form(script)], cwd=command.declared_in, env=full_env)
        return _finish(wait_child(child), script, command.declared_in, full_env)
    assert isinstance(outcome, dispatch.ExecEntry)
    manifest = outcome.manifest
    args = outcome.args
    schema = dispatch.entry_schema(manifest, refresh=outcome.refresh_schema)
    if schema is not None:
        usage = f"see 'fdl {outcome.qualified} --help'"
        args = check_argv(args, schema, usage=usage)
        if outcome.preset is not None:
            check_preset(outcome.preset.name, outcome.preset.options, schema)
    argv = dispatch.entry_argv(manifest, outcome.preset, args)
    if manifest.docker and not in_container():
        assert manifest.entry is not None
        flags = dispatch.entry_args(manifest, outcome.preset, args)
        line = " ".join([manifest.entry.strip(), *(_shell_word(a) for a in flags)])
        console.info(escape(f"fdl: [{manifest.docker}] {line}"))
        return run_in_service(
            manifest.docker, line, manifest.root, project_root, enter=manifest.root
        )
    console.info(escape(f"fdl: {shlex.join(argv)}"))
    full_env = task_env(manifest.python or root_python, dict(os.environ) | env)
    try:
        child = spawn(argv, cwd=manifest.root, env=full_env)
    except OSError as err:
        raise FdlError(
            f"cannot run '{argv[0]}' (entry of {manifest.file}): {err.strerror}",
            "check the 'entry:' line and that the program is installed",
        ) from err
    return _finish(wait_child(child), shlex.join(argv), manifest.root, full_env)


def _shell_word(word: str) -> str:
    """Quote only words with a space, a ``"`` or nothing: the Rust fdl's rule, kept so the line
    run in the container is the one its manifests were written for."""
    if " " in word or '"' in word or not word:
        return "'" + word.replace("'", "'\\''") + "'"
    return word


def _finish(code: int, line: str, cwd: Path, env: dict[str, str]) -> int:
    """A child's exit code, with a note when its Python could not import flodl or torch."""
    if code not in (0, 130):
        from fdl.tasks.interpreter import explain_failure

        note = explain_failure(line, cwd, env)
        if note:
            console.warn(escape(note))
    return code
