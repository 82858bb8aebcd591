"""The manifest model: a project's description, entry point and commands.

A command is one of three kinds:

- **run** — ``run: <shell script>``, optionally ``append:`` default arguments and ``docker:`` a
  compose service to run it in;
- **path** — ``path: <dir>`` (or nothing at all: the convention ``./<name>/``) whose own
  ``fdl.yml`` continues the command line;
- **preset** — ``options:`` (and/or ``ddp:``/``training:``/``output:`` overrides) for the
  ``entry:`` of the enclosing (child) manifest.

A manifest level may also carry ``schema:`` (typed options of its entry, :mod:`fdl.tasks.schema`),
``compile:`` (allow probing a ``cargo`` entry for ``--fdl-schema``) and ``ddp:``/``training:``/
``output:`` defaults (:mod:`fdl.tasks.config_args`) — every key the Rust original's manifests use.
Loading validates everything and reports the file, line and key of the first problem.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from fdl.tasks import config_args
from fdl.tasks.layers import Merged, load_layers, merge
from fdl.tasks.schema import Schema, SchemaError, parse_schema
from fdl.tasks.source import KeyPath

Kind = Literal["run", "path", "preset"]

SECTIONS = ("ddp", "training", "output")
TOP_KEYS = (
    "description", "commands", "entry", "docker", "arg-name", "schema", "compile", "python",
    *SECTIONS,
)  # fmt: skip
COMMAND_KEYS = ("description", "run", "append", "path", "docker", "options", "schema", *SECTIONS)


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
    sections: dict[str, dict[str, Any]] = field(default_factory=dict)  # ddp/training/output
    schema: Schema | None = None  # run kind: typed options of the script (inline)
    probe_schema: bool = False  # run kind: 'schema: probe' asks the script for --fdl-schema
    python: Path | None = None  # the declaring manifest's 'python:' interpreter


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
    schema: Schema | None = None  # inline 'schema:' (a probed one may replace it at run time)
    compile: bool = False
    sections: dict[str, dict[str, Any]] = field(default_factory=dict)  # ddp/training/output
    python: Path | None = None  # 'python:': the interpreter tasks find first on PATH

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
    python_text = _optional_str(merged, ("python",))
    python = (file.parent / Path(python_text).expanduser()).absolute() if python_text else None
    for name, spec in raw_commands.items():
        commands[name] = _command(merged, name, spec, file.parent)
        commands[name].python = python
    compile_ = data.get("compile", False)
    if compile_ is not None and not isinstance(compile_, bool):
        raise merged.error(("compile",), f"must be true or false, got {compile_!r}")
    return Manifest(
        file,
        env,
        merged,
        description,
        entry,
        docker,
        arg_name,
        commands,
        schema=_schema(merged, ("schema",), data.get("schema")),
        compile=bool(compile_),
        sections=_sections(merged, (), data),
        python=python,
    )


def _schema(merged: Merged, key: KeyPath, value: Any) -> Schema | None:
    if value is None:
        return None
    try:
        return parse_schema(value)
    except SchemaError as err:
        raise merged.error((*key, *err.key), err.problem) from None


def _sections(merged: Merged, key: KeyPath, spec: dict[str, Any]) -> dict[str, dict[str, Any]]:
    def fail(where: tuple[str | int, ...], problem: str) -> Exception:
        return merged.error(where, problem)

    return {
        name: config_args.validate_section(name, spec.get(name), (*key, name), fail)
        for name in SECTIONS
    }


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
    sections = _sections(merged, key, spec)
    declared_in = root.resolve()
    raw_schema = spec.get("schema")
    if raw_schema is not None and fields["run"] is None:
        raise merged.error(
            (*key, "schema"),
            "'schema:' on a command applies to a 'run:' script",
            "for an entry, put 'schema:' in the child fdl.yml next to 'entry:'",
        )
    if fields["run"] is not None and not fields["run"].strip():
        raise merged.error(
            (*key, "run"), "is empty", "write the script to run, or remove the command"
        )
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
        sections=sections,
    )
    has_config = bool(options) or any(spec.get(name) is not None for name in SECTIONS)
    if fields["run"] is not None:
        if has_config:
            bad = "options" if options else next(n for n in SECTIONS if spec.get(n) is not None)
            raise merged.error((*key, bad), f"'{bad}:' belongs to presets, not to 'run:' scripts")
        if raw_schema == "probe":
            command.probe_schema = True
        else:
            command.schema = _schema(merged, (*key, "schema"), raw_schema)
        return command
    if fields["path"] is not None or not has_config:
        command.kind = "path"
        command.path = (declared_in / (fields["path"] or name)).resolve()
        if has_config:
            bad = "options" if options else next(n for n in SECTIONS if spec.get(n) is not None)
            raise merged.error((*key, bad), f"'{bad}:' belongs to presets, not to 'path:' commands")
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
