"""The examples in flodl.hf's (and fdl add's) docstrings run and print what they show."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "flodl.hf.model",
    "flodl.hf.hub",
    "flodl.hf.tokenizer",
    "flodl.hf.convert",
    "fdl.scaffold.features",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0
