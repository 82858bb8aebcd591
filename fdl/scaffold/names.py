"""Project names: what ``fdl init NAME`` accepts, and the package name derived from it."""

from __future__ import annotations

import functools
import keyword
import re
import sys

from fdl.errors import FdlUsageError

_ALLOWED = re.compile(r"^[A-Za-z0-9_-]+$")
# Package names that would shadow what the project imports: its own code and layout...
_SHADOWING = {"flodl", "fdl", "test", "tests", "src"}
# ...and the top-level modules of flodl's dependencies (theirs too), of its extras that
# `fdl add` adds (hf, gpu), and of the project's dev tools (pytest, ruff, the hatchling build):
# a package named like one is imported in its place (`import yaml` in flodl finding the
# project's src/yaml), or the other way round. Kept for the machines where some are not
# installed (the project is installed elsewhere too); shadowed_modules() adds what is installed.
_DEPENDENCY_MODULES = {
    # flodl's dependencies
    "torch", "torchgen", "functorch", "numpy", "typer", "rich", "requests", "jinja2", "docker",
    "yaml", "_yaml", "psutil", "griffe", "xxhash", "_xxhash",
    # theirs (torch's include its Linux CUDA wheels, in the nvidia namespace, and triton)
    "filelock", "typing_extensions", "sympy", "isympy", "mpmath", "networkx", "fsspec",
    "setuptools", "pkg_resources", "_distutils_hack", "triton", "nvidia", "markupsafe", "click",
    "shellingham", "markdown_it", "mdurl", "pygments", "charset_normalizer", "idna", "urllib3",
    "certifi", "colorama", "annotated_doc",
    # the hf and gpu extras (and theirs)
    "safetensors", "huggingface_hub", "tokenizers", "tqdm", "hf_xet", "packaging", "pynvml",
    # the project's dev tools
    "pytest", "_pytest", "py", "pluggy", "iniconfig", "ruff", "hatchling",
}  # fmt: skip
# The distributions whose dependency closure the project imports (flodl with these extras).
_ROOTS = ("flodl", "pytest", "ruff", "hatchling")
_FLODL_EXTRAS = ("hf", "gpu")
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


def shadowed_modules() -> frozenset[str]:
    """Lower-case names a project's package must not take (see ``_DEPENDENCY_MODULES``): the
    maintained list, plus the top-level modules of the installed distributions of the
    dependency closure of flodl (its ``hf`` and ``gpu`` extras included), pytest, ruff and
    hatchling."""
    return frozenset(_SHADOWING | _DEPENDENCY_MODULES | _installed_dependency_modules())


@functools.cache
def _installed_dependency_modules() -> frozenset[str]:
    from importlib import metadata

    def normal(dist: str) -> str:
        return re.sub(r"[-_.]+", "-", dist).lower()

    modules: dict[str, set[str]] = {}
    for module, dists in metadata.packages_distributions().items():
        for dist in dists:
            modules.setdefault(normal(dist), set()).add(module.lower())
    seen: set[str] = set()
    todo = list(_ROOTS)
    while todo:
        dist = normal(todo.pop())
        if dist in seen:
            continue
        seen.add(dist)
        try:
            requires = metadata.requires(dist) or []
        except metadata.PackageNotFoundError:
            continue
        for requirement in requires:
            name, _, marker = requirement.partition(";")
            extra = re.search(r"""\bextra\s*==\s*["']([^"']+)""", marker)
            if extra and not (dist == "flodl" and extra.group(1) in _FLODL_EXTRAS):
                continue  # another extra: not installed with the project
            # other markers are not evaluated: a dependency on some platform counts everywhere
            if match := re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", name):
                todo.append(match.group(1))
    return frozenset(m for dist in seen for m in modules.get(dist, ()) if m.isidentifier())


def validate(name: str, *, shadowing: bool = True) -> str:
    """Check ``name`` and return its package name; raise a usage error saying what to change.

    ``shadowing=False`` leaves out the check against the modules the project imports (an
    existing project's answers: one made before its name was refused must still update)."""
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
    shadows = shadowing and (package in sys.stdlib_module_names or package in shadowed_modules())
    if keyword.iskeyword(package) or shadows:
        raise FdlUsageError(
            f"project name '{name}' gives the package name '{package}', which would shadow "
            "a module your code imports",
            f"pick a more specific name (e.g. {package}-model)",
        )
    return package
