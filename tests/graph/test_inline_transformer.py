"""``nn.TransformerEncoderLayer`` and ``nn.TransformerEncoder`` written out
(:func:`flodl.graph.inline.encoder_layer`, :func:`flodl.graph.inline.encoder`): bit-identical
to their ``forward`` in training, in eval with gradients and in inference; the fused kernel is
called without ``forward``'s frame exactly where ``forward``'s fast path calls it, and every
mask, hook, override and setting that changes ``forward``'s choice is honoured."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn
from torch.nn import functional

import flodl as fl
from flodl._torch_release import TORCH_RELEASE
from flodl.graph import inline, torch_source
from tests.graph.helpers import (
    direct_source,
    frames_of,
    same_gradients_then_step,
    sgd,
    whole_tree_direct,
)

pytestmark = pytest.mark.skipif(
    not torch_source.mirrored("encoder"),
    reason="the encoder mirrors are on only under the torch source they were checked against",
)

LAYER_FORWARD = nn.TransformerEncoderLayer.forward.__code__
STACK_FORWARD = nn.TransformerEncoder.forward.__code__
MODES = ["train", "eval", "inference"]  # eval: gradients recorded; inference: no_grad


def _layer(dim: int = 8, heads: int = 2, **settings) -> nn.TransformerEncoderLayer:
    settings.setdefault("batch_first", True)
    return nn.TransformerEncoderLayer(dim, heads, 16, **settings)


def _norms_differ() -> nn.TransformerEncoderLayer:
    layer = _layer()
    layer.norm2.eps = 1e-3
    return layer


def _hooked_inside() -> nn.TransformerEncoderLayer:
    layer = _layer()
    layer.linear1.register_forward_hook(lambda module, args, out: None)
    return layer


def _stack(layer: nn.TransformerEncoderLayer, **settings) -> nn.TransformerEncoder:
    settings.setdefault("enable_nested_tensor", False)
    return nn.TransformerEncoder(layer, 2, **settings)


PRE_HOOK_CALLS: list[int] = []


def _stack_hooked_layer() -> nn.TransformerEncoder:
    stack = _stack(_layer())
    stack.layers[0].register_forward_pre_hook(lambda module, args: PRE_HOOK_CALLS.append(1))
    return stack


# (factory, does forward's fast path take the fused kernel in inference?): each setting the
# fast path reads
LAYER_CASES = {
    "relu": (_layer, True),
    "gelu-norm-first": (lambda: _layer(activation="gelu", norm_first=True), True),
    "no-dropout": (lambda: _layer(dropout=0.0), True),
    "seq-first": (lambda: _layer(batch_first=False), False),
    "odd-heads": (lambda: _layer(9, 3), False),
    "no-bias": (lambda: _layer(bias=False), False),
    "other-activation": (lambda: _layer(activation=functional.silu), False),
    "norms-differ": (_norms_differ, False),
    "hooked-inside": (_hooked_inside, False),
}

# (factory, frames of the layers' forward in inference; 2 in training and eval)
STACK_CASES = {
    "stack": (lambda: _stack(_layer()), 0),
    "stack-norm": (lambda: _stack(_layer(norm_first=True), norm=nn.LayerNorm(8)), 0),
    "stack-seq-first": (lambda: _stack(_layer(batch_first=False)), 2),
    "stack-hooked-layer": (_stack_hooked_layer, 1),  # through its __call__: forward's choice
}


def _check_against(graph: fl.Graph, module: nn.Module, reference: nn.Module, x, mode: str):
    """``graph`` (of ``module``) and ``reference`` (its copy) agree bit for bit over two steps
    in ``mode``: outputs, then the input's and parameters' gradients and parameters after SGD."""
    graph.train(mode == "train")
    reference.train(mode == "train")
    opts = sgd(module, reference)
    recording = mode != "inference"
    for step in range(2):
        xs = [x.clone().requires_grad_(recording) for _ in range(2)]
        with torch.enable_grad() if recording else torch.no_grad():
            torch.manual_seed(step)
            got = graph(xs[0])
            torch.manual_seed(step)
            want = reference(xs[1])
        assert torch.equal(got, want), step
        if recording:
            got.square().sum().backward()
            want.square().sum().backward()
            assert torch.equal(xs[0].grad, xs[1].grad)
            same_gradients_then_step(module, reference, opts)


def _frames(graph: fl.Graph, x, mode: str, code) -> int:
    with torch.no_grad() if mode == "inference" else torch.enable_grad():
        return frames_of(code, lambda: graph(x))


@pytest.mark.parametrize("case", list(LAYER_CASES))
@pytest.mark.parametrize("mode", MODES)
def test_written_out_encoder_layer_is_bit_identical_to_its_forward(case, mode):
    make, fused = LAYER_CASES[case]
    torch.manual_seed(0)
    layer = make()
    reference = copy.deepcopy(layer)
    graph = fl.FlowBuilder(layer).build()
    assert whole_tree_direct(graph) and "_encoder_layer(" in direct_source(graph)
    x = torch.randn(2, 5, layer.self_attn.embed_dim)
    _check_against(graph, layer, reference, x, mode)
    # The fused kernel is called without forward's frame exactly where forward would call it.
    assert _frames(graph, x, mode, LAYER_FORWARD) == (0 if fused and mode == "inference" else 1)


@pytest.mark.parametrize("case", list(STACK_CASES))
@pytest.mark.parametrize("mode", MODES)
def test_written_out_encoder_is_bit_identical_to_its_forward(case, mode):
    make, inference_frames = STACK_CASES[case]
    torch.manual_seed(0)
    stack = make()
    reference = copy.deepcopy(stack)
    graph = fl.FlowBuilder(stack).build()
    assert whole_tree_direct(graph) and "_encoder(" in direct_source(graph)
    x = torch.randn(2, 5, 8)
    PRE_HOOK_CALLS.clear()
    _check_against(graph, stack, reference, x, mode)
    assert len(PRE_HOOK_CALLS) == (4 if case == "stack-hooked-layer" else 0)  # graph and copy
    assert _frames(graph, x, mode, STACK_FORWARD) == 0  # the loop is written out
    layer_frames = _frames(graph, x, mode, LAYER_FORWARD)
    assert layer_frames == (inference_frames if mode == "inference" else 2)


def _masked_graph(module: nn.Module, keyword: str) -> fl.Graph:
    return fl.FlowBuilder().input("mask").through(module).using(**{keyword: "mask"}).build()


@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors")
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    ("make", "keyword", "code"),
    [
        (_layer, "src_key_padding_mask", LAYER_FORWARD),
        (_layer, "src_mask", LAYER_FORWARD),
        # the stack packs a padded batch into a nested tensor in inference: forward's own path
        (
            lambda: _stack(_layer(), enable_nested_tensor=True),
            "src_key_padding_mask",
            STACK_FORWARD,
        ),
        (lambda: _stack(_layer()), "mask", STACK_FORWARD),
    ],
    ids=["layer-padding", "layer-mask", "stack-padding", "stack-mask"],
)
def test_a_masked_call_runs_forward(make, keyword, code, mode):
    torch.manual_seed(0)
    module = make()
    reference = copy.deepcopy(module)
    graph = _masked_graph(module, keyword)
    assert whole_tree_direct(graph)
    x = torch.randn(2, 5, 8)
    if "padding" in keyword:
        mask = torch.tensor([[False] * 5, [False, False, False, True, True]])
    else:
        mask = nn.Transformer.generate_square_subsequent_mask(5)
    graph.train(mode == "train")
    reference.train(mode == "train")
    with torch.no_grad() if mode == "inference" else torch.enable_grad():
        torch.manual_seed(1)
        got = graph(x, mask=mask)
        torch.manual_seed(1)
        want = reference(x, **{keyword: mask})
        assert torch.equal(got, want)
        assert frames_of(code, lambda: graph(x, mask=mask)) == 1


def test_hooks_inside_the_stack_fire_and_decide_as_forward_does():
    torch.manual_seed(0)
    stack = _stack(_layer()).eval()
    fired: list[str] = []
    stack.layers[1].linear1.register_forward_hook(lambda m, a, out: fired.append("linear1"))
    stack.layers[0].register_forward_hook(lambda m, a, out: fired.append("layer0"))
    graph = fl.FlowBuilder(stack).build()
    reference = copy.deepcopy(stack)  # hooks are copied
    x = torch.randn(2, 5, 8)
    with torch.no_grad():
        got = graph(x)
        by_graph = fired[:]
        assert torch.equal(got, reference.forward(x))
    assert by_graph == fired[len(by_graph) :]  # the same hooks fire as in forward
    # layer 0 through its __call__ (its hook fires); layer 1's hook inside turns its fast path
    # off, as in forward, so linear1 runs and its hook fires too (torch 2.4's fast path takes no
    # notice of hooks: it fuses, and linear1's hook fires in neither)
    assert by_graph == (["layer0", "linear1"] if TORCH_RELEASE >= (2, 5) else ["layer0"])


def test_a_layer_forward_of_its_own_inside_the_stack_is_called():
    """An instance-level ``forward`` (as accelerate installs) on a layer in the stack."""
    torch.manual_seed(0)
    stack = _stack(_layer()).eval()
    calls: list[int] = []
    original = stack.layers[1].forward

    def forward(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    stack.layers[1].forward = forward
    graph = fl.FlowBuilder(stack).build()
    x = torch.randn(2, 5, 8)
    with torch.no_grad():
        graph(x)
    assert calls == [1]


def test_a_layer_class_forward_replaced_after_import_is_called(monkeypatch):
    """A library patching ``nn.TransformerEncoderLayer.forward`` on the class (after flodl was
    imported): a layer step and every layer of a stack run the patched forward."""
    torch.manual_seed(0)
    layer, stack = _layer().eval(), _stack(_layer()).eval()
    graphs = [fl.FlowBuilder(layer).build(), fl.FlowBuilder(stack).build()]
    x = torch.randn(2, 5, 8)
    calls: list[int] = []
    original = nn.TransformerEncoderLayer.forward

    def patched(self, src, *args, **kwargs):
        calls.append(1)
        return original(self, src, *args, **kwargs)

    monkeypatch.setattr(nn.TransformerEncoderLayer, "forward", patched)
    with torch.no_grad():
        for graph in graphs:
            graph(x)
    assert len(calls) == 3  # the layer step, then the stack's two layers


@pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated")
def test_a_compiled_layer_inside_the_stack_runs_compiled():
    torch.manual_seed(0)
    stack = _stack(_layer()).eval()
    layer = stack.layers[0]
    layer.compile()  # lazy: sets the layer's compiled call path, compiles on the first call
    calls: list[int] = []
    compiled_call = layer._compiled_call_impl

    def compiled(*args, **kwargs):  # stands in for it (dynamo skips torch.nn's own frames)
        calls.append(1)
        return compiled_call(*args, **kwargs)

    layer._compiled_call_impl = compiled
    graph = fl.FlowBuilder(stack).build()
    x = torch.randn(2, 5, 8)
    with torch.no_grad():
        graph(x)
    assert calls == [1]


@pytest.mark.parametrize(
    "switch", ["fastpath-off", "autocast", "frozen-weights", "training-without-grad"]
)
def test_global_switches_decide_as_in_forward(switch):
    torch.manual_seed(0)
    layer = _layer(dropout=0.0).train(switch == "training-without-grad")
    graph = fl.FlowBuilder(layer).build()
    x = torch.randn(2, 5, 8)
    grad = torch.no_grad()  # the fast path's case, but for the switch
    if switch == "frozen-weights":  # nothing requires a gradient: fused with gradients on
        layer.requires_grad_(False)
        grad = torch.enable_grad()
    cast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=switch == "autocast")
    enabled = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(switch != "fastpath-off")
    try:
        with grad, cast:
            want = _outcome(copy.deepcopy(layer).forward, x)
            got = _outcome(graph, x)
            if isinstance(want, Exception):  # torch 2.4's own layer fails under CPU autocast
                assert type(got) is type(want) and str(got) == str(want)
                return
            assert torch.equal(got, want)
            frames = frames_of(LAYER_FORWARD, lambda: graph(x))
    finally:
        torch.backends.mha.set_fastpath_enabled(enabled)
    # CPU autocast leaves forward's fast path on (it checks CUDA's autocast), and so the kernel
    fused = switch in ("frozen-weights", "autocast")
    assert frames == (0 if fused else 1)


def _outcome(call, x):
    """What ``call(x)`` returns, or the error it raises."""
    try:
        return call(x)
    except RuntimeError as error:
        return error


class _CountingLayer(nn.TransformerEncoderLayer):
    calls = 0

    def forward(self, src, *args, **kwargs):
        type(self).calls += 1
        return super().forward(src, *args, **kwargs)


def test_a_stack_of_another_layer_class_runs_its_forward():
    torch.manual_seed(0)
    stack = _stack(_CountingLayer(8, 2, 16, batch_first=True)).eval()
    graph = fl.FlowBuilder(stack).build()
    x = torch.randn(2, 5, 8)
    with torch.no_grad():
        assert torch.equal(graph(x), copy.deepcopy(stack).forward(x))
        assert frames_of(STACK_FORWARD, lambda: graph(x)) == 1
    assert _CountingLayer.calls == 6  # two layers, three passes


def test_a_bad_input_raises_forwards_own_error():
    layer = _layer().eval()
    graph = fl.FlowBuilder(layer).build()
    x = torch.randn(2, 5, 7)  # 7 features for an 8-wide layer
    with torch.no_grad():
        with pytest.raises(RuntimeError) as want:
            layer(x)
        with pytest.raises(RuntimeError) as got:
            graph(x)
    assert str(want.value) in str(got.value)


def test_a_norm_without_weights_fails_in_forward_as_it_does_alone():
    """forward's fast path reads every norm's weight's device; without a weight it fails: so
    does the graph, with the same error."""
    layer = _layer().eval()
    layer.norm1 = nn.LayerNorm(8, elementwise_affine=False)
    graph = fl.FlowBuilder(layer).build()
    x = torch.randn(2, 5, 8)
    with torch.no_grad():
        with pytest.raises(AttributeError) as want:
            layer(x)
        with pytest.raises(AttributeError) as got:
            graph(x)
    assert str(want.value) in str(got.value)


def test_weights_set_again_as_plain_tensors_are_used_as_forward_uses_them():
    # MAML-style code deletes a parameter and sets a plain tensor in its place: an attribute
    # then, not in ``_parameters``; the fused call must read it as forward does.
    torch.manual_seed(0)
    layer = _layer().eval()
    graph = fl.FlowBuilder(layer).build()
    x = torch.randn(2, 5, 8)
    with torch.no_grad():
        before = graph(x)
        weight, bias = layer.linear1.weight.detach() * 2, layer.norm2.bias.detach() + 1
        del layer.linear1.weight, layer.norm2.bias
        layer.linear1.weight, layer.norm2.bias = weight, bias
        got, want = graph(x), layer.forward(x)
    assert torch.equal(got, want)
    assert not torch.equal(got, before)  # the new tensors were used


def test_a_causal_hint_without_a_mask_runs_the_stacks_forward():
    """The stack passes ``is_causal=True`` on to its layers, whose attention refuses it without
    a mask (outside the fast path): forward's own error, from forward."""
    stack = _stack(_layer())
    x = torch.randn(2, 5, 8)
    for hint in (None, False):
        torch.manual_seed(0)
        got = inline.encoder(stack, x, is_causal=hint)
        torch.manual_seed(0)
        assert torch.equal(got, stack.forward(x))
    with pytest.raises(RuntimeError, match="Need attn_mask if specifying the is_causal hint"):
        stack.forward(x, is_causal=True)

    def hinted():
        with pytest.raises(RuntimeError, match="Need attn_mask if specifying the is_causal"):
            inline.encoder(stack, x, is_causal=True)

    assert frames_of(STACK_FORWARD, hinted) == 1


def test_encoders_are_written_out_only_for_calls_that_bind_to_their_forward():
    layer, stack = _layer(), _stack(_layer())
    assert inline.call(layer, 1, ["src_key_padding_mask"]) == "_encoder_layer"
    assert inline.call(layer, 2, ["is_causal"]) == "_encoder_layer"
    assert inline.call(layer, 1, ["mask"]) is None  # forward raises its own TypeError
    assert inline.call(stack, 1, ["mask", "src_key_padding_mask"]) == "_encoder"
    assert inline.call(stack, 1, ["src_mask"]) is None


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_autocast_runs_forward_as_forward_decides():
    """CUDA's autocast turns forward's fast path off (CPU's does not, above)."""
    torch.manual_seed(0)
    layer = _layer().cuda().eval()
    graph = fl.FlowBuilder(layer).build()
    x = torch.randn(2, 5, 8, device="cuda")
    with torch.no_grad():
        assert frames_of(LAYER_FORWARD, lambda: graph(x)) == 0
        with torch.autocast("cuda"):
            assert torch.equal(graph(x), copy.deepcopy(layer).forward(x))
            assert frames_of(LAYER_FORWARD, lambda: graph(x)) == 1
