"""The vocabulary real scripts need: Select, Param, input defaults, scan, several outputs —
each equal, bit for bit (outputs and gradients), to the hand-written PyTorch it replaces, and
each pickleable."""

from __future__ import annotations

import copy
import functools
import io
import operator
import pickle

import pytest
import torch
from torch import nn

import flodl as fl


def _leaf(x: torch.Tensor) -> torch.Tensor:
    return x.detach().clone().requires_grad_()


def _assert_parity(
    hand: nn.Module, twin: nn.Module, graph: nn.Module, *args: torch.Tensor, **kw
) -> None:
    """Same outputs and the same gradients, compared with torch.equal.

    ``twin`` is a deep copy of ``hand`` whose parameters the graph uses: parameter gradients are
    compared name by name, input gradients in order.
    """
    assert {id(p) for p in graph.parameters()} == {id(p) for p in twin.parameters()}
    a_in, b_in = [_leaf(x) for x in args], [_leaf(x) for x in args]
    out_a, out_b = hand(*a_in, **kw), graph(*b_in, **kw)
    flat_a, flat_b = _flatten(out_a), _flatten(out_b)
    assert len(flat_a) == len(flat_b)
    for u, v in zip(flat_a, flat_b, strict=True):
        assert torch.equal(u, v)
    sum(t.sum() for t in flat_a).backward()
    sum(t.sum() for t in flat_b).backward()
    named = dict(twin.named_parameters())
    for name, p in hand.named_parameters():
        assert torch.equal(p.grad, named[name].grad), name
    for u, v in zip(a_in, b_in, strict=True):
        assert torch.equal(u.grad, v.grad)


def _flatten(value) -> list[torch.Tensor]:
    if isinstance(value, tuple | list):
        return [t for item in value for t in _flatten(item)]
    return [value]


def _roundtrip(graph: fl.Graph) -> fl.Graph:
    return pickle.loads(pickle.dumps(graph))


# ---------------------------------------------------------------- Select
class HandLSTM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lstm = nn.LSTM(3, 6, batch_first=True)
        self.head = nn.Linear(6, 2)

    def forward(self, x):
        out, _ = self.lstm(x)
        return self.head(out[:, -1])


def test_select_takes_the_output_of_an_lstm_like_the_hand_written_model():
    torch.manual_seed(0)
    hand = HandLSTM()
    twin = copy.deepcopy(hand)
    graph = (
        fl.FlowBuilder(twin.lstm)
        .through(fl.nn.Select(0))
        .through(fl.nn.Select((slice(None), -1)))
        .through(twin.head)
        .build()
    )
    _assert_parity(hand, twin, graph, torch.randn(4, 5, 3))
    restored = _roundtrip(graph)
    x = torch.randn(2, 5, 3)
    assert torch.equal(restored(x), graph(x))


def test_select_reaches_into_nested_tuples_and_attention_outputs():
    lstm = nn.LSTM(3, 4)
    g = fl.FlowBuilder(lstm).through(fl.nn.Select(1)).through(fl.nn.Select(0)).build()
    x = torch.randn(5, 2, 3)
    assert torch.equal(g(x), lstm(x)[1][0])
    attn = nn.MultiheadAttention(8, 2, batch_first=True)
    g = fl.FlowBuilder(functools.partial(_self_attention, attn)).through(fl.nn.Select(0)).build()
    x = torch.randn(2, 3, 8)
    assert torch.equal(g(x), attn(x, x, x)[0])
    assert fl.nn.Select(-1)((1, 2, 3)) == 3
    assert "index=0" in repr(fl.nn.Select(0))


def _self_attention(attn, x):
    return attn(x, x, x)


