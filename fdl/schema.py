"""Publish a script's options to ``fdl``: answer ``--fdl-schema`` with JSON.

``fdl`` asks a project's programs for their typed options by running ``<entry> --fdl-schema``
(the Rust original's protocol) and caches the answer; ``fdl CMD --help`` then lists the options
with their types, shell completion offers them and their choices, and a wrong value is refused
(exit 2) before the program starts. Two helpers make a Python script answer:

- :func:`from_argparse` — for an ``argparse.ArgumentParser``;
- :func:`from_typer` — for a Typer app (or a click command).

Both return the schema as a dict (the JSON printed), so it can be inspected or tested.

>>> import argparse
>>> parser = argparse.ArgumentParser()
>>> _ = parser.add_argument("--epochs", type=int, default=20, help="epochs to train")
>>> _ = parser.add_argument("--model", choices=["mlp", "cnn"], default="mlp")
>>> _ = parser.add_argument("--resume", action="store_true")
>>> schema = from_argparse(parser)
>>> schema["options"]["epochs"]
{'type': 'int', 'description': 'epochs to train', 'default': 20}
>>> schema["options"]["model"]["choices"], schema["options"]["resume"]["type"]
(['mlp', 'cnn'], 'bool')
>>> parser.parse_args(["--epochs", "3"]).epochs  # the parser works as before
3
"""

from __future__ import annotations

import argparse
import contextlib
import enum
import json
import sys
import typing
from pathlib import PurePath
from typing import Any

FLAG = "--fdl-schema"
_RESERVED_LONGS = ("help", "version", "quiet", "env", "fdl-schema", "refresh-schema")
_RESERVED_SHORTS = ("h", "V", "q", "v", "e")

__all__ = ["FLAG", "answer", "from_argparse", "from_typer"]


def answer(schema: dict[str, Any], argv: list[str] | None = None) -> None:
    """Print ``schema`` as JSON and exit 0 when ``--fdl-schema`` is in ``argv``
    (default: ``sys.argv[1:]``); otherwise return and let the program run."""
    if FLAG in (sys.argv[1:] if argv is None else argv):
        sys.stdout.write(json.dumps(schema, indent=2) + "\n")
        sys.stdout.flush()
        raise SystemExit(0)


def _jsonable(value: Any) -> Any:
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, PurePath):
        return str(value)
    if isinstance(value, list | tuple):
        items = [_jsonable(v) for v in value]
        return None if any(i is None for i in items) else items
    return None


def _kind(converter: Any) -> str:
    if converter is int:
        return "int"
    if converter is float:
        return "float"
    if isinstance(converter, type) and issubclass(converter, PurePath):
        return "path"
    return "string"


def _add(options: dict[str, Any], long: str, entry: dict[str, Any]) -> None:
    if long in _RESERVED_LONGS:
        return  # fdl's own flag: the program still accepts it (schemas are not strict)
    short = entry.get("short")
    if short is not None and (short in _RESERVED_SHORTS or len(short) != 1):
        entry.pop("short")
    options[long] = {k: v for k, v in entry.items() if v is not None}


def from_argparse(parser: argparse.ArgumentParser, *, strict: bool = False) -> dict[str, Any]:
    """The schema of ``parser``'s options and positionals; also teaches ``parser`` to answer
    ``--fdl-schema`` (print the JSON, exit 0) when it parses.

    Types come from ``type=`` (``int``, ``float``, ``pathlib.Path``; anything else is a string),
    flags (``store_true``/``store_false``/``count``) are ``bool``, ``nargs='+'``/``'*'`` and
    ``action='append'`` make ``list[...]`` options and variadic positionals; ``choices``,
    ``default`` and ``help`` are carried over. ``strict=True`` makes fdl refuse options the
    schema does not list.
    """
    options: dict[str, Any] = {}
    args: list[dict[str, Any]] = []
    for action in parser._actions:  # argparse's public surface has no iterator over actions
        if isinstance(action, argparse._HelpAction | argparse._VersionAction):
            continue
        if FLAG in action.option_strings:
            continue
        text = None if action.help in (None, argparse.SUPPRESS) else str(action.help)
        if text and "%(" in text:
            with contextlib.suppress(KeyError, TypeError, ValueError):
                text = text % {**vars(action), "prog": parser.prog}
        choices = _jsonable(list(action.choices)) if action.choices is not None else None
        default = None if action.default is argparse.SUPPRESS else _jsonable(action.default)
        many = action.nargs in ("+", "*", argparse.REMAINDER) or isinstance(
            action, argparse._AppendAction
        )
        if not action.option_strings:
            args.append(
                {
                    "name": action.metavar if isinstance(action.metavar, str) else action.dest,
                    "type": ("list[%s]" if many else "%s") % _kind(action.type),
                    "description": text,
                    "required": action.nargs not in ("?", "*"),
                    "variadic": many or None,
                    "choices": choices,
                }
            )
            args[-1] = {k: v for k, v in args[-1].items() if v is not None}
            if not args[-1]["required"] and default is not None:
                args[-1]["default"] = default
            continue
        longs = [o[2:] for o in action.option_strings if o.startswith("--")]
        shorts = [o[1:] for o in action.option_strings if len(o) == 2 and o[0] == "-"]
        if not longs:
            continue  # a short-only option: fdl's schemas name options by their long form
        flag = action.nargs == 0
        kind = "bool" if flag else ("list[%s]" if many else "%s") % _kind(action.type)
        _add(
            options,
            longs[0],
            {
                "type": kind,
                "description": text,
                "default": None if flag else default,
                "choices": choices,
                "short": shorts[0] if shorts else None,
            },
        )
    schema: dict[str, Any] = {}
    if args:
        schema["args"] = args
    if options:
        schema["options"] = options
    if strict:
        schema["strict"] = True

    class _Answer(argparse.Action):
        def __call__(self, parser: Any, namespace: Any, values: Any, option: Any = None) -> None:
            sys.stdout.write(json.dumps(schema, indent=2) + "\n")
            sys.stdout.flush()
            parser.exit(0)

    if FLAG not in parser._option_string_actions:
        parser.add_argument(FLAG, action=_Answer, nargs=0, help=argparse.SUPPRESS)
    return schema


