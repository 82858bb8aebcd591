"""User strings never become code in the generated forward: hostile tags, keywords, module and
input names are literals, sanitised ids or build errors — never a SyntaxError or an injection."""

from __future__ import annotations

import ast
import re

import pytest
import torch
from torch import nn

import flodl as fl

from .helpers import Scale

HOSTILE = [
    "my-ref",
    "class",
    "a'); import os; ('",
    'x"""\nimport os\n"""',
    "line\nbreak",
    "tab\tand\\backslash",
    "ünïcode",
]


class TakesAnything(nn.Module):
    """x + Σ keyword refs; remembers the keywords it received."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[str] = []

    def forward(self, x, **refs):
        self.seen = list(refs)
        for v in refs.values():
            x = x + v
        return x


class EvilStr(str):
    """A str whose repr and format would paste code if the generator trusted them."""

    def __repr__(self) -> str:
        return "__import__('os').system('echo pwned')"

    def __format__(self, spec: str) -> str:
        return "__import__('os')"


def only_generated_names(graph: fl.Graph) -> None:
    """Every name in graph.code is one the generator made; no imports; the source parses."""
    tree = ast.parse(graph.code)
    assert not [n for n in ast.walk(tree) if isinstance(n, ast.Import | ast.ImportFrom)]
    allowed = re.compile(r"^(self|input|range|Exception|_[a-z0-9_]*|v_[a-z0-9_]+)$", re.I)
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    names |= {a.arg for n in ast.walk(tree) if isinstance(n, ast.arguments) for a in n.args}
    names |= {n.arg for n in ast.walk(tree) if isinstance(n, ast.keyword) and n.arg}
    names |= {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    extra = {n for n in names if not re.fullmatch(r"[a-z_]+", n) and not allowed.match(n)}
    assert not extra - set(graph.inputs), f"unexpected names in generated code: {extra}"


@pytest.mark.parametrize("key", HOSTILE)
def test_any_keyword_ref_reaches_a_kwargs_module(key):
    receiver = TakesAnything()
    g = fl.FlowBuilder(Scale(1.0)).tag("t").through(receiver).using(**{key: "t"}).build()
    out = g(torch.ones(1, 2))
    assert receiver.seen == [key]
    torch.testing.assert_close(out, torch.full((1, 2), 2.0))
    only_generated_names(g)


def test_identifier_keywords_stay_plain_keyword_arguments():
    g = fl.FlowBuilder().tag("t").through(TakesAnything()).using(ctx="t").build()
    assert "(input, ctx=input)" in g.code  # the readable form, when it is safe


def test_a_keyword_the_module_cannot_take_is_a_build_error_at_the_call_site():
    class TakesCtx(nn.Module):
        def forward(self, x, ctx):
            return x + ctx

    b = fl.FlowBuilder().tag("t").through(TakesCtx()).using(**{"my-ref": "t"})
    line = __import__("inspect").currentframe().f_lineno - 1
    with pytest.raises(fl.GraphBuildError) as info:
        b.build()
    message = str(info.value)
    assert "cannot receive refs 't'" in message and f"test_codegen_safety.py:{line}" in message


@pytest.mark.parametrize("tag", [t for t in HOSTILE if "." not in t])
def test_hostile_tags_are_literals(tag):
    g = (
        fl.FlowBuilder(Scale(2.0))
        .tag(tag)
        .through(TakesAnything())
        .using(ref=tag)
        .through(fl.nn.StateAdd())
        .using(tag + "_later")
        .through(Scale(1.0))
        .tag(tag + "_later")
        .build()
    )
    out = g(torch.ones(1, 2))
    torch.testing.assert_close(g.tagged(tag), torch.full((1, 2), 2.0))
    torch.testing.assert_close(out, torch.full((1, 2), 4.0))
    torch.testing.assert_close(g(torch.ones(1, 2)), torch.full((1, 2), 8.0))  # state kept
    assert tag in {n.value for n in ast.walk(ast.parse(g.code)) if isinstance(n, ast.Constant)}
    only_generated_names(g)
    g.enable_profiling()
    g(torch.ones(1, 2))
    only_generated_names(g)


def test_a_str_subclass_cannot_override_its_literal():
    tag = EvilStr("evil")
    g = fl.FlowBuilder(Scale(2.0)).tag(tag).through(TakesAnything()).using(ref=tag).build()
    assert "__import__" not in g.code and "pwned" not in g.code
    g(torch.ones(1, 2))
    assert g.tagged("evil") is not None
    only_generated_names(g)


def test_hostile_module_names_become_clean_node_ids():
    hostile = type("Evil'); import os; ('", (nn.Module,), {"forward": lambda self, x: x * 3})
    named = Scale(1.0)
    named.node_name = "x = 1\nimport os"
    g = fl.FlowBuilder(hostile()).through(named).through(lambda t: t + 1).build()
    ids = [n.id for n in g.nodes]
    assert all(re.fullmatch(r"[a-z0-9_]+", i) for i in ids), ids
    assert ids[0].startswith("evil_import_os")
    torch.testing.assert_close(g(torch.ones(1)), torch.full((1,), 4.0))
    only_generated_names(g)


def test_hostile_labels_and_nested_graphs_still_build():
    child = fl.FlowBuilder(Scale(2.0)).tag("t").label("bad label'\n").build()
    g = fl.FlowBuilder(child).through(Scale(1.0)).build()
    torch.testing.assert_close(g(torch.ones(1)), torch.full((1,), 2.0))
    only_generated_names(g)


@pytest.mark.parametrize(
    "name",
    ["my-input", "class", "ctx; import os", "ünïcode", "x\n", EvilStr("ctx"), 3, "range", "self"],
)
def test_input_names_that_are_not_plain_identifiers_are_build_errors(name):
    with pytest.raises(fl.GraphBuildError, match="an input name is an ASCII Python identifier"):
        fl.FlowBuilder().input(name).build()


def test_merge_ops_only_hold_known_kinds_and_int_dims():
    with pytest.raises(ValueError, match="unknown merge op"):
        fl.MergeOp("x); import os; (")
    with pytest.raises(TypeError, match="dim must be an int"):
        fl.MergeOp("cat", "1); import os; (")
    with pytest.raises(TypeError, match="dim must be an int"):
        fl.MergeOp.CAT(1.5)
    assert fl.MergeOp.CAT(1) == fl.MergeOp("cat", 1)
