"""The ``fdl`` entry point: global flags, dispatch, and the one place errors are printed."""

from __future__ import annotations

import os
import sys

from fdl import __version__, console
from fdl.argv import split_global_flags
from fdl.errors import ExitCode, FdlError

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    """Run ``fdl`` with ``argv`` (default: ``sys.argv[1:]``) and return the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        flags = split_global_flags(argv)
    except FdlError as err:
        console.error(err.what, err.hint)
        return err.code
    console.configure(
        verbosity=console.NORMAL if flags.verbosity is None else flags.verbosity,
        no_color=flags.no_color,
        env=flags.env,
        ansi=flags.ansi,
    )

    if flags.version:
        console.out(f"fdl {__version__} (flodl {__version__})")
        return ExitCode.OK

    import typer  # not needed for --version: keep that path minimal

    if os.environ.get("_FDL_COMPLETE"):  # shell completion: register typer's shells first
        from typer.completion import completion_init

        completion_init()

    from fdl.app import app

    args = flags.rest or ["--help"]
    command = typer.main.get_command(app)
    try:
        result = command.main(args=args, prog_name="fdl", standalone_mode=False)
    except FdlError as err:
        console.error(err.what, err.hint)
        return err.code
    except typer.TyperException as err:  # click's UsageError and friends
        code = getattr(err, "exit_code", ExitCode.FAILURE)
        ctx = getattr(err, "ctx", None)
        hint = f"run '{ctx.command_path} --help' for usage" if ctx is not None else None
        message = err.format_message().rstrip(".")
        option = getattr(err, "option_name", None)
        if option in ("--version", "-V") and ctx is not None:
            # global only before the command word (fdl.argv): never "print fdl's version, exit 0"
            message = f"'{ctx.command_path}' has no {option} option"
            hint = "fdl's own version is 'fdl --version' (before the command)"
            if any("--torch" in getattr(p, "opts", ()) for p in ctx.command.params):
                hint = "a torch release is given with --torch VERSION; " + hint
        console.error(message, hint if code == ExitCode.USAGE else None)
        return code
    except typer.Abort:
        console.error("aborted")
        return ExitCode.INTERRUPTED
    except KeyboardInterrupt:
        console.error("interrupted")
        return ExitCode.INTERRUPTED
    except OSError as err:
        # a file the command could not read or write (read-only, forbidden, missing) that no
        # code turned into an FdlError: still one line; the traceback is for -vv
        if err.filename is None:
            raise
        import traceback

        console.debug("".join(traceback.format_exception(err)).rstrip())
        target = f"{err.filename} -> {err.filename2}" if err.filename2 else err.filename
        console.error(
            f"{err.strerror or type(err).__name__}: {target}",
            "check that the path exists and is writable (-vv shows where it failed)",
        )
        return ExitCode.FAILURE
    _update_notice(args)
    return result if isinstance(result, int) else ExitCode.OK


def _update_notice(args: list[str]) -> None:
    """One line on stderr when a newer flodl was found (cached; see fdl.update_check)."""
    if os.environ.get("_FDL_COMPLETE") or args[:1] in (["install"], ["version"]):
        return
    from fdl.update_check import notice

    line = notice()
    if line:
        console.info(f"note: {line}")
