"""The examples in the monitor's docstrings run and print what they claim."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "format",
    "eta",
    "resources",
    "monitor",
    "tensorboard",
    "graph_view",
    "messages",
    "timeline",
    "axis",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(f"flodl.monitor.{name}")
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0, f"flodl.monitor.{name} has no examples"
    assert result.failed == 0
