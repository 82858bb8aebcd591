"""Label paths: strict resolution, internal tags, subgraph(), suggestions on typos."""

from __future__ import annotations

import pickle

import pytest
from torch import nn

import flodl as fl

from .trees import composed, encoder, letter, x


def test_an_unlabelled_nested_graph_is_not_a_child_but_its_parameters_count():
    inner = fl.FlowBuilder(nn.Linear(2, 2)).through(nn.Linear(2, 2)).build()
    model = fl.FlowBuilder(inner).build()
    assert model.children_graphs() == {}
    assert len(list(model.parameters())) == 4
    with pytest.raises(fl.PathError):
        model.subgraph("graph_1")  # a node id, not a child label


def test_paths_resolve_to_subgraph_tag_and_node():
    model = composed()
    assert model.validate_path("encoder").kind is fl.PathKind.SUBGRAPH
    assert model.validate_path("head").kind is fl.PathKind.TAG
    assert model.validate_path("encoder.hidden").kind is fl.PathKind.TAG
    node = model.validate_path("encoder.linear_3")
    assert node.kind is fl.PathKind.NODE and isinstance(node.module, nn.Linear)
    assert model.validate_path("encoder").module is model.subgraph("encoder")
    tag = model.validate_path("encoder.hidden")
    assert tag.graph is model.subgraph("encoder") and tag.node.id == "linear_1"


def test_multi_level_paths():
    model = letter()
    assert model.validate_path("letter").kind is fl.PathKind.SUBGRAPH
    assert model.validate_path("letter.read").kind is fl.PathKind.SUBGRAPH
    assert model.validate_path("letter.read.hidden").kind is fl.PathKind.TAG
    assert model.subgraph("letter.read").label == "read"


@pytest.mark.parametrize(
    ("path", "says"),
    [
        ("nonexistent", '"nonexistent" is not a child graph, tag or node of this graph'),
        ("encoder.nonexistent", "is not a child graph, tag or node of 'encoder'"),
        ("nonexistent.foo", '"nonexistent" is not a child graph label of this graph'),
        ("", "empty label path"),
        ("encoder..hidden", '"" is not a child graph label'),
        ("head.weight", "it is a parameter of 'head': paths name modules"),
        ("head.nope", "submodules of 'head' (Linear): none"),
        ("encoder.hidden.x", "submodules of 'encoder.hidden' (Linear): none"),
    ],
)
def test_invalid_paths_raise_path_error(path, says):
    with pytest.raises(fl.PathError) as err:
        composed().validate_path(path)
    assert says in str(err.value)
    assert err.value.path == path
    assert isinstance(err.value, fl.FlodlError)


def test_a_typo_lists_the_closest_valid_paths():
    with pytest.raises(fl.PathError) as err:
        composed().validate_path("encoder.hiden")
    assert err.value.suggestions[0] == "encoder.hidden"
    assert "closest valid paths: 'encoder.hidden'" in str(err.value)


def test_internal_tags_are_private_to_their_graph():
    model = composed()
    for path in ("encoder._plumbing", "encoder.intermediate"):
        with pytest.raises(fl.PathError, match="internal"):
            model.validate_path(path)
        with pytest.raises(fl.PathError, match="internal"):
            model.tagged_at(path)
    # ...but resolve from their own graph, and are never suggested from outside
    child = model.subgraph("encoder")
    assert child.validate_path("_plumbing").kind is fl.PathKind.TAG
    assert child.validate_path("intermediate").kind is fl.PathKind.TAG
    assert "encoder._plumbing" not in model.paths()
    assert "encoder.hidden" in model.paths()


def test_subgraph_of_a_tag_or_node_says_what_it_is():
    with pytest.raises(fl.PathError, match='"head" resolves to a tag, not a subgraph'):
        composed().subgraph("head")
    with pytest.raises(fl.PathError, match="resolves to a node"):
        composed().subgraph("encoder.linear_1")


def test_a_tag_sharing_its_childs_label_on_the_same_node_resolves_to_the_child():
    model = fl.FlowBuilder(encoder()).tag("encoder").through(nn.Linear(4, 1)).build()
    assert model.validate_path("encoder").kind is fl.PathKind.SUBGRAPH
    assert model.children_graphs()["encoder"].is_composed
    assert not model.is_composed


def test_forward_still_works_with_a_tree():
    assert composed()(x()).shape == (1, 2)


def test_path_error_pickles():
    with pytest.raises(fl.PathError) as err:
        composed().validate_path("nope")
    again = pickle.loads(pickle.dumps(err.value))
    assert str(again) == str(err.value)


def test_non_string_path_is_rejected():
    with pytest.raises(fl.PathError, match="a label path is a string"):
        composed().validate_path(3)  # type: ignore[arg-type]
