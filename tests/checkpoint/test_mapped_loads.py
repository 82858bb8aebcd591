"""Memory-mapped loads, verify=False, lazily read training-state extras, `fdl checkpoint info`."""

from __future__ import annotations

import json
import struct

import pytest
import torch
from torch import nn

import flodl as fl


def _flip_payload_bit(path, entry_name: str) -> None:
    data = bytearray(path.read_bytes())
    start = data.index(entry_name.encode()) + len(entry_name)
    (ndim,) = struct.unpack("<I", data[start : start + 4])
    payload = start + 4 + 8 * ndim + 9
    data[payload] ^= 0x10
    path.write_bytes(bytes(data))


def test_mapped_load_copies_out_of_the_file(tmp_path):
    torch.manual_seed(0)
    src = nn.Linear(16, 8)
    path = tmp_path / "m.fdl"
    fl.save_checkpoint(path, src.named_parameters())
    target = nn.Linear(16, 8)
    report = fl.load_checkpoint(path, target.named_parameters())
    assert report.verified and torch.equal(target.weight, src.weight)
    path.write_bytes(b"\0" * path.stat().st_size)  # the model does not view the file
    assert torch.equal(target.weight, src.weight)
    target.weight.data.add_(1)  # and stays writable
    assert not torch.equal(target.weight, src.weight)


def test_verify_false_skips_only_the_payload_checksums(tmp_path):
    torch.manual_seed(0)
    path = tmp_path / "m.fdl"
    fl.save_checkpoint(path, {"w": torch.randn(64), "b": torch.randn(4)})
    _flip_payload_bit(path, "w")
    w, b = torch.zeros(64), torch.zeros(4)
    with pytest.raises(fl.CheckpointError, match="checksum mismatch in entry 'w'"):
        fl.load_checkpoint(path, {"w": w, "b": b})
    assert not w.any() and not b.any()
    report = fl.load_checkpoint(path, {"w": w, "b": b}, verify=False)
    assert report.loaded == ["w", "b"] and not report.verified
    assert "not verified: checksums skipped (verify=False)" in repr(report)
    with pytest.raises(fl.CheckpointError, match="verify=False"):
        fl.load_checkpoint(path, {"w": w}, verify=False, require_verified=True)
    # the structure is still checked: a damaged trailer is refused even with verify=False
    data = bytearray(path.read_bytes())
    data[-3] ^= 1
    path.write_bytes(bytes(data))
    with pytest.raises(fl.CheckpointError, match="trailer"):
        fl.load_checkpoint(path, {"w": w}, verify=False)


def test_graph_load_verify_false(tmp_path):
    g = fl.FlowBuilder(nn.Linear(3, 3)).build()
    g.save_checkpoint(tmp_path / "g.fdl")
    report = g.load_checkpoint(tmp_path / "g.fdl", verify=False)
    assert report.complete and report.integrity.endswith("(verify=False)")


def test_training_state_extras_are_independent_of_the_file(tmp_path):
    model = nn.Linear(4, 2)
    opt = torch.optim.Adam(model.parameters())
    model(torch.randn(3, 4)).sum().backward()
    opt.step()
    extra = {"ema": torch.arange(5.0)}
    fl.save_training_state(tmp_path / "t.fdl", model, opt, extra=extra, epoch=1)
    fresh = nn.Linear(4, 2)
    state = fl.load_training_state(tmp_path / "t.fdl", fresh)  # no optimizer: not materialised
    (tmp_path / "t.fdl").write_bytes(b"\0" * (tmp_path / "t.fdl").stat().st_size)
    assert torch.equal(state.extra["ema"], torch.arange(5.0))
    state.extra["ema"].add_(1)  # writable, its own memory
    assert torch.equal(fresh.weight, model.weight)
    fl.save_training_state(tmp_path / "t.fdl", model, opt, extra=extra, epoch=1)
    opt2 = torch.optim.Adam(fresh.parameters())
    fl.load_training_state(tmp_path / "t.fdl", fresh, opt2)
    (tmp_path / "t.fdl").write_bytes(b"\0" * (tmp_path / "t.fdl").stat().st_size)
    assert torch.equal(opt2.state[fresh.weight]["exp_avg"], opt.state[model.weight]["exp_avg"])
    fresh(torch.randn(3, 4)).sum().backward()
    opt2.step()  # the optimizer's state is its own memory, updated in place


def test_cli_checkpoint_info_shows_integrity(tmp_path, run_fdl):
    path = tmp_path / "m.fdl"
    fl.save_checkpoint(path, {"w": torch.ones(2, 3)})
    result = run_fdl("checkpoint", "info", str(path))
    assert result.returncode == 0, result.stderr
    assert "integrity  checksums verified" in result.stdout and "w" in result.stdout
    data = path.read_bytes()
    (body_len,) = struct.unpack("<Q", data[-16:-8])
    path.write_bytes(data[:body_len])
    result = run_fdl("checkpoint", "info", str(path))
    assert result.returncode == 0 and "not verified: no integrity trailer" in result.stdout
    result = run_fdl("checkpoint", "info", "--json", "--require-verified", str(path))
    assert result.returncode == 1
    assert json.loads(result.stdout)["integrity"] == "not verified: no integrity trailer"
    assert result.stderr.startswith("error:") and "not verified" in result.stderr
    result = run_fdl("checkpoint", "info", str(tmp_path / "missing.fdl"))
    assert result.returncode == 2 and "no such file" in result.stderr
    path.write_bytes(b"JUNK" + bytes(40))
    result = run_fdl("checkpoint", "info", str(path))
    assert result.returncode == 1 and "bad magic" in result.stderr
