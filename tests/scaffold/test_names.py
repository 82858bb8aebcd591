"""Project names and the package names derived from them."""

from __future__ import annotations

import pytest

from fdl.errors import FdlUsageError
from fdl.scaffold.names import package_name, shadowed_modules, validate


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
        # what flodl, torch and the project's tools import: the project would fail out of the box
        ("pytest", "would shadow"),
        ("typing_extensions", "would shadow"),
        ("typing-extensions", "would shadow"),
        ("sympy", "would shadow"),
        ("psutil", "would shadow"),
        ("numpy", "would shadow"),
        ("yaml", "would shadow"),
        ("filelock", "would shadow"),
        ("Jinja2", "would shadow"),
        ("setuptools", "would shadow"),
        ("safetensors", "would shadow"),  # the hf extra's
    ],
)
def test_invalid_names_say_what_to_change(name, message):
    with pytest.raises(FdlUsageError) as info:
        validate(name)
    assert message in info.value.what
    assert info.value.hint


def test_every_installed_module_of_flodls_dependencies_is_refused():
    # computed from the installed distributions, not only from a maintained list: the modules
    # of flodl's dependencies (its hf extra's included) and of theirs
    import re
    from importlib import metadata

    def requirements(dist: str, extras: tuple[str, ...] = ()) -> set[str]:
        try:
            requires = metadata.requires(dist) or []
        except metadata.PackageNotFoundError:
            return set()
        names = set()
        for requirement in requires:
            name, _, marker = requirement.partition(";")
            extra = re.search(r"extra\s*==\s*[\"']([^\"']+)", marker)
            if extra is None or extra.group(1) in extras:
                names.add(re.match(r"[A-Za-z0-9._-]+", name.strip()).group(0).lower())
        return names

    direct = requirements("flodl", ("hf",))
    closure = direct | {n for d in direct for n in requirements(d)}
    modules = {
        module.lower()
        for module, dists in metadata.packages_distributions().items()
        if module.isidentifier()
        and {d.lower().replace("_", "-") for d in dists} & {c.replace("_", "-") for c in closure}
    }
    assert {"torch", "yaml", "click"} <= modules  # what this environment has
    assert modules <= shadowed_modules(), sorted(modules - shadowed_modules())


def test_an_existing_projects_name_can_skip_the_shadowing_check():
    # answers of a project made before its name was refused still load (--update works)
    assert validate("yaml", shadowing=False) == "yaml"
    with pytest.raises(FdlUsageError, match="would shadow"):
        validate("class", shadowing=False)
    with pytest.raises(FdlUsageError, match="contains"):
        validate("../evil", shadowing=False)
