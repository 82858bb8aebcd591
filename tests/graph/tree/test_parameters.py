"""Parameters by path: parameters_at, freeze/thaw (checked by real gradients), set_training_at,
path-shaped named_parameters, subgraph checkpoints."""

from __future__ import annotations

import copy
import pickle

import pytest
import torch
from torch import nn

import flodl as fl

from .trees import composed, encoder, letter


def test_parameters_at_subgraph_tag_and_parameter_free_nodes():
    model = composed()
    assert len(model.parameters_at("encoder")) == 4
    assert len(list(model.parameters())) == 6
    head = model.parameters_at("head")
    assert [tuple(p.shape) for p in head] == [(2, 4), (2,)]
    residual = fl.FlowBuilder(nn.Linear(2, 2)).also(nn.Linear(2, 2)).tag("sum").build()
    assert residual.parameters_at("sum") == []  # a tag on the add node


def test_named_parameters_at_uses_the_childs_namespace():
    model = composed()
    names = [n for n, _ in model.named_parameters_at("encoder")]
    assert names == [n for n, _ in model.subgraph("encoder").named_parameters()]
    assert names[:2] == ["hidden.weight", "hidden.bias"]


def test_named_parameters_are_path_shaped_and_stable():
    model = letter()
    names = [n for n, _ in model.named_parameters()]
    assert names == [n for n, _ in letter().named_parameters()]  # same build, same names
    assert names == [
        "letter.pre.weight", "letter.pre.bias",
        "letter.read.hidden.weight", "letter.read.hidden.bias",
        "out.weight", "out.bias",
    ]  # fmt: skip
    params = dict(model.named_parameters())
    for name, p in params.items():
        owner = name.rsplit(".", 1)[0]  # every prefix is a valid path holding that parameter
        assert any(q is p for q in model.parameters_at(owner))


def gradients(model: fl.Graph) -> dict[str, bool]:
    model.zero_grad(set_to_none=True)
    model(torch.randn(3, 2)).sum().backward()
    return {n: p.grad is not None for n, p in model.named_parameters()}


def test_freeze_and_thaw_by_path_change_which_gradients_flow():
    model = composed()
    assert gradients(model) == dict.fromkeys(gradients(model), True)
    assert model.freeze("encoder") == 4
    assert model.is_frozen("encoder")
    grads = gradients(model)
    assert [n for n, g in grads.items() if g] == ["head.weight", "head.bias"]
    assert not model.is_frozen("head")
    assert model.thaw("encoder") == 4
    assert not model.is_frozen("encoder")
    assert all(gradients(model).values())


@pytest.mark.parametrize("copy_between", [None, "deepcopy", "pickle"])
def test_thaw_leaves_a_parameter_fixed_before_freeze_fixed(copy_between):
    # A positional table made constant on purpose: freeze + thaw used to make it trainable.
    model = composed()
    fixed = model.subgraph("encoder").hidden.bias
    fixed.requires_grad_(False)
    assert model.freeze("encoder") == 4
    if copy_between == "deepcopy":
        model = copy.deepcopy(model)
    elif copy_between == "pickle":
        model = pickle.loads(pickle.dumps(model))
    assert model.thaw("encoder") == 3
    trains = {n: p.requires_grad for n, p in model.named_parameters()}
    assert [n for n, t in trains.items() if not t] == ["encoder.hidden.bias"]
    model.subgraph("encoder").hidden.bias.requires_grad_(True)  # trained again on purpose
    model.freeze("encoder")
    assert model.thaw("encoder") == 4


def test_thaw_undoes_nested_freezes():
    model = composed()
    model.freeze("encoder.hidden")
    model.freeze("encoder")  # finds hidden frozen by freeze, not fixed
    assert model.thaw("encoder") == 4
    assert all(p.requires_grad for p in model.parameters())


def test_freezing_the_innermost_graph_leaves_the_middle_one_trainable():
    model = letter()
    model.freeze("letter.read")
    assert model.is_frozen("letter.read")
    assert not model.is_frozen("letter")  # letter has its own 'pre' Linear
    model.zero_grad(set_to_none=True)
    model(torch.randn(2, 3)).sum().backward()
    assert model.subgraph("letter.read").hidden.weight.grad is None
    assert model.subgraph("letter").pre.weight.grad is not None


