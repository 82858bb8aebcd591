"""Known layers written out as their functional call, and nested graphs' direct forwards called
without ``Graph.forward``: bit-identical to the layer's own ``forward`` (values, gradients,
running statistics), reading parameters and settings at call time, and falling back whenever
the written-out form could differ."""

from __future__ import annotations

import copy
import subprocess
import sys
from typing import ClassVar

import pytest
import torch
from torch import nn

import flodl as fl
from flodl.graph import dispatch, inline
from tests.conftest import clean_env
from tests.graph.helpers import (
    direct_source,
    frames_of,
    same_gradients_then_step,
    sgd,
    whole_tree_direct,
)


def _layer_graph_and_reference(make, training: bool):
    """A fresh layer, its deep copy, and a one-step graph of the layer, in ``training`` mode,
    the graph running its direct forward."""
    torch.manual_seed(0)
    layer = make()
    reference = copy.deepcopy(layer)
    graph = fl.FlowBuilder(layer).build()
    graph.train(training)
    reference.train(training)
    assert whole_tree_direct(graph)
    return layer, graph, reference


# (layer factory, input factory, take gradients?) for every class written out, plus the
# settings each expression reads (bias off, a non-default mode...)
CASES = {
    "linear": (lambda: nn.Linear(5, 3), lambda: torch.randn(4, 5), True),
    "linear-no-bias": (lambda: nn.Linear(5, 3, bias=False), lambda: torch.randn(4, 5), True),
    "gelu": (nn.GELU, lambda: torch.randn(4, 5), True),
    "gelu-tanh": (lambda: nn.GELU("tanh"), lambda: torch.randn(4, 5), True),
    "relu": (nn.ReLU, lambda: torch.randn(4, 5), True),
    "relu-inplace": (lambda: nn.ReLU(inplace=True), lambda: torch.randn(4, 5), False),
    "silu": (nn.SiLU, lambda: torch.randn(4, 5), True),
    "silu-inplace": (lambda: nn.SiLU(inplace=True), lambda: torch.randn(4, 5), False),
    "tanh": (nn.Tanh, lambda: torch.randn(4, 5), True),
    "sigmoid": (nn.Sigmoid, lambda: torch.randn(4, 5), True),
    "identity": (nn.Identity, lambda: torch.randn(4, 5), True),
    "layernorm": (lambda: nn.LayerNorm(5), lambda: torch.randn(4, 5), True),
    "layernorm-plain": (
        lambda: nn.LayerNorm(5, elementwise_affine=False),
        lambda: torch.randn(4, 5),
        True,
    ),
    "dropout": (lambda: nn.Dropout(0.3), lambda: torch.randn(4, 5), True),
    "flatten": (lambda: nn.Flatten(1), lambda: torch.randn(2, 3, 4), True),
    "embedding": (
        lambda: nn.Embedding(10, 4, padding_idx=0, max_norm=1.0),
        lambda: torch.tensor([[0, 3, 9], [2, 2, 1]]),
        False,
    ),
    "adaptive-avg-pool2d": (
        lambda: nn.AdaptiveAvgPool2d((2, 1)),
        lambda: torch.randn(2, 3, 5, 4),
        True,
    ),
    "max-pool2d": (
        lambda: nn.MaxPool2d(2, ceil_mode=True),
        lambda: torch.randn(2, 3, 5, 5),
        True,
    ),
    "conv1d": (lambda: nn.Conv1d(3, 4, 3, padding=1), lambda: torch.randn(2, 3, 7), True),
    "conv2d": (
        lambda: nn.Conv2d(3, 4, 3, stride=2, groups=1),
        lambda: torch.randn(2, 3, 8, 8),
        True,
    ),
    "conv2d-reflect": (
        lambda: nn.Conv2d(3, 4, 3, padding=1, padding_mode="reflect"),
        lambda: torch.randn(2, 3, 6, 6),
        True,
    ),
    "conv3d": (lambda: nn.Conv3d(2, 2, 2), lambda: torch.randn(1, 2, 3, 3, 3), True),
    "conv-transpose1d": (lambda: nn.ConvTranspose1d(3, 2, 3), lambda: torch.randn(2, 3, 5), True),
    "conv-transpose2d": (
        lambda: nn.ConvTranspose2d(3, 2, 4, stride=2, padding=1, output_padding=1),
        lambda: torch.randn(2, 3, 5, 5),
        True,
    ),
    "conv-transpose3d": (
        lambda: nn.ConvTranspose3d(2, 2, 2),
        lambda: torch.randn(1, 2, 3, 3, 3),
        True,
    ),
    "batchnorm1d": (lambda: nn.BatchNorm1d(5), lambda: torch.randn(4, 5), True),
    "batchnorm1d-seq": (lambda: nn.BatchNorm1d(3), lambda: torch.randn(4, 3, 6), True),
    "batchnorm2d": (lambda: nn.BatchNorm2d(3), lambda: torch.randn(2, 3, 4, 4), True),
    "batchnorm2d-cumulative": (
        lambda: nn.BatchNorm2d(3, momentum=None),
        lambda: torch.randn(2, 3, 4, 4),
        True,
    ),
    "batchnorm2d-untracked": (
        lambda: nn.BatchNorm2d(3, track_running_stats=False),
        lambda: torch.randn(2, 3, 4, 4),
        True,
    ),
    "batchnorm3d": (lambda: nn.BatchNorm3d(2), lambda: torch.randn(2, 2, 3, 3, 3), True),
    "select": (lambda: fl.nn.Select((slice(None), -1)), lambda: torch.randn(2, 3, 4), True),
}


