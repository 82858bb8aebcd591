"""Typed options of a command (``schema:``): the model, its validation, and checking a command line.

A schema is written in the manifest (``schema:`` next to ``entry:``) or published by the program
itself (``<entry> --fdl-schema`` prints it as JSON; see :mod:`fdl.tasks.schema_cache` and
:mod:`fdl.schema`). Its shape is the Rust original's, so its manifests and programs work
unchanged::

    schema:
      strict: true                 # unknown flags are usage errors (default: passed through)
      options:
        model: {type: string, short: m, choices: [mlp, resnet], default: mlp,
                description: Which model, env: MODEL}
        epochs: {type: int}
      args:
        - {name: run-id, type: string, required: false}

Types: ``string``, ``int``, ``float``, ``bool`` (a flag), ``path``, and ``list[...]`` of the
scalar ones (the flag may repeat). Before anything runs, fdl checks the user's arguments against
the schema: a wrong value — not one of ``choices``, not a number — is a usage error (exit 2) that
names the option and what is allowed.
"""

from __future__ import annotations

import difflib
import os
from dataclasses import dataclass, field
from typing import Any

from fdl.errors import FdlUsageError
from fdl.tasks.errors import SchemaError

TYPES = (
    "string", "int", "float", "bool", "path",
    "list[string]", "list[int]", "list[float]", "list[path]",
)  # fmt: skip
RESERVED_LONGS = ("help", "version", "quiet", "env")  # fdl's own: a schema may not reuse them
RESERVED_SHORTS = ("h", "V", "q", "v", "e")
UNIVERSAL = {"help": "h", "version": "V", "fdl-schema": None, "refresh-schema": None}
OPTION_KEYS = ("type", "description", "default", "choices", "short", "env", "completer")
ARG_KEYS = (
    "name",
    "type",
    "description",
    "required",
    "variadic",
    "default",
    "choices",
    "completer",
)


@dataclass
class OptionSpec:
    """One ``--long`` option."""

    long: str
    type: str
    description: str | None = None
    default: Any = None
    choices: list[Any] | None = None
    short: str | None = None
    env: str | None = None

    @property
    def takes_value(self) -> bool:
        return self.type != "bool"

    @property
    def scalar_type(self) -> str:
        return self.type[5:-1] if self.type.startswith("list[") else self.type


@dataclass
class ArgSpec:
    """One positional argument."""

    name: str
    type: str
    description: str | None = None
    required: bool = True
    variadic: bool = False
    default: Any = None
    choices: list[Any] | None = None


@dataclass
class Schema:
    """Options and positional arguments of a program, and whether unknown flags are errors."""

    options: dict[str, OptionSpec] = field(default_factory=dict)
    args: list[ArgSpec] = field(default_factory=list)
    strict: bool = False

    def to_json(self) -> dict[str, Any]:
        """The JSON form (the one ``--fdl-schema`` prints and the cache stores)."""
        options = {}
        for long, spec in self.options.items():
            entry: dict[str, Any] = {"type": spec.type}
            for key in ("description", "default", "choices", "short", "env"):
                if getattr(spec, key) is not None:
                    entry[key] = getattr(spec, key)
            options[long] = entry
        args = []
        for arg in self.args:
            entry = {"name": arg.name, "type": arg.type, "required": arg.required}
            for key in ("description", "default", "choices"):
                if getattr(arg, key) is not None:
                    entry[key] = getattr(arg, key)
            if arg.variadic:
                entry["variadic"] = True
            args.append(entry)
        data: dict[str, Any] = {}
        if args:
            data["args"] = args
        if options:
            data["options"] = options
        if self.strict:
            data["strict"] = True
        return data


