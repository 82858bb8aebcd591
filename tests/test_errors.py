"""The exception hierarchy of flodl and fdl, checked over every module of both packages.

Each package keeps its exceptions in its ``errors.py``; every exception derives from the
package's base (``flodl.FlodlError`` or ``fdl.errors.FdlError``) and its name ends in ``Error``
(a warning's in ``Warning``). flodl's renamed classes answer to their old names with a
``DeprecationWarning``. The trees drawn in ``flodl/errors.py`` and ``fdl/errors.py`` name every
class, so the drawing cannot fall behind the code.
"""

from __future__ import annotations

import importlib
import pkgutil
import warnings
from types import ModuleType

import pytest

import fdl
import fdl.errors
import flodl
import flodl.errors

# Not errors: ``SmokeBudgetReached`` is how the smoke budget ends a script (a ``SystemExit``);
# ``SmokeStopped`` is the interrupt that stopped ``fdl check`` (a ``KeyboardInterrupt``).
NOT_ERRORS = {"flodl.smoke.SmokeBudgetReached", "fdl.porting.smoke.SmokeStopped"}

# (module that defined the old name, old name, errors module, new name)
RENAMED = [
    ("flodl.train.worker", "CollectiveFailed", "flodl.train.errors", "CollectiveError"),
    ("flodl.train.transport", "CoordinatorLost", "flodl.train.errors", "CoordinatorLostError"),
    ("flodl.checkpoint.api", "Mismatched", "flodl.checkpoint.errors", "HashRefusedError"),
]


def _library_modules() -> list[ModuleType]:
    """Every module of flodl and fdl, imported (``__main__`` entry points excepted)."""
    modules: list[ModuleType] = [flodl, fdl]
    for package in (flodl, fdl):
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            if info.name.rsplit(".", 1)[-1] == "__main__":
                continue
            modules.append(importlib.import_module(info.name))
    return modules


def _subclasses(root: type) -> set[type]:
    found, pending = set(), [root]
    while pending:
        for sub in pending.pop().__subclasses__():
            if sub not in found:
                found.add(sub)
                pending.append(sub)
    return found


def _library_exceptions() -> list[type[BaseException]]:
    """Every exception class defined in flodl or fdl: module level, nested or made at run time."""
    _library_modules()
    mine = [
        cls
        for cls in _subclasses(BaseException)
        if cls.__module__.split(".")[0] in ("flodl", "fdl")
    ]
    return sorted(mine, key=lambda c: f"{c.__module__}.{c.__qualname__}")


def problems(cls: type[BaseException], module: str | None = None) -> list[str]:
    """What is wrong with ``cls`` as a flodl/fdl exception defined in ``module`` (its own by
    default); empty when nothing."""
    module = module or cls.__module__
    where = f"{module}.{cls.__name__}"
    if where in NOT_ERRORS:
        return []
    found = []
    if module.rsplit(".", 1)[-1] != "errors":
        found.append(f"{where} is not defined in its package's errors.py")
    if issubclass(cls, Warning):
        if not cls.__name__.endswith("Warning"):
            found.append(f"{where}: a warning's name ends in Warning")
        return found
    base = flodl.errors.FlodlError if module.startswith("flodl") else fdl.errors.FdlError
    if not issubclass(cls, base):
        found.append(f"{where} does not derive from {base.__module__}.{base.__name__}")
    if not cls.__name__.endswith("Error"):
        found.append(f"{where}: an exception's name ends in Error")
    return found


def test_every_library_exception_is_in_errors_py_derives_from_the_base_and_ends_in_error():
    classes = _library_exceptions()
    names = {c.__name__ for c in classes}
    # the walk reaches the subpackages' errors (so passing is not an empty loop)
    assert {"PathError", "CollectiveError", "HfError", "ManifestError", "DownloadError"} <= names
    assert [p for cls in classes for p in problems(cls)] == []


def test_the_check_reports_each_rule_a_class_breaks():
    class CollectiveFailed(RuntimeError):  # the shape the rename fixed
        pass

    class Stalled(Exception):
        pass

    class Loud(UserWarning):
        pass

    assert problems(CollectiveFailed, "flodl.train.worker") == [
        "flodl.train.worker.CollectiveFailed is not defined in its package's errors.py",
        "flodl.train.worker.CollectiveFailed does not derive from flodl.errors.FlodlError",
        "flodl.train.worker.CollectiveFailed: an exception's name ends in Error",
    ]
    assert problems(Stalled, "fdl.downloads.engine")[1] == (
        "fdl.downloads.engine.Stalled does not derive from fdl.errors.FdlError"
    )
    assert problems(Loud, "flodl.data.errors") == [
        "flodl.data.errors.Loud: a warning's name ends in Warning"
    ]
    assert problems(flodl.errors.FlodlError) == []


@pytest.mark.parametrize("package", [flodl.errors, fdl.errors], ids=["flodl", "fdl"])
def test_the_top_level_tree_names_every_class_of_its_package(package):
    doc = package.__doc__ or ""
    root = package.__name__.split(".")[0]
    classes = [c for c in _library_exceptions() if c.__module__.split(".")[0] == root]
    missing = [c.__name__ for c in classes if c.__name__ not in doc]
    assert missing == []


def test_each_errors_module_draws_its_own_classes():
    for cls in _library_exceptions():
        module = importlib.import_module(cls.__module__)
        if f"{cls.__module__}.{cls.__qualname__}" in NOT_ERRORS:
            continue
        assert cls.__name__ in (module.__doc__ or ""), f"{cls.__module__} does not draw {cls}"


@pytest.mark.parametrize(("module", "old", "home", "new"), RENAMED, ids=[r[1] for r in RENAMED])
def test_an_old_name_still_works_and_warns(module, old, home, new):
    mod = importlib.import_module(module)
    current = getattr(importlib.import_module(home), new)
    with pytest.warns(
        DeprecationWarning, match=rf"{module}\.{old} is deprecated: it is now {home}\.{new}"
    ):
        assert getattr(mod, old) is current
    namespace: dict[str, object] = {}
    with pytest.warns(DeprecationWarning, match=new):
        exec(f"from {module} import {old}", namespace)
    assert namespace[old] is current
    assert old not in vars(mod)  # only the alias answers: the class lives in errors.py


@pytest.mark.parametrize("module", sorted({r[0] for r in RENAMED}))
def test_a_missing_name_next_to_an_alias_is_still_an_attribute_error(module):
    mod = importlib.import_module(module)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(AttributeError, match="no_such_name"):
            mod.no_such_name  # noqa: B018
        assert not hasattr(mod, "CollectiveFailure")


def test_renamed_errors_keep_their_builtin_bases():
    from flodl.train.errors import CollectiveError, CoordinatorGoneError, CoordinatorLostError

    assert issubclass(CollectiveError, RuntimeError)
    assert issubclass(CoordinatorLostError, RuntimeError)
    assert issubclass(CoordinatorGoneError, flodl.TrainingError)
    assert issubclass(fdl.errors.FdlError, Exception)
    from fdl.tasks.errors import SchemaError

    err = SchemaError(("options", "help"), "option --help shadows a reserved fdl flag")
    assert isinstance(err, ValueError)
    assert str(err) == "option --help shadows a reserved fdl flag"


def test_a_collective_failure_report_is_a_consequence_not_the_cause():
    from flodl.train.builder_runtime import first_cause

    consequence = (1, "Traceback ...\nflodl.train.errors.CollectiveError: averaging failed")
    cause = (0, "Traceback ...\nValueError: bad batch")
    assert first_cause([consequence, cause]) == cause
    assert first_cause([consequence]) == consequence
