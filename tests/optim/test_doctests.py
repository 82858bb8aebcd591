"""The examples in flodl.optim's docstrings run and print what they claim."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "flodl.optim.schedulers",
    "flodl.optim.lr",
    "flodl.optim.factories",
    "flodl.optim.clip",
    "flodl.optim.param_groups",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0, f"{name} has no examples"
    assert result.failed == 0