def parse_schema(data: Any) -> Schema:
    """Validate ``data`` (the ``schema:`` mapping, or ``--fdl-schema`` JSON) into a :class:`Schema`.

    >>> s = parse_schema({"options": {"epochs": {"type": "int", "short": "n"}}})
    >>> s.options["epochs"].short
    'n'
    >>> parse_schema({"options": {"help": {"type": "bool"}}})
    Traceback (most recent call last):
    ...
    fdl.tasks.errors.SchemaError: option --help shadows a reserved fdl flag
    """
    if not isinstance(data, dict):
        raise SchemaError((), "must be a mapping with 'options:', 'args:' and/or 'strict:'")
    _known(data, (), ("options", "args", "strict"))
    schema = Schema(strict=_bool(data.get("strict", False), ("strict",)))
    options = data.get("options") or {}
    if not isinstance(options, dict):
        raise SchemaError(("options",), "must be a mapping of option names to their types")
    shorts: dict[str, str] = {}
    for long, spec in options.items():
        key: tuple[str | int, ...] = ("options", str(long))
        if isinstance(spec, str):
            spec = {"type": spec}
        if not isinstance(spec, dict):
            raise SchemaError(key, "must be a mapping with at least 'type:'")
        _known(spec, key, OPTION_KEYS)
        option = OptionSpec(
            str(long),
            _type(spec, key),
            description=_text(spec.get("description"), (*key, "description")),
            default=spec.get("default"),
            choices=_choices(spec.get("choices"), (*key, "choices")),
            short=_text(spec.get("short"), (*key, "short")),
            env=_text(spec.get("env"), (*key, "env")),
        )
        if option.long in RESERVED_LONGS:
            raise SchemaError(key, f"option --{option.long} shadows a reserved fdl flag")
        if option.short is not None:
            if len(option.short) != 1:
                raise SchemaError((*key, "short"), f"'{option.short}' must be a single character")
            if option.short in RESERVED_SHORTS:
                raise SchemaError((*key, "short"), f"-{option.short} shadows a reserved fdl flag")
            if option.short in shorts:
                raise SchemaError(
                    (*key, "short"),
                    f"options --{shorts[option.short]} and --{option.long} both use -{option.short}",
                )
            shorts[option.short] = option.long
        schema.options[option.long] = option
    args = data.get("args") or []
    if not isinstance(args, list):
        raise SchemaError(("args",), "must be a list of positional arguments")
    seen_optional = False
    for index, spec in enumerate(args):
        key = ("args", index)
        if not isinstance(spec, dict) or "name" not in spec:
            raise SchemaError(key, "must be a mapping with 'name:' and 'type:'")
        _known(spec, key, ARG_KEYS)
        arg = ArgSpec(
            str(spec["name"]),
            _type(spec, key),
            description=_text(spec.get("description"), (*key, "description")),
            required=_bool(spec.get("required", True), (*key, "required")),
            variadic=_bool(spec.get("variadic", False), (*key, "variadic")),
            default=spec.get("default"),
            choices=_choices(spec.get("choices"), (*key, "choices")),
        )
        if any(a.name == arg.name for a in schema.args):
            raise SchemaError(key, f"duplicate positional <{arg.name}>")
        if arg.variadic and index != len(args) - 1:
            raise SchemaError(key, f"<{arg.name}>: a variadic positional must be the last one")
        if arg.required and arg.default is not None and "required" in spec:
            raise SchemaError(key, f"<{arg.name}>: 'required: true' with a default contradicts")
        optional = not arg.required or arg.default is not None
        if seen_optional and not optional:
            raise SchemaError(
                key, f"<{arg.name}>: a required positional cannot follow an optional one"
            )
        seen_optional = seen_optional or optional
        schema.args.append(arg)
    return schema