# (cell factory, input factory [batch, seq, features] or unbatched [seq, features], with an
# initial state?) for every recurrent cell a scan writes out
CELL_CASES = {
    "gru": (lambda: nn.GRUCell(3, 4), lambda: torch.randn(2, 5, 3), False),
    "gru-no-bias": (lambda: nn.GRUCell(3, 4, bias=False), lambda: torch.randn(2, 5, 3), False),
    "gru-initial-state": (lambda: nn.GRUCell(3, 4), lambda: torch.randn(2, 5, 3), True),
    "gru-unbatched": (lambda: nn.GRUCell(3, 4), lambda: torch.randn(5, 3), False),
    "lstm": (lambda: nn.LSTMCell(3, 4), lambda: torch.randn(2, 5, 3), False),
    "lstm-no-bias": (lambda: nn.LSTMCell(3, 4, bias=False), lambda: torch.randn(2, 5, 3), False),
    "lstm-initial-state": (lambda: nn.LSTMCell(3, 4), lambda: torch.randn(2, 5, 3), True),
    "lstm-unbatched": (lambda: nn.LSTMCell(3, 4), lambda: torch.randn(5, 3), False),
}


# (layer factory, input factory) for every recurrent layer written out as its kernel call, with
# the settings the call reads: layers, directions, batch first or not, a projection, no bias,
# dropout between layers (random in training), each kernel; an unbatched input runs forward.
RNN_CASES = {
    "lstm": (lambda: nn.LSTM(3, 4, num_layers=2, batch_first=True), lambda: torch.randn(2, 5, 3)),
    "lstm-seq-first": (lambda: nn.LSTM(3, 4), lambda: torch.randn(5, 2, 3)),
    "lstm-bidirectional": (
        lambda: nn.LSTM(3, 4, bidirectional=True, batch_first=True),
        lambda: torch.randn(2, 5, 3),
    ),
    "lstm-projection": (
        lambda: nn.LSTM(3, 4, num_layers=2, proj_size=2, batch_first=True),
        lambda: torch.randn(2, 5, 3),
    ),
    "lstm-no-bias": (lambda: nn.LSTM(3, 4, bias=False), lambda: torch.randn(5, 2, 3)),
    "lstm-dropout": (
        lambda: nn.LSTM(3, 4, num_layers=3, dropout=0.5, batch_first=True),
        lambda: torch.randn(2, 5, 3),
    ),
    "lstm-unbatched": (lambda: nn.LSTM(3, 4, num_layers=2), lambda: torch.randn(5, 3)),
    "gru": (lambda: nn.GRU(3, 4, num_layers=2, batch_first=True), lambda: torch.randn(2, 5, 3)),
    "gru-bidirectional-dropout": (
        lambda: nn.GRU(3, 4, num_layers=2, dropout=0.5, bidirectional=True),
        lambda: torch.randn(5, 2, 3),
    ),
    "rnn-tanh": (lambda: nn.RNN(3, 4, num_layers=2), lambda: torch.randn(5, 2, 3)),
    "rnn-relu": (
        lambda: nn.RNN(3, 4, nonlinearity="relu", batch_first=True, bias=False),
        lambda: torch.randn(2, 5, 3),
    ),
}


def test_every_written_out_class_has_a_case():
    covered = {type(make()) for make, _, _ in CASES.values()}
    covered |= {type(make()) for make, _, _ in CELL_CASES.values()}
    covered |= {type(make()) for make, _ in RNN_CASES.values()}
    covered |= {type(make()) for make, _, _ in ATTENTION_CASES.values()}
    from tests.graph.test_inline_transformer import LAYER_CASES, STACK_CASES

    covered |= {type(make()) for make, _ in (*LAYER_CASES.values(), *STACK_CASES.values())}
    assert covered == set(inline.FORWARDS)


