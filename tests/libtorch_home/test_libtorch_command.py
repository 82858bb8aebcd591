"""``fdl libtorch``'s command functions and decision helpers, called directly (no app, no
subprocess): which release is picked, option checks, a dry run, list and info."""

from __future__ import annotations

import json

import pytest

from fdl.commands import libtorch
from fdl.errors import FdlError, FdlUsageError
from fdl.variants import load_table


def test_pick_release_takes_the_newest_release_with_the_build():
    table = load_table()
    release, build = libtorch.pick_release(table, None, "cpu")
    assert release is next(r for r in table.releases if r.build("cpu"))
    assert build.tag == "cpu"
    oldest = table.releases[-1]
    assert libtorch.pick_release(table, oldest.torch, "cpu")[0] is oldest


def test_pick_release_refuses_a_build_no_release_has():
    with pytest.raises(FdlUsageError, match="no torch release in the table has a 'cu999' build"):
        libtorch.pick_release(load_table(), None, "cu999")


def test_pick_release_lists_the_builds_of_a_pinned_release_that_lacks_one():
    table = load_table()
    release = table.releases[0]
    with pytest.raises(FdlUsageError, match=f"torch {release.torch} has no 'cu999' libtorch") as e:
        libtorch.pick_release(table, release.torch, "cu999")
    assert e.value.hint == "available: " + ", ".join(b.tag for b in release.builds)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"sha256": "ab" * 32, "verify": False}, "--sha256 and --no-verify contradict"),
        ({"require_verified": True, "verify": False}, "--no-verify contradicts"),
        ({"sha256": "not-hex"}, "sha256"),
        ({"stall_timeout": "soon"}, "stall"),
        ({"max_extract_ratio": "-1"}, "ratio"),
    ],
)
def test_bad_options_are_usage_errors_before_any_download(tmp_path, options, message):
    with pytest.raises(FdlUsageError, match=message):
        libtorch.download_variant(None, "cpu", "linux-x86_64", path=str(tmp_path), **options)
    assert list(tmp_path.iterdir()) == []


def test_a_dry_run_says_what_and_where_and_writes_nothing(tmp_path):
    summary = libtorch.download_variant(
        None, "cpu", "linux-x86_64", path=str(tmp_path / "lt"), dry_run=True
    )
    newest = libtorch.pick_release(load_table(), None, "cpu")[0]
    assert summary["dry_run"] is True and summary["torch"] == newest.torch
    assert summary["path"] == str(tmp_path / "lt" / "precompiled" / "cpu")
    assert summary["url"].startswith("https://download.pytorch.org/libtorch/cpu/")
    assert not (tmp_path / "lt").exists()


def test_list_and_info_on_an_empty_home(tmp_path, capsys):
    libtorch.list_(json_out=True, path=str(tmp_path))
    assert json.loads(capsys.readouterr().out) == []
    with pytest.raises(FdlError, match="no active libtorch variant") as e:
        libtorch.info(path=str(tmp_path))
    assert e.value.hint == "run 'fdl libtorch download'"
