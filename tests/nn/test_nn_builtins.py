"""fl.nn building blocks: shapes, per-sample semantics and their failure messages."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

import flodl as fl
from tests.graph.helpers import Scale


def test_state_add_sums_positional_and_named_refs():
    s = fl.nn.StateAdd()
    x = torch.ones(2)
    torch.testing.assert_close(s(x), x)
    torch.testing.assert_close(s(x, x, x), torch.full((2,), 3.0))
    torch.testing.assert_close(s.forward_named(x, {"a": x}), torch.full((2,), 2.0))


def test_reshape_in_a_graph():
    g = fl.FlowBuilder(nn.Linear(4, 6)).through(fl.nn.Reshape(-1, 2, 3)).build()
    assert g(torch.randn(5, 4)).shape == (5, 2, 3)
    assert g.nodes[1].id == "reshape_2"
    assert fl.nn.Reshape((2, 3)).shape == (2, 3)
    assert fl.nn.Reshape(np.int64(2), -1).shape == (2, -1)


@pytest.mark.parametrize(
    ("shape", "error", "match"),
    [
        ((2.7, 3), TypeError, r"must hold integers, got \(2.7, 3\)"),  # was silently (2, 3)
        (("3",), TypeError, r"must hold integers, got \('3',\)"),  # was silently (3,)
        ((-1, -1), ValueError, r"at most one -1 \(inferred\), got \(-1, -1\)"),
        ((2, -3), ValueError, r"sizes >= 0 .* got \(2, -3\)"),
    ],
)
def test_reshape_refuses_shapes_torch_cannot_use(shape, error, match):
    with pytest.raises(error, match=f"Reshape: .*{match}"):
        fl.nn.Reshape(*shape)


def test_param_takes_numpy_integer_sizes_and_refuses_non_integers():
    assert fl.nn.Param(np.int64(3)).value.shape == (3,)  # was "'numpy.int64' is not iterable"
    assert fl.nn.Param((np.int32(2), 3)).value.shape == (2, 3)
    with pytest.raises(TypeError, match=r"Param: shape must hold integers, got \(2.7, 3\)"):
        fl.nn.Param((2.7, 3))  # was silently (2, 3)
    with pytest.raises(TypeError, match=r"Param: shape is an integer or a sequence.*float 2\.0"):
        fl.nn.Param(2.0)
    with pytest.raises(ValueError, match=r"Param: shape must hold sizes >= 0, got \(-1, 3\)"):
        fl.nn.Param((-1, 3))


def test_routers_shapes_and_refs():
    x = torch.randn(3, 4)
    soft = fl.nn.SoftmaxRouter(4, 2)
    torch.testing.assert_close(soft(x).sum(-1), torch.ones(3))
    torch.testing.assert_close(soft.forward_named(x, {"c": x}), soft(2 * x))
    sig = fl.nn.SigmoidRouter(4, 2)(x)
    assert sig.shape == (3, 2) and bool(((sig > 0) & (sig < 1)).all())


def test_selectors_return_indices():
    sel = fl.nn.ArgmaxSelector(4, 3)
    idx = sel(torch.randn(5, 4))
    assert idx.dtype == torch.long and idx.shape == (5,) and bool((idx < 3).all())
    assert sel(torch.randn(4)).shape == ()
    assert fl.nn.FixedSelector(2)(torch.zeros(3, 1)).item() == 2


def test_threshold_halt_per_sample_and_empty():
    halt = fl.nn.ThresholdHalt(1.0)
    torch.testing.assert_close(
        halt(torch.tensor([[0.5, 2.0], [0.1, 0.2]])), torch.tensor([1.0, -0.8])
    )
    assert halt(torch.tensor([3.0, 0.0])).shape == (1,)
    assert halt(torch.zeros(0)).item() == float("-inf")


@pytest.mark.parametrize("dtype", [torch.float16, torch.float64])
def test_threshold_halt_on_empty_input_keeps_the_shape_and_dtype_of_a_full_one(dtype):
    halt = fl.nn.ThresholdHalt(1.0)
    full = halt(torch.zeros(3, 2, dtype=dtype))
    empty_batch = halt(torch.zeros(0, 2, dtype=dtype))  # was [-inf] of shape [1] in float32
    assert (empty_batch.shape, empty_batch.dtype) == ((0,), full.dtype) == ((0,), dtype)
    empty_samples = halt(torch.zeros(3, 0, dtype=dtype))  # no largest element: never halts
    assert empty_samples.dtype == dtype and empty_samples.tolist() == [float("-inf")] * 3
    assert halt(torch.zeros(0, dtype=dtype)).dtype == dtype
    assert halt(torch.zeros(0, 2, dtype=torch.long)).dtype == halt(torch.ones(1, 2).long()).dtype


def test_a_halting_loop_over_an_empty_batch_stops_and_keeps_the_shape():
    calls = []

    class Double(nn.Module):
        def forward(self, x):
            calls.append(x.shape[0])
            return x * 2

    loop = fl.FlowBuilder().loop_body(Double()).while_cond(fl.nn.ThresholdHalt(10.0), 20).build()
    assert loop(torch.zeros(0, 2)).shape == (0, 2)
    assert len(calls) <= 1  # a one-value -inf verdict ran all 20 iterations on nothing


def test_learned_halt_has_one_output_per_sample():
    assert fl.nn.LearnedHalt(4)(torch.randn(6, 4)).shape == (6, 1)


def test_fn_names_nodes_after_the_callable():
    assert fl.nn.Fn(torch.tanh).node_name == "tanh"
    assert fl.nn.Fn(lambda t: t).node_name == "fn"
    with pytest.raises(TypeError, match="needs a callable"):
        fl.nn.Fn(3)


def test_switch_rejects_non_integer_indices_and_wrong_counts():
    class Half(nn.Module):
        def forward(self, x):
            return torch.full((x.shape[0],), 0.5)

    g = fl.FlowBuilder().switch(Half(), Scale(1), Scale(2)).build()
    with pytest.raises(ValueError, match="non-integer index"):
        g(torch.ones(2, 2))

    class Three(nn.Module):
        def forward(self, x):
            return torch.zeros(3, dtype=torch.long)

    g = fl.FlowBuilder().switch(Three(), Scale(1), Scale(2)).build()
    with pytest.raises(ValueError, match="3 indices for a batch of 2"):
        g(torch.ones(2, 2))


def test_halting_condition_with_a_wrong_shape_is_explained():
    class Wide(nn.Module):
        def forward(self, x):
            return torch.ones(x.shape[0], 3)

    g = fl.FlowBuilder().loop_body(Scale(2)).while_cond(Wide(), 3).build()
    with pytest.raises(
        ValueError, match=r"one value for the whole batch or one per sample"
    ) as info:
        g(torch.ones(2, 2))
    assert "loop_2" in info.value.__notes__[0]