def _run(module: nn.Module, x: torch.Tensor, grads: bool, seed: int):
    x = x.clone().requires_grad_(grads and x.is_floating_point())
    torch.manual_seed(seed)
    out = module(x)
    if not grads:
        return out.detach(), []
    out.square().sum().backward()
    return out.detach(), [x.grad] + [p.grad for p in module.parameters()]


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
def test_written_out_layer_is_bit_identical_to_its_forward(case, training):
    make, data, grads = CASES[case]
    layer, graph, reference = _layer_graph_and_reference(make, training)
    written = inline.expression(layer, "_m[" + repr(graph.nodes[0].attr) + "]", "input")
    assert written is not None and written in direct_source(graph)
    x = data()
    for step in range(3):  # repeated: running statistics and batch counts evolve alike
        got, got_grads = _run(graph, x, grads, seed=step)
        want, want_grads = _run(reference, x, grads, seed=step)
        assert torch.equal(got, want), step
        assert len(got_grads) == len(want_grads)
        for a, b in zip(got_grads, want_grads, strict=True):
            assert (a is None and b is None) or torch.equal(a, b)
    for (name, a), b in zip(
        layer.state_dict().items(), reference.state_dict().values(), strict=True
    ):
        assert torch.equal(a, b), name  # running_mean, running_var, num_batches_tracked


def _by_hand(cell: nn.Module, x: torch.Tensor, h, dim: int, keep: str) -> torch.Tensor:
    outs = []
    for x_t in x.unbind(dim):
        h = cell(x_t, h)
        outs.append(h[0] if isinstance(h, tuple) else h)
    return outs[-1] if keep == "last" else torch.stack(outs, dim)


@pytest.mark.parametrize("case", list(CELL_CASES))
@pytest.mark.parametrize("keep", ["all", "last"])
def test_written_out_cell_in_a_scan_is_bit_identical_to_the_loop_by_hand(case, keep):
    make, data, with_state = CELL_CASES[case]
    torch.manual_seed(0)
    cell = make()
    reference = copy.deepcopy(cell)
    x = data()
    dim = 1 if x.dim() == 3 else 0
    b = fl.FlowBuilder()
    if with_state:
        b = b.input("h0")
    graph = b.scan(cell, dim=dim, state="h0" if with_state else None, keep=keep).build()
    assert whole_tree_direct(graph)
    assert "_VF." in direct_source(graph) and ".forward(" in direct_source(graph)
    opts = sgd(cell, reference)
    for step in range(3):  # gradients, then parameters after optimizer steps, stay identical
        h = torch.randn(x.shape[0], 4) if with_state else None
        if h is not None and isinstance(cell, nn.LSTMCell):
            h = (h, torch.randn_like(h))
        xs = [x.clone().requires_grad_(True) for _ in range(2)]
        got = graph(xs[0], h0=h) if with_state else graph(xs[0])
        want = _by_hand(reference, xs[1], h, dim, keep)
        assert torch.equal(got, want), step
        got.square().sum().backward()
        want.square().sum().backward()
        assert torch.equal(xs[0].grad, xs[1].grad)
        same_gradients_then_step(cell, reference, opts)


def test_a_cell_raises_its_own_error_on_a_bad_state():
    graph = fl.FlowBuilder().input("h0").scan(nn.GRUCell(3, 4), state="h0").build()
    with pytest.raises(ValueError, match="GRUCell: Expected hidden to be 1D or 2D"):
        graph(torch.randn(2, 5, 3), h0=torch.zeros(1, 2, 4))


def test_a_cell_class_whose_forward_is_replaced_gets_its_forward_called(monkeypatch):
    graph = fl.FlowBuilder().scan(nn.GRUCell(3, 4), keep="last").build()
    x = torch.randn(2, 5, 3)
    before = graph(x)
    calls = []
    original = nn.GRUCell.forward

    def patched(self, input, hx=None):
        calls.append(1)
        return original(self, input, hx)

    monkeypatch.setattr(nn.GRUCell, "forward", patched)
    assert not whole_tree_direct(graph)
    assert torch.equal(graph(x), before) and len(calls) == 5  # every step through forward
    monkeypatch.undo()
    assert whole_tree_direct(graph)


def _flat(result) -> list[torch.Tensor]:
    """A recurrent layer's (output, state) as a list of tensors."""
    out, state = result
    return [out, *(state if isinstance(state, tuple) else (state,))]


@pytest.mark.filterwarnings("ignore:LSTM with projections is not supported with oneDNN")
@pytest.mark.parametrize("case", list(RNN_CASES))
@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
def test_written_out_recurrent_layer_is_bit_identical_to_its_forward(case, training):
    make, data = RNN_CASES[case]
    layer, graph, reference = _layer_graph_and_reference(make, training)
    assert "_rnn(" in direct_source(graph)
    opts = sgd(layer, reference)
    x = data()
    for step in range(3):  # dropout draws, gradients, then parameters after steps, identical
        xs = [x.clone().requires_grad_(True) for _ in range(2)]
        torch.manual_seed(step)
        got = _flat(graph(xs[0]))
        torch.manual_seed(step)
        want = _flat(reference(xs[1]))
        assert len(got) == len(want)
        for a, b in zip(got, want, strict=True):
            assert torch.equal(a, b), step
        sum(t.square().sum() for t in got).backward()
        sum(t.square().sum() for t in want).backward()
        assert torch.equal(xs[0].grad, xs[1].grad)
        same_gradients_then_step(layer, reference, opts)
    # The kernel is called without forward's frame on a batched input; forward runs otherwise.
    frames = frames_of(type(layer).forward.__code__, lambda: graph(x))
    assert frames == (0 if x.dim() == 3 else 1)


