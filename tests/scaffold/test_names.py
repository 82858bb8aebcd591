"""Project names and the package names derived from them."""

from __future__ import annotations

import pytest

from fdl.errors import FdlUsageError
from fdl.scaffold.names import package_name, validate


@pytest.mark.parametrize(
    ("name", "package"),
    [("my-model", "my_model"), ("Net_2", "net_2"), ("a", "a"), ("x-y-z", "x_y_z")],
)
def test_valid_names(name, package):
    assert validate(name) == package == package_name(name)


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("", "the project name is empty"),
        ("my model", "contains ' '"),
        ("../escape", "contains '.', '/'"),
        ("café", "contains 'é'"),
        ("2fast", "must start with a letter"),
        ("-x", "must start with a letter"),
        ("class", "would shadow"),
        ("torch", "would shadow"),
        ("json", "would shadow"),
        ("flodl", "would shadow"),
    ],
)
def test_invalid_names_say_what_to_change(name, message):
    with pytest.raises(FdlUsageError) as info:
        validate(name)
    assert message in info.value.what
    assert info.value.hint
