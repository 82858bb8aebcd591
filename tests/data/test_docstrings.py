"""The examples in flodl.data's docstrings run and print what they claim."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import flodl.data

MODULES = sorted(m.name for m in pkgutil.walk_packages(flodl.data.__path__, prefix="flodl.data."))


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0


def test_every_public_name_has_a_docstring():
    for name in flodl.data.__all__:
        obj = getattr(flodl.data, name)
        if callable(obj) or isinstance(obj, type):
            assert (obj.__doc__ or "").strip(), name