@pytest.mark.parametrize(
    ("x", "error"),
    [
        (torch.randn(2, 5, 4), RuntimeError),  # input.size(-1) must be equal to input_size
        (torch.randn(2, 5, 3, dtype=torch.float64), ValueError),  # a dtype not the weights'
        (torch.randn(2, 2, 5, 3), ValueError),  # Expected input to be 2D or 3D
    ],
    ids=["features", "dtype", "dims"],
)
def test_a_recurrent_layer_raises_its_own_error_on_bad_input(x, error):
    layer = nn.LSTM(3, 4, batch_first=True)
    graph = fl.FlowBuilder(layer).build()
    assert whole_tree_direct(graph)
    with pytest.raises(error) as want:
        layer(x)
    with pytest.raises(error) as got:
        graph(x)
    assert str(want.value) in str(got.value)  # the layer's own words, whatever torch's version


def test_a_recurrent_layer_takes_a_packed_sequence_through_its_forward():
    torch.manual_seed(0)
    layer = nn.GRU(3, 4, batch_first=True)
    graph = fl.FlowBuilder(layer).build()
    assert whole_tree_direct(graph) and "_rnn(" in direct_source(graph)
    packed = nn.utils.rnn.pack_padded_sequence(torch.randn(2, 5, 3), [5, 3], batch_first=True)
    got, want = graph(packed), layer.forward(packed)
    assert torch.equal(got[0].data, want[0].data) and torch.equal(got[1], want[1])


def test_a_recurrent_weight_swapped_into_its_parameters_is_used():
    """accelerate and ``functional_call`` write ``_parameters`` directly, past the
    ``__setattr__`` that keeps ``_flat_weights`` current: forward notices, and so must the
    written-out call."""
    torch.manual_seed(0)
    layer = nn.LSTM(3, 4, batch_first=True)
    graph = fl.FlowBuilder(layer).build()
    x = torch.randn(2, 5, 3)
    before = graph(x)[0]
    swapped_in = layer._parameters["weight_hh_l0"] = nn.Parameter(torch.zeros(16, 4))
    got = graph(x)[0]
    assert layer._flat_weights[1] is swapped_in  # forward remade its list, as it does alone
    assert not torch.equal(got, before)
    assert torch.equal(got, layer.forward(x)[0])
    assert frames_of(nn.LSTM.forward.__code__, lambda: graph(x)) == 0  # and direct again
    name = graph.nodes[0].attr
    swapped = torch.ones(16, 3)
    got = torch.func.functional_call(graph, {f"{name}.weight_ih_l0": swapped}, (x,))[0]
    want = torch.func.functional_call(layer, {"weight_ih_l0": swapped}, (x,))[0]
    assert torch.equal(got, want) and not torch.equal(got, layer.forward(x)[0])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("kind", [nn.LSTM, nn.GRU])
def test_a_written_out_recurrent_layer_on_cuda_is_cudnns_call(kind):
    """On CUDA the kernel takes cuDNN's packed weights: the written-out call passes the list
    forward packed, and a weight swapped into ``_parameters`` runs forward, which packs again."""
    torch.manual_seed(0)
    layer = kind(3, 4, 2, batch_first=True).cuda()
    reference = copy.deepcopy(layer)
    graph = fl.FlowBuilder(layer).build()
    x = torch.randn(2, 5, 3, device="cuda")
    xs = [x.clone().requires_grad_(True) for _ in range(2)]
    got, want = _flat(graph(xs[0])), _flat(reference(xs[1]))
    for a, b in zip(got, want, strict=True):
        assert torch.equal(a, b)
    sum(t.square().sum() for t in got).backward()
    sum(t.square().sum() for t in want).backward()
    # cuDNN's recurrent backward is not promised deterministic between two calls
    torch.testing.assert_close(xs[0].grad, xs[1].grad)
    assert frames_of(kind.forward.__code__, lambda: graph(x)) == 0
    swapped = nn.Parameter(torch.zeros_like(layer.weight_hh_l0))
    layer._parameters["weight_hh_l0"] = swapped
    reference._parameters["weight_hh_l0"] = nn.Parameter(torch.zeros_like(swapped))
    assert frames_of(kind.forward.__code__, lambda: graph(x)) == 1  # forward remakes, packs
    assert torch.equal(graph(x)[0], reference(x)[0])
    assert frames_of(kind.forward.__code__, lambda: graph(x)) == 0  # and direct again


