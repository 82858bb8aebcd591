"""The examples in the graph layer's docstrings run and print what they show."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "flodl.graph.builder",
    "flodl.graph.errors",
    "flodl.graph.graph",
    "flodl.graph.hashing",
    "flodl.graph.merge",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    result = doctest.testmod(
        importlib.import_module(name), optionflags=doctest.NORMALIZE_WHITESPACE
    )
    assert result.failed == 0
