"""``fdl setup``'s command function and its decision helper, called directly (no app, no
subprocess): which installs are skipped, what a dry run prints, and bad options."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from fdl.commands import setup as setup_command
from fdl.errors import FdlUsageError


def installed(version: str = "2.9.1", tag: str | None = "cu128", **extra):
    return SimpleNamespace(
        version=f"{version}+{tag}" if tag else version,
        public_version=version,
        tag=tag,
        companions=extra.get("companions", {}),
    )


def plan(torch: str = "2.9.1", tag: str = "cu128"):
    return SimpleNamespace(
        torch=torch,
        tag=tag,
        requirement=f"torch=={torch}+{tag}",
        index_url=f"https://download.pytorch.org/whl/{tag}",
        visible_devices=None,
    )


@pytest.mark.parametrize(
    ("torch_installed", "wanted", "expected"),
    [
        (None, plan(), False),  # nothing installed
        (installed(), plan(), True),  # the release and build the plan asks for
        (installed(tag="cu126"), plan(), False),  # another build of the same release
        (installed(version="2.8.0"), plan(), False),  # another release
        (installed(tag=None), plan(tag=""), True),  # an unlabelled (PyPI) build
        (installed(tag=None), plan(), False),
        # a companion of another build (or release) is not "already installed": it moves too
        (installed(companions={"torchvision": "0.24.1+cu128"}), plan(), True),
        (installed(companions={"torchvision": "0.24.1+cpu"}), plan(), False),
        (installed(companions={"torchaudio": "2.8.0+cu128"}), plan(), False),
    ],
)
def test_already_installed_compares_release_and_build(torch_installed, wanted, expected):
    assert setup_command.already_installed(torch_installed, wanted) is expected


def test_an_unknown_installer_is_a_usage_error_before_anything_is_probed(monkeypatch):
    def probe(*args, **kwargs):
        raise AssertionError("the machine was probed")

    monkeypatch.setattr(setup_command, "_plan", probe)
    with pytest.raises(FdlUsageError, match="unknown installer 'conda'"):
        setup_command.setup(installer="conda")


@pytest.fixture
def planned(monkeypatch):
    """``setup`` with the machine and plan given: returns the list of installs it ran."""
    ran: list[str] = []

    def use(torch_installed, wanted):
        machine = SimpleNamespace(torch=torch_installed)
        monkeypatch.setattr(setup_command, "_plan", lambda *a, **k: (machine, wanted))
        monkeypatch.setattr(
            setup_command, "_run_install", lambda command, *a, **k: ran.append(str(command))
        )
        monkeypatch.setattr(setup_command, "_verify", lambda *a: None)
        return ran

    return use


def test_a_dry_run_prints_the_install_command_and_runs_nothing(planned, capsys):
    ran = planned(installed(tag="cu126"), plan())
    setup_command.setup(dry_run=True, installer="pip", python="/opt/env/bin/python")
    err = " ".join(capsys.readouterr().err.split())
    assert "replacing torch 2.9.1+cu126 with 2.9.1+cu128" in err
    assert "/opt/env/bin/python -m pip install" in err and "torch==2.9.1+cu128" in err
    assert "dry run: nothing was installed" in err
    assert ran == []


def test_the_planned_build_already_installed_is_not_reinstalled(planned, capsys):
    ran = planned(installed(), plan())
    setup_command.setup(yes=True, installer="pip", python="/opt/env/bin/python")
    err = " ".join(capsys.readouterr().err.split())
    assert "torch 2.9.1+cu128 is already installed here (--force reinstalls)" in err
    assert "Done." in err and "Ran:" not in err
    assert ran == []


def test_force_reinstalls_the_planned_build(planned, capsys):
    ran = planned(installed(), plan())
    setup_command.setup(yes=True, force=True, installer="pip", python="/opt/env/bin/python")
    assert len(ran) == 1 and "torch==2.9.1+cu128" in ran[0]
    assert ran[0].endswith("--force-reinstall --no-deps")  # torch only, not its dependencies
    assert "Ran: " in capsys.readouterr().err