# ---------------------------------------------------------------- Param
class HandPositional(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(4, 8)
        self.pos = nn.Parameter(torch.randn(1, 16, 8))

    def forward(self, x):
        h = self.embed(x)
        return h + self.pos[:, : h.size(1)]


def test_param_adds_a_learned_positional_embedding_like_the_hand_written_model():
    torch.manual_seed(0)
    hand = HandPositional()
    twin = copy.deepcopy(hand)
    pos = fl.nn.Param((1, 16, 8), init=hand.pos.detach(), slice_dim=1)
    assert torch.equal(pos.value, hand.pos)
    pos.value = twin.pos  # share the twin's tensor so that gradients compare by name
    graph = fl.FlowBuilder(twin.embed).through(pos).tag("pos").build()
    assert sorted(graph.state_dict()) == ["linear_1.bias", "linear_1.weight", "pos.value"]
    _assert_parity(hand, twin, graph, torch.randn(3, 10, 4))
    x = torch.randn(2, 7, 4)
    assert torch.equal(_roundtrip(graph)(x), graph(x))


def test_param_modes_and_initialisers():
    x = torch.full((2, 3), 2.0)
    scale = fl.nn.Param(3, init=functools.partial(nn.init.constant_, val=0.5), mode="mul")
    assert torch.equal(scale(x), torch.ones(2, 3))
    const = fl.nn.Param((2, 3), init=nn.init.ones_, mode="value")
    assert torch.equal(const(torch.zeros(5)), torch.ones(2, 3))
    assert torch.equal(fl.nn.Param(3)(x), x)  # zeros by default
    torch.manual_seed(1)
    a = fl.nn.Param(4, init=nn.init.normal_).value
    torch.manual_seed(1)
    assert torch.equal(a, nn.init.normal_(torch.zeros(4)))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"mode": "concat"}, "mode must be one of add, mul, value"),
        ({"init": torch.zeros(2)}, "init tensor has shape (2,), expected (3,)"),
        ({"init": "normal"}, "in-place initialiser"),
    ],
)
def test_param_rejects_bad_arguments_clearly(kwargs, message):
    with pytest.raises((ValueError, TypeError)) as info:
        fl.nn.Param(3, **kwargs)
    assert message in str(info.value)


# ---------------------------------------------------------------- input defaults
class HandFuture(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 3)

    def forward(self, x, future=0):
        return self.lin(x) * (future + 1)


class Scaled(nn.Module):
    def __init__(self, lin: nn.Linear) -> None:
        super().__init__()
        self.lin = lin

    def forward(self, x, future):
        return self.lin(x) * (future + 1)


def test_input_default_is_used_when_the_argument_is_left_out():
    torch.manual_seed(0)
    hand = HandFuture()
    twin = copy.deepcopy(hand)
    graph = (
        fl.FlowBuilder()
        .input("future", default=0)
        .through(Scaled(twin.lin))
        .using("future")
        .build()
    )
    x = torch.randn(2, 3)
    _assert_parity(hand, twin, graph, x)
    hand.zero_grad()
    twin.zero_grad()
    _assert_parity(hand, twin, graph, x, future=2)
    assert graph.input_defaults == {"future": 0}
    assert "future=0" in graph._signature()
    assert _roundtrip(graph).input_defaults == {"future": 0}
    assert torch.equal(_roundtrip(graph)(x), graph(x))


def test_required_inputs_still_fail_and_nested_optional_inputs_need_no_wiring():
    inner = fl.FlowBuilder().input("scale", default=3).through(Scaled(nn.Linear(2, 2)))
    inner = inner.using(future="scale").label("inner").build()
    outer = fl.FlowBuilder(nn.Identity()).through(inner).build()  # scale left to its default
    x = torch.randn(1, 2)
    assert torch.equal(outer(x), inner(x))
    strict = fl.FlowBuilder().input("ctx").through(fl.nn.StateAdd()).using("ctx").build()
    with pytest.raises(fl.GraphInputError, match="missing graph input 'ctx'"):
        strict(x)


# ---------------------------------------------------------------- scan
class HandLSTMCellLoop(nn.Module):
    """The loop every LSTMCell script writes: zeros state, one step per time index."""

    def __init__(self) -> None:
        super().__init__()
        self.cell = nn.LSTMCell(3, 5)
        self.head = nn.Linear(5, 1)

    def forward(self, x):
        h = torch.zeros(x.size(0), 5)
        c = torch.zeros(x.size(0), 5)
        outs = []
        for t in range(x.size(1)):
            h, c = self.cell(x[:, t], (h, c))
            outs.append(h)
        return self.head(torch.stack(outs, 1)), (h, c)


