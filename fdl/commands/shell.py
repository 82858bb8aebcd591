"""``fdl version``, ``fdl completions SHELL`` (print the script) and ``fdl autocomplete`` (install it).

Completion is computed by ``fdl`` itself at each <TAB> (so it always matches the current
``fdl.yml``): the script only calls ``fdl`` back with ``_FDL_COMPLETE=complete_<shell>``.
``fdl autocomplete`` writes the script into a marked block of the shell's start-up file, replacing
the block on a second run (idempotent), and never touches the rest of the file.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer

from fdl.errors import FdlUsageError

SHELLS = ("bash", "zsh", "fish")
COMPLETE_VAR = "_FDL_COMPLETE"
BEGIN = "# >>> fdl completion >>>"
END = "# <<< fdl completion <<<"


def script(shell: str) -> str:
    """The completion script for ``shell`` (bash, zsh or fish)."""
    if shell not in SHELLS:
        raise FdlUsageError(f"unsupported shell '{shell}'", f"choose one of: {', '.join(SHELLS)}")
    from typer._completion_shared import get_completion_script

    return get_completion_script(prog_name="fdl", complete_var=COMPLETE_VAR, shell=shell)


def rc_file(shell: str, home: Path) -> Path:
    """Where ``shell`` reads its interactive start-up commands."""
    if shell == "bash":
        return home / ".bashrc"
    if shell == "zsh":
        return Path(os.environ.get("ZDOTDIR") or home) / ".zshrc"
    return home / ".config" / "fish" / "completions" / "fdl.fish"


def install_block(path: Path, body: str) -> bool:
    """Put ``body`` between the markers in ``path`` (replacing an earlier block); returns whether
    the file changed."""
    block = f"{BEGIN}\n# written by 'fdl autocomplete'; run it again to update, delete to remove\n{body.strip()}\n{END}\n"
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        text = ""
    if BEGIN in text and END in text:
        start = text.index(BEGIN)
        end = text.index(END, start) + len(END)
        new = text[:start] + block.rstrip("\n") + text[end:]
    else:
        new = text + ("\n" if text and not text.endswith("\n") else "") + block
    if new == text:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.fdl-tmp")
    tmp.write_text(new, encoding="utf-8")
    if path.exists():
        tmp.chmod(path.stat().st_mode & 0o777)
    tmp.replace(path)
    return True


def detect_shell() -> str | None:
    name = Path(os.environ.get("SHELL", "")).name
    return name if name in SHELLS else None


def version() -> None:
    from fdl import __version__, console

    console.out(f"fdl {__version__} (flodl {__version__})")


def completions(
    shell: Annotated[str, typer.Argument(help="bash, zsh or fish.", show_default=False)],
) -> None:
    from fdl import console

    console.out(script(shell))


def autocomplete(
    shell: Annotated[
        str | None,
        typer.Option("--shell", help="bash, zsh or fish (default: from $SHELL)."),
    ] = None,
) -> None:
    from rich.markup import escape

    from fdl import console

    chosen = shell or detect_shell()
    if chosen is None:
        raise FdlUsageError(
            f"cannot tell your shell from SHELL={os.environ.get('SHELL', '')!r}",
            "pass --shell bash|zsh|fish",
        )
    body = script(chosen)
    target = rc_file(chosen, Path.home())
    if chosen == "fish":  # fish loads the whole file: no block needed
        changed = not target.exists() or target.read_text(encoding="utf-8") != body + "\n"
        if changed:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(body + "\n", encoding="utf-8")
    else:
        if chosen == "zsh":  # compdef exists only once compinit has run
            body = "(( $+functions[compdef] )) || { autoload -Uz compinit && compinit; }\n" + body
        changed = install_block(target, body)
    state = "installed in" if changed else "already up to date in"
    console.info(escape(f"fdl: {chosen} completion {state} {target}"))
    if changed:
        console.info("Open a new shell (or source that file) to use it.")


def register(app: typer.Typer, make_group: Callable[[str, str], typer.Typer]) -> None:
    app.command("version", help="Print fdl's version (the same as 'fdl --version').")(version)
    app.command(
        "completions",
        help="Print the shell completion script for SHELL (bash, zsh or fish) to stdout.",
    )(completions)
    app.command(
        "autocomplete",
        help="Install completion for your shell: a marked block in ~/.bashrc or ~/.zshrc, or "
        "~/.config/fish/completions/fdl.fish. Running it again replaces the block.",
    )(autocomplete)
