"""Every public name of flodl.data is documented (its examples run in tests/test_doctests.py)."""

from __future__ import annotations

import flodl.data


def test_every_public_name_has_a_docstring():
    for name in flodl.data.__all__:
        obj = getattr(flodl.data, name)
        if callable(obj) or isinstance(obj, type):
            assert (obj.__doc__ or "").strip(), name