def test_scan_equals_a_hand_written_lstmcell_loop_bit_for_bit():
    torch.manual_seed(0)
    hand = HandLSTMCellLoop()
    twin = copy.deepcopy(hand)
    graph = (
        fl.FlowBuilder()
        .scan(twin.cell, dim=1, final="state")
        .through(twin.head)
        .tag("y")
        .output("y", "state")
        .build()
    )
    _assert_parity(hand, twin, graph, torch.randn(4, 9, 3))
    restored = _roundtrip(graph)
    x = torch.randn(2, 4, 3)
    assert torch.equal(restored(x)[0], graph(x)[0])


class HandGRU(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.cell = nn.GRUCell(2, 4)

    def forward(self, x, h0):
        h = h0
        outs = []
        for x_t in x.unbind(0):  # time-major
            h = self.cell(x_t, h)
            outs.append(h)
        return torch.stack(outs, 0)


def test_scan_over_dim_0_with_an_initial_state_input_equals_a_grucell_loop():
    torch.manual_seed(0)
    hand = HandGRU()
    twin = copy.deepcopy(hand)
    graph = fl.FlowBuilder().input("h0").scan(twin.cell, dim=0, state="h0").build()
    _assert_parity(hand, twin, graph, torch.randn(6, 3, 2), h0=torch.randn(3, 4))
    optional = fl.FlowBuilder().input("h0", default=None).scan(nn.GRUCell(2, 4), state="h0")
    g = optional.build()
    assert g(torch.randn(3, 6, 2)).shape == (3, 6, 4)


def test_scan_mistakes_are_build_errors_with_the_call_site():
    with pytest.raises(fl.GraphBuildError) as info:
        fl.FlowBuilder().scan(nn.GRUCell(2, 4), state="h0").build()
    assert "no tag or input 'h0' is defined before this scan" in str(info.value)
    assert "test_porting_vocabulary.py" in str(info.value)
    with pytest.raises(fl.GraphBuildError, match="dim must be an integer"):
        fl.FlowBuilder().scan(nn.GRUCell(2, 4), dim="1").build()
    with pytest.raises(fl.GraphBuildError, match="duplicate tag 'h'"):
        fl.FlowBuilder().tag("h").scan(nn.GRUCell(2, 4), final="h").build()


class HandLastState(nn.Module):
    """A model that reads only the final hidden state: no list, no stack."""

    def __init__(self, cell: nn.Module) -> None:
        super().__init__()
        self.cell = cell
        self.head = nn.Linear(5, 2)

    def forward(self, x):
        h = None
        for x_t in x.unbind(1):
            h = self.cell(x_t, h)
        return self.head(h[0] if isinstance(h, tuple) else h)


@pytest.mark.parametrize("cell", [nn.GRUCell(3, 5), nn.LSTMCell(3, 5)], ids=["gru", "lstm"])
def test_scan_keeping_the_last_output_equals_a_final_state_loop(cell):
    torch.manual_seed(0)
    hand = HandLastState(cell)
    twin = copy.deepcopy(hand)
    graph = fl.FlowBuilder().scan(twin.cell, keep="last", final="state").through(twin.head)
    graph = graph.build()
    _assert_parity(hand, twin, graph, torch.randn(4, 7, 3))
    x = torch.randn(2, 6, 3)
    with torch.no_grad():
        assert graph(x).shape == (2, 2)
        state = graph.tagged("state")  # the final state is still there to tag
        assert (state[0] if isinstance(state, tuple) else state).shape == (2, 5)
    assert "_torch.stack" not in graph.code  # nothing collected
    restored = _roundtrip(graph)
    assert torch.equal(restored(x), graph(x))


def test_keep_all_is_the_default_and_leaves_existing_graphs_as_they_were():
    cell = nn.GRUCell(2, 4)
    default = fl.FlowBuilder().scan(cell).build()
    explicit = fl.FlowBuilder().scan(cell, keep="all").build()
    assert default.structural_hash() == explicit.structural_hash()
    assert "keep" not in default.nodes[0].serialized_options()  # pickles and hashes unchanged
    last = fl.FlowBuilder().scan(cell, keep="last").build()
    assert last.structural_hash() != default.structural_hash()
    with pytest.raises(fl.GraphBuildError, match=r"keep must be 'all' .* or 'last'"):
        fl.FlowBuilder().scan(cell, keep="first").build()


# ---------------------------------------------------------------- several outputs
class HandVAE(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.enc = nn.Linear(6, 8)
        self.mu = nn.Linear(8, 2)
        self.logvar = nn.Linear(8, 2)
        self.dec = nn.Linear(2, 6)

    def forward(self, x):
        h = torch.relu(self.enc(x))
        mu, logvar = self.mu(h), self.logvar(h)
        z = mu + 0.5 * logvar  # deterministic reparametrisation stand-in
        return torch.sigmoid(self.dec(z)), mu, logvar


class Combine(nn.Module):
    def forward(self, mu, logvar):
        return mu + 0.5 * logvar


def test_output_returns_several_values_like_the_original_forward():
    torch.manual_seed(0)
    hand = HandVAE()
    t = copy.deepcopy(hand)
    graph = (
        fl.FlowBuilder(t.enc)
        .through(torch.relu)
        .fork(t.logvar)
        .tag("logvar")
        .through(t.mu)
        .tag("mu")
        .through(Combine())
        .using("logvar")
        .through(t.dec)
        .through(torch.sigmoid)
        .tag("recon")
        .output("recon", "mu", "logvar")
        .build()
    )
    assert graph.outputs == ("recon", "mu", "logvar")
    _assert_parity(hand, t, graph, torch.randn(5, 6))
    x = torch.randn(2, 6)
    for a, b in zip(_roundtrip(graph)(x), graph(x), strict=True):
        assert torch.equal(a, b)


def test_output_mistakes_are_build_errors():
    with pytest.raises(fl.GraphBuildError, match=r"output\('mu'\): no such tag"):
        fl.FlowBuilder(nn.Linear(2, 2)).tag("mux").output("mu").build()
    with pytest.raises(fl.GraphBuildError, match="output was already called"):
        fl.FlowBuilder(nn.Linear(2, 2)).tag("a").output("a").output("a").build()
    single = fl.FlowBuilder(nn.Linear(2, 2)).tag("a").output("a").build()
    assert isinstance(single(torch.randn(1, 2)), tuple)


# ---------------------------------------------------------------- pickling
def test_a_lambda_step_fails_at_pickle_time_naming_the_node_and_the_fix():
    g = fl.FlowBuilder(nn.LSTM(3, 4, batch_first=True)).through(lambda t: t[0]).build()
    for attempt in (lambda: pickle.dumps(g), lambda: torch.save(g, io.BytesIO())):
        with pytest.raises(fl.GraphPickleError) as info:
            attempt()
        text = str(info.value)
        assert "node 'fn_2'" in text and "runs a lambda" in text
        assert "test_porting_vocabulary.py" in text
        assert "fl.nn.Select" in text and "operator.itemgetter" in text
    assert isinstance(info.value, pickle.PicklingError) and isinstance(info.value, fl.FlodlError)
    x = torch.randn(2, 5, 3)
    assert torch.equal(copy.deepcopy(g)(x), g(x))  # deepcopy shares functions: it works


def test_a_local_function_inside_a_nested_module_is_named_too():
    def first(t):
        return t[0]

    g = fl.FlowBuilder(nn.LSTM(3, 4)).through(nn.Sequential(fl.nn.Fn(first))).build()
    with pytest.raises(fl.GraphPickleError, match=r"sequential_2\.0.*local function"):
        pickle.dumps(g)


def test_itemgetter_and_module_level_functions_pickle():
    g = fl.FlowBuilder(nn.LSTM(3, 4)).through(operator.itemgetter(0)).through(torch.tanh)
    g = g.build()
    x = torch.randn(5, 2, 3)
    assert torch.equal(_roundtrip(g)(x), g(x))