def test_frozen_parameters_are_skipped_by_a_real_optimizer():
    model = composed()
    model.freeze("encoder.hidden")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    model(torch.randn(4, 2)).pow(2).sum().backward()
    opt.step()
    after = dict(model.named_parameters())
    changed = {n for n in before if not torch.equal(before[n], after[n])}
    assert "encoder.hidden.weight" not in changed and "encoder.hidden.bias" not in changed
    assert {"head.weight", "encoder.linear_3.weight"} <= changed
    for name in before:  # every name is a path from the root
        assert model.validate_path(name.rsplit(".", 1)[0])


@pytest.mark.parametrize("method", ["freeze", "thaw", "is_frozen", "parameters_at"])
def test_bad_paths_raise_and_change_nothing(method):
    model = composed()
    with pytest.raises(fl.PathError):
        getattr(model, method)("encoder.hiddn")
    assert all(p.requires_grad for p in model.parameters())


def test_freezing_a_path_without_parameters_is_an_error_not_a_silent_no_op():
    model = fl.FlowBuilder(nn.Linear(2, 2)).through(nn.ReLU()).tag("act").build()
    with pytest.raises(fl.PathError, match="has no parameters"):
        model.freeze("act")
    assert not model.is_frozen("act")


def test_set_training_at_switches_only_that_part():
    model = fl.FlowBuilder(encoder()).through(nn.Dropout(0.5)).tag("drop").build()
    model.train()
    model.set_training_at("encoder", False)
    assert not model.subgraph("encoder").training
    assert all(not m.training for m in model.subgraph("encoder").modules())
    assert model.training and model.drop.training
    model.set_training_at("encoder")
    assert model.subgraph("encoder").training
    model.set_training_at("drop", False)
    assert not model.drop.training
    with pytest.raises(fl.PathError):
        model.set_training_at("encodr", False)
    residual = fl.FlowBuilder(nn.Linear(2, 2)).also(nn.Linear(2, 2)).tag("sum").build()
    with pytest.raises(fl.PathError, match="runs no module"):
        residual.set_training_at("sum", False)


def test_a_childs_own_checkpoint_loads_into_a_composed_model(tmp_path):
    trained = encoder()
    with torch.no_grad():
        for p in trained.parameters():
            p.normal_()
    trained.save_checkpoint(tmp_path / "enc.fdl")

    model = composed()
    own_before = {
        n: p.detach().clone() for n, p in model.named_parameters() if n.startswith("head")
    }
    report = model.load_subgraph_checkpoint("encoder", tmp_path / "enc.fdl")
    assert len(report.loaded) >= 4 and report.missing == []
    assert all(name.startswith("encoder.") for name in report.loaded)
    for (_, a), (_, b) in zip(
        trained.named_parameters(), model.subgraph("encoder").named_parameters(), strict=True
    ):
        assert torch.equal(a, b)
    for n, p in model.named_parameters():
        if n.startswith("head"):
            assert torch.equal(p, own_before[n])  # the parent's own weights are untouched


def test_loading_a_subgraph_checkpoint_by_a_nested_path(tmp_path):
    read = fl.FlowBuilder(nn.Linear(3, 3)).tag("hidden").label("read").build()
    read.save_checkpoint(tmp_path / "read.fdl")
    model = letter()
    report = model.load_subgraph_checkpoint("letter.read", tmp_path / "read.fdl")
    assert report.missing == [] and len(report.loaded) == 2
    torch.testing.assert_close(model.subgraph("letter.read").hidden.weight, read.hidden.weight)


