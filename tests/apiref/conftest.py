"""Every api-ref / porting test gets its own FLODL_HOME, so the cache never touches ~/.flodl."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def private_flodl_home(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("FLODL_HOME", str(tmp_path_factory.mktemp("flodl-home")))