# (attention factory, wiring, takes the fused fast path in inference?) where wiring is
# "self" (query, key and value the same tensor), "cross" (key and value another input) or
# "masked" (self-attention with a key padding mask): each setting forward's fast path reads
ATTENTION_CASES = {
    "self": (lambda: nn.MultiheadAttention(8, 2, batch_first=True), "self", True),
    "self-no-bias": (
        lambda: nn.MultiheadAttention(8, 2, bias=False, batch_first=True),
        "self",
        False,
    ),
    "self-seq-first": (lambda: nn.MultiheadAttention(8, 2), "self", False),
    "self-odd-heads": (lambda: nn.MultiheadAttention(9, 3, batch_first=True), "self", False),
    "self-dropout": (
        lambda: nn.MultiheadAttention(8, 2, dropout=0.5, batch_first=True),
        "self",
        True,
    ),
    "self-kv-bias": (
        lambda: nn.MultiheadAttention(8, 2, add_bias_kv=True, batch_first=True),
        "self",
        False,
    ),
    "self-zero-attn": (
        lambda: nn.MultiheadAttention(8, 2, add_zero_attn=True, batch_first=True),
        "self",
        False,
    ),
    "cross-other-kdim": (
        lambda: nn.MultiheadAttention(8, 2, kdim=6, vdim=6, batch_first=True),
        "cross",
        False,
    ),
    "cross": (lambda: nn.MultiheadAttention(8, 2, batch_first=True), "cross", False),
    "masked": (lambda: nn.MultiheadAttention(8, 2, batch_first=True), "masked", False),
}


def _attention_graph(attn: nn.Module, wiring: str) -> fl.Graph:
    b = fl.FlowBuilder().input("memory", "mask").tag("x").through(attn)
    if wiring == "cross":
        b = b.using(key="memory", value="memory")
    elif wiring == "masked":
        b = b.using(key="x", value="x", key_padding_mask="mask")
    else:
        b = b.using(key="x", value="x")
    return b.build()


@pytest.mark.parametrize("case", list(ATTENTION_CASES))
@pytest.mark.parametrize("mode", ["train", "eval", "inference"])
def test_written_out_attention_is_bit_identical_to_its_forward(case, mode):
    make, wiring, fused = ATTENTION_CASES[case]
    torch.manual_seed(0)
    attn = make()
    reference = copy.deepcopy(attn)
    graph = _attention_graph(attn, wiring)
    graph.train(mode == "train")
    reference.train(mode == "train")
    assert whole_tree_direct(graph)
    assert "_mha(" in direct_source(graph)
    dim = attn.embed_dim
    x, memory = torch.randn(2, 5, dim), torch.randn(2, 4, attn.kdim)
    mask = torch.tensor([[False] * 5, [False, False, False, True, True]])
    if not attn.batch_first:
        x, memory, mask = x.transpose(0, 1), memory.transpose(0, 1), mask

    def by_hand(x, memory):
        kv = memory if wiring == "cross" else x
        masks = {"key_padding_mask": mask} if wiring == "masked" else {}
        return reference(x, kv, kv, **masks)

    grad = torch.enable_grad() if mode != "inference" else torch.no_grad()
    opts = sgd(attn, reference)
    for step in range(2):
        xs = [x.clone().requires_grad_(mode != "inference") for _ in range(2)]
        with grad:
            torch.manual_seed(step)
            got = graph(xs[0], memory=memory, mask=mask)
            torch.manual_seed(step)
            want = by_hand(xs[1], memory)
        for a, b in zip(got, want, strict=True):
            assert torch.equal(a, b), step
        if mode != "inference":
            got[0].square().sum().backward()
            want[0].square().sum().backward()
            assert torch.equal(xs[0].grad, xs[1].grad)
            same_gradients_then_step(attn, reference, opts)
    # The fused kernel is called without forward's frame exactly where forward would take it.
    with torch.no_grad() if mode == "inference" else torch.enable_grad():
        frames = frames_of(
            nn.MultiheadAttention.forward.__code__, lambda: graph(x, memory=memory, mask=mask)
        )
    assert frames == (0 if fused and mode == "inference" else 1)


class _Wrapped(nn.Module):
    """An adapter's wrapper (as LoRA libraries put around ``out_proj``): ``weight`` and
    ``bias`` are properties over the wrapped layer, which holds the parameters."""

    def __init__(self, base: nn.Linear) -> None:
        super().__init__()
        self.base = base

    @property
    def weight(self) -> torch.Tensor:
        return self.base.weight

    @property
    def bias(self) -> torch.Tensor:
        return self.base.bias


def test_written_out_attention_reads_its_projections_as_forward_does():
    torch.manual_seed(0)
    attn = nn.MultiheadAttention(8, 2, batch_first=True).eval()
    attn.out_proj = _Wrapped(attn.out_proj)
    graph = _attention_graph(attn, "self")
    x = torch.randn(2, 5, 8)
    with torch.no_grad():
        got = graph(x, memory=None, mask=None)
        for a, b in zip(got, attn.forward(x, x, x), strict=True):
            assert torch.equal(a, b)


