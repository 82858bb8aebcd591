"""The exact installer command fdl setup announces and runs."""

from __future__ import annotations

import stat

import pytest

from fdl.errors import FdlError
from fdl.torch_setup import install_command

INDEX = "https://download.pytorch.org/whl/cu126"


def test_pip_form_moves_companions_and_forces_only_them(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # no uv
    cmd = install_command(
        "/env/bin/python",
        "torch==2.14.0+cu126",
        INDEX,
        companions=["torchaudio==2.14.0+cu126", "torchvision==0.29.0+cu126"],
        force=True,
    )
    assert cmd.installer == "pip"
    # --no-deps: a bare --force-reinstall would reinstall every dependency as well (for a CUDA
    # build, gigabytes of nvidia-* wheels)
    assert cmd.argv == [
        "/env/bin/python",
        "-m",
        "pip",
        "install",
        "--disable-pip-version-check",
        "torch==2.14.0+cu126",
        "torchaudio==2.14.0+cu126",
        "torchvision==0.29.0+cu126",
        "--index-url",
        INDEX,
        "--force-reinstall",
        "--no-deps",
    ]


def test_companion_releases_follow_torchs():
    from fdl.torch_setup.install import companion_requirement

    # the pairs PyPI has, e.g. torch 2.9.1 / torchvision 0.24.1 / torchaudio 2.9.1
    assert companion_requirement("torchvision", "2.9.1", "cu128", INDEX) == (
        "torchvision==0.24.1+cu128"
    )
    assert companion_requirement("torchvision", "2.6.0", "cpu", INDEX) == "torchvision==0.21.0+cpu"
    assert companion_requirement("torchaudio", "2.8.0", "cu126", INDEX) == "torchaudio==2.8.0+cu126"
    assert companion_requirement("torchaudio", "2.9.1", "cpu", None) == "torchaudio==2.9.1"


def test_http_mirror_is_a_trusted_host_and_pypi_has_no_index(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    cmd = install_command("py", "torch==2.14.0", "http://10.0.0.5:8080/whl/cpu")
    assert cmd.argv[-2:] == ["--trusted-host", "10.0.0.5"]
    assert "--index-url" not in install_command("py", "torch==2.14.0", None).argv  # macOS: PyPI


def test_uv_is_preferred_when_on_path(monkeypatch, tmp_path):
    uv = tmp_path / "uv"
    uv.write_text("#!/bin/sh\n")
    uv.chmod(uv.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", str(tmp_path))
    cmd = install_command(
        "/env/bin/python",
        "torch==2.14.0",
        INDEX,
        companions=["torchvision==0.29.0+cu126"],
        force=True,
    )
    assert cmd.installer == "uv"
    assert cmd.argv == [
        str(uv),
        "pip",
        "install",
        "--python",
        "/env/bin/python",
        "torch==2.14.0",
        "torchvision==0.29.0+cu126",
        "--index-url",
        INDEX,
        "--reinstall-package",
        "torch",
        "--reinstall-package",
        "torchvision",
    ]
    assert install_command("py", "torch", INDEX, installer="pip").installer == "pip"


def test_forcing_uv_without_uv_is_an_error(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(FdlError, match="uv is not on PATH"):
        install_command("py", "torch", INDEX, installer="uv")


@pytest.mark.parametrize("torch", ["2.0.1", "1.13.1", "2.15.0.dev20260101"])
def test_companions_of_a_release_outside_the_rule_are_refused_not_guessed(torch):
    # 2.0.1 shipped torchvision 0.15.2 (not 0.15.1), 1.13 torchvision 0.14; nightlies a .dev date
    from fdl.torch_setup.install import companion_version

    with pytest.raises(ValueError, match=f"no companion rule for torch {torch}"):
        companion_version("torchvision", torch)
