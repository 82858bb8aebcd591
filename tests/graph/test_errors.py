"""Errors users can act on: build errors name the call site and rule; runtime errors name the node."""

from __future__ import annotations

import inspect

import pytest
import torch
from torch import nn

import flodl as fl

from .helpers import AddRef, EqualRouter, Scale

HERE = "tests/graph/test_errors.py"


def line_of(marker: str) -> int:
    """The line in this file carrying ``# <marker>``."""
    source = inspect.getsource(inspect.getmodule(line_of))
    for number, text in enumerate(source.splitlines(), 1):
        if text.rstrip().endswith(f"# {marker}"):
            return number
    raise AssertionError(marker)


def build_error(builder) -> fl.GraphBuildError:
    with pytest.raises(fl.GraphBuildError) as info:
        builder.build()
    return info.value


def test_split_needs_two_branches_and_names_the_call_site():
    b = fl.FlowBuilder(nn.Linear(2, 2))
    b.split(nn.ReLU())  # SPLIT-ONE
    err = build_error(b.merge(fl.MergeOp.ADD))
    assert "split requires at least 2 branches (got 1)" in str(err)
    assert f"{HERE}:{line_of('SPLIT-ONE')}" in str(err)
    assert err.issues[0].method == "split"


def test_open_streams_at_build_name_the_split():
    b = fl.FlowBuilder().split(nn.ReLU(), nn.Tanh())  # OPEN-SPLIT
    err = build_error(b)
    assert "open streams: call merge before build" in str(err)
    assert f"{HERE}:{line_of('OPEN-SPLIT')}" in str(err)


def test_single_stream_methods_after_split_explain_what_to_do():
    b = fl.FlowBuilder().split(nn.ReLU(), nn.Tanh())
    b.through(nn.ReLU())  # THROUGH-AFTER-SPLIT
    err = build_error(b.merge())
    text = str(err)
    assert "through needs a single stream, but 2 are open" in text
    assert f"{HERE}:{line_of('THROUGH-AFTER-SPLIT')}" in text
    assert ".merge(" in text


def test_duplicate_tag_names_the_first_tag():
    b = fl.FlowBuilder().tag("x")  # FIRST-TAG
    b.through(nn.ReLU()).tag("x")  # SECOND-TAG
    err = build_error(b)
    assert f"duplicate tag 'x' (first tagged at {HERE}:{line_of('FIRST-TAG')})" in str(err)
    assert f"{HERE}:{line_of('SECOND-TAG')}" in str(err)


@pytest.mark.parametrize("later", [True, False], ids=["id-of-a-later-node", "id-of-an-earlier"])
def test_a_tag_spelt_as_another_nodes_id_is_refused(later):
    # Paths try tags first and state_dict names an untagged node by its id: freeze("linear_3")
    # froze the first layer while linear_3.weight was the last one's.
    b = fl.FlowBuilder(nn.Linear(4, 4))
    if later:
        b = b.tag("linear_3").through(nn.ReLU()).through(nn.Linear(4, 4))  # LATER-ID
    else:
        b = b.through(nn.ReLU()).tag("linear_1").through(nn.Linear(4, 4))  # EARLIER-ID
    err = build_error(b)
    tag, tag_line = ("linear_3", "LATER-ID") if later else ("linear_1", "EARLIER-ID")
    assert f"tag '{tag}' is also the id of another node" in str(err)
    assert f"{HERE}:{line_of(tag_line)}" in str(err)
    assert "choose a tag that is not a node id" in str(err)


def test_a_tag_spelt_as_its_own_nodes_id_names_that_node():
    first = nn.Linear(4, 4)
    g = fl.FlowBuilder(first).tag("linear_1").through(nn.ReLU()).through(nn.Linear(4, 4)).build()
    g.freeze("linear_1")
    assert not first.weight.requires_grad and g.linear_3.weight.requires_grad


def test_all_problems_are_listed_not_just_the_first():
    b = fl.FlowBuilder().split(nn.ReLU()).tag("a").tag("a")
    err = build_error(b)
    assert len(err.issues) == 2
    assert "2 problems" in str(err)


def test_unresolved_ref_suggests_a_close_tag():
    b = fl.FlowBuilder().tag("encoded").through(AddRef())
    b.using("encodde")  # TYPO
    err = build_error(b)
    assert "unresolved ref 'encodde'" in str(err)
    assert "did you mean 'encoded'?" in str(err)
    assert f"{HERE}:{line_of('TYPO')}" in str(err)


def test_unresolved_ref_with_no_close_tag_names_it_in_the_hint():
    b = fl.FlowBuilder().tag("encoded").through(AddRef())
    b.using("memory")
    err = build_error(b)
    assert (
        "hint: tag a value with .tag('memory') (later in the chain for a forward ref across "
        "calls) or declare .input('memory')"
    ) in str(err)
    assert "{" not in str(err)  # no placeholder left unfilled