def test_written_out_attention_reads_weights_set_again_as_plain_tensors_as_forward_does():
    # MAML-style code deletes a parameter and sets a plain tensor in its place: the tensor is
    # an attribute then, not in ``_parameters``, and the fused call must use it as forward does.
    torch.manual_seed(0)
    attn = nn.MultiheadAttention(8, 2, batch_first=True).eval()
    graph = _attention_graph(attn, "self")
    x = torch.randn(2, 5, 8)
    with torch.no_grad():
        before = graph(x, memory=None, mask=None)  # planned and run with the parameters
        in_proj = attn.in_proj_weight.detach() * 2
        out_weight = attn.out_proj.weight.detach() + 1
        del attn.in_proj_weight, attn.out_proj.weight
        attn.in_proj_weight, attn.out_proj.weight = in_proj, out_weight
        got = graph(x, memory=None, mask=None)
        want = attn.forward(x, x, x)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    assert not torch.equal(got[0], before[0])  # the new tensors were used


def test_attention_is_written_out_only_for_calls_that_bind_to_its_forward():
    attn = nn.MultiheadAttention(8, 2, batch_first=True)
    assert inline.call(attn, 1, ["key", "value"]) == "_mha"
    assert inline.call(attn, 3, ["attn_mask", "need_weights"]) == "_mha"
    assert inline.call(attn, 1, ["key"]) is None  # forward raises its own TypeError
    assert inline.call(attn, 1, ["key", "value", "scale"]) is None
    assert inline.call(attn, 9, []) is None
    assert inline.call(nn.Linear(8, 8), 1, []) is None  # not a class written out this way


def test_a_recurrent_weight_set_to_none_runs_as_forward_runs():
    """forward's refresh skips a weight set to None and keeps the list it has: so must the
    written-out call (not hand None to the kernel)."""
    torch.manual_seed(0)
    layer = nn.GRU(3, 4, batch_first=True)
    graph = fl.FlowBuilder(layer).build()
    x = torch.randn(2, 5, 3)
    graph(x)
    layer.register_parameter("bias_hh_l0", None)
    got, want = graph(x), layer.forward(x)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


def test_a_class_forward_patched_before_flodl_is_imported_is_not_written_out(tmp_path):
    """A library that patched ``nn.Linear.forward`` (or ``nn.LSTM.forward``) before flodl was
    imported keeps its patch: those classes are not written out."""
    script = tmp_path / "patched_first.py"
    script.write_text(
        "import functools, torch\n"
        "from torch import nn\n"
        "calls = []\n"
        "for cls in (nn.Linear, nn.LSTM):\n"
        "    def wrap(original):\n"
        "        @functools.wraps(original)\n"
        "        def forward(self, *args):\n"
        "            calls.append(type(self).__name__)\n"
        "            return original(self, *args)\n"
        "        return forward\n"
        "    cls.forward = wrap(cls.forward)\n"
        "import flodl as fl\n"
        "graph = fl.FlowBuilder(nn.LSTM(3, 4, batch_first=True)).through(fl.nn.Select(0))\n"
        "graph = graph.through(nn.Linear(4, 2)).build()\n"
        "graph(torch.randn(2, 5, 3))\n"
        "print(sorted(calls))\n"
    )
    done = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        env=clean_env(),
    )
    assert done.stdout.strip() == "['LSTM', 'Linear']"


def test_a_parameter_replaced_after_build_is_used():
    graph = fl.FlowBuilder(nn.Linear(3, 2)).through(nn.LayerNorm(2)).build()
    x = torch.randn(4, 3)
    graph(x)
    graph.linear_1.weight = nn.Parameter(torch.zeros(2, 3))
    graph.layernorm_2.bias = nn.Parameter(torch.full((2,), 7.0))
    assert whole_tree_direct(graph)
    want = nn.functional.layer_norm(
        nn.functional.linear(x, graph.linear_1.weight, graph.linear_1.bias),
        (2,),
        graph.layernorm_2.weight,
        graph.layernorm_2.bias,
    )
    assert torch.equal(graph(x), want)


def _as_plain_tensor(module: nn.Module, name: str, where: str = "parameter") -> None:
    """Replace ``module.<name>`` by a plain tensor attribute (or a buffer), as MAML-style and
    hypernetwork code does: the dict the written-out call reads no longer holds it."""
    value = getattr(module, name).detach() * 2
    delattr(module, name)
    if where == "buffer":
        module.register_buffer(name, value)
    else:
        setattr(module, name, value)


# (the layer, what to replace, as what, the input's shape)
REPLACED = {
    "linear weight": (lambda: nn.Linear(4, 4), "weight", "parameter", (3, 4)),
    "linear bias as a buffer": (lambda: nn.Linear(4, 4), "bias", "buffer", (3, 4)),
    "layer norm weight": (lambda: nn.LayerNorm(4), "weight", "parameter", (3, 4)),
    "conv weight": (lambda: nn.Conv1d(1, 1, 3), "weight", "parameter", (3, 1, 4)),
    "batch norm statistics": (lambda: nn.BatchNorm1d(4).eval(), "running_mean", "attr", (3, 4)),
}


@pytest.mark.parametrize("case", list(REPLACED))
def test_a_parameter_replaced_by_a_plain_tensor_runs_forward(case):
    make, name, where, shape = REPLACED[case]
    torch.manual_seed(0)
    layer = make()
    graph = fl.FlowBuilder(layer).build()
    x = torch.randn(*shape)
    graph(x)
    _as_plain_tensor(layer, name, where)
    assert not whole_tree_direct(graph)  # the written-out call would not find it
    assert torch.equal(graph(x), layer(x))


