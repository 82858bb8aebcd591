"""Help screens of the task runner (stdout, so they can be piped and grepped).

``fdl --help`` inside a project adds the manifest's commands and environments to fdl's own help
(see ``fdl.app``); ``fdl <cmd> -h`` explains one command: what it runs, where, with what.

Help never runs a program to learn its options: it reads the ``--fdl-schema`` cache, and when
there is no fresh answer it says how to get one. Running an unknown script just to print help
could start a training run or hang; ``--refresh-schema`` next to ``-h`` is the explicit way.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fdl.errors import FdlError
from fdl.tasks.compose import split_append
from fdl.tasks.dispatch import ShowHelp, load_child
from fdl.tasks.layers import list_envs
from fdl.tasks.manifest import Command, Manifest
from fdl.tasks.schema import Schema

if TYPE_CHECKING:
    from fdl.tasks.schema_cache import Target


def describe(command: Command, env: str | None = None) -> str:
    """One line for a command list: its description, else what it runs."""
    if command.description:
        return command.description
    if command.kind == "run":
        return command.run.strip().splitlines()[0] if command.run else ""
    if command.kind == "path":
        try:
            return load_child(command, env).description or "(sub-commands)"
        except FdlError:  # a broken child is reported when it runs, not in a listing
            return "(sub-commands)"
    return "preset: " + " ".join(f"{k}={v}" for k, v in command.options.items())


def command_rows(manifest: Manifest) -> list[tuple[str, str]]:
    """(name, description) of every command of ``manifest``, in file order."""
    return [(name, describe(c, manifest.env)) for name, c in manifest.commands.items()]


def env_rows(manifest: Manifest) -> list[tuple[str, str]]:
    """(env, note) for the overlays next to the manifest; the active one is marked."""
    return [
        (env, f"fdl.{env}.yml" + ("  (active)" if env == manifest.env else ""))
        for env in list_envs(manifest.file)
    ]


def _table(title: str, rows: list[tuple[str, str]]) -> list[str]:
    if not rows:
        return []
    width = max(len(name) for name, _ in rows) + 2
    return ["", f"{title}:", *(f"  {name.ljust(width)}{text}".rstrip() for name, text in rows)]


def render(outcome: ShowHelp) -> str:
    """The help text for a :class:`ShowHelp` outcome."""
    command, manifest = outcome.command, outcome.manifest
    refresh = outcome.refresh_schema
    if command is None:
        return _manifest_help(manifest, outcome.qualified, refresh)
    if command.kind == "run":
        return _run_help(command, outcome.qualified, refresh)
    return _preset_help(manifest, command, outcome.qualified, refresh)


def _options(schema: Schema | None) -> list[str]:
    from fdl.tasks.schema import option_lines

    lines = option_lines(schema) if schema is not None else []
    if not lines:
        return []
    strict = "; unknown options are errors" if schema and schema.strict else ""
    return ["", f"Options (checked before the program runs{strict}):", *lines]


def _entry_not_asked(manifest: Manifest, qualified: str, refresh: bool) -> list[str]:
    from fdl.tasks.dispatch import entry_target

    if manifest.entry is None or refresh:
        return []
    return _not_asked(entry_target(manifest), qualified)


def _not_asked(target: Target, qualified: str) -> list[str]:
    """How to list a program's own options when the cache holds no fresh answer (help never
    asks the program itself: see the module docstring)."""
    from fdl.tasks import schema_cache

    if not target.probe_allowed:
        return []
    record = schema_cache.read(target)
    if schema_cache.is_fresh(target, record):
        return []
    state = "not been asked yet" if record is None else "changed since it was last asked"
    return [
        "",
        f"The program's own options ({schema_cache.PROBE_FLAG}) are not listed: it has {state},",
        "and help never runs it. Run the command once, or ask it now with",
        f"'fdl {qualified} --refresh-schema -h' (or 'fdl schema refresh {target.name}').",
    ]


def _defaults(manifest: Manifest, preset: Command | None = None) -> list[str]:
    rows = []
    for section in ("ddp", "training", "output"):
        values = dict(manifest.sections.get(section, {}))
        if preset is not None:
            values.update(
                {k: v for k, v in preset.sections.get(section, {}).items() if v is not None}
            )
        rows += [
            f"  {section}.{key}: {value}" for key, value in values.items() if value is not None
        ]
    title = "Effective config:" if preset is not None else "Defaults (become program flags):"
    return ["", title, *rows] if rows else []


def _run_help(command: Command, qualified: str, refresh: bool = False) -> str:
    pre, post, separator = split_append(command.append)
    runs = " ".join(filter(None, [command.run.strip() if command.run else "", pre, "[ARGS...]"]))
    if separator or post:
        runs += " -- " + " ".join(filter(None, [post, "[MORE...]"]))
    from fdl.tasks.dispatch import run_schema, run_target

    schema = run_schema(command, refresh=refresh, probe=refresh)
    lines = [f"fdl {qualified}" + (f" — {command.description}" if command.description else "")]
    slot = " [OPTIONS]" if schema is not None or command.probe_schema else ""
    lines += ["", f"Usage: fdl {qualified}{slot} [--no-append] [-- ARGS... [-- MORE...]]"]
    lines += _options(schema)
    if command.probe_schema and not refresh:
        lines += _not_asked(run_target(command), qualified)
    lines += ["", "Runs:"]
    where = f"in service '{command.docker}' (docker)" if command.docker else "on this machine"
    lines += [f"  {runs}", f"  {where}, from {command.declared_in}"]
    lines += [
        "",
        "Arguments after '--' are passed to the script, after its 'append:' defaults so yours",
        "win; a second '--' sends the rest after the script's own '--'. --no-append drops",
        "the 'append:' defaults for this run.",
    ]
    return "\n".join(lines)


def _manifest_help(manifest: Manifest, qualified: str, refresh: bool = False) -> str:
    from fdl.tasks.dispatch import entry_schema

    prog = " ".join(filter(None, ["fdl", qualified]))
    title = prog + (f" — {manifest.description}" if manifest.description else "")
    presets = [(n, describe(c)) for n, c in manifest.commands.items() if c.kind == "preset"]
    others = [
        (n, describe(c, manifest.env)) for n, c in manifest.commands.items() if c.kind != "preset"
    ]
    slot = f" [{manifest.arg_name}]" if presets else ""
    slot += " [COMMAND]" if others else ""
    lines = [title, "", f"Usage: {prog}{slot} [ARGS...]"]
    lines += _table("Presets", presets)
    lines += _table("Commands", others)
    if qualified:
        lines += _options(entry_schema(manifest, refresh=refresh, probe=refresh))
        lines += _entry_not_asked(manifest, qualified, refresh)
    else:
        lines += _options(manifest.schema)
    lines += _defaults(manifest)
    if manifest.entry:
        docker = f"  (in service '{manifest.docker}')" if manifest.docker else ""
        lines += [
            "",
            "Entry:",
            f"  {manifest.entry}{docker}",
            "  Other arguments are passed to it.",
        ]
    lines += ["", f"Defined in {manifest.file}"]
    return "\n".join(lines)


def _preset_help(
    manifest: Manifest, command: Command, qualified: str, refresh: bool = False
) -> str:
    from fdl.tasks.dispatch import entry_argv, entry_schema

    title = f"fdl {qualified}" + (f" — {command.description}" if command.description else "")
    lines = [title, "", f"Usage: fdl {qualified} [ARGS...]"]
    lines += _defaults(manifest, command)
    if command.options:
        lines += ["", "Preset options:"]
        lines += [f"  {key}: {value}" for key, value in command.options.items()]
    lines += _options(entry_schema(manifest, refresh=refresh, probe=refresh))
    lines += _entry_not_asked(manifest, qualified, refresh)
    if manifest.entry:
        import shlex

        lines += ["", "Runs:", f"  {shlex.join(entry_argv(manifest, command, []))} [ARGS...]"]
    lines += ["", "Arguments are appended after the preset's options, so they override them."]
    return "\n".join(lines)
