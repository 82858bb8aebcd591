"""The examples in the graph-tree modules' docstrings run and print what they show."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "flodl.graph.paths",
    "flodl.graph.tree",
    "flodl.graph.observe",
    "flodl.graph.trend",
    "flodl.graph.profile",
    "flodl.graph.traces",
    "flodl.graph.timing",
    "flodl.graph.visual",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0
    assert result.attempted > 0