def test_a_cell_weight_replaced_by_a_plain_tensor_runs_forward():
    torch.manual_seed(0)
    cell = nn.GRUCell(2, 3)
    graph = fl.FlowBuilder().scan(cell, dim=1).build()
    x = torch.randn(2, 4, 2)
    graph(x)
    _as_plain_tensor(cell, "weight_hh")
    assert not whole_tree_direct(graph)
    h, outs = None, []
    for t in range(4):
        h = cell(x[:, t], h)
        outs.append(h)
    assert torch.equal(graph(x), torch.stack(outs, dim=1))


def test_settings_changed_after_build_are_used():
    torch.manual_seed(0)
    graph = fl.FlowBuilder(nn.Linear(3, 3)).through(nn.GELU()).through(nn.LayerNorm(3)).build()
    reference = nn.Sequential(*(copy.deepcopy(m) for m in graph.children()))
    x = torch.randn(4, 3)
    graph(x)
    graph.gelu_2.approximate = reference[1].approximate = "tanh"
    graph.layernorm_3.eps = reference[2].eps = 0.5
    got = graph(x)
    assert torch.equal(got, reference(x))
    reference[2].eps = 1e-5  # the settings matter: with the old eps the result differs
    assert not torch.equal(got, reference(x))


def test_a_class_whose_forward_is_replaced_gets_its_forward_called(monkeypatch):
    graph = fl.FlowBuilder(nn.Linear(3, 3)).through(nn.Linear(3, 2)).build()
    x = torch.randn(4, 3)
    before = graph(x)
    calls = []
    original = nn.Linear.forward

    def patched(self, input):  # as an adapter library patching the class would
        calls.append(self)
        return original(self, input) * 2

    monkeypatch.setattr(nn.Linear, "forward", patched)
    assert not whole_tree_direct(graph)
    assert torch.equal(graph(x), (graph.linear_2(graph.linear_1(x)) / 2) * 2)
    assert len([c for c in calls if c is graph.linear_1]) == 2  # the graph's call and ours
    monkeypatch.undo()
    assert whole_tree_direct(graph) and torch.equal(graph(x), before)


# ---------------------------------------------------------------- nested graphs


def block(dim: int = 4) -> fl.Graph:
    return fl.FlowBuilder(nn.Linear(dim, dim)).through(nn.GELU()).through(nn.LayerNorm(dim)).build()


def tower() -> fl.Graph:
    inner = fl.FlowBuilder().also(block()).build()  # two levels of nesting
    return (
        fl.FlowBuilder(nn.Linear(4, 4))
        .also(block())
        .loop_body(inner)
        .for_n(2)
        .gate(fl.nn.SoftmaxRouter(4, 2), block(), block())
        .through(nn.Linear(4, 2))
        .build()
    )


def test_nested_graphs_run_their_direct_forward_without_graph_forward(monkeypatch):
    torch.manual_seed(0)
    graph = tower()
    x = torch.randn(3, 4)
    want = graph(x)
    assert whole_tree_direct(graph)
    assert "(_q := _m['graph_2'])._direct_fn(_q, v_linear_1)" in direct_source(graph)
    entered = []
    original = fl.Graph.forward

    def counting(self, *args, **kwargs):
        entered.append(self)
        return original(self, *args, **kwargs)

    # Graph.forward replaced on the class: the merged path must not skip it any more
    monkeypatch.setattr(fl.Graph, "forward", counting)
    assert not whole_tree_direct(graph)
    assert torch.equal(graph(x), want)
    assert graph.graph_2 in entered and graph.loop_4.body in entered
    monkeypatch.undo()
    entered.clear()
    assert torch.equal(graph(x), want) and entered == []


def test_a_hook_deep_inside_keeps_the_rest_direct_and_fires():
    torch.manual_seed(0)
    graph = tower()
    x = torch.randn(3, 4)
    want = graph(x)
    seen = []
    handle = graph.gate_5.experts[1].linear_1.register_forward_hook(lambda *a: seen.append(1))
    plan = graph._direct_plan
    assert not dispatch.direct_ok(plan.merged()) and dispatch.direct_ok(plan)
    assert torch.equal(graph(x), want) and seen == [1]
    assert graph._fallback_fn is not None  # the graph's own steps still ran directly
    handle.remove()
    assert whole_tree_direct(graph)


