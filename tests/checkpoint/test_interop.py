"""safetensors export and import."""

from __future__ import annotations

import pytest
import torch

import flodl as fl
from tests.checkpoint.layout import hash_of

safetensors = pytest.importorskip("safetensors.torch")


def test_fdl_to_safetensors_and_back_keeps_data_and_hash(tmp_path):
    named = {
        "w": torch.randn(3, 4),
        "h": torch.arange(5, dtype=torch.bfloat16),
        "b": torch.tensor(True),
    }
    fl.save_checkpoint(tmp_path / "m.fdl", named, None, hash_of("m"))
    fl.fdl_to_safetensors(tmp_path / "m.fdl", tmp_path / "m.safetensors")
    loaded = safetensors.load_file(tmp_path / "m.safetensors")
    assert all(torch.equal(loaded[k], v) for k, v in named.items())
    fl.safetensors_to_fdl(tmp_path / "m.safetensors", tmp_path / "back.fdl")
    info = fl.checkpoint_info(tmp_path / "back.fdl")
    assert info.structural_hash == hash_of("m") and set(info.names) == set(named)


def test_tied_weights_become_copies_for_safetensors(tmp_path):
    shared = torch.randn(4, 4)
    fl.save_checkpoint(tmp_path / "tied.fdl", {"embed": shared, "out": shared})
    fl.fdl_to_safetensors(tmp_path / "tied.fdl", tmp_path / "tied.safetensors")
    loaded = safetensors.load_file(tmp_path / "tied.safetensors")
    assert torch.equal(loaded["embed"], shared) and torch.equal(loaded["out"], shared)


def test_unreadable_safetensors_is_a_checkpoint_error(tmp_path):
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"\xff" * 16)
    with pytest.raises(fl.CheckpointError, match="cannot read safetensors"):
        fl.safetensors_to_fdl(bad, tmp_path / "out.fdl")
