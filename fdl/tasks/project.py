"""The task runner as seen from fdl's command tree: manifest commands next to the built-ins.

``fdl --help`` inside a project lists the manifest's commands in their own panel (and its
environments below), shell completion offers them, and ``fdl <name>`` runs them. This module is
imported when the command tree is built, so it stays cheap: it only looks for the file; PyYAML is
imported when a manifest is actually read.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Collection
from pathlib import Path
from typing import Any

from typer import _click
from typer.core import TyperCommand

from fdl import console
from fdl.errors import FdlError
from fdl.tasks.discover import find_manifest

PANEL = "Project commands"


def manifest_file() -> Path | None:
    """The nearest manifest (or example), without offering to copy anything (a few stat calls)."""
    return find_manifest(offer_copy=False)


def _help_env(file: Path) -> str | None:
    from fdl.tasks.layers import overlay_path

    env = console.settings.env or os.environ.get("FDL_ENV") or None
    return env if env and overlay_path(file, env) else None


def _manifest(*, quiet: bool = False) -> Any:
    """The root manifest for help and completion, or ``None``.

    A broken manifest is reported once, as a warning, where commands are listed (help,
    completion); ``quiet`` when a command is about to run, since running it prints the error.
    """
    file = manifest_file()
    if file is None:
        return None
    env = _help_env(file)
    from fdl.tasks.layers import overlay_path

    overlay = overlay_path(file, env) if env else None
    stamp = (file.stat().st_mtime_ns, overlay.stat().st_mtime_ns if overlay else 0)
    manifest, error = _load(file, env, stamp)
    if error is not None and not quiet and error not in _warned:
        from rich.markup import escape

        _warned.add(error)
        console.warn(escape(f"project commands unavailable: {error}"))
    return manifest


_warned: set[str] = set()


@functools.cache
def _load(file: Path, env: str | None, stamp: tuple[int, int]) -> tuple[Any, str | None]:
    """(manifest, None) or (None, the error); cached per file, environment and modification
    times (help asks for it many times)."""
    from fdl.tasks.manifest import load_manifest
    from fdl.tasks.runner import check_reserved

    try:
        manifest = load_manifest(file, env)
        check_reserved(manifest)  # running a command would refuse it: so does the listing
        return manifest, None
    except FdlError as err:
        return None, str(err)


def command_names(builtins: Collection[str]) -> list[str]:
    """Names of the project's commands, shadowing ones included (empty outside a project)."""
    manifest = _manifest()
    return list(manifest.commands) if manifest else []


def shadowed(builtins: Collection[str]) -> set[str]:
    """Built-in names the project's root manifest declares as its own commands.

    Outside a project this costs a few ``stat`` calls; inside, the manifest is read once.
    """
    if manifest_file() is None:
        return set()
    manifest = _manifest(quiet=True)
    if manifest is None:
        return set()
    return {
        n for n in manifest.commands if n in builtins and n != "builtin"
    }  # 'builtin' is reserved


def declared_while_broken(name: str) -> bool:
    """True when the manifest does not load but still declares a root command ``name`` (in its
    file or the active overlay, as written): ``fdl NAME`` then reports the manifest's error
    rather than running the built-in that command would shadow."""
    file = manifest_file()
    if file is None or _manifest(quiet=True) is not None:
        return False
    from fdl.tasks.layers import overlay_path

    env = _help_env(file)
    overlay = overlay_path(file, env) if env else None
    return any(name in _declared(f) for f in (file, overlay) if f is not None)


def _declared(file: Path) -> set[str]:
    """The names under ``commands:`` in ``file``: from the YAML, else (it does not parse) from
    the lines indented one level under a top-level ``commands:``."""
    from fdl.tasks.source import MAX_BYTES, read_source

    try:
        data = read_source(file).data
    except FdlError:
        try:
            with file.open(encoding="utf-8", errors="replace") as handle:
                lines = handle.read(MAX_BYTES).splitlines()
        except OSError:
            return set()
        names: set[str] = set()
        inside, level = False, 0  # in the top-level 'commands:'; the indent of its keys
        for line in lines:
            text = line.strip()
            if not text or text.startswith("#"):
                continue
            depth = len(line) - len(line.lstrip())
            if depth == 0:
                inside, level = text.startswith("commands:"), 0
                continue
            level = level or depth
            match = re.match(r"""["']?([^"':\s]+)["']?\s*:""", text)
            if inside and depth == level and match:
                names.add(match.group(1))
        return names
    commands = data.get("commands") if isinstance(data, dict) else None
    return {str(k) for k in commands} if isinstance(commands, dict) else set()