def composite_model() -> fl.Graph:
    """Every kind of place a parameter can live: gate, switch, loop (with a labelled graph as
    its body), map, an unlabelled nested graph, a tagged node and a labelled child."""
    unlabelled = fl.FlowBuilder(nn.Linear(4, 4)).tag("inner").through(nn.Linear(4, 4)).build()
    body = fl.FlowBuilder(nn.Linear(4, 4)).tag("update").label("refine").build()
    return (
        fl.FlowBuilder(nn.Linear(4, 4))
        .gate(fl.nn.SoftmaxRouter(4, 2), nn.Linear(4, 4), nn.Sequential(nn.Linear(4, 4)))
        .through(unlabelled)
        .loop_body(body)
        .for_n(2)
        .switch(fl.nn.ArgmaxSelector(4, 2), nn.Linear(4, 4), nn.Linear(4, 4))
        .map(nn.Linear(4, 4))
        .each()
        .through(fl.FlowBuilder(nn.Linear(4, 4)).label("child").build())
        .through(nn.Linear(4, 2))
        .tag("head")
        .build()
    )


def test_every_named_parameter_prefix_is_a_path_holding_that_parameter():
    model = composite_model()
    names = [n for n, _ in model.named_parameters()]
    assert {
        "gate_2.router.proj.weight", "gate_2.experts.0.weight", "gate_2.experts.1.0.bias",
        "graph_3.inner.weight", "graph_3.linear_2.weight", "loop_4.body.update.weight",
        "switch_5.selector.proj.weight", "switch_5.branches.1.bias", "map_6.body.weight",
        "child.linear_1.weight", "head.weight",
    } <= set(names)  # fmt: skip
    for name, param in model.named_parameters():
        prefix = name.rsplit(".", 1)[0]
        target = model.validate_path(prefix)
        assert any(p is param for p in target.parameters()), name
        assert any(p is param for p in model.parameters_at(prefix)), name
    assert model.validate_path("gate_2.router.proj").kind is fl.PathKind.MODULE
    assert model.validate_path("graph_3.inner").kind is fl.PathKind.TAG  # graph rules inside
    assert model.validate_path("loop_4.body.update").kind is fl.PathKind.TAG


def test_freeze_by_a_module_path_stops_exactly_those_gradients():
    model = composite_model()
    assert model.freeze("gate_2.experts.1") == 2
    assert model.freeze("graph_3.linear_2") == 2
    model(torch.randn(3, 4)).sum().backward()
    grads = {n: p.grad is not None for n, p in model.named_parameters()}
    frozen = {"gate_2.experts.1.0.weight", "gate_2.experts.1.0.bias"}
    frozen |= {"graph_3.linear_2.weight", "graph_3.linear_2.bias"}
    assert {n for n, g in grads.items() if not g} >= frozen
    assert grads["gate_2.experts.0.weight"] and grads["graph_3.inner.weight"]
    assert model.is_frozen("gate_2.experts.1") and not model.is_frozen("gate_2")
    model.set_training_at("gate_2.router", False)
    assert not model.gate_2.router.training and model.gate_2.experts[0].training


def test_module_paths_that_name_nothing_say_what_is_there():
    model = composite_model()
    with pytest.raises(fl.PathError) as err:
        model.validate_path("gate_2.router.proj2")
    assert "submodules of 'gate_2.router' (SoftmaxRouter): proj" in str(err.value)
    assert err.value.suggestions == ["gate_2.router.proj"]
    with pytest.raises(fl.PathError, match=r"it is a parameter of 'gate_2\.router\.proj'"):
        model.freeze("gate_2.router.proj.weight")
    with pytest.raises(fl.PathError, match="runs no module"):
        fl.FlowBuilder(nn.Linear(2, 2)).also(nn.Linear(2, 2)).tag("sum").build().validate_path(
            "sum.x"
        )


def test_a_name_from_pytorch_habit_points_at_the_graph_method():
    model = composed()
    with pytest.raises(AttributeError, match=r"no attribute 'unfreeze': .*\.thaw\(path\)"):
        model.unfreeze("encoder")
    with pytest.raises(AttributeError, match=r"no attribute 'tags': the tags are \.tag_names\(\)"):
        model.tags  # noqa: B018
    assert not hasattr(model, "unfreeze")  # still a plain AttributeError to hasattr
    with pytest.raises(AttributeError) as info:
        model.unfreez  # noqa: B018  a typo with no hint stays torch's message
    assert str(info.value) == "'Graph' object has no attribute 'unfreez'"
    assert model.head is model._modules["head"]  # submodules as before
