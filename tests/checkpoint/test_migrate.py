"""Migration to a model's current names (the original's v1 → v2 path)."""

from __future__ import annotations

import io

import pytest
import torch

import flodl as fl
from tests.checkpoint.layout import FIXTURES, fixture_entries


def file_of(named) -> io.BytesIO:
    buf = io.BytesIO()
    fl.save_checkpoint(buf, named)
    buf.seek(0)
    return buf


def migrate(named_old, params, buffers=None):
    out = io.BytesIO()
    report = fl.migrate_checkpoint_file(file_of(named_old), out, params, buffers)
    out.seek(0)
    return report, out


def test_every_name_changed_is_remapped_and_loads():
    a, b = torch.randn(3, 4), torch.randn(4)
    report, out = migrate(
        {"linear_0/weight": a, "linear_0/bias": b},
        {"enc/weight": torch.zeros(3, 4), "enc/bias": torch.zeros(4)},
    )
    assert report.remapped == [("linear_0/weight", "enc/weight"), ("linear_0/bias", "enc/bias")]
    assert report.is_complete()
    back = fl.read_checkpoint(out)
    assert torch.equal(back["enc/weight"], a) and torch.equal(back["enc/bias"], b)


def test_partial_renames_keep_exact_matches():
    report, _ = migrate(
        {"shared/weight": torch.ones(2), "linear_0/weight": torch.ones(3)},
        {"shared/weight": torch.zeros(2), "encoder/weight": torch.zeros(3)},
    )
    assert report.unchanged == ["shared/weight"]
    assert report.remapped == [("linear_0/weight", "encoder/weight")]


def test_parameters_and_buffers():
    report, out = migrate(
        {"p_0": torch.ones(2), "b_0": torch.full((3,), 2.0)},
        {"param": torch.zeros(2)},
        {"buf": torch.zeros(3)},
    )
    assert len(report.remapped) == 2
    buf = torch.zeros(3)
    assert fl.load_checkpoint(out, {"param": torch.zeros(2)}, {"buf": buf}).complete
    assert torch.equal(buf, torch.full((3,), 2.0))


def test_dropped_and_missing():
    report, _ = migrate(
        {"kept": torch.ones(2), "removed/weight": torch.ones(5)},
        {"kept": torch.zeros(2), "added/weight": torch.zeros(7)},
    )
    assert report.unchanged == ["kept"]
    assert report.dropped == ["removed/weight"] and report.missing == ["added/weight"]
    assert not report.is_complete()


def test_identical_shapes_map_in_order_and_dtype_must_match():
    x, y = torch.full((2,), 1.0), torch.full((2,), 2.0)
    report, out = migrate(
        {"old_a": x, "old_i": torch.ones(2, dtype=torch.int64), "old_b": y},
        {
            "new_a": torch.zeros(2),
            "new_b": torch.zeros(2),
            "new_i": torch.zeros(2, dtype=torch.int64),
        },
    )
    assert report.remapped == [("old_a", "new_a"), ("old_b", "new_b"), ("old_i", "new_i")]
    back = fl.read_checkpoint(out)
    assert list(back) == ["new_a", "new_b", "new_i"]  # model order
    assert torch.equal(back["new_a"], x) and torch.equal(back["new_b"], y)


def test_migrating_the_originals_v1_file_writes_v2_without_hash(tmp_path):
    targets = [(f"layer{i}/{n}", t) for i, (n, t) in enumerate(fixture_entries())]
    dst = tmp_path / "migrated.fdl"
    report = fl.migrate_checkpoint_file(FIXTURES / "original_v1.fdl", dst, targets)
    assert report.is_complete() and len(report.remapped) == len(targets)
    assert dst.read_bytes()[:8] == b"FDLC\x02\x00\x00\x00"
    info = fl.checkpoint_info(dst)
    assert info.version == 2 and info.structural_hash is None and info.verified
    loaded = fl.read_checkpoint(dst)
    for name, tensor in targets:
        assert torch.equal(loaded[name], tensor)


def test_report_display_matches_the_original():
    report = fl.MigrateReport(
        unchanged=["shared/weight"],
        remapped=[("old/bias", "new/bias")],
        dropped=["x"],
        missing=["y"],
    )
    assert str(report) == (
        "unchanged (1):\n  shared/weight\nremapped (1):\n  old/bias -> new/bias\n"
        "dropped (1):\n  x\nmissing (1):\n  y"
    )


def test_source_and_destination_must_differ(tmp_path):
    path = tmp_path / "m.fdl"
    fl.save_checkpoint(path, {"w": torch.ones(1)})
    before = path.read_bytes()
    for dst in (path, tmp_path / "." / "m.fdl"):
        with pytest.raises(fl.CheckpointError, match="same file"):
            fl.migrate_checkpoint_file(path, dst, {"v": torch.zeros(1)})
    link = tmp_path / "link.fdl"
    link.symlink_to(path)
    with pytest.raises(fl.CheckpointError, match="same file"):
        fl.migrate_checkpoint_file(path, link, {"v": torch.zeros(1)})
    assert path.read_bytes() == before
