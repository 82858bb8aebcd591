"""Small API contracts: the error hierarchy, raw version reporting, fsync=False, docstring examples,
and calls with a model or a path in the wrong place."""

from __future__ import annotations

import doctest
import importlib
import io

import pytest
import torch
from torch import nn

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


def _model() -> fl.Graph:
    return fl.FlowBuilder(nn.Linear(2, 3)).through(nn.BatchNorm1d(3)).build()


@pytest.mark.parametrize(
    ("call", "says"),
    [
        (lambda m, p: fl.save_checkpoint(m, p), "got a Graph as dest"),  # torch.save's order
        (lambda m, p: fl.save_checkpoint(p, m), "got a Graph for named_params"),
        (lambda m, p: fl.load_checkpoint(m, p), "got a Graph as src"),
        (lambda m, p: fl.load_checkpoint(str(p), str(p)), "got the path"),
    ],
    ids=["save-model-first", "save-model-as-tensors", "load-model-first", "load-path-twice"],
)
def test_a_model_or_path_in_the_wrong_place_says_how_to_call_it(tmp_path, call, says):
    model, path = _model(), tmp_path / "m.fdl"
    with pytest.raises(fl.CheckpointError, match="takes a path \\(or binary file\\) first") as e:
        call(model, path)
    assert says in str(e.value)
    assert "model.named_parameters(), model.named_buffers()" in str(e.value)
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_the_way_the_error_suggests_saves_and_loads_a_plain_module(tmp_path):
    path = tmp_path / "m.fdl"
    torch.manual_seed(0)
    saved = nn.Sequential(nn.Linear(2, 3), nn.BatchNorm1d(3))
    saved(torch.randn(4, 2))  # running statistics move
    fl.save_checkpoint(path, saved.named_parameters(), saved.named_buffers())
    loaded = nn.Sequential(nn.Linear(2, 3), nn.BatchNorm1d(3))
    report = fl.load_checkpoint(path, loaded.named_parameters(), loaded.named_buffers())
    assert not report.missing and not report.skipped
    for key, value in saved.state_dict().items():
        assert torch.equal(value, loaded.state_dict()[key]), key
