"""``fdl init``: scaffold a project that trains on CPU out of the box; ``--update`` refreshes one."""

from __future__ import annotations

import errno
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer

from fdl.errors import FdlUsageError

# The generated README's install command (a fresh virtualenv; see constraints.txt).
INSTALL_COMMAND = "python3 -m venv .venv && . .venv/bin/activate && pip install -c constraints.txt -e . pytest ruff"


def init(
    name: Annotated[
        str | None,
        typer.Argument(
            help="Project directory and name (letters, digits, '-', '_'; starts with a letter, "
            "ends with a letter or digit; at most 64); '.' "
            "scaffolds into the current directory (empty, or only .git) named after it.",
            show_default=False,
        ),
    ] = None,
    docker: Annotated[
        bool, typer.Option("--docker", help="Add CPU and CUDA images and compose services.")
    ] = False,
    native: Annotated[bool, typer.Option("--native", help="No Docker (the default).")] = False,
    cuda: Annotated[
        str | None,
        typer.Option(
            "--cuda", metavar="TAG", help="CUDA build of torch for the GPU image, e.g. 12.8."
        ),
    ] = None,
    update: Annotated[
        bool,
        typer.Option(
            "--update",
            help="Re-render this project with the current templates (keeps your edits).",
        ),
    ] = False,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="With --update: show the diff, change nothing.")
    ] = False,
    with_hf: Annotated[
        bool,
        typer.Option(
            "--with-hf", help="Include HuggingFace support (as 'fdl add hf' does afterwards)."
        ),
    ] = False,
) -> None:
    if docker and native:
        raise FdlUsageError("--docker and --native are mutually exclusive", "pick one")
    if dry_run and not update:
        raise FdlUsageError("--dry-run only applies to --update", "add --update")
    mode = "docker" if docker else "native" if native else None
    if update and with_hf:
        raise FdlUsageError("--with-hf applies to a new project", "inside one: fdl add hf")
    _pipe.closed = False
    if update:
        _update(Path(name or "."), mode, cuda, dry_run)
    else:
        if name is None:
            raise FdlUsageError("missing the project name", "e.g. fdl init my-model")
        _create(name, mode, cuda)
        if with_hf:
            _add_feature(Path(name).resolve(), "hf")
    if _pipe.closed:  # now that everything is written: fdl's usual exit on a closed pipe
        raise BrokenPipeError(errno.EPIPE, "the output was closed")


class _Pipe:
    """What ``fdl init`` prints goes through here: a reader that stops early (``fdl init
    --update | head -3``) closes the pipe, and the next print raises BrokenPipeError. That must
    not stop the project from being written: the print is dropped (the other stream may still
    be open), the work goes on, and ``init`` raises the error at the end (fdl then exits 1
    quietly, as on any closed pipe)."""

    closed = False

    def __call__(self, show: Callable[[str], None], text: str) -> None:
        try:
            show(text)
        except BrokenPipeError:
            self.closed = True
        except SystemExit as stop:  # rich's own reaction to a closed pipe (on_broken_pipe)
            if not isinstance(stop.__context__, BrokenPipeError):
                raise
            self.closed = True


_pipe = _Pipe()


def _info(text: str) -> None:
    from fdl import console

    _pipe(console.info, text)


def _out(text: str) -> None:
    from fdl import console

    _pipe(console.out, text)


def _warn(text: str) -> None:
    from fdl import console

    _pipe(console.warn, text)


def register(app: typer.Typer, make_group: Callable[[str, str], typer.Typer]) -> None:
    app.command(
        "init",
        help="Scaffold a new flodl project (model, training script, tests, fdl.yml tasks; "
        "Docker images with --docker), or bring newer templates into one with --update.",
    )(init)


def _add_feature(root: Path, feature: str) -> None:
    from rich.markup import escape

    from fdl.scaffold import features

    changes = features.add(root, feature)
    features.report(feature, changes, lambda line: _info(escape(line)), root, images_built=False)


def _ask_mode() -> str:
    """Docker or not: asked on a terminal, native otherwise."""
    if not (sys.stdin.isatty() and sys.stderr.isatty()):
        return "native"
    from rich.prompt import Confirm

    from fdl import console

    docker = Confirm.ask(
        "Add Docker images (CPU + CUDA) and run the project's tasks in containers?",
        default=False,
        console=console.console(stderr=True),
    )
    return "docker" if docker else "native"


def _gpu_image(answers, cuda: str | None, *, announce: bool = True):
    """``answers`` with the GPU image's build filled in: ``--cuda``, else what fits this machine.

    Native projects are not probed (the build is chosen when Docker is added); an answers file
    from before torch was pinned gets the newest release with its recorded build.
    """
    import dataclasses

    from rich.markup import escape

    from fdl.scaffold.cuda import choose_cuda, pin_torch

    if cuda is None and not answers.docker:
        return answers
    if cuda is None and answers.cuda and answers.torch:
        return answers  # already chosen: --update keeps it
    if cuda is None and answers.cuda:
        torch = pin_torch(answers.cuda)
        reason = f"{answers.cuda_reason}; torch pinned to {torch}, the newest with this build"
        answers = dataclasses.replace(answers, torch=torch, cuda_reason=reason.lstrip("; "))
    else:
        choice = choose_cuda(cuda)
        answers = dataclasses.replace(
            answers, cuda=choice.tag, torch=choice.torch, cuda_reason=choice.reason
        )
    if announce:
        _info(escape(f"GPU image: torch {answers.torch} + {answers.cuda} ({answers.cuda_reason})"))
    return answers