def test_using_on_a_module_that_cannot_take_refs():
    b = fl.FlowBuilder().tag("ctx").through(nn.Linear(2, 2))
    b.using("ctx")  # LINEAR-REFS
    err = build_error(b)
    assert "node 'linear_2' cannot receive refs 'ctx'" in str(err)
    assert "forward_named" in str(err)
    assert f"{HERE}:{line_of('LINEAR-REFS')}" in str(err)


def test_using_after_merge_is_rejected_not_summed_in():
    b = fl.FlowBuilder().tag("x").split(Scale(1), Scale(2)).merge().using("x")
    assert "merge node 'merge_4'" in str(build_error(b))


def test_duplicate_refs_are_rejected():
    b = fl.FlowBuilder().tag("x").through(AddRef()).using("x", "x")
    assert "duplicate ref 'x' on node 'addref_2'" in str(build_error(b))


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda b: b.loop_body(Scale(2)).for_n(0), "for_n: n must be an integer >= 1"),
        (lambda b: b.loop_body(Scale(2)).while_cond(Scale(1), 0), "max_iter must be an integer"),
        (lambda b: b.gate(Scale(1), Scale(2)), "gate requires at least 2 experts (got 1)"),
        (lambda b: b.switch(Scale(1), Scale(2)), "switch requires at least 2 branches"),
        (lambda b: b.map(Scale(2)).slices(0), "slices: n must be an integer >= 1"),
        (lambda b: b.map(Scale(2)).over("nope"), "over('nope'): no tag 'nope'"),
        (
            lambda b: b.split(Scale(1), Scale(2)).tag_group("g").merge().map(Scale(2)).over("g"),
            "over('g'): 'g' is a tag group ('g_0', 'g_1'), not one value",
        ),
        (lambda b: b.merge(), "merge requires several open streams"),
        (lambda b: b.tag_group("g"), "tag_group('g') requires several open streams"),
        (
            lambda b: (
                b.split(Scale(1), Scale(2))
                .tag_group("g")
                .merge()
                .split(Scale(1), Scale(2))
                .tag_group("g")
                .merge()
            ),
            "duplicate tag 'g' (first tagged at",
        ),
        (
            lambda b: b.tag("g_1").split(Scale(1), Scale(2)).tag_group("g").merge(),
            "duplicate tag 'g_1' (first tagged at",
        ),
        (lambda b: b.tag("a.b"), "without dots"),
        (lambda b: b.through(42), "a step is an nn.Module"),
        (lambda b: b.through(nn.Linear), "could not construct Linear with no arguments"),
        (lambda b: b.through(fl.FlowBuilder()), "call .build() on the inner builder"),
        (lambda b: b.input("self"), "input('self')"),
        (lambda b: b.tag("ctx").input("ctx"), "input 'ctx' conflicts with the existing tag"),
        (lambda b: b.internal("ghost"), "internal('ghost'): no tag 'ghost'"),
        (lambda b: b.label("a.b"), "label('a.b')"),
        (lambda b: b.using("x"), "identity entry"),
    ],
)
def test_rules(make, message):
    err = build_error(make(fl.FlowBuilder()))
    assert message in str(err)
    assert HERE in str(err)


def test_duplicate_child_labels_are_rejected():
    a = fl.FlowBuilder(nn.Linear(2, 2)).label("enc").build()
    b = fl.FlowBuilder(nn.Linear(2, 2)).label("enc").build()
    err = build_error(fl.FlowBuilder().through(a).through(b))
    assert "duplicate child graph label 'enc'" in str(err)


def test_a_builder_builds_once():
    b = fl.FlowBuilder(nn.Linear(2, 2))
    b.build()
    with pytest.raises(fl.GraphBuildError, match="already built"):
        b.build()


def test_runtime_error_keeps_its_type_and_names_branch_and_call_site():
    g = (
        fl.FlowBuilder(nn.Linear(4, 4))
        .split(
            nn.Linear(4, 3),
            nn.Linear(5, 3),  # BAD-BRANCH
        )
        .merge()
        .build()
    )
    with pytest.raises(RuntimeError) as info:
        g(torch.randn(2, 4))
    note = "\n".join(info.value.__notes__)
    assert "raised in graph node linear_3" in note
    assert "branch 1 of the split" in note
    assert f"{HERE}:" in note and ".split(...)" in note


def test_runtime_note_names_the_path_through_nested_graphs_and_tags():
    inner = (
        fl.FlowBuilder(nn.Linear(2, 3))
        .through(nn.Linear(4, 2))  # INNER-BAD
        .tag("proj")
        .label("encoder")
        .build()
    )
    outer = fl.FlowBuilder(nn.Linear(2, 2)).through(inner).build()  # OUTER
    with pytest.raises(RuntimeError) as info:
        outer(torch.randn(1, 2))
    note = "\n".join(info.value.__notes__)
    assert "raised in graph node encoder.linear_2 (Linear; tags: proj)" in note
    assert f"{HERE}:{line_of('INNER-BAD')}" in note
    assert f"{HERE}:{line_of('OUTER')}" in note
    assert len(info.value.__notes__) == 1  # one combined note, not one per level


