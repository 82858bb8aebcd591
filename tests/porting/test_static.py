"""The static half of `fdl check`: which flodl names a script uses, and which do not exist."""

from __future__ import annotations

from pathlib import Path

import pytest

from fdl.apiref.extract import extract
from fdl.apiref.source import find_source
from fdl.porting.static import check_source

MINI = Path(__file__).resolve().parents[1] / "apiref" / "fixtures" / "mini"


@pytest.fixture(scope="module")
def ref():
    return extract(find_source(MINI))


def codes(source: str, ref) -> list[tuple[int, str, str]]:
    findings, _ = check_source(source, "s.py", ref)
    return [(f.line, f.severity, f.target) for f in findings]


def test_a_correct_script_has_no_findings_and_reports_what_it_uses(ref):
    source = (
        "import flodl as fl\nfrom torch import nn\n"
        "g = fl.FlowBuilder(nn.Linear(2, 2)).through(nn.ReLU()).tag('h').build()\n"
        "g.freeze('h')\ng.state_dict()\ng.train()\nfl.MergeOp.ADD\n"
        "fl.nn.functional.focal_loss\nfl.optim.StepDecay(0.1, 10).lr(3)\n"
    )
    findings, used = check_source(source, "s.py", ref)
    assert findings == []
    assert {
        "flodl.FlowBuilder.through",
        "flodl.FlowBuilder.build",
        "flodl.Graph.freeze",
        "flodl.MergeOp.ADD",
        "flodl.nn.functional.focal_loss",
        "flodl.optim.StepDecay.lr",
    } <= used


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("import flodl.graff\n", [(1, "error", "flodl.graff")]),
        ("from flodl.nn import Nope\n", [(1, "error", "flodl.nn.Nope")]),
        ("import flodl.nn as fnn\nfnn.Nope\n", [(2, "error", "flodl.nn.Nope")]),
        ("import flodl\nflodl.graph.Nope\n", [(2, "error", "flodl.graph.Nope")]),
        (
            "from flodl import graph\ngraph.FlowBuilder().nope()\n",
            [(2, "error", "flodl.FlowBuilder.nope")],
        ),
        (
            "from flodl.graph import FlowBuilder as FB\nFB.from_modules().tag('a').zap\n",
            [(2, "error", "flodl.FlowBuilder.zap")],
        ),
        ("import flodl as fl\nfl.MergeOp.SUM\n", [(2, "error", "flodl.MergeOp.SUM")]),
        (
            "import flodl as fl\nfl.optim.StepDecay(1, 2).nope\n",
            [(2, "error", "flodl.optim.StepDecay.nope")],
        ),
    ],
)
def test_unknown_names_are_found_wherever_they_are_reached(ref, source, expected):
    assert codes(source, ref) == expected


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("import flodl as fl\nfl.optim.param_groups(1)\n", []),
        ("from flodl.optim.param_groups import param_groups\nparam_groups(1)\n", []),
        ("from flodl.optim import param_groups\nparam_groups(1)\n", []),
        (
            "import flodl as fl\nfl.optim.param_groups.param_groups(1)\n",
            [(2, "error", "flodl.optim.param_groups.param_groups")],
        ),
    ],
)
def test_a_function_re_bound_over_its_submodule_is_the_function(ref, source, expected):
    # flodl/optim/__init__.py: `from flodl.optim.param_groups import param_groups`
    assert codes(source, ref) == expected


def test_explicit_reexports_are_known_where_they_are_exported(ref):
    ok = "import flodl as fl\nfl.checkpoint.checkpoint_version('a.fdl')\n"
    assert codes(ok, ref) == []
    top = "import flodl as fl\nfl.checkpoint_version('a.fdl')\n"
    assert codes(top, ref) == [(2, "error", "flodl.checkpoint_version")]


def test_attribute_of_a_flodl_function_says_it_is_a_function(ref):
    findings, _ = check_source(
        "import flodl as fl\nfl.optim.param_groups.param_groups\n", "s.py", ref
    )
    assert [f.render() for f in findings] == [
        "s.py:2:23: error[unknown-attribute]: `fl.optim.param_groups.param_groups` does not "
        "exist: fl.optim.param_groups is a function, not a module — did you mean "
        "`fl.optim.param_groups`?"
    ]


def test_chains_follow_declared_return_types_through_helper_builders(ref):
    source = "import flodl as fl\nfl.FlowBuilder().loop_body(1).for_n(2).through(3).oops()\n"
    assert codes(source, ref) == [(2, "error", "flodl.FlowBuilder.oops")]