def _install(answers, *, announce: bool = True, update: bool = False):
    """``answers`` with how the project installs: the torch build for this machine
    (``constraints.txt``) and, unless the running flodl came from a package index, a bundled
    wheel of it (see ``fdl.scaffold.bundle`` for why). With ``update``, when the index could not
    be asked whether it has this flodl, the recorded choice (bundled or not) is kept: it must
    not flip with the network."""
    import dataclasses

    from rich.markup import escape

    from fdl.scaffold.bundle import detect_origin, wheel_name
    from fdl.scaffold.torch_pin import choose_torch

    pin = choose_torch()
    origin = detect_origin()
    bundled, described = not origin.from_index, origin.describe()
    kept = update and origin.kind == "unrecorded" and not origin.asked and answers.flodl_origin
    if kept:
        bundled, described = bool(answers.flodl_wheel), answers.flodl_origin
    answers = dataclasses.replace(
        answers,
        torch_pin=pin.requirement,
        torch_index=pin.index_url,
        torch_reason=pin.reason,
        flodl_wheel=wheel_name() if bundled else "",
        flodl_origin=described,
    )
    if announce:
        _info(escape(f"torch: {pin.requirement} in constraints.txt ({pin.reason})"))
        if kept:
            _info(
                escape(
                    "flodl: the package index could not be asked whether it has this flodl; "
                    f"kept as recorded ({'bundled' if bundled else 'from the index'})"
                )
            )
        if answers.flodl_wheel:
            _info(
                escape(
                    f"flodl: from {origin.describe()}; bundled as .fdl/wheels/"
                    f"{answers.flodl_wheel} so the project installs on any machine"
                )
            )
    return answers


def _create(name: str, mode: str | None, cuda: str | None) -> None:
    from fdl.scaffold.create import create
    from fdl.scaffold.names import validate
    from fdl.scaffold.render import Answers

    here = name == "."
    target = Path(name).resolve()
    if here:  # 'fdl init .': the current directory, named after it
        name = target.name
    package = validate(name)
    from fdl.scaffold.create import check_here, check_target, create_here

    (check_here if here else check_target)(target)  # before asking anything
    mode = mode or _ask_mode()
    answers = _gpu_image(Answers(name, package, mode), cuda)  # type: ignore[arg-type]
    answers = _install(answers)
    files = create_here(target, answers) if here else create(target, answers)
    from rich.markup import escape

    _info(f"Created [bold]{name}[/] ({mode}, {len(files)} files) in {escape(str(target))}")
    steps = [] if here else [f"cd {name}"]
    if mode == "docker":
        steps += [
            "fdl train -- --epochs 1     # builds the CPU image on first use, trains in it",
            "fdl test",
            "fdl shell                   # a shell in the container",
        ]
    else:
        steps += [
            "fdl train -- --epochs 1     # trains (on the GPU when there is one)",
            "fdl train -- --epochs 3 --resume",
            "fdl test",
        ]
    steps += ["fdl --help                  # every task in fdl.yml.example"]
    _info("\nNext:\n" + "\n".join(f"  {step}" for step in steps))
    if mode != "docker":
        _info(
            "\nTasks run with the 'python' on your PATH: use the environment flodl is installed in,"
            " or make one with the install command in the project's README:\n  " + INSTALL_COMMAND
        )
    _info(f"Then edit src/{package}/model.py (the model) and src/{package}/train.py (data).")


def _update(start: Path, mode: str | None, cuda: str | None, dry_run: bool) -> None:
    import dataclasses

    from rich.markup import escape

    from fdl import __version__
    from fdl.errors import ExitCode, FdlError
    from fdl.scaffold import answers as answers_file
    from fdl.scaffold import update

    root = answers_file.find_project(start)
    if root is None:
        raise FdlError(
            f"no {answers_file.ANSWERS_PATH} found at or above {start.resolve()}",
            "run 'fdl init --update' inside a project created by 'fdl init'",
            ExitCode.UNAVAILABLE,
        )
    answers, old_version, recorded = answers_file.load(root)
    if mode:
        answers = dataclasses.replace(answers, mode=mode)  # type: ignore[arg-type]
    answers = _gpu_image(answers, cuda)
    answers = _install(answers, update=True)
    changes = update.plan(root, answers, recorded)
    for change in changes:
        if change.status in ("create", "update", "conflict"):
            if change.binary:  # the bundled wheel: one line, not an empty diff
                _out(f"Binary file b/{change.path} ({change.status}, {len(change.new)} bytes)")
            elif diff := change.diff():
                _out(diff)
    _info(escape(f"Templates of fdl {old_version} -> {__version__} in {root}:"))
    for change in changes:
        if change.status != "unchanged":
            note = {
                "conflict": f"  (yours kept; new version in {change.path}{update.CONFLICT_SUFFIX})",
                "kept": "  (your edits; the template did not change)",
                "skipped": "  (you deleted it; not recreated)",
                "dropped": "  (your edits, kept; no longer generated, nor tracked)",
            }.get(change.status, "")
            _info(escape(f"  {change.status:<9} {change.path}{note}"))
    if not any(c.status in ("create", "update", "conflict", "removed", "dropped") for c in changes):
        _info("  nothing to update")
    if dry_run:
        _info("Dry run: nothing written.")
        return
    update.apply(root, answers, changes)
    if any(c.status == "conflict" for c in changes):
        _warn(f"merge each *{update.CONFLICT_SUFFIX} file into its original, then delete it")
