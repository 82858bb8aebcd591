"""The manifest model: a project's description, entry point and commands.

A command is one of three kinds:

- **run** — ``run: <shell script>``, optionally ``append:`` default arguments and ``docker:`` a
  compose service to run it in;
- **path** — ``path: <dir>`` (or nothing at all: the convention ``./<name>/``) whose own
  ``fdl.yml`` continues the command line;
- **preset** — ``options:`` for the ``entry:`` of the enclosing (child) manifest.

Loading validates everything and reports the file, line and key of the first problem.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from fdl.tasks.layers import Merged, load_layers, merge
from fdl.tasks.source import KeyPath

Kind = Literal["run", "path", "preset"]

TOP_KEYS = ("description", "commands", "entry", "docker", "arg-name")
COMMAND_KEYS = ("description", "run", "append", "path", "docker", "options")


@dataclass
class Command:
    """One entry of a manifest's ``commands:``."""

    name: str
    kind: Kind
    declared_in: Path  # directory of the manifest that declares it (cwd of run scripts)
    description: str | None = None
    run: str | None = None
    append: str | None = None
    docker: str | None = None
    path: Path | None = None  # path kind: the child directory
    options: dict[str, Any] = field(default_factory=dict)


@dataclass
class Manifest:
    """A loaded, merged and validated manifest (one directory level)."""

    file: Path
    env: str | None
    merged: Merged
    description: str | None
    entry: str | None
    docker: str | None
    arg_name: str
    commands: dict[str, Command]

    @property
    def root(self) -> Path:
        return self.file.parent

    @property
    def layer_files(self) -> list[Path]:
        return [layer.path for layer in self.merged.layers]


def load_manifest(file: Path, env: str | None = None) -> Manifest:
    """Load ``file`` with overlay ``env`` (which must exist) and validate it."""
    merged = merge(load_layers(file, env))
    return _validate(file, env, merged)


def _validate(file: Path, env: str | None, merged: Merged) -> Manifest:
    data = merged.data
    _check_keys(merged, (), data, TOP_KEYS, allow_x=True)
    description = _optional_str(merged, ("description",))
    entry = _optional_str(merged, ("entry",))
    docker = _optional_str(merged, ("docker",))
    arg_name = _optional_str(merged, ("arg-name",)) or "preset"
    raw_commands = data.get("commands") or {}
    if not isinstance(raw_commands, dict):
        raise merged.error(("commands",), "must be a mapping of command names to commands")
    commands = {}
    for name, spec in raw_commands.items():
        commands[name] = _command(merged, name, spec, file.parent)
    return Manifest(file, env, merged, description, entry, docker, arg_name, commands)


def _command(merged: Merged, name: str, spec: Any, root: Path) -> Command:
    key: KeyPath = ("commands", name)
    if not name or name.startswith("-") or any(c.isspace() for c in name):
        raise merged.error(key, "command names cannot be empty, start with '-' or contain spaces")
    if spec is None:
        spec = {}
    if not isinstance(spec, dict):
        raise merged.error(
            key,
            f"must be a mapping, got {type(spec).__name__}",
            f"write e.g. '{name}:\\n    run: ...' (a command is a mapping, not a string)",
        )
    _check_keys(merged, key, spec, COMMAND_KEYS)
    fields = {
        k: _optional_str(merged, (*key, k))
        for k in ("description", "run", "append", "path", "docker")
    }
    options = spec.get("options") or {}
    if not isinstance(options, dict):
        raise merged.error((*key, "options"), "must be a mapping of option names to values")
    for option, value in options.items():
        if isinstance(value, dict):
            raise merged.error(
                (*key, "options", option), "an option value must be a scalar or a list"
            )
    declared_in = root.resolve()
    if fields["run"] is not None and fields["path"] is not None:
        raise merged.error(key, "sets both 'run:' and 'path:'; only one is allowed")
    if fields["run"] is None:
        for lonely in ("docker", "append"):
            if fields[lonely] is not None:
                raise merged.error(
                    (*key, lonely),
                    f"'{lonely}:' only applies to a 'run:' script",
                    "add a 'run:' line",
                )
    command = Command(
        name,
        "run",
        declared_in,
        description=fields["description"],
        options=options,
        run=fields["run"],
        append=fields["append"],
        docker=fields["docker"],
    )
    if fields["run"] is not None:
        if options:
            raise merged.error(
                (*key, "options"), "'options:' belongs to presets, not to 'run:' scripts"
            )
        return command
    if fields["path"] is not None or not options:
        command.kind = "path"
        command.path = (declared_in / (fields["path"] or name)).resolve()
        if options:
            raise merged.error(
                (*key, "options"), "'options:' belongs to presets, not to 'path:' commands"
            )
        return command
    command.kind = "preset"
    return command


def _optional_str(merged: Merged, key: KeyPath) -> str | None:
    node: Any = merged.data
    for part in key:
        node = node.get(part) if isinstance(node, dict) else None
    if node is None:
        return None
    if isinstance(node, bool) or not isinstance(node, str | int | float):
        raise merged.error(key, f"must be a string, got {type(node).__name__}")
    return str(node)


def _check_keys(
    merged: Merged,
    key: KeyPath,
    mapping: dict[str, Any],
    known: tuple[str, ...],
    allow_x: bool = False,
) -> None:
    for name in mapping:
        if name in known or (allow_x and name.startswith("x-")):
            continue
        close = difflib.get_close_matches(name, known, n=1)
        hint = f"did you mean '{close[0]}'?" if close else f"known keys: {', '.join(known)}"
        raise merged.error((*key, name), "unknown key", hint)
