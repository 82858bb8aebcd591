"""The ``fdl`` command tree: one Typer app, every built-in command registered here.

Command modules keep their heavy imports (torch, requests, docker, jinja2, griffe) inside the
command body, so building this tree — and so ``fdl --help`` — stays cheap. Help is click's plain
layout (``rich_markup_mode=None``): typer's rich help would import rich's markdown, syntax and
traceback renderers (pygments, markdown-it) on every ``--help``, which tripled its start-up time.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

from fdl import console
from fdl.errors import FdlUsageError
from fdl.tasks import project

HELP_FLAGS = ("-h", "--help")


class FdlGroup(TyperGroup):
    """A command group whose unknown-command error follows fdl's error style."""

    def resolve_command(self, ctx: Any, args: list[str]) -> tuple[str | None, Any, list[str]]:
        name = args[0]
        command = self.get_command(ctx, name)
        if command is not None:
            return name, command, args[1:]
        if name.startswith("-"):
            return super().resolve_command(ctx, args)  # an unknown option: click says so
        if ctx.parent is None and project.routes_to_runner(name):
            rest = args[1:]
            if rest and (rest[0] in HELP_FLAGS or rest[0] in self.commands):
                # `fdl ci --help`, `fdl ci config show`: the overlay word means `--env ci`
                console.settings.env = console.settings.env or name
                if rest[0] in HELP_FLAGS:
                    typer.echo(ctx.get_help())
                    ctx.exit(0)
                return super().resolve_command(ctx, rest)
            return name, project.TaskCommand(name, set(self.commands)), rest  # `fdl ci test`
        path = ctx.command_path
        close = difflib.get_close_matches(name, self.list_commands(ctx), n=1)
        if close:
            hint = f"did you mean '{path} {close[0]}'?"
        elif (taker := self._file_command(name)) is not None:
            hint = f"did you mean '{path} {taker} {name}'?"  # `fdl checkpoint model.fdl`
        else:
            hint = f"run '{path} --help' to list them"
        raise FdlUsageError(f"unknown command '{name}'", hint)

    def _file_command(self, name: str) -> str | None:
        """The subcommand that takes a file first (see :func:`_group`), when ``name`` looks
        like a file."""
        if not ("." in name or "/" in name or Path(name).exists()):
            return None
        return _FILE_COMMANDS.get(self.name or "")


# group name -> its subcommand taking a file first: `fdl checkpoint model.fdl` suggests it.
_FILE_COMMANDS: dict[str, str] = {}


_PLAIN = None  # rich_markup_mode: click's own help layout (see the module docstring)


class FdlRootGroup(FdlGroup):
    """The top-level group: built-ins, then the commands of the nearest fdl.yml (task runner).

    Name clashes: inside a project, a project command with a built-in's name (``check`` is the
    common one) runs the project's command — the project is where that word was given a meaning;
    the built-in stays reachable as ``fdl builtin NAME``, and ``fdl --help`` marks both rows.
    ``builtin`` itself is reserved. (The Rust original had no ``check`` built-in, so its manifests
    declaring ``check:`` ran their own command; this rule keeps them working unchanged.)
    """

    def builtin_command(self, ctx: Any, cmd_name: str) -> Any:
        """The built-in ``cmd_name``, whatever the project declares."""
        return super().get_command(ctx, cmd_name)

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        builtin = super().get_command(ctx, cmd_name)
        if builtin is None:
            return project.task_command(cmd_name, set(self.commands))
        if cmd_name in project.shadowed(set(self.commands)):
            return project.task_command(cmd_name, set(self.commands)) or builtin
        if cmd_name != "builtin" and project.declared_while_broken(cmd_name):
            # the manifest that would shadow it does not load: its error, not the built-in
            return project.TaskCommand(cmd_name, set(self.commands), shadowing=True)
        return builtin

    def list_commands(self, ctx: Any) -> list[str]:
        builtins = super().list_commands(ctx)
        return builtins + [n for n in project.command_names(set(builtins)) if n not in builtins]

    def format_help(self, ctx: Any, formatter: Any) -> None:
        self.epilog = project.epilog()
        super().format_help(ctx, formatter)

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        """One section per help panel: the built-ins, then the project's fdl.yml commands."""
        sections: dict[str, list[tuple[str, str]]] = {}
        shadowed = project.shadowed(set(self.commands))
        names = super().list_commands(ctx)
        names += [n for n in project.command_names(set(names)) if n not in names]
        rows: list[tuple[str, Any, str]] = []
        for name in names:
            builtin = super().get_command(ctx, name)
            if builtin is not None:
                note = f"[shadowed here: 'fdl builtin {name}'] " if name in shadowed else ""
                rows.append((name, builtin, note))
        for name in names:
            if name in shadowed or super().get_command(ctx, name) is None:
                command = project.task_command(name, set(self.commands))
                note = f"[shadows the built-in '{name}'] " if name in shadowed else ""
                if command is not None:
                    rows.append((name, command, note))
        for name, command, note in rows:
            if command.hidden:
                continue
            panel = getattr(command, "rich_help_panel", None) or "Commands"
            # the whole first sentence, wrapped, rather than click's one truncated line
            text = note + command.get_short_help_str(200)
            sections.setdefault(panel, []).append((name, text))
        for panel, entries in sections.items():
            with formatter.section(panel):
                formatter.write_dl(entries)