def from_typer(app: Any, *, strict: bool = False, argv: list[str] | None = None) -> dict[str, Any]:
    """The schema of a Typer app's (or click command's) parameters; answers ``--fdl-schema``
    right away (prints the JSON and exits 0) when it is on the command line, else returns it.

    Call it before running the app::

        if __name__ == "__main__":
            fdl.schema.from_typer(app)
            app()

    ``int``/``float``/``Path`` parameters keep their type, flags are ``bool``, ``Choice`` gives
    ``choices``, ``multiple=True`` a ``list[...]``, ``envvar`` the ``env`` fallback. For an app
    with several commands, the options of the top-level callback are described.
    """
    command = app
    if not hasattr(app, "params"):  # a Typer app, not a click command
        import typer.main

        command = typer.main.get_command(app)

    def is_a(obj: Any, *names: str) -> bool:  # click, or the copy of click Typer vendors
        return any(cls.__name__ in names for cls in type(obj).__mro__)

    def describe(param: Any) -> tuple[str, list[Any] | None]:
        """(scalar type, choices) from click's ParamType, or Typer's annotation."""
        descriptor = getattr(param, "type_descriptor", None)
        if descriptor is not None and not hasattr(param, "type"):
            annotation = descriptor.annotation
            args = typing.get_args(annotation)
            if typing.get_origin(annotation) in (list, tuple, set) and args:
                annotation = args[0]
            elif args and type(None) in args:  # Optional[X]
                annotation = next(a for a in args if a is not type(None))
            if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
                return "string", [_jsonable(m.value) for m in annotation]
            return _kind(annotation), None
        ptype = param.type
        choices = _jsonable(list(ptype.choices)) if is_a(ptype, "Choice") else None
        if is_a(ptype, "IntParamType", "IntRange"):
            return "int", choices
        if is_a(ptype, "FloatParamType", "FloatRange"):
            return "float", choices
        if is_a(ptype, "Path"):
            return "path", choices
        return "string", choices

    options: dict[str, Any] = {}
    args: list[dict[str, Any]] = []
    for param in command.params:
        if param.name in ("install_completion", "show_completion"):
            continue  # Typer's own completion options
        scalar, choices = describe(param)
        default = None if callable(param.default) else _jsonable(param.default)
        if param.param_type_name == "argument":
            many = param.nargs == -1
            entry = {
                "name": param.name,
                "type": ("list[%s]" if many else "%s") % scalar,
                "required": bool(param.required),
                "variadic": many or None,
                "choices": choices,
                "default": None if param.required else default,
            }
            args.append({k: v for k, v in entry.items() if v is not None})
            continue
        if param.param_type_name != "option" or param.hidden:
            continue
        longs = [o[2:] for o in param.opts if o.startswith("--")]
        shorts = [o[1:] for o in param.opts if len(o) == 2 and o[0] == "-"]
        if not longs:
            continue
        flag = bool(param.is_flag)
        envvar = param.envvar if isinstance(param.envvar, str) else None
        _add(
            options,
            longs[0],
            {
                "type": "bool" if flag else ("list[%s]" if param.multiple else "%s") % scalar,
                "description": param.help,
                "default": None if flag else default,
                "choices": choices,
                "short": shorts[0] if shorts else None,
                "env": envvar,
            },
        )
    schema: dict[str, Any] = {}
    if args:
        schema["args"] = args
    if options:
        schema["options"] = options
    if strict:
        schema["strict"] = True
    answer(schema, argv)
    return schema
