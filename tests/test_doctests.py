"""Every docstring example in flodl and fdl runs and prints what it claims.

The packages' own doctest tests also check that their key modules have examples; this one makes
sure no module's examples go unrun.
"""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import fdl
import flodl


def modules_with_examples() -> list[str]:
    names = []
    for package in (flodl, fdl):
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            if info.name.endswith("__main__") or info.name.startswith("flodl.hf"):
                continue  # an entry point runs on import; flodl.hf needs its extra (below)
            names.append(info.name)
    return names


def run_examples(name: str) -> doctest.TestResults:
    module = importlib.import_module(name)
    finder = doctest.DocTestFinder(exclude_empty=True)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    for test in finder.find(module, name):
        runner.run(test)
    return runner.summarize(verbose=False)


@pytest.mark.parametrize("name", modules_with_examples())
def test_docstring_examples_run(name):
    assert run_examples(name).failed == 0


def test_the_hf_examples_run():
    pytest.importorskip("transformers")
    names = [
        info.name
        for info in pkgutil.walk_packages(importlib.import_module("flodl.hf").__path__, "flodl.hf.")
    ]
    assert [n for n in names if run_examples(n).failed] == []
