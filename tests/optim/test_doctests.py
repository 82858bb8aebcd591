"""The examples in the docstrings of this subsystem run and print what they claim."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "flodl.optim.schedulers",
    "flodl.optim.lr",
    "flodl.optim.factories",
    "flodl.optim.clip",
    "flodl.random",
    "flodl.device",
    "flodl.nn.functional",
    "flodl.nn.init",
    "flodl.nn.blur",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0, f"{name} has no examples"
    assert result.failed == 0
