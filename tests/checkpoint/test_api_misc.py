"""Small API contracts: the error hierarchy, raw version reporting, fsync=False, docstring examples."""

from __future__ import annotations

import doctest
import importlib
import io

import pytest
import torch

import flodl as fl
from tests.checkpoint.layout import header

MODULES = [
    "errors",
    "api",
    "migrate",
    "optimizer",
    "sidecar",
    "rust_graph",
    "rust_optim",
    "explain",
]


def test_checkpoint_error_is_a_flodl_error_and_all_names_are_exported():
    assert issubclass(fl.CheckpointError, fl.FlodlError)
    for name in fl.checkpoint.__all__:
        assert getattr(fl, name) is getattr(fl.checkpoint, name)


def test_checkpoint_version_reports_the_raw_field():
    # Only the magic is checked, so callers can see what they are holding.
    assert fl.checkpoint_version(io.BytesIO(header(0, version=99))) == 99
    with pytest.raises(fl.CheckpointError, match="unsupported checkpoint version 99"):
        fl.read_checkpoint(io.BytesIO(header(0, version=99)))
    with pytest.raises(fl.CheckpointError, match="empty file"):
        fl.checkpoint_version(io.BytesIO(b""))


def test_fsync_false_still_writes_atomically(tmp_path):
    path = tmp_path / "m.fdl"
    fl.save_checkpoint(path, {"w": torch.ones(3)}, fsync=False)
    assert torch.equal(fl.read_checkpoint(path)["w"], torch.ones(3))
    assert [p.name for p in tmp_path.iterdir()] == ["m.fdl"]


@pytest.mark.parametrize("module", MODULES)
def test_docstring_examples(module):
    mod = importlib.import_module(f"flodl.checkpoint.{module}")
    result = doctest.testmod(mod, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0