def test_runtime_note_names_the_loop_iteration_and_gate_expert():
    class FailsAtThird(nn.Module):
        def __init__(self):
            super().__init__()
            self.calls = 0

        def forward(self, x):
            self.calls += 1
            if self.calls == 3:
                raise ValueError("boom")
            return x

    g = fl.FlowBuilder().loop_body(FailsAtThird()).for_n(5).build()
    with pytest.raises(ValueError, match="boom") as info:
        g(torch.ones(1))
    assert "iteration 3 of 5" in info.value.__notes__[0]

    gate = fl.FlowBuilder().gate(fl.nn.SoftmaxRouter(2, 2), Scale(1), nn.Linear(3, 2)).build()
    with pytest.raises(RuntimeError) as info:
        gate(torch.ones(1, 2))
    assert "gate_2 (Gate; expert 1 of 2)" in info.value.__notes__[0]


def test_forward_ref_zero_fill_shape_mismatch_explains_the_zeros():
    g = (
        fl.FlowBuilder()
        .through(AddRef())
        .using("wide")
        .through(nn.Linear(2, 4))
        .tag("wide")
        .build()
    )
    g(torch.ones(1, 2))  # first call: zeros shaped like the input
    with pytest.raises(RuntimeError) as info:
        g(torch.ones(1, 2))
    assert "read the previous call's value" in info.value.__notes__[0]


def test_the_merge_closing_a_broken_split_adds_no_second_error():
    err = build_error(fl.FlowBuilder().split(nn.ReLU()).merge(fl.MergeOp.ADD))
    assert len(err.issues) == 1 and err.issues[0].method == "split"


def test_missing_input_names_where_it_was_declared():
    g = fl.FlowBuilder().input("ctx").through(lambda x, ctx: x + ctx).using("ctx").build()  # DECL
    with pytest.raises(fl.GraphInputError, match=f"input.*at {HERE}:{line_of('DECL')}"):
        g(torch.ones(1))


def test_build_errors_survive_pickling():
    import pickle

    err = build_error(fl.FlowBuilder().split(nn.ReLU()))
    again = pickle.loads(pickle.dumps(err))
    assert str(again) == str(err) and again.issues == err.issues


def test_runtime_note_names_the_also_with_path():
    g = fl.FlowBuilder().also_with(nn.Linear(2, 3), nn.Linear(4, 3)).build()
    with pytest.raises(RuntimeError) as info:
        g(torch.ones(1, 2))
    assert "linear_3 (Linear; the main path of also_with)" in info.value.__notes__[0]


def test_runtime_note_through_a_loop_body_graph_is_a_valid_path_with_the_iteration():
    class FailsAtSecond(nn.Module):
        def __init__(self):
            super().__init__()
            self.calls = 0

        def forward(self, x):
            self.calls += 1
            if self.calls == 2:
                raise ValueError("boom")
            return x

    for finish in (lambda b: b.for_n(3), lambda b: b.until_cond(fl.nn.ThresholdHalt(99.0), 3)):
        body = fl.FlowBuilder(Scale(1.0)).through(FailsAtSecond()).tag("step").label("refine")
        g = finish(fl.FlowBuilder(nn.Linear(2, 2)).loop_body(body.build())).build()
        with pytest.raises(ValueError, match="boom") as info:
            g(torch.ones(1, 2))
        (note,) = info.value.__notes__
        head = note.splitlines()[0]
        path = head.split("raised in graph node ")[1].split(" ")[0]
        assert path == "loop_2.body.failsatsecond_2"
        assert isinstance(g.validate_path(path).module, FailsAtSecond)  # a real path
        assert "in graph 'refine'" in head and "loop_2 iteration 2 of" in head
        assert "node 'failsatsecond_2' of graph 'refine'" in note


def test_runtime_note_through_an_unlabelled_nested_graph_and_a_gate_expert():
    inner = fl.FlowBuilder(Scale(1.0)).through(nn.Linear(3, 2)).build()
    g = fl.FlowBuilder().gate(EqualRouter(2), Scale(1.0), inner).build()
    with pytest.raises(RuntimeError) as info:
        g(torch.ones(1, 2))
    head = info.value.__notes__[0].splitlines()[0]
    path = head.split("raised in graph node ")[1].split(" ")[0]
    assert path == "gate_2.experts.1.linear_2" and "gate_2 expert 1 of 2" in head
    assert isinstance(g.validate_path(path).module, nn.Linear)
