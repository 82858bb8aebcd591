"""``fdl install [--check]``: is a newer flodl available from where this one came, and get it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

import typer


def install(
    check: Annotated[
        bool, typer.Option("--check", help="Only report whether a newer flodl is available.")
    ] = False,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print the pip command(s) instead of running them.")
    ] = False,
    source: Annotated[
        str | None,
        typer.Option(
            "--from",
            metavar="PATH",
            help="Look there instead of where flodl was installed from: a folder of wheels, a "
            "wheel or a checkout (for an install pip recorded no origin of, e.g. --find-links).",
        ),
    ] = None,
    as_json: Annotated[
        bool,
        typer.Option(
            "--json",
            help="The check as one JSON object, alone on stdout (pip's output and the "
            "--dry-run command go to stderr).",
        ),
    ] = False,
) -> None:
    import dataclasses
    import json
    import shlex
    import subprocess
    import sys

    from rich.markup import escape

    from fdl import console
    from fdl.errors import ExitCode, FdlError
    from fdl.update_check import check as check_now
    from fdl.update_check import kept_installed, refresh

    if source is None:
        result = refresh()
    else:  # not recorded: the notice and a plain `fdl install` follow the installed origin
        try:
            result = check_now(source=source)
        except ValueError as err:
            hint = "name a folder of flodl-*.whl, a flodl-*.whl or a flodl checkout"
            raise FdlError(str(err), hint, ExitCode.USAGE) from None
    if as_json:
        console.out(json.dumps(dataclasses.asdict(result), indent=2))
    elif result.error is None:
        console.info(escape(result.describe()))
    if result.error is not None:
        from_hint = (
            "point fdl install at where flodl is: fdl install --from DIR (a folder of wheels, "
            "a wheel or a checkout)"
        )
        if result.origin == "unknown":
            hint = from_hint
        elif result.origin == "index":  # no origin recorded: the index, or somewhere else
            hint = (
                f"check the network and run again; if flodl did not come from an index, {from_hint}"
            )
        else:
            hint = "check the network (or the path) and run again"
        raise FdlError(result.describe(), hint, ExitCode.UNAVAILABLE)
    if check or not result.newer:
        return
    if result.upgrade is None:
        console.info(
            escape(f"flodl is installed in development mode from {result.where}: update that "
                   "checkout (e.g. git pull); the new version is live at once")
        )  # fmt: skip
        return
    line = shlex.join(result.upgrade)
    then = None if result.reinstall is None else shlex.join(result.reinstall)
    if dry_run:
        # the condition as a shell comment: the lines stay a script (running both is only slower)
        kept = "  # only if pip kept the installed flodl (a new commit, the same version number)"
        for shown in (line, *([then + kept] if then else [])):
            if as_json:  # the commands are in the JSON; stdout stays one document
                console.info(escape(shown))
            else:
                console.out(shown)
        return
    console.info(escape(f"fdl: {line}"))
    # pip's progress is messages, not data: stderr, so stdout holds only what fdl reports
    code = subprocess.call(result.upgrade, stdout=sys.stderr)
    if code == 0 and result.reinstall is not None and then and kept_installed(result):
        console.info(escape(f"fdl: {then}  # pip kept the installed flodl (same version number)"))
        code = subprocess.call(result.reinstall, stdout=sys.stderr)
    if code != 0:
        raise FdlError(f"the update failed (pip exited with {code})", "see pip's output above")


def register(app: typer.Typer, make_group: Callable[[str, str], typer.Typer]) -> None:
    app.command(
        "install",
        help="Update flodl (and fdl) from where it was installed: the package index, a git URL, "
        "a checkout or a wheel folder. --check only reports.",
    )(install)
