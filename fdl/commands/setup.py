"""``fdl setup``: detect hardware, choose the torch (and libtorch) build, install, verify."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

import typer


def _show_gpus(machine) -> None:
    from rich.markup import escape

    from fdl import console

    nv = machine.nvidia
    if nv.gpus:
        console.info(f"[bold]GPUs[/bold] (driver {nv.driver or 'unknown'}):")
        for g in nv.gpus:
            console.info(escape(f"  [{g.index}] {g.name} -- {g.sm or 'sm unknown'}"))
    elif machine.target().driver_problem:
        console.info("[bold]GPUs[/bold]: unknown (an NVIDIA driver is here but lists none)")
    else:
        console.info("[bold]GPUs[/bold]: none (CPU-only)")


def _show_plan(machine, plan, python: str) -> None:
    from rich.markup import escape

    from fdl import console

    _show_gpus(machine)
    console.info(f"[bold]Plan[/bold]: torch {plan.torch} + {plan.tag} ({plan.status})")
    for reason in plan.reasons:
        console.info(escape(f"  - {reason}"))
    for warning in plan.warnings:
        console.warn(warning)
    for alt in plan.alternatives:
        console.info(escape(f"  alternative: {alt}"))
    env = machine.python
    console.info(f"[bold]Environment[/bold]: {escape(python)} ({env.kind} at {escape(env.prefix)})")


def _choose_build(machine, plan):
    """No build fits every GPU: let the user pick which compromise to install — among the builds
    this driver can load that run on at least one GPU, each from the newest release that has it."""
    from rich.markup import escape
    from rich.prompt import Prompt

    from fdl import console
    from fdl.variants import resolve

    release_of: dict[str, str] = {}
    for c in plan.considered:  # newest release first
        if c.driver_ok is not False and c.usable and c.build.tag not in release_of:
            release_of[c.build.tag] = c.build.torch
            gpus = ", ".join(str(f.index) for f in c.usable)
            console.info(escape(f"  {c.build.tag}: torch {c.build.torch}, usable on GPU {gpus}"))
    choices = [*release_of, "cpu"]
    choice = Prompt.ask(
        "No single build runs on every GPU. Build to install",
        choices=choices,
        default=plan.tag,
        console=console.console(stderr=True),
    )
    if choice == plan.tag:
        return plan
    # a CUDA build from the release listed for it; cpu from the plan's (a --torch pin holds)
    chosen = resolve(machine.target(), torch=release_of.get(choice, plan.torch), tag=choice)
    console.info(f"[bold]Plan[/bold]: torch {chosen.torch} + {chosen.tag} (your choice)")
    for warning in chosen.warnings:
        console.warn(warning)
    return chosen


def setup(
    yes: Annotated[bool, typer.Option("--yes", "-y", help="No prompts; take the plan.")] = False,
    force: Annotated[
        bool, typer.Option("--force", help="Reinstall torch even if this build is present.")
    ] = False,
    torch_version: Annotated[
        str | None,
        typer.Option("--torch", metavar="VERSION", help="Pin a torch release, e.g. 2.9."),
    ] = None,
    variant: Annotated[
        str | None,
        typer.Option("--variant", metavar="TAG", help="Force a build: cpu, cu126, cu128…"),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Show the plan and commands; change nothing.")
    ] = False,
    python: Annotated[
        str | None,
        typer.Option(
            "--python", metavar="PATH", help="Install into this interpreter's environment."
        ),
    ] = None,
    installer: Annotated[
        str | None,
        typer.Option(
            "--installer", metavar="pip|uv", help="Force pip or uv (default: uv if on PATH)."
        ),
    ] = None,
    libtorch: Annotated[
        bool, typer.Option("--libtorch", help="Also download the matching libtorch (C++).")
    ] = False,
) -> None:
    import sys

    from rich.markup import escape

    from fdl import console
    from fdl.errors import FdlUsageError
    from fdl.torch_setup import install_command

    if installer not in (None, "pip", "uv"):
        raise FdlUsageError(f"unknown installer '{installer}'", "use --installer pip or uv")
    target_python = python or sys.executable
    interactive = not (yes or dry_run) and sys.stdin.isatty()
    machine, plan = _plan(target_python, torch_version, variant, interactive=interactive)
    installed = machine.torch
    wrong = mismatched_companions(installed, plan)
    present = already_installed(installed, plan)
    same_build = (
        installed is not None
        and installed.public_version == plan.torch
        and (installed.tag or "") == plan.tag
    )
    skip = present and not force
    command = install_command(
        target_python,
        plan.requirement,
        plan.index_url,
        companions=companion_requirements(installed, plan),
        # only torch's own build needs forcing (the +tag pins switch any other, companions
        # included), and pip's form skips dependencies, which a different build may need
        force=force and same_build,
        installer=installer,
    )
    if skip:
        console.info(f"torch {installed.version} is already installed here (--force reinstalls)")
    else:
        if installed and not same_build:
            console.info(f"replacing torch {installed.version} with {plan.torch}+{plan.tag}")
        if wrong:
            console.info(
                escape(
                    f"{', '.join(wrong)}: not the build of torch {plan.torch}+{plan.tag}, "
                    "moving with it"
                )
            )
        console.info(f"[bold]Command[/bold]: {escape(str(command))}")
    if dry_run:
        console.info("dry run: nothing was installed")
        return
    ran: list[str] = []
    if not skip:
        _run_install(command, target_python, confirmed=yes)
        ran.append(str(command))
    _verify(machine, plan, target_python)
    if libtorch:
        from fdl.commands.libtorch import download_variant

        download_variant(plan.torch, plan.tag, machine.system.platform_key, force=force)
    console.info(
        "[bold green]Done.[/bold green]" + escape(" Ran: " + "; ".join(ran) if ran else "")
    )
    if plan.visible_devices:
        from fdl.variants.resolver import device_env

        console.info(escape(f"Remember: {device_env(plan.visible_devices)}"))


def already_installed(installed: Any, plan: Any) -> bool:
    """Whether ``installed`` (a ``TorchInstall``, or None) is the release and build ``plan`` asks
    for, its installed companions included, so there is nothing to install without ``--force``."""
    return (
        installed is not None
        and installed.public_version == plan.torch
        and (installed.tag or "") == plan.tag
        and not mismatched_companions(installed, plan)
    )


def companion_requirements(installed: Any, plan: Any) -> list[str]:
    """The installed torchvision/torchaudio, pinned to the release and build matching ``plan``."""
    from fdl.torch_setup.install import companion_requirement

    names = sorted(installed.companions) if installed else []
    return [companion_requirement(n, plan.torch, plan.tag, plan.index_url) for n in names]


def mismatched_companions(installed: Any, plan: Any) -> list[str]:
    """``["torchvision 0.29.1+cpu"]``: installed companions that are not the release and build
    matching ``plan`` (a companion without a label is the flavour of the torch beside it)."""
    from fdl.torch_setup.install import companion_version

    wrong = []
    for name, version in sorted((installed.companions if installed else {}).items()):
        public, _, label = version.partition("+")
        if (
            public != companion_version(name, plan.torch)
            or (label or installed.tag or "") != plan.tag
        ):
            wrong.append(f"{name} {version}")
    return wrong


def _plan(python: str, torch_version: str | None, variant: str | None, *, interactive: bool):
    """The machine and the build to install for it, shown; on a terminal, when no build fits
    every GPU and none was forced, the user picks the compromise.

    An NVIDIA driver that is there but lists no GPU (not rebooted after an upgrade, hung, or
    nvidia-smi missing) is refused unless a build is forced: the GPUs are unknown, not absent,
    and choosing the CPU build would replace a working CUDA torch."""
    from fdl.errors import ExitCode, FdlError
    from fdl.hardware import detect
    from fdl.variants import resolve

    machine = detect(docker=False, python=python)
    problem = machine.target().driver_problem
    if problem and variant is None:
        raise FdlError(
            f"cannot choose a build: {problem}",
            "fix the driver first (a reboot, usually), then run fdl setup again; or pass "
            "--variant cpu to install the CPU build on purpose (--variant cu126 etc. for a "
            "CUDA build)",
            ExitCode.UNAVAILABLE,
        )
    plan = resolve(machine.target(), torch=torch_version, tag=variant)
    _show_plan(machine, plan, python)
    if plan.status == "compromise" and variant is None and interactive:
        plan = _choose_build(machine, plan)
    return machine, plan


def _run_install(command: Any, python: str, *, confirmed: bool) -> None:
    """Run the installer, after asking on a terminal unless ``confirmed`` (``-y``). Its output
    goes to stderr as it comes, and is kept to explain a failure."""
    import codecs
    import os
    import subprocess
    import sys

    from fdl import console
    from fdl.errors import ExitCode, FdlError, FdlUsageError

    if not confirmed:
        if not sys.stdin.isatty():
            raise FdlUsageError(
                "no terminal to confirm the install", "re-run with -y to accept the plan"
            )
        from rich.prompt import Confirm

        if not Confirm.ask("Install?", default=True, console=console.console(stderr=True)):
            raise FdlError("setup cancelled; nothing was installed", None, ExitCode.FAILURE)
    proc = subprocess.Popen(command.argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert proc.stdout is not None
    out = proc.stdout.fileno()
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    tail = ""
    for chunk in iter(lambda: os.read(out, 65536), b""):  # as it comes: pip's progress too
        text = decoder.decode(chunk)
        sys.stderr.write(text)
        sys.stderr.flush()
        tail = (tail + text)[-20000:]
    code = proc.wait()
    if code == 0:
        return
    flat = " ".join(tail.split()).lower()
    if "externally-managed-environment" in flat or "externally managed" in flat:
        raise FdlError(
            f"{command.installer} refused to install into {python}: it is an externally managed "
            "(system) Python (PEP 668); nothing was changed",
            "create a virtual environment and install there: python3 -m venv .venv, then "
            "fdl setup --python .venv/bin/python",
        )
    raise FdlError(
        f"{command.installer} failed (exit {code}); the environment may be unchanged or "
        "partly updated",
        f"read the installer output above; the command was: {command}",
    )


def _verify(machine: Any, plan: Any, python: str) -> None:
    """Check the installed torch in a fresh interpreter, on the GPUs the plan covers."""
    from rich.markup import escape

    from fdl import console
    from fdl.errors import FdlError
    from fdl.torch_setup import scope_for, verify_torch

    scope = scope_for(plan, machine.nvidia.gpus)
    console.info("[bold]Verify[/bold] (in a fresh interpreter):")
    for note in scope.notes:
        console.info(escape(f"  {note}"))
    if scope.visible_devices is not None:
        console.info(
            "  with CUDA_DEVICE_ORDER=PCI_BUS_ID "
            f"CUDA_VISIBLE_DEVICES={scope.visible_devices!r}, as the plan says"
        )
    check = verify_torch(
        python, expected_gpus=scope.expected_gpus, visible_devices=scope.visible_devices
    )
    for line in check.lines:
        console.info(escape(f"  {line}"))
    if not check.ok:
        raise FdlError(
            "torch is installed but does not work here: " + "; ".join(check.problems),
            "run 'fdl diagnose' and see docs/setup.md (troubleshooting)",
        )


def register(app: typer.Typer, make_group: Callable[[str, str], typer.Typer]) -> None:
    app.command("setup", help="Install the right torch build for this machine, and verify it.")(
        setup
    )
