"""The exact installer command fdl setup announces and runs."""

from __future__ import annotations

import stat

import pytest

from fdl.errors import FdlError
from fdl.torch_setup import install_command

INDEX = "https://download.pytorch.org/whl/cu126"


def test_pip_form_moves_companions_and_forces(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # no uv
    cmd = install_command(
        "/env/bin/python",
        "torch==2.14.0",
        INDEX,
        companions=["torchaudio", "torchvision"],
        force=True,
    )
    assert cmd.installer == "pip"
    assert cmd.argv == [
        "/env/bin/python",
        "-m",
        "pip",
        "install",
        "--disable-pip-version-check",
        "torch==2.14.0",
        "torchaudio",
        "torchvision",
        "--index-url",
        INDEX,
        "--force-reinstall",
    ]


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
        "/env/bin/python", "torch==2.14.0", INDEX, companions=["torchvision"], force=True
    )
    assert cmd.installer == "uv"
    assert cmd.argv == [
        str(uv),
        "pip",
        "install",
        "--python",
        "/env/bin/python",
        "torch==2.14.0",
        "torchvision",
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
