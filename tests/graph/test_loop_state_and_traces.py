"""Loop bodies start each run fresh (reset / reset_state), and report per-iteration traces."""

from __future__ import annotations

import copy
import pickle

import pytest
import torch
from torch import nn

import flodl as fl


class Counter(nn.Module):
    """Counts its iterations; ``reset()`` is what the loop calls before each run."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def forward(self, x):
        self.count += 1
        return x + 1

    def reset(self) -> None:
        self.count = 0


class NoReset(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def forward(self, x):
        self.count += 1
        return x


@pytest.mark.parametrize(
    "finish",
    [
        lambda lb: lb.for_n(3),
        lambda lb: lb.while_cond(lambda x: torch.tensor(0.0), 3),
        lambda lb: lb.until_cond(lambda x: torch.tensor(0.0), 3),
    ],
    ids=["for_n", "while_cond", "until_cond"],
)
def test_body_reset_before_every_loop_run(finish):
    body = Counter()
    graph = finish(fl.FlowBuilder().loop_body(body)).build()
    graph(torch.zeros(2))
    graph(torch.zeros(2))
    assert body.count == 3  # 6 when state leaked across forward passes


def test_reset_also_on_the_loop_module_used_alone_and_after_unpickling():
    body = Counter()
    graph = fl.FlowBuilder().loop_body(body).for_n(3).build()
    for clone in (pickle.loads(pickle.dumps(graph)), copy.deepcopy(graph)):
        clone(torch.zeros(1))
        clone(torch.zeros(1))
        assert clone.module_of("loop_2").body.count == 3
    loop = graph.module_of("loop_2")
    loop(torch.zeros(1))
    loop(torch.zeros(1))
    assert body.count == 3


def test_a_body_without_reset_keeps_its_attributes_and_stays_inlined():
    body = NoReset()
    graph = fl.FlowBuilder().loop_body(body).for_n(2).build()
    assert "for _i_loop_2 in range(2)" in graph.code  # the unrolled fast path is kept
    graph(torch.zeros(1))
    graph(torch.zeros(1))
    assert body.count == 4


def test_graph_body_forward_reference_state_restarts_each_forward():
    # body: s = x + previous s (zeros on the first iteration of each run)
    body = fl.FlowBuilder().through(fl.nn.StateAdd()).using("s").tag("s").build()
    graph = fl.FlowBuilder().loop_body(body).for_n(3).build()
    first = graph(torch.ones(2))
    second = graph(torch.ones(2))
    assert torch.equal(first, second)
    # Within a run the state carries across iterations: 1, then 1+1, then 2+2.
    assert first.tolist() == [4.0, 4.0]


def test_stateless_graph_body_keeps_the_inlined_loop():
    body = fl.FlowBuilder(nn.Linear(2, 2)).build()
    graph = fl.FlowBuilder().loop_body(body).for_n(2).build()
    assert "for _i_loop_2 in range(2)" in graph.code


# ---------------------------------------------------------------------------------- traces


class Halve(nn.Module):
    def forward(self, x):
        self.last = x / 2
        return self.last

    def trace(self):
        return self.last.sum()


class Named(nn.Module):
    def __init__(self, prefix: str = "") -> None:
        super().__init__()
        self.prefix = prefix

    def forward(self, x):
        self.last = x + 1
        return self.last

    def trace(self):
        return {f"{self.prefix}value": self.last.sum(), f"{self.prefix}double": 2 * self.last.sum()}


def test_tensor_traces_by_tag_node_and_last():
    graph = fl.FlowBuilder().loop_body(Halve()).for_n(3).tag("halving").build()
    assert graph.traces("halving") == []  # known tag, nothing run yet
    assert graph.last_trace("halving") is None
    graph(torch.tensor([8.0]))
    assert [float(t) for t in graph.traces("halving")] == [4.0, 2.0, 1.0]
    assert [float(t) for t in graph.traces_by_node("loop_2")] == [4.0, 2.0, 1.0]
    assert float(graph.last_trace("halving")) == 1.0


def test_a_new_forward_replaces_the_traces():
    graph = fl.FlowBuilder().loop_body(Halve()).for_n(2).tag("h").build()
    graph(torch.tensor([8.0]))
    graph(torch.tensor([100.0]))
    assert [float(t) for t in graph.traces("h")] == [50.0, 25.0]


def test_moving_the_graph_forgets_the_traces_and_the_next_run_records_them_anew():
    graph = fl.FlowBuilder().loop_body(Named()).for_n(2).tag("n").build()
    graph(torch.tensor([0.0]))
    graph.to(torch.float64)  # the traces were float32 tensors of the last run
    with pytest.raises(fl.TraceError, match="traces appear after a forward"):
        graph.traces_named("value")
    graph(torch.tensor([0.0], dtype=torch.float64))
    assert [t.dtype for t in graph.traces_named("value")] == [torch.float64] * 2


def test_named_traces_from_a_dict_with_halting_loop():
    stop = fl.nn.ThresholdHalt(2.5)
    graph = fl.FlowBuilder().loop_body(Named()).until_cond(stop, 10).build()
    graph(torch.tensor([0.0]))  # 1, 2, 3 -> halts after the third iteration
    assert [float(t) for t in graph.traces_named("value")] == [1.0, 2.0, 3.0]
    assert [float(t) for t in graph.traces("double")] == [2.0, 4.0, 6.0]
    assert graph.traces_by_node("loop_2") == []  # only named traces were published


def test_traces_keep_gradients_until_detach_state():
    w = nn.Parameter(torch.tensor([2.0]))

    class Scale(nn.Module):
        def forward(self, x):
            self.out = x * w
            return self.out

        def trace(self):
            return self.out

    graph = fl.FlowBuilder().loop_body(Scale()).for_n(2).tag("s").build()
    graph(torch.tensor([1.0]))
    graph.traces("s")[-1].sum().backward()  # d(4w^2... ) reaches the parameter
    assert w.grad is not None and float(w.grad) == 4.0
    graph.detach_state()
    assert all(t.grad_fn is None for t in graph.traces("s"))


def test_trace_names_in_a_child_graph_by_path():
    inner = fl.FlowBuilder().loop_body(Halve()).for_n(2).tag("h").label("encoder").build()
    model = fl.FlowBuilder(inner).through(nn.Identity()).build()
    model(torch.tensor([4.0]))
    assert [float(t) for t in model.traces("encoder.h")] == [2.0, 1.0]


def test_unknown_and_wrong_kind_trace_names_raise():
    graph = fl.FlowBuilder(nn.Linear(1, 1)).tag("lin").loop_body(Halve()).for_n(2).tag("h").build()
    with pytest.raises(fl.TraceError, match="did you mean 'h'"):
        graph.traces("hh")
    with pytest.raises(fl.TraceError, match="not on a loop"):
        graph.traces("lin")
    with pytest.raises(fl.TraceError, match="not a loop"):
        graph.traces_by_node("linear_1")
    with pytest.raises(fl.UnknownTagError):
        graph.traces_by_node("loop_99")
    with pytest.raises(fl.TraceError, match="none yet"):
        graph.traces_named("value")


def test_two_loops_publishing_one_name_is_an_error():
    graph = fl.FlowBuilder().loop_body(Named()).for_n(1).loop_body(Named()).for_n(1).build()
    graph(torch.zeros(1))
    with pytest.raises(fl.TraceError, match="published by both"):
        graph.traces_named("value")
    ok = fl.FlowBuilder().loop_body(Named("a_")).for_n(1).loop_body(Named("b_")).for_n(2).build()
    ok(torch.zeros(1))
    assert len(ok.traces_named("a_value")) == 1 and len(ok.traces_named("b_value")) == 2


def test_a_bad_trace_return_is_a_type_error_naming_the_body():
    class Bad(nn.Module):
        def forward(self, x):
            return x

        def trace(self):
            return 3.0

    graph = fl.FlowBuilder().loop_body(Bad()).for_n(2).build()
    with pytest.raises(TypeError, match=r"Bad.trace\(\) must return a tensor"):
        graph(torch.zeros(1))