def test_only_the_graph_that_runs_merges_the_plans_of_the_graphs_inside(monkeypatch):
    # Building a graph nested n deep stays linear: no level merges the plans below it at build
    # time (that copied every level's steps into every level above: quadratic in n).
    torch.manual_seed(0)
    levels = [fl.FlowBuilder(nn.Linear(3, 3)).through(nn.GELU()).build()]
    for _ in range(60):
        levels.append(fl.FlowBuilder(levels[-1]).through(nn.Tanh()).build())
    outer, x = levels[-1], torch.randn(2, 3)
    assert all(g._direct_tree is None for g in levels)
    monkeypatch.setenv("FLODL_DIRECT_DISPATCH", "0")
    twin = copy.deepcopy(outer)  # re-installed without direct dispatch: the ordinary path
    monkeypatch.delenv("FLODL_DIRECT_DISPATCH")
    with torch.no_grad():
        got = outer(x)
    assert all(g._direct_tree is None for g in levels[:-1])  # run as one, never merged
    tree = outer._direct_tree
    assert tree.nested == levels[-2::-1]  # depth first, each nested graph once
    assert tree.nested_plans == [g._direct_plan for g in levels[-2::-1]]
    assert len(tree.callees) == len(outer._direct_plan.callees) + sum(
        len(g._direct_plan.callees) for g in levels[:-1]
    )
    assert whole_tree_direct(outer) and dispatch.direct_ok(tree)
    with torch.no_grad():
        assert twin._direct_plan is None and torch.equal(got, twin(x))


def test_torch_compile_of_a_fresh_nested_graph_traces_the_ordinary_path_in_one_graph():
    # The first pass may be dynamo's: it must not trace the plan merge (or anything direct).
    torch.manual_seed(0)
    graph = tower()
    x = torch.randn(3, 4)
    compiled = torch.compile(graph, backend="eager", fullgraph=True)
    got = compiled(x)
    assert graph._direct_tree is None  # traced: the direct path was never looked at
    assert torch.equal(got, graph(x)) and whole_tree_direct(graph)


@pytest.mark.parametrize("change", ["profiling", "compile"])
def test_a_nested_graph_rebuilt_after_its_parent_is_called_through_its_forward(change):
    torch.manual_seed(0)
    graph = tower()
    x = torch.randn(3, 4)
    want = graph(x)
    child = graph.graph_2
    if change == "profiling":
        child.enable_profiling()
    else:
        child.compile(backend="eager")
    assert child._direct_plan is None  # profiled or compiled: its own forward decides
    assert not whole_tree_direct(graph)
    assert torch.allclose(graph(x), want)
    if change == "profiling":
        assert child.profile() is not None  # the nested graph's profiled forward ran


def test_profiling_the_whole_tree_on_and_off_restores_the_merged_path():
    torch.manual_seed(0)
    graph = tower()
    x = torch.randn(3, 4)
    want = graph(x)
    graph.enable_profiling()
    assert graph(x).shape == want.shape and graph.profile() is not None
    graph.disable_profiling()
    assert whole_tree_direct(graph)  # nested graphs re-planned before the graph that holds them
    assert [g for g, _ in graph._direct_plan.found] == [
        graph.graph_2,
        graph.loop_4.body,
        graph.gate_5.experts[0],
        graph.gate_5.experts[1],
    ]
    assert torch.equal(graph(x), want)


def test_a_nested_graph_profiled_on_its_own_is_then_called_through_its_forward():
    torch.manual_seed(0)
    graph = tower()
    x = torch.randn(3, 4)
    want = graph(x)
    graph.graph_2.enable_profiling()
    graph.graph_2.disable_profiling()
    plan = graph._direct_plan
    assert not dispatch.direct_ok(plan.merged()) and dispatch.direct_ok(plan)
    assert whole_tree_direct(graph.graph_2)  # its own steps run directly
    assert torch.equal(graph(x), want)
    assert whole_tree_direct(copy.deepcopy(graph))  # a rebuilt copy takes it in again


class _Recorded(torch.Tensor):
    """A tensor subclass overriding ``__torch_function__``: records the functions it sees."""

    seen: ClassVar[list[str]] = []

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        cls.seen.append(getattr(func, "__name__", repr(func)))
        return super().__torch_function__(func, types, args, kwargs or {})


@pytest.mark.parametrize(
    "make",
    [lambda: nn.LayerNorm(5), nn.ReLU, lambda: nn.SiLU(inplace=True), lambda: nn.BatchNorm1d(5)],
    ids=["layernorm", "relu", "silu-inplace", "batchnorm-eval"],
)
def test_a_tensor_subclass_override_still_runs_on_the_written_out_builtins(make):
    """LayerNorm, eval BatchNorm, ReLU and SiLU are written out as the builtin ``F`` forwards
    to: a subclass's ``__torch_function__`` still runs (the builtins check for overrides) and
    the result is the layer's, of the subclass."""
    _, graph, reference = _layer_graph_and_reference(make, training=False)
    x = torch.randn(4, 5)
    _Recorded.seen = []
    want = reference(x.clone().as_subclass(_Recorded))
    assert _Recorded.seen  # the override saw the layer's call
    _Recorded.seen = []
    got = graph(x.clone().as_subclass(_Recorded))
    assert _Recorded.seen  # ... and the graph's
    assert type(got) is type(want) is _Recorded
    assert torch.equal(got.as_subclass(torch.Tensor), want.as_subclass(torch.Tensor))