def task_command(name: str, builtins: Collection[str]) -> _click.Command | None:
    """A command object for manifest command ``name``, or ``None`` if there is no such command.

    A manifest that fails to load still yields a command, so that running it reports the error.
    """
    if manifest_file() is None:
        return None
    manifest = _manifest(quiet=True)
    if manifest is None:
        return TaskCommand(name, builtins)
    if name not in manifest.commands:
        return None
    from fdl.tasks.help import describe

    return TaskCommand(name, builtins, describe(manifest.commands[name], manifest.env))


def routes_to_runner(name: str) -> bool:
    """True when ``name`` is an environment overlay of the project (``fdl ci test``)."""
    file = manifest_file()
    if file is None:
        return False
    from fdl.tasks.layers import overlay_path

    return overlay_path(file, name) is not None


def epilog() -> str | None:
    """Project and environment lines for the bottom of ``fdl --help``."""
    manifest = _manifest()
    if manifest is None:
        return None
    from fdl.tasks.layers import list_envs

    lines = [
        f"Project: {manifest.file}" + (f" — {manifest.description}" if manifest.description else "")
    ]
    envs = list_envs(manifest.file)
    if envs:
        marked = ", ".join(f"{e} (active)" if e == manifest.env else e for e in envs)
        lines.append(
            f"Environments: {marked}. Select one with --env NAME, FDL_ENV=NAME or 'fdl NAME COMMAND'."
        )
    lines.append("'fdl COMMAND -h' explains a project command.")
    return "\n\n".join(lines)


class TaskCommand(TyperCommand):
    """A manifest command: its arguments are not parsed by click but handed to the runner."""

    def __init__(
        self,
        name: str,
        builtins: Collection[str],
        help: str | None = None,
        *,
        shadowing: bool = False,
    ):
        super().__init__(
            name,
            help=help,
            add_help_option=False,
            context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
        )
        self.builtins = set(builtins)
        self.shadowing = shadowing  # a built-in's name in a broken manifest: its errors say
        # how to reach the built-in
        file = manifest_file()
        self.rich_help_panel = f"{PANEL} ({_relative(file)})" if file else PANEL

    def parse_args(self, ctx: _click.Context, args: list[str]) -> list[str]:
        ctx.args = list(args)
        return ctx.args

    def get_short_help_str(self, limit: int = 45) -> str:
        """The whole description for ``fdl --help``: click would cut it at its first ". ", which
        splits "Train the model (e.g. ...)" after "e.g."; the help formatter wraps it instead."""
        return " ".join((self.help or "").split())

    def invoke(self, ctx: _click.Context) -> int:
        from fdl.tasks.runner import run_tokens

        try:
            return run_tokens([ctx.info_name or self.name or "", *ctx.args], self.builtins)
        except FdlError as err:
            if not self.shadowing:
                raise
            name = self.name or ""
            builtin = f"'fdl builtin {name}' runs fdl's own {name}"
            hint = f"{err.hint}; {builtin}" if err.hint else builtin
            raise FdlError(err.what, hint, err.code) from err

    def shell_complete(self, ctx: _click.Context, incomplete: str) -> list[Any]:
        """The child commands and presets after ``fdl bench <TAB>`` (or ``fdl ci <TAB>``)."""
        from typer._click.shell_completion import CompletionItem

        from fdl.tasks.dispatch import completion_schema, completions
        from fdl.tasks.runner import load_root, select
        from fdl.tasks.schema import completion_words

        tokens = [ctx.info_name or self.name or "", *ctx.args]
        try:
            selection = select(tokens, self.builtins)
            manifest = load_root(selection, self.builtins)
            words = [t for t in selection.tokens if not t.startswith("-")]
            found = completions(manifest, words, selection.env) if words == selection.tokens else {}
            schema = completion_schema(manifest, selection.tokens, selection.env)
        except (FdlError, OSError):  # a broken manifest: no completions, never a traceback
            return []
        if schema is not None:
            previous = ctx.args[-1] if ctx.args else None
            typed = completion_words(schema, previous)
            if previous and previous.startswith("-") and typed and not typed[0][0].startswith("-"):
                found = dict(typed)  # the values of the option just typed
            elif incomplete.startswith("-") or not found:
                found = {**found, **dict(typed)}
        return [
            CompletionItem(name, help=text or None)
            for name, text in found.items()
            if name.startswith(incomplete)
        ]


def _relative(path: Path) -> str:
    try:
        return str(path.relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)
