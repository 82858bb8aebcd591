"""Every builder verb, checked numerically against hand-written PyTorch."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import flodl as fl

from .helpers import Scale, identity_linear


def test_single_linear_graph_maps_shape():
    g = fl.FlowBuilder(nn.Linear(3, 2)).build()
    assert g(torch.randn(1, 3)).shape == (1, 2)
    assert isinstance(g, nn.Module) and isinstance(g, fl.Graph)


def test_chain_matches_sequential_with_same_weights():
    torch.manual_seed(0)
    seq = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    g = fl.FlowBuilder(seq[0]).through(seq[1]).through(seq[2]).build()
    x = torch.randn(5, 4)
    torch.testing.assert_close(g(x), seq(x))
    assert len(list(g.parameters())) == 4


def test_chain_backward_reaches_input_and_every_parameter():
    g = fl.FlowBuilder(nn.Linear(4, 8)).through(nn.ReLU()).through(nn.Linear(8, 2)).build()
    x = torch.randn(3, 4, requires_grad=True)
    g(x).sum().backward()
    assert x.grad is not None
    assert all(p.grad is not None for p in g.parameters())


def test_also_is_residual_2x_plus_1():
    g = fl.FlowBuilder(identity_linear(3)).also(identity_linear(3, bias=1.0)).build()
    out = g(torch.tensor([[1.0, 2.0, 3.0]]))
    torch.testing.assert_close(out, torch.tensor([[3.0, 5.0, 7.0]]))


def test_also_gradients_match_hand_written_residual():
    torch.manual_seed(1)
    inner = nn.Linear(4, 4)
    g = fl.FlowBuilder().also(inner).build()
    x = torch.randn(2, 4, requires_grad=True)
    g(x).pow(2).sum().backward()
    got = (x.grad.clone(), inner.weight.grad.clone())
    x.grad = None
    inner.zero_grad()
    (x + inner(x)).pow(2).sum().backward()
    torch.testing.assert_close(got[0], x.grad)
    torch.testing.assert_close(got[1], inner.weight.grad)


def test_also_with_is_skip_plus_main():
    skip, main = nn.Linear(4, 6), nn.Linear(4, 6)
    g = fl.FlowBuilder().also_with(skip, main).through(nn.ReLU()).build()
    x = torch.randn(3, 4)
    torch.testing.assert_close(g(x), torch.relu(skip(x) + main(x)))
    assert [n.id for n in g.nodes] == ["identity_1", "linear_2", "linear_3", "add_4", "relu_5"]


def test_fork_keeps_main_stream_and_tags_side_branch():
    g = fl.FlowBuilder().fork(nn.Linear(2, 3)).tag("side").through(nn.ReLU()).build()
    out = g(torch.tensor([[1.0, -1.0]]))
    torch.testing.assert_close(out, torch.tensor([[1.0, 0.0]]))
    assert g.tagged("side").shape == (1, 3)


def test_two_forks_off_a_tagged_latent():
    g = (
        fl.FlowBuilder(nn.Linear(2, 4))
        .tag("latent")
        .fork(nn.Linear(4, 3))
        .tag("a")
        .fork(nn.Linear(4, 2))
        .tag("b")
        .build()
    )
    out = g(torch.randn(1, 2))
    assert out.shape == (1, 4)
    assert g.tagged("a").shape == (1, 3) and g.tagged("b").shape == (1, 2)
    torch.testing.assert_close(out, g.tagged("latent"))


def test_fork_target_does_not_leak_past_the_next_step():
    # The original tagged the fork when another step came in between; we tag the stream.
    g = fl.FlowBuilder().fork(nn.Linear(2, 3)).through(Scale(2.0)).tag("x").build()
    g(torch.ones(1, 2))
    assert g.tagged("x").shape == (1, 2)


def test_backward_through_fork_tag_reaches_parameters():
    entry, side = nn.Linear(2, 2), nn.Linear(2, 3)
    g = fl.FlowBuilder(entry).fork(side).tag("side").build()
    x = torch.randn(2, 2, requires_grad=True)
    (g(x).sum() + g.tagged("side").sum()).backward()
    assert x.grad is not None and side.weight.grad is not None
    # the entry feeds both the main stream and the fork: both contributions reach it
    d_hidden = 1 + side.weight.sum(0)  # d(loss)/d(entry output), per feature
    torch.testing.assert_close(entry.weight.grad, torch.outer(d_hidden, x.sum(0)))
    assert all(p.grad is not None for p in g.parameters())


@pytest.mark.parametrize(
    ("op", "expected"),
    [
        (fl.MergeOp.ADD, lambda a, b: a + b),
        (fl.MergeOp.MEAN, lambda a, b: (a + b) / 2),
        (fl.MergeOp.MUL, lambda a, b: a * b),
        (fl.MergeOp.CAT(1), lambda a, b: torch.cat([a, b], 1)),
    ],
)
def test_split_merge_ops(op, expected):
    a, b = nn.Linear(3, 4), nn.Linear(3, 4)
    g = fl.FlowBuilder().split(a, b).merge(op).build()
    x = torch.randn(2, 3)
    torch.testing.assert_close(g(x), expected(a(x), b(x)))


def test_split_accepts_a_list_and_preserves_shape():
    g = fl.FlowBuilder().split([nn.ReLU(), nn.Sigmoid()]).merge(fl.MergeOp.ADD).build()
    assert g(torch.randn(1, 3)).shape == (1, 3)


def test_merge_mean_of_identities_is_identity():
    g = fl.FlowBuilder().split(nn.Identity(), nn.Identity()).merge(fl.MergeOp.MEAN).build()
    torch.testing.assert_close(g(torch.tensor([[3.0, 7.0]])), torch.tensor([[3.0, 7.0]]))


def test_split_merge_backward_reaches_everything():
    g = fl.FlowBuilder(nn.Linear(2, 3)).split(nn.Linear(3, 3), nn.Linear(3, 3)).merge().build()
    x = torch.randn(2, 2, requires_grad=True)
    g(x).sum().backward()
    assert x.grad is not None and all(p.grad is not None for p in g.parameters())


def test_tag_group_names_each_branch():
    g = (
        fl.FlowBuilder()
        .split(Scale(1.0), Scale(2.0), Scale(3.0))
        .tag_group("heads")
        .merge(fl.MergeOp.ADD)
        .build()
    )
    g(torch.ones(1, 2))
    assert g.tag_names() == ["heads_0", "heads_1", "heads_2"]
    assert g.tag_groups == {"heads": ["heads_0", "heads_1", "heads_2"]}
    torch.testing.assert_close(g.tagged("heads_2"), torch.full((1, 2), 3.0))


def test_steps_can_be_classes_and_plain_callables():
    g = fl.FlowBuilder(nn.Identity).through(torch.relu).through(lambda t: t * 2).build()
    torch.testing.assert_close(g(torch.tensor([-1.0, 2.0])), torch.tensor([0.0, 4.0]))
    assert [n.id for n in g.nodes] == ["identity_1", "relu_2", "fn_3"]


def test_new_builder_starts_from_identity_and_can_tag_first():
    g = fl.FlowBuilder().tag("raw").through(Scale(3.0)).build()
    out = g(torch.ones(2))
    torch.testing.assert_close(out, torch.full((2,), 3.0))
    torch.testing.assert_close(g.tagged("raw"), torch.ones(2))


def test_graphs_nest_as_steps_and_parameters_count():
    inner = fl.FlowBuilder(nn.Linear(2, 4)).through(nn.Linear(4, 2)).build()
    outer = fl.FlowBuilder(nn.Linear(2, 2)).through(inner).build()
    assert outer(torch.randn(1, 2)).shape == (1, 2)
    assert len(list(outer.parameters())) == 6


def test_tagged_is_refreshed_every_forward_and_unknown_tags_raise():
    g = fl.FlowBuilder().tag("features").through(Scale(5.0)).build()
    assert g.tagged("features") is None
    g(torch.tensor([2.0]))
    torch.testing.assert_close(g.tagged("features"), torch.tensor([2.0]))
    g(torch.tensor([10.0]))
    torch.testing.assert_close(g.tagged("features"), torch.tensor([10.0]))
    with pytest.raises(fl.UnknownTagError, match="did you mean 'features'"):
        g.tagged("feature")
    with pytest.raises(
        fl.UnknownTagError, match="no tag 'logits' in this graph; its tags: 'features'"
    ):
        g.tagged("logits")  # nothing close: the tags there are
    many = fl.FlowBuilder()
    for i in range(10):
        many = many.through(Scale(1.0)).tag(f"t{i}")
    with pytest.raises(fl.UnknownTagError, match=r"its tags: 't0', .*'t7' and 2 more$"):
        many.build().tagged("logits")
    with pytest.raises(fl.UnknownTagError, match="it has no tags"):
        fl.FlowBuilder(Scale(1.0)).build().tagged("features")


def test_training_converges_on_a_line():
    torch.manual_seed(0)
    g = fl.FlowBuilder(nn.Linear(1, 1)).build()
    opt = torch.optim.SGD(g.parameters(), lr=0.1)
    x = torch.linspace(-1, 1, 32).unsqueeze(1)
    y = 2 * x + 1
    for _ in range(300):
        loss = nn.functional.mse_loss(g(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert loss.item() < 0.01


def test_same_module_used_twice_is_registered_once():
    shared = nn.Linear(3, 3)
    g = fl.FlowBuilder(shared).through(nn.ReLU()).through(shared).build()
    assert len(list(g.parameters())) == 2
    assert g.node("linear_3").attr == "linear_1"
    x = torch.randn(2, 3)
    torch.testing.assert_close(g(x), shared(torch.relu(shared(x))))


def test_two_auxiliary_inputs_in_declaration_order():
    class Sum3(nn.Module):
        def forward(self, x, a, b):
            return x + a + b

    g = fl.FlowBuilder().input("a", "b").through(Sum3()).using("a", "b").build()
    one = torch.ones(1)
    assert g(one, 10 * one, 100 * one).item() == 111.0
    assert g(one, b=100 * one, a=10 * one).item() == 111.0


def test_labels_children_and_composition():
    child = fl.FlowBuilder(nn.Linear(2, 2)).through(nn.Linear(2, 2)).label("my-model").build()
    assert child.label == "my-model" and not child.is_composed
    assert fl.FlowBuilder(nn.Linear(2, 2)).build().label is None
    parent = fl.FlowBuilder().through(child).tag("my-model").build()  # same node: allowed
    assert parent.children_graphs() == {"my-model": child}
    assert child.is_composed and not parent.is_composed
    assert len(list(parent.parameters())) == 4
    unlabelled = fl.FlowBuilder().through(fl.FlowBuilder(nn.Linear(2, 2)).build()).build()
    assert unlabelled.children_graphs() == {}


def test_short_hash_prefixes_the_hash_and_until_loop_counts_parameters():
    g = fl.FlowBuilder().loop_body(nn.Linear(2, 2)).until_cond(fl.nn.LearnedHalt(2), 3).build()
    assert len(list(g.parameters())) == 4
    assert g.structural_hash().startswith(g.short_hash()) and len(g.short_hash()) == 8


def test_map_over_reads_the_tagged_value_not_the_stream():
    g = fl.FlowBuilder().tag("features").through(Scale(2.0)).map(Scale(2.0)).over("features")
    x = torch.tensor([[1.0, 2.0]])
    torch.testing.assert_close(g.build()(x), 2 * x)


def test_several_tags_on_one_node_name_it_by_the_first_tag_deterministically():
    def build() -> fl.Graph:
        return (
            fl.FlowBuilder(nn.Linear(2, 2)).tag("zeta").tag("alpha").tag("mid")
            .through(nn.ReLU()).build()
        )  # fmt: skip

    g = build()
    assert g.nodes[0].tags == ["zeta", "alpha", "mid"]  # definition order, not sorted
    assert list(g.state_dict()) == ["zeta.weight", "zeta.bias"] == list(build().state_dict())
    assert [n for n, _ in g.named_parameters()] == ["zeta.weight", "zeta.bias"]
    for tag in ("zeta", "alpha", "mid"):  # every tag still names the node
        assert g.validate_path(tag).node.id == "linear_1"
    assert "#zeta #alpha #mid" in g.dot()
    g.enable_profiling()
    g(torch.ones(1, 2))
    assert g.profile().nodes[0].tag == "zeta"


def test_tag_group_lookups_of_unknown_names():
    g = (
        fl.FlowBuilder().split(Scale(1.0), Scale(2.0)).tag_group("heads")
        .merge(fl.MergeOp.ADD).build()
    )  # fmt: skip
    g(torch.ones(1, 2))
    assert g.tag_groups.get("nope") is None and "heads" in g.tag_groups
    with pytest.raises(fl.PathError):
        g.collect("nope")
    with pytest.raises(fl.PathError):
        g.trends("nope")
    with pytest.raises(fl.FlodlError, match=r"'heads' is a tag group: tagged\(\) its members"):
        g.tagged("heads")  # a group is not a tag: its members are