def _known(mapping: dict[str, Any], key: tuple[str | int, ...], known: tuple[str, ...]) -> None:
    for name in mapping:
        if name not in known:
            close = difflib.get_close_matches(str(name), known, n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else f" (known: {', '.join(known)})"
            raise SchemaError((*key, str(name)), "unknown key" + hint)


def _type(spec: dict[str, Any], key: tuple[str | int, ...]) -> str:
    kind = spec.get("type")
    if kind not in TYPES:
        raise SchemaError((*key, "type"), f"unknown type {kind!r} (valid: {', '.join(TYPES)})")
    return str(kind)


def _text(value: Any, key: tuple[str | int, ...]) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise SchemaError(key, f"must be a string, got {type(value).__name__}")
    return str(value)


def _bool(value: Any, key: tuple[str | int, ...]) -> bool:
    if not isinstance(value, bool):
        raise SchemaError(key, f"must be true or false, got {value!r}")
    return value


def _choices(value: Any, key: tuple[str | int, ...]) -> list[Any] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not value:
        raise SchemaError(key, "must be a non-empty list of allowed values")
    return value


def display(value: Any) -> str:
    """A schema value as the user types it (``true``, ``0.5``, ``mlp``)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def allowed(values: list[Any]) -> str:
    return ", ".join(display(v) for v in values)


def _check_value(what: str, kind: str, choices: list[Any] | None, value: str) -> None:
    if kind == "int":
        try:
            int(value, 10)
        except ValueError:
            raise FdlUsageError(
                f"invalid value '{value}' for {what}: expected an integer", None
            ) from None
    elif kind == "float":
        try:
            float(value)
        except ValueError:
            raise FdlUsageError(f"invalid value '{value}' for {what}: expected a number") from None
    if choices is not None and value not in {display(c) for c in choices}:
        raise FdlUsageError(
            f"invalid value '{value}' for {what}",
            f"allowed: {allowed(choices)}",
        )


def check_argv(
    tokens: list[str],
    schema: Schema,
    environ: dict[str, str] | None = None,
    usage: str | None = None,
) -> list[str]:
    """Check ``tokens`` (the user's arguments) against ``schema``; return them, plus
    ``--option VALUE`` for options absent from ``tokens`` whose ``env:`` variable is set.

    Choices and types are always checked; unknown flags are usage errors only with
    ``strict: true`` (otherwise they are the program's business). Everything after ``--`` passes.

    >>> s = parse_schema({"options": {"model": {"type": "string", "choices": ["mlp", "cnn"]}}})
    >>> check_argv(["--model", "cnn", "--other"], s)
    ['--model', 'cnn', '--other']
    >>> check_argv(["--model=rnn"], s)
    Traceback (most recent call last):
    ...
    fdl.errors.FdlUsageError: invalid value 'rnn' for --model — allowed: mlp, cnn
    """
    environ = dict(os.environ) if environ is None else environ
    by_short = {spec.short: spec for spec in schema.options.values() if spec.short}
    seen: set[str] = set()
    positionals: list[str] = []
    index = 0
    hint = usage

    def unknown(flag: str) -> FdlUsageError:
        names = [f"--{n}" for n in schema.options]
        close = difflib.get_close_matches(flag, names, n=1)
        return FdlUsageError(
            f"unknown option '{flag}'",
            f"did you mean '{close[0]}'?" if close else hint or "see the command's --help",
        )

    while index < len(tokens):
        token = tokens[index]
        index += 1
        if token == "--":
            break
        if token.startswith("--") and len(token) > 2:
            name, eq, inline = token[2:].partition("=")
            spec = schema.options.get(name)
            if spec is None:
                if name in UNIVERSAL:
                    continue
                if schema.strict:
                    raise unknown(f"--{name}")
                if not eq and index < len(tokens) and not tokens[index].startswith("-"):
                    index += 1  # lenient: an unknown option's value goes along with it
                continue
        elif token.startswith("-") and len(token) > 1 and not _is_number(token):
            short, rest = token[1], token[2:]
            spec = by_short.get(short)
            if spec is None:
                if short in ("h", "V"):
                    continue
                if schema.strict:
                    raise unknown(f"-{short}")
                continue
            eq, inline = ("=", rest.removeprefix("=")) if rest else ("", "")
        else:
            positionals.append(token)
            continue
        seen.add(spec.long)
        what = f"--{spec.long}"
        if not spec.takes_value:
            if eq and inline.lower() not in ("true", "false"):
                raise FdlUsageError(f"{what} is a flag and takes no value (got '{inline}')")
            continue
        if eq:
            value = inline
        elif index < len(tokens) and tokens[index] != "--":
            value = tokens[index]
            index += 1
        else:
            raise FdlUsageError(f"{what} needs a value ({spec.scalar_type})", hint)
        _check_value(what, spec.scalar_type, spec.choices, value)
    for position, value in enumerate(positionals):
        if not schema.args:
            break
        arg = schema.args[min(position, len(schema.args) - 1)]
        if position >= len(schema.args) and not arg.variadic:
            if schema.strict:
                raise FdlUsageError(f"unexpected argument '{value}'", hint)
            break
        _check_value(
            f"<{arg.name}>", arg.type.removeprefix("list[").rstrip("]"), arg.choices, value
        )
    extra: list[str] = []
    for spec in schema.options.values():
        if spec.long in seen or not spec.env or spec.env not in environ:
            continue
        value = environ[spec.env]
        what = f"--{spec.long} (from ${spec.env})"
        if spec.takes_value:
            _check_value(what, spec.scalar_type, spec.choices, value)
            extra += [f"--{spec.long}", value]
        elif value.strip().lower() in ("1", "true", "yes", "on"):
            extra.append(f"--{spec.long}")
    if extra:
        cut = tokens.index("--") if "--" in tokens else len(tokens)
        return [*tokens[:cut], *extra, *tokens[cut:]]
    return list(tokens)


def _is_number(token: str) -> bool:
    try:
        float(token)
    except ValueError:
        return False
    return True


def check_preset(name: str, options: dict[str, Any], schema: Schema) -> None:
    """A preset's ``options:`` against the schema: choices always, unknown keys when strict."""
    for key, value in options.items():
        spec = schema.options.get(str(key)) or schema.options.get(str(key).replace("_", "-"))
        if spec is None:
            if schema.strict:
                raise FdlUsageError(
                    f"preset '{name}' sets option '{key}', which the schema does not declare",
                    f"declared options: {', '.join(schema.options) or '(none)'}",
                )
            continue
        if spec.choices is not None and display(value) not in {display(c) for c in spec.choices}:
            raise FdlUsageError(
                f"preset '{name}' sets option '{key}' to '{display(value)}'",
                f"allowed: {allowed(spec.choices)}",
            )


def option_lines(schema: Schema) -> list[str]:
    """Help lines for the options and arguments: flag, type, choices, default, env, description."""
    rows: list[tuple[str, str]] = []
    for arg in schema.args:
        slot = f"<{arg.name}>" + ("..." if arg.variadic else "")
        if not arg.required or arg.default is not None:
            slot = f"[{slot}]"
        rows.append((slot, _describe(arg.type, arg.description, arg.choices, arg.default, None)))
    for spec in schema.options.values():
        flag = (f"-{spec.short}, " if spec.short else "    ") + f"--{spec.long}"
        if spec.takes_value:
            flag += f" <{spec.scalar_type.upper()}>" + (
                "..." if spec.type.startswith("list[") else ""
            )
        rows.append((flag, _describe(None, spec.description, spec.choices, spec.default, spec.env)))
    if not rows:
        return []
    width = min(max(len(flag) for flag, _ in rows), 34) + 2
    return [f"  {flag.ljust(width)}{text}".rstrip() for flag, text in rows]


def _describe(
    kind: str | None, text: str | None, choices: list[Any] | None, default: Any, env: str | None
) -> str:
    parts = [text or ""]
    if choices:
        parts.append(f"[{'|'.join(display(c) for c in choices)}]")
    elif kind:
        parts.append(f"[{kind}]")
    if default is not None:
        parts.append(f"(default: {display(default)})")
    if env:
        parts.append(f"[env: {env}]")
    return " ".join(p for p in parts if p)


def completion_words(schema: Schema, previous: str | None) -> list[tuple[str, str]]:
    """Completion candidates: the choices of the option just typed, else every flag."""
    if previous is not None and previous.startswith("-"):
        name = previous.lstrip("-")
        spec = schema.options.get(name) or next(
            (s for s in schema.options.values() if s.short == name), None
        )
        if spec is not None and spec.takes_value:
            return [(display(c), "") for c in spec.choices or []]
    return [(f"--{spec.long}", spec.description or spec.type) for spec in schema.options.values()]
