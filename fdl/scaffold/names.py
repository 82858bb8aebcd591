"""Project names: what ``fdl init NAME`` accepts, and the package name derived from it."""

from __future__ import annotations

import keyword
import re
import sys

from fdl.errors import FdlUsageError

_ALLOWED = re.compile(r"^[A-Za-z0-9_-]+$")
# Package names that would shadow what the project imports.
_SHADOWING = {"flodl", "fdl", "torch", "numpy", "test", "tests", "src"}
MAX_LENGTH = 64  # a directory, a package and a distribution name: keep it typeable
# Device names Windows reserves in every directory (any case): such a folder cannot be created
# or cloned there.
_WINDOWS_RESERVED = {"con", "prn", "aux", "nul"} | {
    f"{p}{i}" for p in ("com", "lpt") for i in range(1, 10)
}


def package_name(name: str) -> str:
    """The Python package for project ``name``: lower case, ``-`` -> ``_``.

    >>> package_name("My-Model")
    'my_model'
    """
    return name.replace("-", "_").lower()


def validate(name: str) -> str:
    """Check ``name`` and return its package name; raise a usage error saying what to change."""
    if not name:
        raise FdlUsageError("the project name is empty", "e.g. fdl init my-model")
    if len(name) > MAX_LENGTH:
        raise FdlUsageError(
            f"project name '{name[:20]}...' is {len(name)} characters long; "
            f"the limit is {MAX_LENGTH}",
            "pick a shorter name (it names the directory, the package and the distribution)",
        )
    if not _ALLOWED.match(name):
        bad = sorted({c for c in name if not re.match(r"[A-Za-z0-9_-]", c)})
        raise FdlUsageError(
            f"project name '{name}' contains {', '.join(repr(c) for c in bad)}",
            "use only letters, digits, '-' and '_' (e.g. my-model)",
        )
    if name.lower() in _WINDOWS_RESERVED:
        raise FdlUsageError(
            f"project name '{name}' is a device name Windows reserves (con, prn, aux, nul, "
            "com1-9, lpt1-9)",
            "such a folder cannot be created or cloned on Windows; pick another name",
        )
    package = package_name(name)
    if not package[0].isalpha():
        raise FdlUsageError(
            f"project name '{name}' must start with a letter",
            "its Python package name is derived from it (e.g. model-2, not 2-model)",
        )
    if not name[-1].isalnum():
        raise FdlUsageError(
            f"project name '{name}' must end with a letter or digit",
            f"it is also the distribution name, which must begin and end with one (PEP 508), "
            f"or the project cannot be installed: e.g. {name.rstrip('-_') or 'my-model'}",
        )
    if keyword.iskeyword(package) or package in _SHADOWING or package in sys.stdlib_module_names:
        raise FdlUsageError(
            f"project name '{name}' gives the package name '{package}', which would shadow "
            "a module your code imports",
            f"pick a more specific name (e.g. {package}-model)",
        )
    return package
