"""Overlays, inherit-from chains and the deep merge with provenance."""

from __future__ import annotations

from pathlib import Path

import pytest

from fdl.errors import FdlError
from fdl.tasks.layers import inherit_chain, list_envs, load_layers, merge, overlay_path
from fdl.tasks.source import Source


def layer(name: str, data: dict) -> Source:
    return Source(Path(name), data)


def test_scalars_replace_maps_merge_lists_replace():
    base = layer("fdl.yml", {"a": 1, "m": {"x": 1, "y": 2}, "l": [1, 2, 3]})
    over = layer("fdl.ci.yml", {"a": 2, "m": {"y": 3, "z": 4}, "l": [9]})
    merged = merge([base, over])
    assert merged.data == {"a": 2, "m": {"x": 1, "y": 3, "z": 4}, "l": [9]}
    assert merged.origin == {"a": 1, "m": {"x": 0, "y": 1, "z": 1}, "l": 1}


def test_null_deletes_leaves_and_whole_blocks():
    base = layer("fdl.yml", {"m": {"x": 1, "y": 2}, "gone": {"deep": 1}})
    merged = merge([base, layer("fdl.ci.yml", {"m": {"x": None}, "gone": None})])
    assert merged.data == {"m": {"y": 2}}
    assert "gone" not in merged.origin


def test_type_changes_replace_wholesale_in_both_directions():
    base = layer("fdl.yml", {"a": {"x": 1}, "b": 5})
    merged = merge([base, layer("o.yml", {"a": "flat", "b": {"now": "map"}})])
    assert merged.data == {"a": "flat", "b": {"now": "map"}}
    assert merged.origin == {"a": 1, "b": {"now": 1}}


def test_three_layers_merge_left_to_right_without_mutating_inputs():
    a = layer("a", {"k": {"v": 1, "w": 1}})
    b = layer("b", {"k": {"v": 2}})
    c = layer("c", {"k": {"w": 3}})
    merged = merge([a, b, c])
    assert merged.data == {"k": {"v": 2, "w": 3}}
    assert merged.origin == {"k": {"v": 1, "w": 2}}
    assert a.data == {"k": {"v": 1, "w": 1}}


def test_base_nulls_are_kept_they_mean_an_empty_command():
    merged = merge([layer("fdl.yml", {"commands": {"sub": None}})])
    assert merged.data == {"commands": {"sub": None}}


def test_env_listing_ignores_examples_backups_and_other_files(tmp_path):
    for name in [
        "fdl.yml",
        "fdl.ci.yml",
        "fdl.gpu.yaml",
        "fdl.yml.example",
        "fdl.yml.bak",
        "other.ci.yml",
    ]:
        (tmp_path / name).write_text("{}")
    assert list_envs(tmp_path / "fdl.yml") == ["ci", "gpu"]


def test_overlay_prefers_yml_over_yaml(tmp_path):
    (tmp_path / "fdl.ci.yaml").write_text("{}")
    (tmp_path / "fdl.ci.yml").write_text("{}")
    assert overlay_path(tmp_path / "fdl.yml", "ci") == tmp_path / "fdl.ci.yml"
    assert overlay_path(tmp_path / "fdl.yml", "nope") is None


def test_missing_env_is_an_error_naming_it(tmp_path):
    (tmp_path / "fdl.yml").write_text("{}")
    with pytest.raises(FdlError, match="environment 'prod' not found"):
        load_layers(tmp_path / "fdl.yml", "prod")


def test_inherit_from_puts_parents_first_and_strips_the_key(tmp_path):
    (tmp_path / "shared").mkdir()
    (tmp_path / "shared" / "base.yml").write_text("description: shared\nx: 1\n")
    (tmp_path / "fdl.yml").write_text("inherit-from: shared/base.yml\nx: 2\n")
    chain = inherit_chain(tmp_path / "fdl.yml")
    assert [s.path.name for s in chain] == ["base.yml", "fdl.yml"]
    assert merge(chain).data == {"description": "shared", "x": 2}


def test_env_overlay_inheriting_the_base_is_deduplicated(tmp_path):
    (tmp_path / "fdl.yml").write_text("x: 1\n")
    (tmp_path / "mixin.yml").write_text("y: 2\n")
    (tmp_path / "fdl.ci.yml").write_text("inherit-from: mixin.yml\nz: 3\n")
    layers = load_layers(tmp_path / "fdl.yml", "ci")
    assert [s.path.name for s in layers] == ["fdl.yml", "mixin.yml", "fdl.ci.yml"]
    (tmp_path / "fdl.ci.yml").write_text("inherit-from: fdl.yml\nz: 3\n")
    assert [s.path.name for s in load_layers(tmp_path / "fdl.yml", "ci")] == [
        "fdl.yml",
        "fdl.ci.yml",
    ]


def test_inherit_from_cycles_and_bad_values_are_errors(tmp_path):
    (tmp_path / "a.yml").write_text("inherit-from: b.yml\n")
    (tmp_path / "b.yml").write_text("inherit-from: a.yml\n")
    with pytest.raises(FdlError, match="inherit-from cycle"):
        inherit_chain(tmp_path / "a.yml")
    (tmp_path / "c.yml").write_text("inherit-from: missing.yml\n")
    with pytest.raises(FdlError, match=r"c\.yml:1: inherit-from: missing\.yml not found"):
        inherit_chain(tmp_path / "c.yml")
    (tmp_path / "d.yml").write_text("inherit-from: 3\n")
    with pytest.raises(FdlError, match="must be a file path"):
        inherit_chain(tmp_path / "d.yml")
    (tmp_path / "e.yml").write_text("inherit-from: null\nx: 1\n")
    assert merge(inherit_chain(tmp_path / "e.yml")).data == {"x": 1}


def test_error_location_follows_the_layer_that_wrote_the_key(tmp_path):
    (tmp_path / "fdl.yml").write_text("commands:\n  t:\n    run: a\n")
    (tmp_path / "fdl.ci.yml").write_text("# ci\ncommands:\n  t:\n    run: 5\n")
    merged = merge(load_layers(tmp_path / "fdl.yml", "ci"))
    assert merged.source_of(("commands", "t", "run")).path.name == "fdl.ci.yml"
    assert "fdl.ci.yml:4" in merged.error(("commands", "t", "run"), "bad").what
