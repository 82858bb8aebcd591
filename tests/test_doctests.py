"""Every docstring example in flodl and fdl runs and prints what it claims.

The modules in WITH_EXAMPLES must keep having examples: they are where a reader of the API looks
first (the packages' everyday names).
"""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import fdl
import flodl

FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE

WITH_EXAMPLES = [
    *(f"flodl.optim.{m}" for m in ("schedulers", "lr", "factories", "clip", "param_groups")),
    *(
        f"flodl.nn.{m}"
        for m in ("blur", "fn", "functional", "halting", "init", "routing", "shape", "state")
    ),
    *(
        f"flodl.graph.{m}"
        for m in (
            *("builder", "errors", "graph", "hashing", "merge", "paths", "tree", "observe"),
            *("trend", "profile", "traces", "timing", "visual"),
        )
    ),
    *(
        f"flodl.monitor.{m}"
        for m in (
            *("format", "eta", "resources", "monitor", "tensorboard", "graph_view"),
            *("messages", "timeline", "axis"),
        )
    ),
    "fdl.scaffold.features",
]
HF_WITH_EXAMPLES = [f"flodl.hf.{m}" for m in ("model", "hub", "tokenizer", "convert")]


def modules(package) -> list[str]:
    return [
        info.name
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + ".")
        if not info.name.endswith("__main__")  # an entry point runs on import
    ]


def all_modules() -> list[str]:
    # flodl.hf needs its extra: test_the_hf_examples_run covers it.
    return [n for p in (flodl, fdl) for n in modules(p) if not n.startswith("flodl.hf")]


def run_examples(name: str) -> doctest.TestResults:
    module = importlib.import_module(name)
    runner = doctest.DocTestRunner(optionflags=FLAGS)
    for test in doctest.DocTestFinder(exclude_empty=True).find(module, name):
        runner.run(test)
    return runner.summarize(verbose=False)


@pytest.mark.parametrize("name", all_modules())
def test_docstring_examples_run(name):
    result = run_examples(name)
    assert result.failed == 0
    assert result.attempted > 0 or name not in WITH_EXAMPLES, f"{name} has no examples"


def test_the_hf_examples_run():
    hf = pytest.importorskip("flodl.hf", exc_type=ImportError)
    pytest.importorskip("transformers")
    results = {name: run_examples(name) for name in modules(hf)}
    assert [n for n, r in results.items() if r.failed] == []
    assert [n for n in HF_WITH_EXAMPLES if results[n].attempted == 0] == []


def test_the_listed_modules_exist():
    assert sorted(set(WITH_EXAMPLES) - set(all_modules())) == []