def test_assigned_values_are_tracked_and_shadowed_by_parameters(ref):
    source = (
        "import flodl as fl\n"
        "model = fl.FlowBuilder().build()\n"
        "model.freez('x')\n"  # tracked: a Graph (a warning: Graphs grow attributes, see below)
        "def train(model):\n    model.anything()\n"  # a parameter: not the Graph above
        "model = 3\nmodel.real\n"  # rebound: no longer a Graph
    )
    assert codes(source, ref) == [(3, "warning", "flodl.Graph.freez")]


# The rule: a missing attribute is an error, except on an *instance* whose class or a base
# defines __getattr__ (every Graph is a torch.nn.Module: children by label), where it is a
# warning, whatever flodl names it resembles; the smoke run settles it.
def test_a_child_module_by_label_is_not_an_error_even_near_flodl_names(ref):
    findings, _ = check_source(
        "import flodl as fl\nmodel = fl.FlowBuilder().build()\nmodel.encoder\n", "s.py", ref
    )
    [finding] = findings
    assert (finding.severity, finding.target) == ("warning", "flodl.Graph.encoder")
    assert finding.suggestions == []  # `.code`/`.node` would send an assistant the wrong way
    assert "child module, parameter or buffer" in finding.message


def test_a_very_near_miss_on_a_growing_instance_is_suggested_but_a_warning(ref):
    findings, _ = check_source(
        "import flodl as fl\nfl.FlowBuilder().build().freez('x')\n", "s.py", ref
    )
    assert [(f.severity, f.suggestions) for f in findings] == [("warning", [".freeze"])]


def test_typos_on_builders_classes_and_modules_stay_errors(ref):
    source = (
        "import flodl as fl\n"
        "fl.FlowBuilder().throug(1)\n"  # a builder chain: FlowBuilder has no __getattr__
        "fl.Graph.freez\n"  # a class: __getattr__ serves instances only
        "fl.Flowbuilder\n"  # a module-level name
    )
    assert codes(source, ref) == [
        (2, "error", "flodl.FlowBuilder.throug"),
        (3, "error", "flodl.Graph.freez"),
        (4, "error", "flodl.Flowbuilder"),
    ]


def test_unknown_attribute_on_a_torch_module_subclass_is_only_a_warning(ref):
    # nn.Module has __getattr__ (child modules), so an unrelated name may exist at run time.
    assert codes("import flodl as fl\nfl.Graph().encoder\n", ref) == [
        (2, "warning", "flodl.Graph.encoder")
    ]


def test_a_flodl_class_with_getattr_makes_unknown_attributes_warnings(ref):
    assert codes("import flodl as fl\nt = fl.Tree()\nt.encoder\nt.pahts\n", ref) == [
        (3, "warning", "flodl.Tree.encoder"),
        (4, "warning", "flodl.Tree.pahts"),
    ]


def test_flodl_mixins_are_not_named_as_foreign_bases():
    from tests.porting.support import live_api

    findings, _ = check_source(
        "import flodl as fl\nfl.FlowBuilder().build().encoder\n", "s.py", live_api()
    )
    [finding] = findings
    assert finding.severity == "warning"
    assert "not in flodl or torch.nn.Module:" in finding.message
    assert "flodl.graph." not in finding.message


def test_torch_methods_inherited_by_flodl_classes_are_known(ref):
    source = "import flodl as fl\ng = fl.Graph()\ng.parameters(); g.to('cpu'); g.eval(); g.load_state_dict({})\n"
    assert codes(source, ref) == []


def test_submodule_not_loaded_by_import_flodl_needs_an_import(tmp_path):
    pkg = tmp_path / "flodl"
    (pkg / "extra").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "extra" / "__init__.py").write_text("def f():\n    pass\n")
    ref = extract(find_source(tmp_path))
    assert codes("import flodl as fl\nfl.extra.f()\n", ref) == [(2, "error", "flodl.extra")]
    assert codes("import flodl as fl\nimport flodl.extra\nfl.extra.f()\n", ref) == []


def test_suggestions_use_the_scripts_own_spelling(ref):
    findings, _ = check_source("import flodl as F\nF.StateAdd\nF.flowbuilder\n", "s.py", ref)
    assert [f.suggestions for f in findings] == [["F.nn.StateAdd"], ["F.FlowBuilder"]]


def test_other_packages_and_relative_imports_are_ignored(ref):
    source = "import torch\nimport flodlx\nfrom . import flodl\ntorch.nn.Nope\nflodlx.Nope\n"
    assert codes(source, ref) == []


def test_syntax_error_is_one_located_finding(ref):
    findings, used = check_source("x = (\n", "s.py", ref)
    assert [(f.line, f.code) for f in findings] == [(1, "syntax-error")] and used == set()
