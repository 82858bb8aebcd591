"""A FlowBuilder used as what it describes, an unfinished loop_body/map, and a merge of
mismatched branches: each error says what to write instead, and where."""

from __future__ import annotations

import inspect
import re

import pytest
import torch
from torch import nn

import flodl as fl


def here() -> int:
    """The line number of the caller (to check the builder line an error names)."""
    return inspect.currentframe().f_back.f_lineno


def unbuilt() -> fl.FlowBuilder:
    return fl.FlowBuilder(nn.Linear(2, 3)).through(nn.ReLU())


def test_calling_an_unbuilt_builder_names_build():
    with pytest.raises(fl.NotBuiltError, match=r"\.build\(\) returns the module") as info:
        unbuilt()(torch.randn(1, 2))
    assert isinstance(info.value, TypeError) and isinstance(info.value, fl.FlodlError)


@pytest.mark.parametrize(
    "use",
    [
        lambda b: torch.optim.Adam(b.parameters()),  # the parameters of the model
        lambda b: torch.optim.SGD(b, lr=0.1),  # the model itself (an iterable of parameters)
        lambda b: b.to("cpu"),
        lambda b: b.eval(),
        lambda b: b.state_dict(),
        lambda b: b.save_checkpoint("model.fdl"),  # a Graph method, not only nn.Module's
        lambda b: b.tagged("features"),
    ],
)
def test_using_an_unbuilt_builder_as_a_module_names_build(use):
    with pytest.raises(fl.NotBuiltError, match=r"\.build\(\)"):
        use(unbuilt())


def test_a_builder_passed_to_through_names_build():
    with pytest.raises(fl.GraphBuildError, match=r"through\(inner\.build\(\)\)"):
        fl.FlowBuilder(nn.Linear(2, 3)).through(unbuilt()).build()


@pytest.mark.parametrize(
    ("method", "end"),
    [("loop_body", lambda pending: pending.for_n(2)), ("map", lambda pending: pending.each())],
)
def test_a_builder_given_as_a_body_is_reported_at_the_call_that_took_it(method, end):
    b = fl.FlowBuilder(nn.Linear(3, 3))
    pending = getattr(b, method)(unbuilt())
    line = here() - 1
    with pytest.raises(fl.GraphBuildError) as info:
        end(pending).build()
    assert len(info.value.issues) == 1
    issue = info.value.issues[0]
    assert issue.method == method and issue.site.lineno == line
    assert f".{method}(inner.build())" in str(info.value)


def test_builders_still_behave_as_plain_objects():
    builder = unbuilt()
    assert not hasattr(builder, "parameters")  # NotBuiltError is an AttributeError too
    with pytest.raises(AttributeError, match="no attribute 'thruogh'"):
        builder.thruogh  # noqa: B018  a typo is a plain AttributeError
    model = builder.build()
    assert model(torch.randn(4, 2)).shape == (4, 3)


def test_through_after_an_unfinished_loop_body_names_its_endings():
    line = here() + 1
    loop = fl.FlowBuilder(nn.Linear(2, 3)).loop_body(nn.Linear(3, 3))
    with pytest.raises(fl.NotBuiltError) as info:
        loop.through(nn.ReLU())
    message = str(info.value)
    for ending in ("for_n(n)", "while_cond(cond, max_iter)", "until_cond(cond, max_iter)"):
        assert ending in message
    assert f"test_builder_hints.py:{line}" in message
    assert isinstance(info.value, AttributeError)  # what Python raised before


def test_an_unfinished_map_names_its_endings():
    with pytest.raises(fl.NotBuiltError, match=r"\.each\(\), \.over\(tag\) or \.slices\(n\)"):
        fl.FlowBuilder(nn.Linear(2, 3)).map(nn.Linear(3, 3)).build()


def test_a_loop_body_left_unfinished_fails_the_build_naming_its_line():
    builder = fl.FlowBuilder(nn.Linear(2, 3))
    line = here() + 1
    builder.loop_body(nn.Linear(3, 3))  # never finished: the loop is not in the graph
    with pytest.raises(fl.GraphBuildError) as info:
        builder.through(nn.ReLU()).build()
    assert "loop_body(...) was never finished" in str(info.value)
    assert f"test_builder_hints.py:{line}" in str(info.value)
    assert "for_n(n)" in str(info.value)


def test_finished_loops_and_maps_build():
    model = (
        fl.FlowBuilder(nn.Linear(2, 3))
        .loop_body(nn.Linear(3, 3))
        .for_n(2)
        .map(nn.Linear(3, 3))
        .each()
        .build()
    )
    assert model(torch.randn(4, 2)).shape == (4, 3)


def error_notes(model: fl.Graph, x: torch.Tensor) -> str:
    with pytest.raises(RuntimeError) as info:
        model(x)
    return "\n".join(getattr(info.value, "__notes__", []))


def test_a_merge_shape_error_lists_every_branch_with_its_shape_and_line():
    line = here() + 3
    model = (
        fl.FlowBuilder(nn.Linear(2, 3))
        .split(nn.Linear(3, 4), nn.Linear(3, 5), nn.Linear(3, 4))
        .merge(fl.MergeOp.ADD)
        .build()
    )
    notes = error_notes(model, torch.randn(2, 2))
    assert "the merge (MergeOp.ADD) combines:" in notes
    shapes = re.findall(r"branch (\d): shape \((\d+), (\d+)\) from '(\w+)', added by (.*)", notes)
    assert [(b, int(r), int(c)) for b, r, c, _, _ in shapes] == [
        ("0", 2, 4),
        ("1", 2, 5),
        ("2", 2, 4),
    ]
    assert all(f"test_builder_hints.py:{line}" in where for *_, where in shapes)


def test_a_cat_merge_and_a_residual_name_their_operands():
    cat = (
        fl.FlowBuilder(nn.Linear(2, 3))
        .split(nn.Linear(3, 4), nn.Flatten(0))
        .merge(fl.MergeOp.CAT(1))
        .build()
    )
    notes = error_notes(cat, torch.randn(2, 2))
    assert "branch 0: shape (2, 4)" in notes and "branch 1: shape (6,)" in notes
    residual = fl.FlowBuilder(nn.Linear(2, 3)).also(nn.Linear(3, 5)).build()
    notes = error_notes(residual, torch.randn(2, 2))
    assert "the stream: shape (2, 3)" in notes and "the residual: shape (2, 5)" in notes


def test_an_also_with_shape_error_names_the_skip_and_main_paths():
    model = fl.FlowBuilder(nn.Linear(2, 3)).also_with(nn.Linear(3, 4), nn.Linear(3, 6)).build()
    notes = error_notes(model, torch.randn(2, 2))
    assert "the skip path: shape (2, 4)" in notes and "the main path: shape (2, 6)" in notes