def _group(name: str, help_text: str, file_command: str | None = None) -> typer.Typer:
    """A command group; run without a sub-command it prints its help and exits 0.
    ``file_command``: its subcommand taking a file first, suggested for an unknown command
    that looks like a file."""
    if file_command is not None:
        _FILE_COMMANDS[name] = file_command
    group = typer.Typer(
        name=name,
        help=help_text,
        cls=FdlGroup,
        rich_markup_mode=_PLAIN,
        invoke_without_command=True,
        add_completion=False,
        pretty_exceptions_enable=False,
        context_settings={"help_option_names": ["-h", "--help"]},
    )

    @group.callback()
    def _show_help(ctx: typer.Context) -> None:
        if ctx.invoked_subcommand is None:
            typer.echo(ctx.get_help())
            raise typer.Exit(0)

    return group


app = typer.Typer(
    name="fdl",
    help="The flodl toolchain: the right torch for this machine, project scaffolding, "
    "an fdl.yml task runner, and API references and a porting skill for AI assistants.",
    cls=FdlRootGroup,
    rich_markup_mode=_PLAIN,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


@app.callback()
def _global_options(
    version: Annotated[
        bool, typer.Option("--version", "-V", help="Print the version and exit.")
    ] = False,
    verbose: Annotated[
        int,
        typer.Option(
            "--verbose",
            "-v",
            count=True,
            show_default=False,
            help="More output (-vv: debug, -vvv: trace).",
        ),
    ] = 0,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Errors only.")] = False,
    no_color: Annotated[
        bool,
        typer.Option("--no-color", "--no-ansi", help="No colours or styles (also: NO_COLOR=1)."),
    ] = False,
    ansi: Annotated[
        bool,
        typer.Option("--ansi", help="Colours and styles even when not a terminal (over NO_COLOR)."),
    ] = False,
    env: Annotated[
        str | None,
        typer.Option("--env", metavar="NAME", help="Overlay fdl.NAME.yml on the project manifest."),
    ] = None,
) -> None:
    """Global options, accepted before or after the command (up to a standalone ``--``).

    fdl.main pulls them out of the command line before this parser runs (fdl.argv), so they are
    declared here for ``--help`` and shell completion only.
    """


class BuiltinCommand(typer.core.TyperCommand):
    """``fdl builtin NAME [ARGS]``: run fdl's own ``NAME`` even where the project declares one."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        ctx.args = list(args)
        return ctx.args

    def invoke(self, ctx: Any) -> Any:
        root = ctx.find_root()
        group = root.command
        names = [
            n
            for n in group.list_commands(root)
            if n != "builtin" and group.builtin_command(root, n)
        ]
        if not ctx.args or ctx.args[0] in HELP_FLAGS:
            typer.echo(ctx.get_help().rstrip() + "\n\nBuilt-ins: " + ", ".join(names))
            return 0
        name, rest = ctx.args[0], ctx.args[1:]
        command = group.builtin_command(root, name) if name != "builtin" else None
        if command is None:
            close = difflib.get_close_matches(name, names, n=1)
            hint = (
                f"did you mean 'fdl builtin {close[0]}'?"
                if close
                else "built-ins: " + ", ".join(names)
            )
            raise FdlUsageError(f"'{name}' is not a built-in fdl command", hint)
        # a fresh top-level context: give it the -h that the root's context_settings would
        # have passed down to a command run as `fdl NAME`
        return command.main(
            args=rest,
            prog_name=f"fdl {name}",
            standalone_mode=False,
            help_option_names=list(HELP_FLAGS),
        )


def _register_commands() -> None:
    from fdl.commands import (
        add,
        api_ref,
        check,
        checkpoint,
        config,
        diagnose,
        hf,
        init,
        install,
        libtorch,
        port,
        schema,
        setup,
        shell,
        skill,
    )

    modules = (
        diagnose,
        setup,
        libtorch,
        init,
        add,
        install,
        config,
        schema,
        api_ref,
        skill,
        check,
        port,
        checkpoint,
        hf,
    )
    for module in (*modules, shell):
        module.register(app, _group)
    app.registered_commands.append(
        typer.models.CommandInfo(
            name="builtin",
            cls=BuiltinCommand,
            help="Run fdl's own COMMAND even where the project's fdl.yml declares one of that "
            "name.",
            context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
            add_help_option=False,
            options_metavar="COMMAND [ARGS]...",
            callback=lambda: None,
        )
    )


_register_commands()
