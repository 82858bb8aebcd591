"""The examples in flodl.nn's docstrings run and print what they claim."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "flodl.nn.blur",
    "flodl.nn.fn",
    "flodl.nn.functional",
    "flodl.nn.halting",
    "flodl.nn.init",
    "flodl.nn.routing",
    "flodl.nn.shape",
    "flodl.nn.state",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0, f"{name} has no examples"
    assert result.failed == 0
