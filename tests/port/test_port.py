"""``fdl port``: models written for these tests, ported, built, parity-checked and re-checked."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import flodl as fl
from fdl.port import parity, trace
from fdl.port.load import Example, PortError
from fdl.port.run import port, render_report

MODELS = Path(__file__).parent / "models"

# (script, class, examples, idioms the generated flow must use)
CASES = {
    "cnn": (
        "cnn.py",
        "CNN",
        ["torch.randn(2, 3, 32, 32)"],
        ["fl.FlowBuilder(m.conv1)", ".through(nn.ReLU())", ".through(nn.MaxPool2d(2))",
         ".through(nn.Flatten())", ".through(m.dropout)"],
    ),
    "resnet": (
        "resnet.py",
        "ResNet",
        ["torch.randn(2, 3, 16, 16)"],
        [".also(nn.Sequential(m.layer1.conv1", ".also_with(\n            m.layer2.downsample,",
         ".through(nn.Flatten())", "# Imports BasicBlock from resnet.py: keep it importable"],
    ),
    "vae": (
        "vae.py",
        "VAE",
        ["torch.rand(4, 64)"],
        ['.fork(m.fc_mu)', '.tag("mu")', '.using("mu")', '.output("sigmoid", "mu", "logvar")',
         "return mu + (torch.randn_like(x) * x)", "return torch.exp(0.5 * x)"],
    ),
    "generator": (
        "dcgan.py",
        "Generator",
        ["torch.randn(2, 16, 1, 1)"],
        ["fl.FlowBuilder(m.main).build()", "m.main = nn.Sequential("],
    ),
    "discriminator": (
        "dcgan.py",
        "Discriminator",
        ["torch.randn(2, 3, 16, 16)"],
        ["fl.FlowBuilder(m.main).through(squeeze).build()", "return x.view(-1, 1).squeeze(1)"],
    ),
    "lstm": (
        "lstm.py",
        "LSTMClassifier",
        ["torch.randint(0, 50, (3, 7))"],
        [".through(m.lstm)", ".through(fl.nn.Select(1))", ".through(fl.nn.Select(0))",
         "return x[-1]"],
    ),
    "tagger": (
        "lstm.py",
        "Tagger",
        ["torch.randn(2, 5, 6)", "(torch.randn(2, 5, 6), (torch.randn(1, 2, 12), torch.randn(1, 2, 12)))"],
        ['.input("state", default=None)', '.using(hx="state")', ".output("],
    ),
    "transformer": (
        "transformer.py",
        "EncoderBlock",
        ["torch.randn(2, 5, 32)"],
        ['Call(m.attn, stream_as=("query", "key", "value"), need_weights=False)',
         "fl.nn.Select(0)", ".through(m.norm1)", ".also(nn.Sequential(m.ff1, nn.GELU(), m.ff2, m.drop))"],
    ),
    "inception": (
        "branches.py",
        "Inception",
        ["torch.randn(2, 4, 8, 8)"],
        [".split(m.b1, nn.Sequential(m.b3a, nn.ReLU(), m.b3b), m.pool)", ".merge(fl.MergeOp.CAT(1))",
         ".through(nn.AdaptiveAvgPool2d(1))"],
    ),
    "unet": (
        "branches.py",
        "UNet",
        ["torch.randn(2, 3, 16, 16)"],
        [".split(nn.Sequential(nn.MaxPool2d(2), m.enc2, nn.ReLU(), m.up), nn.Identity())",
         ".merge(fl.MergeOp.CAT(1))", "return (x * 2) - 1"],
    ),
    "positional": (
        "branches.py",
        "Positional",
        ["torch.randn(2, 5, 6)", "torch.randn(3, 16, 6)"],
        [".fork(shared(m.pos))", '.tag("pos")', "return (x + pos[:, : x.size(1)]).mean(dim=1)"],
    ),
    "gated": (
        "dynamic.py",
        "GatedNet",
        ["torch.randn(4, 8)", "-torch.ones(4, 8)"],
        [".through(m.gate)", "from dynamic import Gate"],
    ),
    "halting": (
        "dynamic.py",
        "Halting",
        ["torch.randn(4, 8)"],
        ["fl.FlowBuilder(m).build()", "return from_torch(Halting(dim=dim))"],
    ),
    "dataclass_output": (
        "structured.py",
        "Classifier",
        ["torch.randn(2, 5, 8)"],
        ["fl.FlowBuilder(m.encoder).through(index)", "return x.last_hidden_state[:, 0]",
         "from structured import Encoder"],
    ),
    "dict_output": (
        "structured.py",
        "DictHead",
        ["torch.randn(2, 5, 8)"],
        ['.through(fl.nn.Select("pooled"))'],
    ),
    "kwargs_kept": (
        "structured.py",
        "Rescaled",
        ["torch.randn(2, 5, 8)"],
        ['Call(m.encoder, stream_as=("x",), scale=0.5, flag=True)', "return x.pooled"],
    ),
    "input_by_keyword": (
        "structured.py",
        "Tokens",
        ["torch.randint(0, 20, (2, 5))"],
        ["fl.FlowBuilder(m.embed).through(m.out)"],
    ),
    "wrapped_helper": (
        "structured.py",
        "Padded",
        ["torch.randn(2, 7)"],
        ["from structured import pad_to_even", "fl.FlowBuilder(pad_to_even).through(m.fc)"],
    ),
    "leading_expression": (
        "structured.py",
        "Scaled",
        ["torch.randn(2, 4)"],
        ["fl.FlowBuilder(sub).through(m.fc)", "return (x * 2) - 1"],
    ),
    "versioned_state": (
        "structured.py",
        "WithVersioned",
        ["torch.randn(2, 4)"],
        ["fl.FlowBuilder(m.block.fc).through(nn.ReLU()).through(m.out)"],
    ),
    "tuple_argument": (
        "zoo.py",
        "Pooled",
        ["torch.randn(2, 3, 6, 6)"],
        ["return x.mean((2, 3), keepdim=True)"],
    ),
    "buffers_read": (
        "zoo.py",
        "Masked",
        ["torch.randn(3, 4)"],
        ['.fork(Held(m, "scale"))', '.fork(Held(m.window, "index"))', "class Held(nn.Module):"],
    ),
    "many_untraceable_copies": (
        "zoo.py",
        "ManyGates",
        ["torch.randn(2, 4)"],
        ["fl.FlowBuilder(m.gates[0])", ".through(m.gates[39])", "# Opaque (kept whole): gates.0 and 39 more (dynamic.py:14)"],
    ),
    "expression_off_the_stream": (
        "zoo.py",
        "Fourier",
        ["torch.randn(2, 4)"],
        [".fork(div)\n        .using(\"proj_weight\")", "def div(_, proj_weight):",
         "return torch.arange(4, device=proj_weight.device) / 4"],
    ),
    "tuple_read_thrice": (
        "zoo.py",
        "Attention",
        ["torch.randn(2, 4)"],
        [".through(unbind)", ".fork(fl.nn.Select(0))"],
    ),
    "tag_not_a_node_id": (
        "zoo.py",
        "Residuals",
        ["torch.randn(2, 4)"],
        ['.tag("add3")', '.output("o", "add3")'],
    ),
    "assignment": (
        "mutation.py",
        "Filled",
        ["torch.randn(3, 8)"],
        ["t = torch.zeros(x.shape[0], 12)\n    t[:, :4] = stream\n    return t\n",
         "    x[:, 4:] = a\n", "    t = stream * 2\n    t[x.sum(-1) > 0] = 0.0\n"],
    ),
    "buffer_write": (
        "mutation.py",
        "Tracked",
        ["torch.randn(3, 5, 8)"],
        ["    last[:] = x.detach().mean((0, 1))\n    return last\n",
         "return torch.arange(x.shape[1])", '.fork(Held(m, "last"))'],
    ),
    "input_write": (
        "mutation.py",
        "Cleaned",
        ["torch.randn(3, 8)"],
        ["fl.FlowBuilder(assign)", "    x[:, 0] = 0.0\n",
         "    t = x.view(-1, 2, 4)\n    t[:, 0] = 1.0\n    return t\n"],
    ),
    "buffer_expression": (
        "zoo.py",
        "Indexed",
        ["torch.randn(2, 4, 4)"],
        ['Held(m, "index")', "[index.view(-1)]"],
    ),
    "shape_unpacking": (
        "zoo.py",
        "Heads",
        ["torch.randn(2, 5, 8)"],
        [".view(x.shape[0], x.shape[1], 3, 2, -1)", ".reshape(x.shape[0], x.shape[1], -1)"],
    ),
    "constants": (
        "mutation.py",
        "Weighted",
        ["torch.randn(3, 8)"],
        ['t = x * torch.tensor([1.0, 2.0, 1.0, 2.0, 1.0, 2.0, 1.0, float("inf")], '
         'dtype=torch.float32)\n    t[:, torch.tensor([0, 2], dtype=torch.int64)] = 0.0\n'],
    ),
    "settings": (
        "settings.py",
        "Heads",
        ["torch.randn(2, 5, 8)"],
        ['SETTINGS = {\n    "": {"heads": 2},\n}', "settings_checked(m, SETTINGS)"],
    ),
    "einops": (
        "rearranged.py",
        "TinyViT",
        ["torch.randn(2, 3, 8, 8)"],
        ["from einops import rearrange", ".through(m.to_patch[0])",
         'shape_checked(x, x.shape[-1] == 24, True, "x.shape[-1] == 24")'],
    ),
}  # fmt: skip


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    for script in MODELS.glob("*.py"):
        shutil.copy(script, tmp_path / script.name)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    yield tmp_path
    for name in [m.stem for m in MODELS.glob("*.py")] + ["_fdl_port_generated", "hf_models"]:
        sys.modules.pop(name, None)


def assert_same_in_both_modes(original, graph, x, seed, modes=(True, False)):
    """The port's graph gives the original's output bit for bit in each mode (one seed)."""
    for mode in modes:
        original.train(mode), graph.train(mode)
        torch.manual_seed(seed)
        want = original(x)
        torch.manual_seed(seed)
        assert torch.equal(graph(x), want), f"training={mode}"


def load(path: Path):
    spec = importlib.util.spec_from_file_location(f"ported_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("case", list(CASES))
def test_port_translates_builds_and_proves_parity(workdir, case):
    script, cls, examples, idioms = CASES[case]
    out = workdir / f"{case}_port.py"
    report = port(workdir / script, cls, None, examples, out)
    assert report.written and report.parity.exact, report.to_dict()
    # eval and train for each seed's draw of each example (an expression drawing nothing: one)
    drawn = {(c.example, c.seed) for c in report.parity.cases}
    assert len(report.parity.cases) == 2 * len(drawn)
    for number, expr in enumerate(examples, 1):
        seeds = {seed for n, seed in drawn if n == number}
        assert seeds == ({0, 1} if "rand" in expr else {0}), (expr, seeds)
    text = out.read_text()
    for idiom in idioms:
        assert idiom in text, (idiom, text)
    assert text.startswith(f"# Ported from {script} (class {cls}) by:")
    flow = text[text.index("def flow(") :]
    for name in re.findall(r"^def (\w+)\(", text, re.MULTILINE):
        # every function is a used step (shape_checked: the helper that the steps call;
        # shown_setting: the one settings_checked calls)
        if name not in ("build", "from_torch", "flow", "shape_checked", "shown_setting"):
            assert re.search(rf"[(, ]{name}[(),]", flow), (name, flow)
    assert "# Parity: exact on" in text
    assert "# Note:" not in text and report.note == ""  # every value read in the original's order

    # the written file imports; build() makes the model fresh; from_torch shares the weights
    generated = load(out)
    original = getattr(sys.modules[Path(script).stem], cls)()
    graph = generated.from_torch(original)
    assert {id(p) for p in graph.parameters()} == {id(p) for p in original.parameters()}
    fresh = generated.build()
    assert sorted(p.shape for p in fresh.parameters()) == sorted(
        p.shape for p in original.parameters()
    )
    args = eval(examples[-1], {"torch": torch})
    args = args if isinstance(args, tuple) else (args,)
    original.eval()
    graph.eval()
    fresh.eval()
    names = list(__import__("inspect").signature(original.forward).parameters)
    kwargs = dict(zip(names[1:], args[1:], strict=False)) if report.translated else {}
    call = (args[0],) if report.translated else args
    torch.manual_seed(3)
    want = original(*args)
    torch.manual_seed(3)
    got = graph(*call, **kwargs)
    flat = lambda v: [t for x in v for t in flat(x)] if isinstance(v, tuple) else [v]  # noqa: E731
    assert all(torch.equal(a, b) for a, b in zip(flat(want), flat(got), strict=True))
    fresh(*call, **kwargs)  # a fresh model runs on the same inputs


def test_opaque_submodule_is_reported_with_its_line_and_the_rest_translated(workdir):
    report = port(workdir / "dynamic.py", "GatedNet", None, ["torch.randn(4, 8)"], workdir / "g.py")
    assert report.written and report.parity.exact
    (opaque,) = report.opaque
    assert (opaque.path, opaque.cls, opaque.location) == ("gate", "Gate", "dynamic.py:14")
    assert "control flow" in opaque.reason
    assert [s["original"] for s in report.translated] == [
        "self.inp", "torch.relu", "self.gate", "self.out"
    ]  # fmt: skip
    assert "# Opaque (kept whole): gate (dynamic.py:14)" in (workdir / "g.py").read_text()


def test_whole_forward_opaque_still_proves_parity(workdir):
    report = port(workdir / "dynamic.py", "Halting", None, ["torch.randn(4, 8)"], workdir / "h.py")
    assert report.written and report.parity.exact and report.translated == []
    (opaque,) = report.opaque
    assert opaque.path == "" and opaque.location == "dynamic.py:40"


def test_a_buffer_read_in_forward_is_shared_and_saved_only_if_the_original_saves_it(workdir):
    out = workdir / "masked_port.py"
    report = port(workdir / "zoo.py", "Masked", None, ["torch.randn(3, 4)"], out)
    assert report.written and report.parity.exact
    original = sys.modules["zoo"].Masked()
    graph = load(out).from_torch(original)
    assert list(graph.state_dict()) == ["scale.value", "window_table.value", "linear_6.weight",
                                        "linear_6.bias"]  # fmt: skip
    with torch.no_grad():
        original.scale.mul_(3)  # the graph reads the same tensor
    x = torch.randn(3, 4)
    assert torch.equal(graph(x), original(x))


def test_many_copies_of_an_untraceable_block_are_reported_on_one_line(workdir, run_fdl):
    result = run_fdl("port", "zoo.py", "--model", "ManyGates", "--example-input",
                     "torch.randn(2, 4)", cwd=workdir)  # fmt: skip
    assert result.returncode == 0, result.stderr
    opaque = [line for line in result.stdout.splitlines() if "opaque:" in line]
    assert opaque == [
        "  opaque: gates.0 and 39 more (Gate) at dynamic.py:14: TraceError: symbolically traced "
        "variables cannot be used as inputs to control flow"
    ]


def test_a_value_read_out_of_order_is_laid_out_in_the_originals_order(workdir):
    # no layout along the stream reads x in the original's order (a, b, n): the port lays out
    # every operation in that order, a layer called on a tag where it must be
    out = workdir / "mixed_port.py"
    report = port(workdir / "zoo.py", "Mixed", None, ["torch.randn(2, 4)"], out)
    assert report.written and report.parity.exact and report.note == "", report.to_dict()
    text = out.read_text()
    flow = text[text.index("def flow(") :]
    assert 'Call(m.b, stream_as=()))\n        .using(input="x")' in flow
    assert 'Call(m.mix, stream_as=("input2",)))\n        .using(input1="a")' in flow
    assert flow.index("m.a)") < flow.index("m.b,") < flow.index("m.mix,") < flow.index("m.n,")


def test_with_no_layout_in_order_the_port_says_gradients_may_differ(workdir):
    # Pair takes *xs: it cannot be called on tags, so no layout keeps the original's order
    out = workdir / "pairs_port.py"
    report = port(workdir / "zoo.py", "MixedPairs", None, ["torch.randn(2, 4)"], out, force=True)
    note = (
        "the input is read by 3 operations, which the port runs in another order than the "
        "original: autograd sums the terms of its gradient in that order, so gradients can "
        "differ in the last bits"
    )
    assert report.note == note and report.written
    assert f"# Note: {note}." in out.read_text()
    assert all(c.outputs == 0.0 for c in report.parity.cases)  # the forward itself is exact


def test_branches_that_exchange_features_are_laid_out(workdir, run_fdl):
    # HRNet's fusion: each output sums a layer of its own branch and one of the other branch;
    # no layout along one stream exists, one in the original's order does
    out = workdir / "fusion_port.py"
    report = port(workdir / "zoo.py", "Fusion", None, ["torch.randn(2, 3, 8, 8)"], out)
    assert report.written and report.parity.exact and not report.opaque, report.to_dict()
    assert len(report.translated) == 11
    assert 'Call(m.down, stream_as=()))\n        .using(input="high")' in out.read_text()
    check = run_fdl("check", "--no-run", out.name, cwd=workdir)
    assert check.returncode == 0 and "check ok" in check.stdout, check.stdout + check.stderr


def test_a_port_that_differs_is_laid_out_again_in_the_originals_order(workdir):
    from fdl.port import parity, render, run, trace, translate
    from fdl.port.load import example_inputs, import_script

    out = workdir / "folded_port.py"
    report = port(workdir / "zoo.py", "Folded", None, ["torch.randn(2, 3)"], out)
    assert report.written and report.parity.exact and report.note == "", report.to_dict()
    flow = out.read_text()
    # each operation a step of its own, where the original runs it: l0 * x, then - x
    assert (
        '.through(m.l0)\n        .through(mul)\n        .using("x")\n        .through(sub)' in flow
    )
    # the first layout, one function per expression, sums x's gradient in another order: on
    # this machine it differs in the last bits (rounding may agree elsewhere: then it is kept)
    module = import_script(workdir / "zoo.py")
    torch.manual_seed(0)
    original = module.Folded()
    gm, _ = trace.trace(original, 1)
    examples = example_inputs(["torch.randn(2, 3)"])
    kinds = translate.value_kinds(gm, examples[0].args)
    folded = translate.Translator(gm, original, kinds).translate()
    assert not folded.strict and "return (stream * x) - x" in "".join(folded.functions)
    source = render.init_source(module.Folded, module)
    text = render.render(folded, source, class_name="Folded", script_name="zoo.py", header=[],
                         opaque_inputs=[])  # fmt: skip
    graph = run._load_generated(text, workdir).from_torch(original)
    first = parity.check(original, graph, examples, lambda g, a: g(*a))
    assert not first.exact, "rounding agreed here: this test no longer shows the retry"


def test_more_untraceable_classes_than_retries_keep_the_model_whole_and_say_why(workdir):
    from fdl.port.trace import MAX_RETRIES

    classes = "".join(
        f"class G{i}(nn.Module):\n"
        "    def forward(self, x):\n"
        "        return x + 1 if x.sum() > 0 else x - 1  # decided by the data\n\n\n"
        for i in range(MAX_RETRIES + 1)
    )
    gates = ", ".join(f"G{i}()" for i in range(MAX_RETRIES + 1))
    (workdir / "kinds.py").write_text(
        "import torch\nfrom torch import nn\n\n\n" + classes
        + "class Kinds(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        f"        self.gates = nn.ModuleList([{gates}])\n\n"
        "    def forward(self, x):\n"
        "        for gate in self.gates:\n"
        "            x = gate(x)\n"
        "        return x\n"
    )  # fmt: skip
    report = port(workdir / "kinds.py", "Kinds", None, ["torch.randn(2, 3)"], workdir / "k.py")
    assert report.written and report.parity.exact and report.translated == []
    (opaque,) = report.opaque
    assert (opaque.path, opaque.cls) == ("", "Kinds")
    assert opaque.reason == f"more than {MAX_RETRIES} kinds of submodule could not be traced"


def test_a_forward_no_layout_fits_names_the_operation_in_the_way(workdir):
    report = port(
        workdir / "structured.py", "Sized", None, ["torch.randn(2, 5, 6)"], workdir / "s.py"
    )
    assert report.written and report.parity.exact and report.translated == []
    (opaque,) = report.opaque
    assert opaque.reason == (
        "not expressible as builder calls: the data flow could not be laid out as builder calls: "
        "self.encoder is called with a value computed from a tensor's shape"
    )


HF_SCRIPT = """
import torch
from transformers import BertConfig, BertModel, GPT2Config, GPT2LMHeadModel


class TinyLM(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        config = GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=50, n_positions=8,
                            bos_token_id=0, eos_token_id=0)
        self.lm = GPT2LMHeadModel(config)

    def forward(self, ids):
        return self.lm(ids).logits


class TinyClassifier(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        config = BertConfig(num_hidden_layers=1, hidden_size=16, num_attention_heads=2,
                            intermediate_size=32, vocab_size=50, max_position_embeddings=8)
        self.bert = BertModel(config, add_pooling_layer=False)
        self.head = torch.nn.Linear(16, 3)

    def forward(self, ids):
        return self.head(self.bert(ids).last_hidden_state[:, 0])


class TinyEagerClassifier(TinyClassifier):
    # BERT with the attention written in Python (eager), with its attention dropout: its
    # self-attention unpacks the hidden states' shape ((*input_shape, -1, head_size)) and
    # drops attention weights at ``0.0 if not self.training else p``.

    def __init__(self):
        torch.nn.Module.__init__(self)
        torch.manual_seed(0)
        config = BertConfig(num_hidden_layers=1, hidden_size=16, num_attention_heads=2,
                            intermediate_size=32, vocab_size=50, max_position_embeddings=8,
                            attention_probs_dropout_prob=0.1, attn_implementation="eager")
        self.bert = BertModel(config, add_pooling_layer=False)
        self.head = torch.nn.Linear(16, 3)
"""


@pytest.mark.parametrize(
    ("cls", "kept", "ends"),
    [
        # GPT-2 and BERT's default attention (sdpa) branch on the query's length: decided as
        # for the example, and checked on every input (shape_checked)
        ("TinyLM", [], [".view()", "[...]", "self.lm.lm_head"]),
        (
            "TinyClassifier",
            # the embeddings read slices of their position_ids and token_type_ids buffers:
            # written out since buffers are traced values (they were kept whole)
            [],
            ["self.bert.encoder.layer.0.output.LayerNorm", "[...]", "self.head"],
        ),
        (
            # eager attention is plain tensor code, every part of it written out, its dropout
            # as nn.Dropout(0.1)
            "TinyEagerClassifier",
            [],
            ["self.bert.encoder.layer.0.output.LayerNorm", "[...]", "self.head"],
        ),
    ],
)
def test_transformers_models_port_exactly_around_what_fx_cannot_trace(workdir, cls, kept, ends):
    """transformers' models return ModelOutput dataclasses, take **kwargs and are called with
    their defaults spelled out: the port picks fields off the output and keeps the rest."""
    pytest.importorskip("transformers")
    (workdir / "hf_models.py").write_text(HF_SCRIPT)
    out = workdir / "hf_port.py"
    report = port(workdir / "hf_models.py", cls, None, ["torch.randint(0, 50, (2, 6))"], out)
    assert report.written and report.parity.exact, report.to_dict()
    assert [o.path for o in report.opaque] == kept  # parts kept whole, never the model
    assert [s["original"] for s in report.translated][-3:] == ends
    if cls == "TinyEagerClassifier":  # the attention weights' dropout, off in eval mode
        assert "nn.Dropout(p=0.1)" in out.read_text()
    original = getattr(sys.modules["hf_models"], cls)().eval()
    graph = load(out).from_torch(original).eval()
    for length in (6, 3):  # the example's length and another
        ids = torch.randint(0, 50, (2, length))
        assert torch.equal(graph(ids), original(ids))
    if cls != "TinyEagerClassifier":  # one token takes sdpa's other branch: refused, not wrong
        with pytest.raises(
            ValueError,
            match=r"port again with example inputs of each shape it meets \(--example-input, repeated\)",
        ):
            graph(torch.randint(0, 50, (2, 1)))


def test_transformers_config_settings_are_checked(workdir):
    """transformers' models read their config in the forward (which attention function to
    call, what to return): the port records those reads as settings of ``lm.config`` and
    refuses a model configured otherwise; the config classes get their own lookup back."""
    configuration_utils = pytest.importorskip("transformers.configuration_utils")
    lookup = vars(configuration_utils.PretrainedConfig)["__getattribute__"]
    (workdir / "hf_models.py").write_text(HF_SCRIPT)
    out = workdir / "hf_port.py"
    report = port(workdir / "hf_models.py", "TinyLM", None, ["torch.randint(0, 50, (2, 6))"], out)
    assert report.written and report.parity.exact, report.to_dict()
    assert report.settings["lm.config._attn_implementation_internal"] == "sdpa"
    assert report.settings["lm.config.return_dict"] is True
    assert vars(configuration_utils.PretrainedConfig)["__getattribute__"] is lookup
    assert "__getattribute__" not in vars(sys.modules["hf_models"].GPT2Config)
    ported = load(out)
    model = sys.modules["hf_models"].TinyLM().eval()
    ids = torch.randint(0, 50, (2, 6))
    assert torch.equal(ported.from_torch(model).eval()(ids), model(ids))
    model.lm.config._attn_implementation_internal = "eager"
    with pytest.raises(
        ValueError, match=r"written for lm\.config\._attn_implementation_internal='sdpa'"
    ):
        ported.from_torch(model)


def test_init_arguments_reach_the_model_and_build(workdir):
    out = workdir / "c.py"
    report = port(workdir / "cnn.py", "CNN", "(1, 5)", ["torch.randn(2, 1, 32, 32)"], out)
    assert report.written and report.parity.exact
    generated = load(out)
    assert generated.build(1, 5)(torch.randn(2, 1, 32, 32)).shape == (2, 5)
    report = port(
        workdir / "cnn.py",
        "CNN",
        "{'num_classes': 7}",
        ["torch.randn(1, 3, 32, 32)"],
        out,
        overwrite=True,
    )
    assert report.parity.exact
    assert load(out).build(num_classes=7)(torch.randn(1, 3, 32, 32)).shape == (1, 7)


def test_inexact_port_writes_nothing_unless_forced(workdir):
    out = workdir / "drift.py"
    report = port(workdir / "inexact.py", "Drifting", None, ["torch.randn(2, 4)"], out)
    assert not report.written and not out.exists()
    assert not report.parity.exact and report.parity.max_abs_diff > 0
    assert "nothing written" in report.refused
    forced = port(workdir / "inexact.py", "Drifting", None, ["torch.randn(2, 4)"], out, force=True)
    assert forced.written and "# Parity: NOT exact" in out.read_text()


@pytest.mark.parametrize(
    ("cls", "init", "example", "message"),
    [
        ("Nope", None, "torch.randn(2, 4)", "class Nope not found in inexact.py"),
        ("Broken", None, "torch.randn(2, 4)", "missing a required argument: 'dim'"),
        ("Broken", "(0,)", "torch.randn(2, 4)", "ValueError: dim must be positive"),
        ("Broken", "(4,)", "torch.randn(2, 5)", "does not fit Broken: RuntimeError: "),
        ("Broken", "(4,", "torch.randn(2, 4)", "is not a Python literal"),
        ("Broken", "(4,)", "torch.randn(2, 4", "--example-input"),
    ],
)
def test_user_errors_are_clear_and_write_nothing(workdir, cls, init, example, message):
    out = workdir / "never.py"
    with pytest.raises(Exception) as info:
        port(workdir / "inexact.py", cls, init, [example], out)
    assert message in str(info.value)
    assert info.type.__module__.startswith("fdl"), info.type  # an fdl error, not a crash
    assert not out.exists()


def test_port_error_is_an_fdl_error():
    from fdl.errors import FdlError

    assert issubclass(PortError, FdlError)


# ------------------------------------------------------------------------------- the CLI
def test_cli_json_report_and_byte_stable_output(workdir, run_fdl):
    argv = ["port", "vae.py", "--model", "VAE", "--example-input", "torch.rand(4, 64)", "--json"]
    first = run_fdl(*argv, cwd=workdir)
    assert first.returncode == 0, first.stderr
    data = json.loads(first.stdout)
    assert data["written"] and data["parity"]["exact"] and data["parity"]["max_abs_diff"] == 0
    assert {c["mode"] for c in data["parity"]["cases"]} == {"eval", "train"}
    assert {"node": "fc_mu", "original": "self.fc_mu", "as": "m.fc_mu"} in data["translated"]
    assert data["output"] == "vae_flodl.py" and data["opaque"] == []
    written = (workdir / "vae_flodl.py").read_bytes()
    again = run_fdl(*argv[:-1], "--overwrite", cwd=workdir)
    assert again.returncode == 0 and "parity: exact" in again.stdout
    assert (workdir / "vae_flodl.py").read_bytes() == written


def test_a_rerun_that_would_write_the_same_port_succeeds_without_overwrite(workdir, run_fdl):
    argv = ["port", "vae.py", "--model", "VAE", "--example-input", "torch.rand(4, 64)"]
    assert run_fdl(*argv, cwd=workdir).returncode == 0
    ported = workdir / "vae_flodl.py"
    written, stamp = ported.read_bytes(), ported.stat().st_mtime_ns
    again = run_fdl(*argv, "--json", cwd=workdir)  # refused with "already exists" before
    assert again.returncode == 0, again.stderr
    report = json.loads(again.stdout)
    assert report["ok"] and report["unchanged"] and not report["written"]
    assert ported.read_bytes() == written and ported.stat().st_mtime_ns == stamp  # not rewritten
    ported.write_bytes(written + b"# my note\n")  # an edit of the earlier port is kept
    edited = run_fdl(*argv, cwd=workdir)
    assert edited.returncode == 1 and "already exists — pass --overwrite" in edited.stderr
    assert ported.read_bytes().endswith(b"# my note\n")
    other = run_fdl(*argv, "--example-input", "torch.rand(2, 64)", cwd=workdir)
    assert other.returncode == 1 and "already exists" in other.stderr  # another command line


def test_an_existing_output_is_replaced_only_with_overwrite(workdir, run_fdl):
    edited = workdir / "vae_flodl.py"
    edited.write_text("# my edits of an earlier port\n")
    argv = ["port", "vae.py", "--model", "VAE", "--example-input", "torch.rand(4, 64)"]
    for extra in ([], ["--force"]):  # --force is about parity: it replaces nothing
        refused = run_fdl(*argv, *extra, cwd=workdir)
        assert refused.returncode == 1, refused.stdout + refused.stderr
        assert refused.stderr.startswith(
            "error: vae_flodl.py already exists — pass --overwrite to replace it"
        )
        assert "Traceback" not in refused.stderr
        assert edited.read_text() == "# my edits of an earlier port\n"
    replaced = run_fdl(*argv, "--overwrite", cwd=workdir)
    assert replaced.returncode == 0, replaced.stderr
    assert edited.read_text().startswith("# Ported from vae.py (class VAE) by:")


def test_cli_errors_have_no_traceback(workdir, run_fdl):
    result = run_fdl("port", "cnn.py", "--model", "CNX", "--example-input", "torch.randn(1)",
                     cwd=workdir)  # fmt: skip
    assert result.returncode == 2
    assert "error: class CNX not found in cnn.py — did you mean CNN?" in result.stderr
    assert "Traceback" not in result.stderr and not (workdir / "cnn_flodl.py").exists()
    result = run_fdl("port", "cnn.py", "--model", "CNN", "--example-input", "torch.randn(2, 3, 8, 8)",
                     cwd=workdir)  # fmt: skip
    assert result.returncode == 1 and "does not fit CNN: RuntimeError" in result.stderr
    assert "Traceback" not in result.stderr and not (workdir / "cnn_flodl.py").exists()
    result = run_fdl("port", "inexact.py", "--model", "Drifting", "--example-input",
                     "torch.randn(2, 4)", cwd=workdir)  # fmt: skip
    assert result.returncode == 1 and "nothing written" in result.stdout
    assert not (workdir / "inexact_flodl.py").exists()
    result = run_fdl("port", "cnn.py", "--model", "CNN", cwd=workdir)
    assert result.returncode == 2 and "--example-input" in result.stderr


def test_generated_code_passes_fdl_check(workdir, run_fdl):
    port(workdir / "resnet.py", "ResNet", None, ["torch.randn(2, 3, 16, 16)"], workdir / "r.py")
    result = run_fdl("check", "--no-run", "r.py", cwd=workdir)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "check ok" in result.stdout


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
def test_every_port_passes_fdl_check_and_is_byte_stable(workdir, run_fdl, case):
    script, cls, examples, _ = CASES[case]
    argv = ["port", script, "--model", cls, "-o", "out.py"]
    for example in examples:
        argv += ["--example-input", example]
    first = run_fdl(*argv, cwd=workdir)
    assert first.returncode == 0, first.stdout + first.stderr
    written = (workdir / "out.py").read_bytes()
    assert run_fdl(*argv, "--overwrite", cwd=workdir).returncode == 0
    assert (workdir / "out.py").read_bytes() == written
    check = run_fdl("check", "--no-run", "out.py", cwd=workdir)
    assert check.returncode == 0 and "check ok" in check.stdout, check.stdout + check.stderr


def test_the_port_skill_says_to_try_fdl_port_first():
    text = (Path(__file__).parents[2] / "porting_skill/instructions.md").read_text()
    mechanical = text.index("## Mechanical first — `fdl port` for each model class")
    assert mechanical < text.index("## Step 4 — design")  # before designing by hand
    assert "fdl port <script.py> --model <Class> --example-input" in text


def test_a_model_kept_whole_still_takes_its_extra_arguments(workdir):
    out = workdir / "seq.py"
    examples = ["torch.randn(2, 6)", "(torch.randn(2, 6), 3)"]
    report = port(workdir / "dynamic.py", "Rollout", None, examples, out)
    assert report.written and report.parity.exact and report.opaque[0].path == ""
    assert '.input("steps", default=1).through(m).using(steps="steps")' in out.read_text()
    generated = load(out)
    original = sys.modules["dynamic"].Rollout()
    x = torch.randn(2, 6)
    assert torch.equal(generated.from_torch(original)(x, steps=2), original(x, 2))


FIXED_HEADER = "# Fixed while tracing (always these values; not inputs of the graph): "


def test_an_argument_no_example_passes_is_reported_as_fixed(workdir):
    out = workdir / "one.py"
    report = port(workdir / "dynamic.py", "Rollout", None, ["torch.randn(2, 6)"], out)
    assert report.written and report.fixed == {"steps": 1}
    assert FIXED_HEADER + "steps=1" in out.read_text()


def test_an_argument_fixed_while_tracing_is_not_a_graph_input(workdir, request):
    request.addfinalizer(lambda: sys.modules.pop("two", None))
    # declared as an input, `ctx` would be accepted and ignored: g(x, ctx=c) == net(x)
    (workdir / "two.py").write_text(
        "from torch import nn\n\n\nclass TwoIn(nn.Module):\n"
        "    def __init__(self):\n        super().__init__()\n"
        "        self.a = nn.Linear(4, 4)\n        self.b = nn.Linear(4, 4)\n\n"
        "    def forward(self, x, ctx=None):\n        h = self.a(x)\n"
        "        if ctx is not None:\n            h = h + self.b(ctx)\n        return h\n"
    )
    out = workdir / "two_flodl.py"
    report = port(workdir / "two.py", "TwoIn", None, ["torch.randn(2, 4)"], out)
    text = out.read_text()
    assert report.written and report.fixed == {"ctx": None}
    assert FIXED_HEADER + "ctx=None" in text and ".input(" not in text
    original = sys.modules["two"].TwoIn()
    graph = load(out).from_torch(original)
    x = torch.randn(2, 4)
    assert torch.equal(graph(x), original(x))
    with pytest.raises(fl.GraphInputError, match=r"unexpected graph input.*'ctx'"):
        graph(x, ctx=torch.randn(2, 4))


def test_a_model_kept_whole_reports_nothing_fixed(workdir, request):
    # the original itself takes `scale`, so the port passes it on: nothing is fixed
    request.addfinalizer(lambda: sys.modules.pop("echo", None))
    (workdir / "echo.py").write_text(
        "from torch import nn\n\n\nclass Echo(nn.Module):\n    def __init__(self):\n"
        "        super().__init__()\n        self.a = nn.Linear(4, 4)\n\n"
        "    def forward(self, x, scale=2):\n        return self.a(x) * scale, x\n"
    )
    out = workdir / "echo_flodl.py"
    report = port(workdir / "echo.py", "Echo", None, ["torch.randn(2, 4)"], out)
    assert report.written and report.opaque[0].path == "" and report.fixed == {}
    text = out.read_text()
    assert '.input("scale", default=2)' in text and "Fixed while tracing" not in text


def test_a_script_parsing_its_arguments_on_import_ports(workdir, monkeypatch, request):
    # module-level parse_args() sees only the script's name, not fdl's command line
    (workdir / "cli.py").write_text(
        "import argparse\nfrom torch import nn\n\n"
        "args = argparse.ArgumentParser().parse_args()\n\n\n"
        "class Net(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.a = nn.Linear(4, 4)\n\n    def forward(self, x):\n        return self.a(x)\n"
    )
    argv = ["fdl", "port", "cli.py", "--model", "Net", "--example-input", "torch.randn(2, 4)"]
    monkeypatch.setattr(sys, "argv", argv)
    request.addfinalizer(lambda: sys.modules.pop("cli", None))
    report = port(workdir / "cli.py", "Net", None, ["torch.randn(2, 4)"], workdir / "out.py")
    assert report.written and sys.argv == argv


def test_build_constructs_the_original_when_init_calls_its_own_methods(workdir):
    out = workdir / "s.py"
    report = port(workdir / "branches.py", "SelfInit", None, ["torch.randn(2, 4)"], out)
    assert report.written and "calls self._reset()" in report.build
    text = out.read_text()
    assert "from branches import SelfInit" in text
    assert "return from_torch(SelfInit(dim=dim))" in text
    graph = load(out).build(dim=3)
    (bias,) = [p for n, p in graph.named_parameters() if n.endswith("bias")]
    assert torch.equal(bias, torch.zeros(3))  # the original's own initialisation ran


def test_a_module_without_its_own_init_ports_with_exact_parity(workdir):
    out = workdir / "d.py"
    report = port(workdir / "inherited.py", "Doubled", None, ["torch.randn(2, 4)"], out)
    assert report.written and report.parity.exact and len(report.translated) == 2
    assert "def build() -> fl.Graph:" in out.read_text()
    x = torch.randn(3, 4)
    assert torch.equal(load(out).build()(x), torch.relu(x) * 2)


@pytest.mark.parametrize(
    ("cls", "signature", "kwargs"),
    [
        ("Child", "def build(dim: int = 4) -> fl.Graph:", {"dim": 4}),
        ("Annotated", "def build(dim: Any = None) -> fl.Graph:", {}),
    ],
)
def test_build_keeps_an_inherited_or_annotated_signature_importable(
    workdir, cls, signature, kwargs
):
    out = workdir / f"{cls}.py"
    report = port(workdir / "inherited.py", cls, None, ["torch.randn(2, 4)"], out)
    assert report.written and report.parity.exact
    text = out.read_text()
    assert signature in text
    if "Any" in signature:
        assert "from typing import Any" in text
    assert load(out).build(**kwargs)(torch.randn(2, 4)).shape[0] == 2


def test_build_renames_self_around_a_loop_variable_named_m(workdir):
    out = workdir / "l.py"
    report = port(workdir / "branches.py", "LoopInit", None, ["torch.randn(2, 4)"], out)
    assert report.written and report.build == "LoopInit.__init__, self renamed to model"
    text = out.read_text()
    assert "model = nn.Module()" in text and "for m in model.modules():" in text
    graph = load(out).build()
    assert all(
        torch.equal(p, torch.zeros_like(p)) for n, p in graph.named_parameters() if "bias" in n
    )


def test_scripts_that_cannot_be_used_are_clear_errors(workdir, run_fdl):
    result = run_fdl("port", "missing.py", "--model", "X", "--example-input", "torch.randn(1)",
                     cwd=workdir)  # fmt: skip
    assert result.returncode == 2 and "missing.py: no such file" in result.stderr
    (workdir / "bad.py").write_text("import torch\n\nraise RuntimeError('no data here')\n")
    result = run_fdl("port", "bad.py", "--model", "X", "--example-input", "torch.randn(1)",
                     cwd=workdir)  # fmt: skip
    assert result.returncode == 1
    assert "importing bad.py failed at bad.py:3: RuntimeError: no data here" in result.stderr
    assert "Traceback" not in result.stderr and not (workdir / "bad_flodl.py").exists()


def test_an_unwritable_output_is_a_clear_error(workdir):
    with pytest.raises(PortError, match=r"cannot write .*nowhere/cnn\.py: No such file"):
        port(
            workdir / "cnn.py",
            "CNN",
            None,
            ["torch.randn(1, 3, 32, 32)"],
            workdir / "nowhere/cnn.py",
        )


def test_what_a_forward_does_in_training_only_follows_the_graphs_mode(workdir):
    # Noisy adds noise under `if self.training:`: the step computes both, by the graph's mode
    out = workdir / "mode.py"
    report = port(workdir / "dynamic.py", "ModeNet", None, ["torch.randn(3, 4)"], out)
    assert report.written and report.parity.exact and report.opaque == []
    flow = out.read_text()
    assert (
        "def add(x, *, training):\n    return (x + (0.1 * torch.randn_like(x))) if training else x"
        in flow
    )
    assert "fl.FlowBuilder(fl.nn.Fn(add, pass_training=True))" in flow
    assert "nn.Dropout(p=0.2)" in flow  # F.dropout(..., self.training) follows the mode itself


@pytest.mark.parametrize("evaluating", [False, True])
def test_a_batch_count_and_a_drop_path_in_training_only_are_written_out(workdir, evaluating):
    # timm's BatchNormAct2d counts batches and its blocks drop paths in training only: both
    # traces are ported as one (the training one, also when the model is built in eval mode)
    out = workdir / "timm.py"
    init = "{'evaluating': True}" if evaluating else None
    examples = ["torch.randn(8, 3, 5, 5)"]
    report = port(workdir / "dynamic.py", "TrainingOnlyNet", init, examples, out)
    assert report.written and report.parity.exact and report.opaque == []
    flow = out.read_text()
    assert "num_batches_tracked.add_(1) if training else " in flow
    assert ".bernoulli_(0.5)" in flow and ".bernoulli_(0.75)" in flow  # keep 1 - p
    original = sys.modules["dynamic"].TrainingOnlyNet()
    graph = load(out).from_torch(original)
    x = torch.randn(64, 3, 5, 5)
    assert_same_in_both_modes(original, graph, x, seed=5, modes=(True, False, True))
    counted = [b.norm.num_batches_tracked.item() for b in original.blocks]
    assert counted == [4, 4]  # the original's 2 training calls and the graph's 2, not eval's
    assert not torch.equal(graph.train()(x), graph.train()(x))  # paths dropped at random
    assert torch.equal(graph.eval()(x), graph.eval()(x))


def test_a_training_only_call_that_cannot_follow_the_mode_keeps_only_its_module_whole(workdir):
    # torch.sort in training only returns a tuple, a step of its own that has no eval value:
    # that module is kept whole, and the batch norm counting batches is still written out
    out = workdir / "sorted.py"
    report = port(workdir / "dynamic.py", "SortedNet", None, ["torch.randn(6, 4)"], out)
    assert report.written and report.parity.exact
    assert [(o.path, o.cls) for o in report.opaque] == [("inner", "SortedInTraining")]
    flow = out.read_text()
    assert ".through(m.inner)" in flow
    assert "norm_num_batches_tracked.add_(1) if training else " in flow


def test_a_branch_on_shapes_follows_the_example_and_checks_every_input(workdir):
    out = workdir / "length.py"
    report = port(workdir / "shapes.py", "LengthBranch", None, ["torch.randn(2, 5, 4)"], out)
    assert report.written and report.parity.exact and report.opaque == []
    flow = out.read_text()
    assert 'shape_checked(x, x.shape[1] > 1, True, "x.shape[1] > 1")' in flow
    assert 'shape_checked(x, x.dim() == 3, True, "x.dim() == 3")' in flow
    assert report.checks == [("x.shape[1] > 1", True), ("x.dim() == 3", True)]
    assert report.to_dict()["shape_checks"][0] == {"test": "x.shape[1] > 1", "value": True}
    assert (
        "# Decided for the example, checked on every input: x.shape[1] > 1 is True; "
        "x.dim() == 3 is True" in flow
    )
    assert "  checked: x.shape[1] > 1 is True; x.dim() == 3 is True (branches decided" in (
        render_report(report)
    )
    original = sys.modules["shapes"].LengthBranch()
    graph = load(out).from_torch(original)
    longer = torch.randn(3, 9, 4)
    assert torch.equal(graph(longer), original(longer))  # another length, the same branch
    with pytest.raises(ValueError, match=r"where x\.shape\[1\] > 1 was True, and for this input"):
        graph(torch.randn(3, 1, 4))  # the branch not taken: an error, not a wrong result


def test_a_rank_test_on_a_piece_of_a_split_is_checked(workdir):
    """llama2.c's rotary embedding views its table with the rank of one piece of an unbind
    (``i == x.ndim - 1`` for each dim): the test reads that piece's shape, decided for the
    example and checked (the whole model was kept opaque)."""
    out = workdir / "rotary.py"
    report = port(workdir / "shapes.py", "Rotary", None, ["torch.randn(2, 6, 8)"], out)
    assert report.written and report.parity.exact and report.opaque == [], report.to_dict()
    assert report.checks == [("(x.ndim - 1) == 0", False), ("(x.ndim - 1) == 2", True)]
    original = sys.modules["shapes"].Rotary()
    graph = load(out).from_torch(original)
    x = torch.randn(3, 4, 8)  # a shorter sequence: the same rank, the same decisions
    assert torch.equal(graph(x), original(x))


def test_a_branch_on_a_device_or_dtype_keeps_its_module_whole(workdir):
    """``if x.device.type == "mps":``, ``if x.is_cuda:`` and ``if x.dtype == torch.float16:``
    are not shape tests: decided for a CPU float32 example, a port would refuse the model on a
    GPU or under autocast. Each module branching so is kept whole (it runs its own forward on
    any device), with the reason; the rest is written out."""
    out = workdir / "placed.py"
    report = port(workdir / "shapes.py", "Placed", None, ["torch.randn(4, 3)"], out)
    assert report.written and report.parity.exact and report.checks == [], report.to_dict()
    reasons = {o.path: o.reason for o in report.opaque}
    assert set(reasons) == {"transform", "cast"}
    assert reasons["cast"] == (
        "TraceError: a branch on a tensor's dtype (not its shape): decided for the example, a "
        "port would refuse inputs of another dtype (under autocast)"
    )
    assert reasons["transform"] == (
        "TraceError: a branch on a tensor's device.type (not its shape): decided for the "
        "example, a port would refuse inputs on another device (the model on a GPU)"
    )
    original = sys.modules["shapes"].Placed()
    x = torch.randn(5, 3)
    assert torch.equal(load(out).from_torch(original)(x), original(x))


def test_a_list_passed_in_iterates_as_its_items_and_its_length_is_checked(workdir):
    """``for x in xs`` and ``range(len(xs))`` over a list input: one value per item, as many as
    the example has; a list of another length is an error, never an item ignored (the whole
    model was kept opaque)."""
    out = workdir / "summed.py"
    report = port(workdir / "shapes.py", "Summed", None, ["[torch.randn(2, 4)] * 2"], out)
    assert report.written and report.parity.exact and report.opaque == [], report.to_dict()
    assert report.checks == [("len(x) == 2", True)]
    original = sys.modules["shapes"].Summed()
    graph = load(out).from_torch(original)
    xs = [torch.randn(3, 4), torch.randn(3, 4)]
    assert torch.equal(graph(xs), original(xs))
    with pytest.raises(ValueError, match=r"where len\(x\) == 2 was True, and for this input"):
        graph([*xs, torch.randn(3, 4)])


def test_a_plain_tensor_attribute_is_read_from_the_module_at_each_call(workdir):
    """``self.table[:, : x.size(1)]`` and ``self.mask[:t, :t]`` on tensors held as plain
    attributes (not buffers): fx handed the forward the tensors themselves, a slice by a traced
    length failed and the model was kept whole. They are now traced values, which the port
    reads from the module at each call (``Attr``), as the original does: not held, not saved."""
    out = workdir / "unregistered.py"
    report = port(workdir / "shapes.py", "Unregistered", None, ["torch.randn(2, 5, 8)"], out)
    assert report.written and report.parity.exact and report.opaque == [], report.to_dict()
    text = out.read_text()
    assert 'Attr(m.pos, "table")' in text and 'Attr(m, "mask")' in text
    original = sys.modules["shapes"].Unregistered()
    assert type(original.pos.table) is torch.Tensor  # (tracing handed the model nothing)
    graph = load(out).from_torch(original)
    x = torch.randn(3, 7, 8)
    assert torch.equal(graph(x), original(x))
    original.pos.table = torch.randn(1, 16, 8)  # replaced: the port reads the new one
    assert torch.equal(graph(x), original(x))
    assert not any("table" in key or "mask" in key for key in graph.state_dict())


def test_a_step_function_is_never_named_after_a_builtin(workdir):
    """``.float()`` is written as a function; named ``float``, it was called by another step's
    ``float('-inf')`` and the port was refused."""
    out = workdir / "masked.py"
    report = port(workdir / "shapes.py", "Masked", None, ["torch.randn(2, 4)"], out)
    assert report.written and report.parity.exact, report.to_dict()
    text = out.read_text()
    assert 'float("-inf")' in text and "def float(" not in text


def test_a_shape_test_computed_through_math_is_checked_too(workdir):
    out = workdir / "padded.py"
    report = port(workdir / "shapes.py", "PaddedToEven", None, ["torch.randn(2, 6, 4)"], out)
    assert report.written and report.parity.exact and report.opaque == []
    assert "(math.ceil(x.shape[1] / 2) * 2) != x.shape[1]" in out.read_text()
    original = sys.modules["shapes"].PaddedToEven()
    graph = load(out).from_torch(original)
    even = torch.randn(3, 8, 4)
    assert torch.equal(graph(even), original(even))
    with pytest.raises(ValueError, match="was False, and for this input it is True"):
        graph(torch.randn(3, 7, 4))  # the original would pad: the port refuses, never skips it


@pytest.mark.parametrize(
    ("model", "function"),
    [
        (
            "EvalOnlyNet",
            "def clamp(x, *, training):\n    return x if training else x.clamp(-0.5, 0.5)",
        ),
        (
            "ProbabilitiesInEval",
            "def softmax(x, *, training):\n    return x if training else x.softmax(-1)",
        ),
    ],
)
def test_what_a_forward_does_in_eval_mode_only_follows_the_graphs_mode(workdir, model, function):
    out = workdir / "evalonly.py"
    report = port(workdir / "dynamic.py", model, None, ["torch.randn(3, 4)"], out)
    assert report.written and report.parity.exact and report.opaque == []
    assert function in out.read_text()
    original = getattr(sys.modules["dynamic"], model)()
    graph = load(out).from_torch(original)
    x = torch.randn(16, 4) * 3
    assert_same_in_both_modes(original, graph, x, seed=6)
    assert not torch.equal(graph.train()(x), graph.eval()(x))


def test_a_layer_called_in_eval_mode_only_keeps_only_its_module_whole(workdir):
    out = workdir / "layerineval.py"
    report = port(workdir / "dynamic.py", "LayerInEvalNet", None, ["torch.randn(3, 4)"], out)
    assert report.written and report.parity.exact
    (opaque,) = report.opaque
    assert opaque.path == "inner" and "self.training" in opaque.reason


@pytest.mark.parametrize("evaluating", [False, True])
def test_a_dropout_whose_rate_is_zero_in_eval_mode_is_one_dropout_layer(workdir, evaluating):
    # transformers' attention writes ``dropout=0.0 if not self.training else p``: in eval mode
    # the call is off whatever its rate, so both traces are the same nn.Dropout(p) -- also when
    # the model is built in eval mode and the eval-mode forward is the one traced first
    out = workdir / "attn.py"
    init = "{'evaluating': True}" if evaluating else None
    report = port(workdir / "dynamic.py", "AttentionNet", init, ["torch.randn(2, 3, 4)"], out)
    assert report.written and report.parity.exact and report.opaque == []
    flow = out.read_text()
    assert "nn.Dropout(p=0.25)" in flow and "training=False" not in flow


@pytest.mark.parametrize("evaluating", [False, True])
def test_a_helper_told_the_mode_by_argument_is_a_step_that_follows_the_graphs_mode(
    workdir, evaluating
):
    # torchvision's stochastic_depth(x, p, mode, self.training) and Swin's
    # training=self.training: the two traces differ only in that flag, so the function takes
    # the graph's mode (fl.nn.Fn(..., pass_training=True)) instead of its module being whole
    out = workdir / "sd.py"
    init = "{'evaluating': True}" if evaluating else None
    report = port(workdir / "dynamic.py", "StochasticNet", init, ["torch.randn(6, 4)"], out)
    assert report.written and report.parity.exact and report.opaque == []
    flow = out.read_text()
    assert flow.count("pass_training=True") == 2, flow
    assert "def add(x, a, *, training):\n    return x + jitter(a, 0.5, training)" in flow
    assert (
        "def add_2(x, b, *, training):\n    return x + jitter(b, 0.25, training=training)" in flow
    )
    assert ".through(fl.nn.Fn(add, pass_training=True))" in flow
    original = sys.modules["dynamic"].StochasticNet()
    graph = load(out).from_torch(original)
    x = torch.randn(64, 4)
    assert_same_in_both_modes(original, graph, x, seed=3)
    assert not torch.equal(graph.train()(x), graph.eval()(x))  # it does follow the mode


@pytest.mark.parametrize(
    ("model", "function"),
    [
        # Monte Carlo dropout at a rate chosen by the mode: on in eval mode too, at another rate
        (
            "MonteCarloDropout",
            "def dropout(x, *, training):\n    return F.dropout(x, p=(0.1 if training else 0.3))",
        ),
        ("RescaledNet", "def mul(x, *, training):\n    return x * (0.5 if training else 1.0)"),
    ],
)
def test_a_constant_chosen_by_the_mode_is_chosen_by_the_graphs_mode(workdir, model, function):
    out = workdir / "bymode.py"
    report = port(workdir / "dynamic.py", model, None, ["torch.randn(3, 4)"], out)
    assert report.written and report.parity.exact and report.opaque == []
    assert function in out.read_text()
    original = getattr(sys.modules["dynamic"], model)()
    graph = load(out).from_torch(original)
    x = torch.randn(256, 4)
    assert_same_in_both_modes(original, graph, x, seed=4)
    torch.manual_seed(4)
    trained = graph.train()(x)
    torch.manual_seed(4)
    assert not torch.equal(graph.eval()(x), trained)  # the mode does choose


def test_port_overhead_benchmark_smoke_run(tmp_path):
    import subprocess

    from tests.conftest import clean_env

    script = Path(__file__).parents[2] / "benchmarks" / "port_overhead.py"
    proc = subprocess.run(
        [sys.executable, str(script), "--smoke", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=clean_env(OMP_NUM_THREADS="1"),
        timeout=900,  # a hang guard only: the run takes seconds
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = json.loads((tmp_path / "port_overhead.json").read_text())["rows"]
    assert [r["model"] for r in rows] == ["cnn", "resnet", "vae", "lstm", "transformer"]
    assert all(r["ratio"] > 0 and r["a_a_ratio"] > 0 for r in rows)


def test_port_zoo_benchmark_ports_each_model_and_skips_a_zoo_not_installed(tmp_path, monkeypatch):
    spec = importlib.util.spec_from_file_location(
        "port_zoo", Path(__file__).parents[2] / "benchmarks" / "port_zoo.py"
    )
    port_zoo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(port_zoo)
    local = f"import sys; sys.path.insert(0, {str(MODELS)!r}); import zoo"
    monkeypatch.setattr(port_zoo, "ZOOS", {
        "local": (local, {"pooled": ("zoo.Pooled()", 6), "broken": ("zoo.Pooled(-1)", 6)}),
        "absent": ("import a_zoo_that_is_not_installed", {"x": ("x()", 8)}),
    })  # fmt: skip
    rows = port_zoo.main(["--out", str(tmp_path)])
    assert [(r["model"], r["result"], r["translated"]) for r in rows] == [
        ("pooled", "exact", 4),
        ("broken", "error", 0),
    ]
    notes = json.loads((tmp_path / "port_zoo.json").read_text())["notes"]
    assert notes.startswith("2 models: 1 ported exactly") and "absent: not installed" in notes


def test_a_long_chain_is_written_in_pieces(workdir, run_fdl):
    out = workdir / "deep_port.py"
    report = port(workdir / "branches.py", "Deep", None, ["torch.randn(2, 4)"], out)
    assert report.written and report.parity.exact and len(report.translated) == 300
    text = out.read_text()
    assert text.count("flow = (") == 2 and "return flow.build()" in text  # 100 calls: 60 + 40
    check = run_fdl("check", "--no-run", "deep_port.py", cwd=workdir)
    assert check.returncode == 0, check.stdout + check.stderr


def test_each_example_is_drawn_under_every_seed_reproducibly():
    from fdl.errors import FdlUsageError
    from fdl.port.load import example_inputs

    first = example_inputs(["torch.randn(2, 3)", "torch.ones(2, 3)", "(torch.randn(4), 5)"])
    assert [(e.number, e.seed) for e in first] == [(1, 0), (1, 1), (2, 0), (3, 0), (3, 1)]
    assert not torch.equal(first[0].args[0], first[1].args[0])  # two inputs nobody chose
    assert first[3].args[1] == 5 and first[4].args[1] == 5
    again = example_inputs(["torch.randn(2, 3)", "torch.ones(2, 3)", "(torch.randn(4), 5)"])
    assert all(torch.equal(a.args[0], b.args[0]) for a, b in zip(first, again, strict=True))
    # an expression that seeds itself draws the same values every time: one input
    assert len(example_inputs(["(torch.manual_seed(7), torch.randn(2))[1]"], seeds=5)) == 1
    assert [e.seed for e in example_inputs(["torch.randn(2)"], seeds=3)] == [0, 1, 2]
    with pytest.raises(FdlUsageError, match="at least one seed"):
        example_inputs(["torch.randn(2)"], seeds=0)


def test_a_port_exact_on_one_draw_but_not_another_is_not_exact():
    from fdl.port import parity
    from fdl.port.load import example_inputs

    examples = example_inputs(["torch.randn(16)"])
    tops = [float(e.args[0].max()) for e in examples]
    assert tops[0] < tops[1]  # seeded: the same draws on every machine
    limit = sum(tops) / 2

    class Identity(torch.nn.Module):
        def forward(self, x):
            return x * 1

    class Saturating(torch.nn.Module):  # a "port" that differs only above `limit`
        def forward(self, x):
            return x.clamp(max=limit)

    result = parity.check(Identity(), Saturating(), examples, lambda g, a: g(*a))
    by_seed = {(c.seed, c.mode): c.exact for c in result.cases}
    assert by_seed == {
        (0, "eval"): True,
        (0, "train"): True,
        (1, "eval"): False,
        (1, "train"): False,
    }
    assert not result.exact
    assert result.summary().startswith(
        "NOT exact on 2 inputs (1 example input, one draw per seed), eval and train mode"
    )


def test_seeds_option_is_recorded_and_reported(workdir, run_fdl):
    argv = ["port", "cnn.py", "--model", "CNN", "--example-input", "torch.randn(2, 3, 32, 32)"]
    one = run_fdl(*argv, "--seeds", "1", "--json", cwd=workdir)
    assert one.returncode == 0, one.stdout + one.stderr
    cases = json.loads(one.stdout)["parity"]["cases"]
    assert [(c["example"], c["seed"], c["mode"]) for c in cases] == [
        (1, 0, "eval"),
        (1, 0, "train"),
    ]
    text = (workdir / "cnn_flodl.py").read_text()
    assert "--example-input 'torch.randn(2, 3, 32, 32)' --seeds 1\n" in text
    assert "# Parity: exact on 1 example input, eval and train mode" in text
    three = run_fdl(*argv, "--seeds", "3", "--overwrite", cwd=workdir)
    assert three.returncode == 0, three.stdout + three.stderr
    assert "parity: exact on 3 inputs (1 example input, one draw per seed)" in three.stdout
    bad = run_fdl(*argv, "--seeds", "0", "--overwrite", cwd=workdir)
    assert bad.returncode == 2 and "--seeds" in bad.stderr and "Traceback" not in bad.stderr


@pytest.mark.parametrize(
    "model", ["Dag0", "Dag1", "Dag9", "Dag13", "Dag14", "Dag27", "Dag35", "Writes79"]
)
def test_random_data_flows_port_exactly(workdir, model):
    # 7 of 60 random flows were refused (off in the last bits) before layouts kept the
    # original's order of operations; the three draws make each proof harder to pass by luck
    out = workdir / f"{model}_port.py"
    report = port(workdir / "dags.py", model, None, ["torch.randn(2, 3)"], out, seeds=3)
    assert report.written and report.parity.exact and not report.opaque, report.to_dict()


def test_an_in_place_write_is_kept(workdir):
    # t.add_(x); return tanh(t): fx records add_ as a value nobody reads, the tanh reading t
    out = workdir / "inplace_port.py"
    report = port(workdir / "zoo.py", "InPlace", None, ["torch.randn(3, 4)"], out)
    assert report.written and report.parity.exact, report.to_dict()
    assert ".add_(x)" in out.read_text()


def test_layers_called_for_their_effects_are_kept(workdir):
    # an unread dropout moves the random stream, an unread batch norm its running statistics:
    # without them the train-mode output and the buffers would differ
    out = workdir / "unused_port.py"
    report = port(workdir / "zoo.py", "Unused", None, ["torch.randn(3, 4)"], out)
    assert report.written and report.parity.exact, report.to_dict()
    flow = out.read_text()
    assert "m.probe" in flow and "m.stats" in flow
    assert flow.index("m.probe") < flow.index("m.stats") < flow.rindex("m.drop")


def test_port_random_benchmark_reports_each_flow(tmp_path):
    spec = importlib.util.spec_from_file_location(
        "port_random", Path(__file__).parents[2] / "benchmarks" / "port_random.py"
    )
    assert spec is not None and spec.loader is not None
    port_random = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(port_random)
    assert port_random.model_source(7) == port_random.model_source(7)  # a seed is one model
    rows = port_random.main(["--start", "3", "--count", "2", "--out", str(tmp_path)])
    assert [(r["seed"], r["result"]) for r in rows] == [(3, "exact"), (4, "exact")], rows
    notes = json.loads((tmp_path / "port_random.json").read_text())["notes"]
    assert notes == "2 random flows (seeds 3-4): 2 exact, 0 whole, 0 refused, 0 error."
    # seed 4 with --writes: a masked write and a torch.zeros(x.shape[0], 4) filled in a slice
    assert "t4[v2 > 0] = 0.0" in port_random.model_source(4, writes=True)
    assert "torch.zeros(x.shape[0], 4)" in port_random.model_source(4, writes=True)
    rows = port_random.main(["--writes", "--start", "4", "--count", "1", "--out", str(tmp_path)])
    assert [(r["seed"], r["result"]) for r in rows] == [(4, "exact")], rows
    # seed 10 with --ops too: writes, torch.where, a reshape and transpose, F.normalize
    source = port_random.model_source(10, writes=True, ops=True)
    assert all(op in source for op in ("torch.where(", ".transpose(1, 2)", "F.normalize("))
    argv = ["--writes", "--ops", "--start", "10", "--count", "1", "--out", str(tmp_path)]
    assert [(r["seed"], r["result"]) for r in port_random.main(argv)] == [(10, "exact")]


def test_a_function_is_written_without_the_defaults_fx_recorded(workdir):
    out = workdir / "scores_port.py"
    report = port(workdir / "zoo.py", "Scores", None, ["torch.randn(3, 4)"], out)
    assert report.written and report.parity.exact, report.to_dict()
    assert "    return F.softmax(q + x, dim=-1)\n" in out.read_text(), out.read_text()


def test_constant_tensors_are_compared_by_value_across_modes_and_not_left_on_the_model(workdir):
    sys.path.insert(0, str(workdir))  # the fixture restores the path
    import mutation

    # each trace stores its constants under new names (_tensor_constant0, 1...) on the model
    # it traces: equal values are one forward, and the model keeps none of them
    model = mutation.Weighted()
    gm, opaque = trace.trace(model, 1)
    assert gm is not None and opaque == []
    assert not [name for name in vars(model) if name.startswith("_tensor_constant")]
    report = port(workdir / "mutation.py", "ScaledByMode", None, ["torch.randn(3, 8)"], None)
    assert [o.reason for o in report.opaque] == [trace.MODE_REASON], report.to_dict()
    assert report.parity.exact


def test_a_constant_too_big_to_write_keeps_only_the_module_making_it_whole(workdir):
    out = workdir / "ramped_port.py"
    report = port(workdir / "mutation.py", "Ramped", None, ["torch.randn(3, 8)"], out)
    assert report.written and report.parity.exact, report.to_dict()
    assert [(o.path, o.reason) for o in report.opaque] == [("ramp", trace.CONSTANT_REASON)]
    assert "fl.FlowBuilder(m.a).through(m.ramp).through(m.b)" in out.read_text()


def test_a_forward_writing_its_buffers_is_ported_and_the_model_keeps_them(workdir):
    sys.path.insert(0, str(workdir))  # the fixture restores the path
    import mutation

    # self.steps += 1 rebinds the buffer to the sum: recorded as a write into the buffer
    original = mutation.Counted()
    out = workdir / "counted_port.py"
    report = port(workdir / "mutation.py", "Counted", None, ["torch.randn(3, 8)"], out)
    assert report.written and report.parity.exact and not report.opaque, report.to_dict()
    assert "    steps[...] = steps + 1\n" in out.read_text()
    graph = load(out).from_torch(original)
    graph(torch.randn(3, 8))
    graph(torch.randn(3, 8))
    assert original.steps.item() == 2
    # tracing never hands the model a traced value in place of its buffer
    assert trace.trace(original, 1)[0] is not None
    assert type(original.steps) is torch.Tensor and original.steps.item() == 2
    # a branch on a buffer's value (an ActNorm's first-batch initialisation) keeps its module
    # whole: it was traced with the branch decided, and a fresh port never initialised
    report = port(workdir / "mutation.py", "Normed", None, ["torch.randn(3, 8)"], None)
    assert [o.path for o in report.opaque] == ["norm"] and report.parity.exact, report.to_dict()


def test_a_port_that_unpacks_shapes_runs_on_other_shapes_of_the_same_rank(workdir):
    """``(*x.shape[:-1], heads, -1)`` is traced with the example's rank: the port reads each
    dim from the input (``x.shape[0], x.shape[1]``), so other batch and sequence sizes run."""
    out = workdir / "heads_port.py"
    report = port(workdir / "zoo.py", "Heads", None, ["torch.randn(2, 5, 8)"], out)
    assert report.written and report.parity.exact and report.opaque == []
    original = sys.modules["zoo"].Heads()
    graph = load(out).from_torch(original)
    for shape in ((3, 7, 8), (1, 1, 8)):
        x = torch.randn(shape)
        assert torch.equal(graph(x), original(x)), shape


def test_iterating_a_tensor_still_keeps_its_module_whole(workdir):
    """A tensor's length is its batch size, which a port may not fix: only shapes iterate."""
    report = port(workdir / "zoo.py", "Rows", None, ["torch.randn(3, 4)"], workdir / "r.py")
    assert report.written and report.parity.exact
    (opaque,) = report.opaque
    assert (opaque.path, opaque.cls) == ("inner", "RowSum")
    assert "Proxy object cannot be iterated" in opaque.reason


def test_finding_a_shape_s_length_writes_nothing_into_the_model(workdir):
    """The traced-so-far graph runs on fake tensors, the model's buffers included: a batch norm
    in training mode (which counts its batches in place) is left as it was."""
    sys.path.insert(0, str(workdir))  # the fixture restores sys.path and drops the module
    original = importlib.import_module("zoo").NormedHeads().train()
    before = {k: v.clone() for k, v in original.state_dict().items()}
    gm, opaque = trace.trace(original, 1, (torch.randn(2, 5, 8),))
    assert gm is not None and opaque == []
    after = original.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before), [
        k for k in before if not torch.equal(before[k], after[k])
    ]


def test_a_setting_the_forward_computes_with_is_checked_by_build_and_from_torch(workdir, run_fdl):
    """``self.heads`` sizes a view: the port is written for 2 heads, so a module with 4 is
    refused, never given a graph that splits it into 2."""
    out = workdir / "heads_flodl.py"
    report = port(workdir / "settings.py", "Heads", None, ["torch.randn(2, 5, 8)"], out)
    assert report.written and report.parity.exact and report.opaque == []
    assert report.settings == {"heads": 2}
    assert report.to_dict()["settings"] == {"heads": 2}
    assert "  settings: heads=2 (the forward computes with these as constants" in (
        render_report(report)
    )
    text = out.read_text()
    assert 'SETTINGS = {\n    "": {"heads": 2},\n}' in text
    assert "settings_checked(m, SETTINGS)" in text
    ported = load(out)
    models = sys.modules["settings"]
    same = models.Heads(8, 2)
    x = torch.randn(3, 7, 8)
    assert torch.equal(ported.from_torch(same)(x), same(x))  # the same settings: exact
    assert ported.build(16, 2)(torch.randn(1, 3, 16)).shape == (1, 3, 16)  # dim is not read
    message = r"written for heads=2 \(its forward computes with it as a constant\), and this "
    with pytest.raises(ValueError, match=message + r"module has heads=4: port again"):
        ported.from_torch(models.Heads(8, 4))
    with pytest.raises(ValueError, match=message):
        ported.build(8, 4)
    # the classes the trace watched are given back as they were
    assert all("__getattribute__" not in vars(c) for c in (models.Heads, torch.nn.Linear))
    data = json.loads(
        run_fdl("port", "settings.py", "--model", "Heads", "--example-input",
                "torch.randn(2, 5, 8)", "--json", "-o", "again.py", cwd=workdir).stdout
    )  # fmt: skip
    assert data["settings"] == {"heads": 2}


def test_settings_of_a_submodule_are_checked_by_path_with_their_types(workdir):
    out = workdir / "nested_flodl.py"
    report = port(workdir / "settings.py", "Nested", None, ["torch.randn(3, 4)"], out)
    assert report.written and report.parity.exact
    # read by the forward, in order; not the attributes it never reads (unused, name)
    assert report.settings == {"block.scale": 0.5, "block.gated": True}
    ported = load(out)
    model = sys.modules["settings"].Nested()
    model.block.gated = False  # the port multiplies by the gate: a module without it is refused
    with pytest.raises(ValueError, match=r"written for block\.gated=True .* has block\.gated=F"):
        ported.from_torch(model)
    model.block.gated, model.block.scale = True, 1  # an int scale where the port has a float
    with pytest.raises(ValueError, match=r"block\.scale=0\.5 .* has block\.scale=1:"):
        ported.from_torch(model)
    del model.block.scale
    with pytest.raises(ValueError, match=r"this module has no block\.scale:"):
        ported.from_torch(model)
    model.block.scale = 0.5
    x = torch.randn(2, 4)
    assert torch.equal(ported.from_torch(model)(x), model(x))


def test_a_setting_read_only_by_a_module_kept_whole_is_not_checked(workdir):
    """A module kept whole runs its own forward, with its own settings: only the written-out
    forward's are the port's."""
    out = workdir / "kept_flodl.py"
    report = port(workdir / "settings.py", "WithKeptWhole", None, ["torch.randn(3, 4)"], out)
    assert report.written and report.parity.exact
    assert [o.path for o in report.opaque] == ["gate"]
    assert report.settings == {"factor": 2.0}
    model = sys.modules["settings"].WithKeptWhole()
    model.gate.threshold = -10.0  # another branch in the module kept whole: still its own
    x = torch.randn(2, 4)
    assert torch.equal(load(out).from_torch(model)(x), model(x))


def test_a_port_without_settings_writes_no_check(workdir):
    out = workdir / "length.py"
    report = port(workdir / "shapes.py", "LengthBranch", None, ["torch.randn(2, 5, 4)"], out)
    assert report.written and report.settings == {}
    assert "SETTINGS" not in out.read_text() and "settings:" not in render_report(report)


def test_a_setting_declared_on_the_class_is_checked_where_an_instance_sets_another(workdir):
    out = workdir / "class_flodl.py"
    report = port(workdir / "settings.py", "ClassScale", None, ["torch.randn(3, 4)"], out)
    assert report.written and report.settings == {"scale": 0.5}
    # build()'s holder gets what the class declares, as an instance of the class sees it
    assert report.build == "ClassScale.__init__, self renamed to m"
    assert "    m.scale = 0.5  # declared on ClassScale\n" in out.read_text()
    model = sys.modules["settings"].ClassScale()
    ported = load(out)
    assert ported.build()(torch.randn(2, 4)).shape == (2, 4)
    x = torch.randn(2, 4)
    assert torch.equal(ported.from_torch(model)(x), model(x))
    model.scale = 2.0  # this instance's own: the port, written for 0.5, refuses it
    with pytest.raises(ValueError, match=r"written for scale=0\.5 .* has scale=2\.0:"):
        ported.from_torch(model)


def test_a_dtype_setting_is_written_and_checked(workdir):
    out = workdir / "cast_flodl.py"
    report = port(workdir / "settings.py", "Cast", None, ["torch.randn(3, 4)"], out)
    assert report.written and report.settings == {"dtype": torch.float64}
    assert json.loads(json.dumps(report.to_dict()))["settings"] == {"dtype": "torch.float64"}
    assert '"": {"dtype": torch.float64},' in out.read_text()
    model = sys.modules["settings"].Cast()
    model.dtype = torch.float16
    with pytest.raises(
        ValueError, match=r"written for dtype=torch\.float64 .* has dtype=torch\.float16"
    ):
        load(out).from_torch(model)


def test_einops_calls_and_layers_are_written_as_they_are(workdir):
    """The ViT code most often copied: an einops ``Rearrange`` layer, ``repeat``, ``reduce``
    (through the module) and ``rearrange`` over ``map`` of a ``chunk``: written out whole."""
    out = workdir / "vit_flodl.py"
    report = port(workdir / "rearranged.py", "TinyViT", None, ["torch.randn(2, 3, 8, 8)"], out)
    assert report.written and report.parity.exact and report.opaque == []
    text = out.read_text()
    assert all(
        f"\nfrom einops import {name}\n" in text for name in ("rearrange", "reduce", "repeat")
    )
    assert 'rearrange(x, "b n (h d) -> b h n d", h=2)' in text
    assert ".through(m.to_patch[0])" in text  # the einops layer is kept as one step
    assert report.settings == {"attn.heads": 2, "attn.scale": 0.5}
    original = sys.modules["rearranged"].TinyViT()
    graph = load(out).from_torch(original)
    assert_same_in_both_modes(original, graph, torch.randn(5, 3, 8, 8), seed=0)


def test_a_loop_over_a_tensor_s_pieces_is_written_for_the_example_size_and_checked(workdir):
    out = workdir / "steps_flodl.py"
    report = port(workdir / "rearranged.py", "PerStep", None, ["torch.randn(2, 3, 4)"], out)
    assert report.written and report.parity.exact and report.opaque == []
    assert report.checks == [("x.shape[1] == 3", True)]
    original = sys.modules["rearranged"].PerStep()
    graph = load(out).from_torch(original)
    x = torch.randn(5, 3, 4)  # another batch: the same 3 steps
    assert torch.equal(graph(x), original(x))
    with pytest.raises(ValueError, match=r"where x\.shape\[1\] == 3 was True"):
        graph(torch.randn(2, 4, 4))  # 4 steps: an error, never a loop over 3 of them
    halves = port(
        workdir / "rearranged.py", "Halves", None, ["torch.randn(2, 6)"], out, overwrite=True
    )
    assert halves.written and halves.parity.exact and halves.opaque == []


def test_a_weights_dtype_is_decided_and_checked_and_finfo_reads_the_dtype(workdir):
    """T5's layer norm branches on its weight's dtype: the model's own (autocast does not
    change it), so the branch is decided and checked like a shape, and a model converted to
    another dtype is refused with what to do. ``torch.finfo(scores.dtype).min`` is written as
    it is: the mask takes the lowest value of whatever dtype the scores have."""
    out = workdir / "half_aware.py"
    report = port(workdir / "shapes.py", "HalfAware", None, ["torch.randn(2, 3, 8)"], out)
    assert report.written and report.parity.exact and report.opaque == [], report.to_dict()
    assert [(test.split(".dtype")[1], value) for test, value in report.checks] == [
        (" == torch.float16", False),
        (" == torch.bfloat16", False),
    ]
    assert "torch.finfo(x.dtype).min" in out.read_text()
    model = sys.modules["shapes"].HalfAware().double()  # float64: neither half dtype
    graph = load(out).from_torch(model)
    x = torch.randn(2, 5, 8, dtype=torch.float64)
    want = model(x)
    assert torch.equal(graph(x), want) and want.min() == torch.finfo(torch.float64).min
    model.to(torch.bfloat16)
    with pytest.raises(ValueError, match=r"is True: port again with the model and its inputs"):
        graph(x.to(torch.bfloat16))


def test_an_activations_dtype_that_autocast_leaves_as_it_is_is_decided_and_checked(workdir):
    """T5's block clamps its residual stream when it is float16. Under autocast (to bfloat16
    or float16) the stream stays float32, so the branch decides as for the example: it is
    written out and checked, exact under autocast, and a model run in half precision is
    refused. A dtype test autocast would flip (``_ToFloat`` above) still keeps its module."""
    out = workdir / "clamped.py"
    report = port(workdir / "shapes.py", "Clamped", None, ["torch.randn(2, 8)"], out)
    assert report.written and report.parity.exact and report.opaque == [], report.to_dict()
    assert report.checks == [("x.dtype == torch.float16", False)]  # (the check step's stream)
    model = sys.modules["shapes"].Clamped()
    graph = load(out).from_torch(model)
    x = torch.randn(3, 8)
    for dtype in (torch.bfloat16, torch.float16):
        with torch.autocast("cpu", dtype=dtype):
            assert torch.equal(graph(x), model(x))
    model.half()
    with pytest.raises(ValueError, match=r"x\.dtype == torch\.float16 was False"):
        graph(x.half())


def test_porting_leaves_torch_compile_working_in_the_same_process(workdir):
    """A trace replaces ``torch.finfo`` (and torch's factories) while it runs, and the fake
    tensors it runs on import ``torch._dynamo`` the first time, which records those names in
    its tables: imported then, it kept the stand-ins and a later ``torch.compile`` failed
    (``isinstance() arg 2 must be a type``). Checked in a fresh interpreter, where the trace
    is the first to import it."""
    script = (
        "import sys, torch\n"
        "from fdl.port import trace\n"
        "import shapes\n"
        "assert 'torch._dynamo' not in sys.modules\n"
        "trace.trace(shapes.HalfAware(), 1, (torch.randn(2, 3, 8),))\n"
        "import torch._dynamo.utils as u\n"
        "assert torch.finfo in u.common_constant_types and torch.zeros is torch._C._VariableFunctions.zeros\n"
        "print('ok')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=workdir, capture_output=True, text=True, timeout=120
    )
    assert done.stdout.strip() == "ok", done.stderr[-2000:]


def test_len_of_a_tensor_is_written_as_len_and_runs_on_other_batch_sizes(workdir):
    """``b = len(x)``: fx refuses a tensor's ``len``; the port records it and writes it as it
    is, so the graph runs on any batch size. A loop over ``range(len(x))`` is a loop over the
    batch, which a port does not fix: that module is kept whole."""
    out = workdir / "batched_flodl.py"
    report = port(workdir / "shapes.py", "Batched", None, ["torch.randn(3, 2, 8)"], out)
    assert report.written and report.parity.exact and report.opaque == [], report.to_dict()
    text = out.read_text()
    assert "view(len(x), -1)" in text and "torch.arange(len(x))" in text
    original = sys.modules["shapes"].Batched()
    graph = load(out).from_torch(original)
    for batch in (1, 5):
        x = torch.randn(batch, 4, 8)
        assert torch.equal(graph(x), original(x))
    rows = port(workdir / "shapes.py", "AroundRows", None, ["torch.randn(3, 8)"], None)
    assert rows.parity.exact and [o.path for o in rows.opaque] == ["rows"]
    assert rows.opaque[0].reason == (
        "TypeError: a size read off a tensor is used as a Python int (range(len(x)), a loop "
        "over the batch): a port runs on any size, so it cannot fix the count"
    )


@pytest.mark.parametrize(
    ("script", "cls", "kept"),
    [("shapes.py", "AroundLength", "inner"), ("rearranged.py", "PerStep", "")],
)
def test_examples_whose_shapes_decide_differently_keep_the_deciding_module_whole(
    workdir, script, cls, kept
):
    """One port follows one branch, and loops over one number of pieces: examples that differ
    there (a one-step sequence beside a longer one) keep the module deciding it whole, and the
    port is written, exact on every example, instead of refused."""
    out = workdir / "whole_flodl.py"
    examples = ["torch.randn(2, 3, 4)", "torch.randn(2, 1, 4)"]
    report = port(workdir / script, cls, None, examples, out)
    assert report.written and report.parity.exact
    (opaque,) = report.opaque
    assert opaque.path == kept and "ShapesDisagreeError: the example inputs take" in opaque.reason
    original = getattr(sys.modules[script.removesuffix(".py")], cls)()
    graph = load(out).from_torch(original)
    for length in (1, 3, 6):  # every length runs as the original does
        x = torch.randn(2, length, 4)
        assert torch.equal(graph(x), original(x))


def test_a_shape_assert_beside_a_fixed_argument_and_a_constant_in_the_returned_tuple(workdir):
    """nanoGPT's forward: its ``assert t <= block_size`` is decided on the example (with the
    fixed ``targets=None`` placeholder, which fx renames), and ``return logits, loss`` with
    ``loss`` None is the stream returned as ``(x, None)``."""
    out = workdir / "lm_flodl.py"
    report = port(
        workdir / "shapes.py", "TargetsOptional", None, ["torch.randint(0, 11, (2, 5))"], out
    )
    assert report.written and report.parity.exact and report.opaque == []
    assert report.fixed == {"targets": None}
    assert report.checks == [("x.size()[1] <= 6", True)]
    assert report.settings == {"block": 6}
    assert "def returned(x):\n    return (x, None)\n" in out.read_text()
    original = sys.modules["shapes"].TargetsOptional()
    graph = load(out).from_torch(original)
    x = torch.randint(0, 11, (3, 4))
    logits, loss = graph(x)
    assert loss is None and torch.equal(logits, original(x)[0])
    with pytest.raises(ValueError, match=r"where x\.size\(\)\[1\] <= 6 was True"):
        graph(torch.randint(0, 11, (1, 7)))  # the original's assert fails there too


@pytest.mark.parametrize(
    ("cls", "returned"),
    [
        ("DictHeads", "{'logits': tensor, 'aux': tensor, 'features': tensor, 'version': 2}"),
        ("ListOut", "[tensor, tensor]"),
        ("Twice", "(tensor, tensor)"),
    ],
)
def test_a_dict_a_list_or_a_value_returned_twice_is_built_by_a_last_step(
    workdir, run_fdl, cls, returned
):
    out = workdir / "returns_flodl.py"
    report = port(workdir / "returns.py", cls, None, ["torch.randn(3, 4)"], out)
    assert report.written and report.parity.exact and report.opaque == []
    assert "def returned(" in out.read_text()
    original = getattr(sys.modules["returns"], cls)()
    x = torch.randn(2, 4)
    got, want = load(out).from_torch(original)(x), original(x)
    assert parity.skeleton(got) == parity.skeleton(want) == returned
    assert all(map(torch.equal, parity._tensors(got), parity._tensors(want)))
    check = run_fdl("check", "--no-run", out.name, cwd=workdir)
    assert check.returncode == 0 and "check ok" in check.stdout, check.stdout + check.stderr


def test_a_named_tuple_returned_is_built_by_its_class(workdir):
    """fx records ``Pair(y, tanh(y))`` as a call of the class: the port makes the same type."""
    out = workdir / "n.py"
    report = port(workdir / "returns.py", "NamedOut", None, ["torch.randn(3, 4)"], out)
    assert report.written and report.parity.exact and report.opaque == []
    original = sys.modules["returns"].NamedOut()
    x = torch.randn(2, 4)
    got = load(out).from_torch(original)(x)
    assert parity.skeleton(got) == parity.skeleton(original(x)) == "Pair(tensor, tensor)"


def test_a_returned_structure_no_source_can_write_keeps_the_model_whole(workdir):
    out = workdir / "w.py"
    report = port(workdir / "returns.py", "ByScale", None, ["torch.randn(3, 4)"], out)
    assert report.written and report.parity.exact
    (opaque,) = report.opaque
    assert opaque.path == "" and "returns a structure other than values in tuples" in opaque.reason


def test_parity_refuses_a_port_returning_another_structure():
    """Equal tensors in another container are not the original's result: a caller unpacking
    or appending to it would see the difference."""

    class AsTuple(torch.nn.Module):
        def forward(self, x):
            return x * 2, x + 1

    class AsList(torch.nn.Module):
        def forward(self, x):
            return [x * 2, x + 1]

    examples = [Example(1, 0, (torch.randn(2, 3),))]
    found = parity.check(AsTuple(), AsList(), examples, lambda g, a: g(*a))
    assert not found.exact
    assert found.cases[0].error == (
        "the port returns [tensor, tensor] where the original returns (tensor, tensor)"
    )
    assert parity.check(AsTuple(), AsTuple(), examples, lambda g, a: g(*a)).exact


def test_settings_read_through_a_config_object_are_checked(workdir):
    out = workdir / "configured_flodl.py"
    report = port(workdir / "settings.py", "Configured", None, ["torch.randn(2, 3, 8)"], out)
    assert report.written and report.parity.exact and report.opaque == []
    assert report.settings == {"config.heads": 2}
    assert '"config": {"heads": 2},' in out.read_text()
    models = sys.modules["settings"]
    assert "__getattribute__" not in vars(models.Config)  # given back as it was
    ported = load(out)
    x = torch.randn(2, 5, 8)
    model = models.Configured()
    assert torch.equal(ported.from_torch(model)(x), model(x))
    four = models.Config(heads=4)
    with pytest.raises(ValueError, match=r"written for config\.heads=2 .* has config\.heads=4:"):
        ported.from_torch(models.Configured(four))
    with pytest.raises(ValueError, match=r"written for config\.heads=2"):
        ported.build(four)


def test_a_module_whose_forward_assigns_attributes_is_kept_whole_and_keeps_them(workdir):
    """``self.calls += 1`` and ``self.last_weights = w`` are state a graph does not keep: the
    module assigning them runs its own forward in the port (every copy of its class), so a
    caller reading them after a pass sees what the original shows. Tracing leaves the model
    as it was: no count of the tracer's runs, no traced or fake value."""
    out = workdir / "watching_flodl.py"
    report = port(workdir / "settings.py", "Watching", None, ["torch.randn(3, 4)"], out)
    assert report.written and report.parity.exact, report.to_dict()
    assert [(o.path, o.cls) for o in report.opaque] == [("first", "Watched"), ("second", "Watched")]
    assert report.opaque[0].reason.startswith(
        "its forward assigns self.calls: state a port's graph does not keep"
    )  # (self.last_weights alone would be written out: see the next test)
    models = sys.modules["settings"]
    original, twin = models.Watching(), models.Watching()
    twin.load_state_dict(original.state_dict())
    graph = load(out).from_torch(twin)
    for _ in range(2):
        x = torch.randn(2, 4)
        assert torch.equal(graph(x), original(x))
    assert twin.first.calls == twin.second.calls == 2
    assert torch.equal(twin.second.last_weights, original.second.last_weights)
    # the model traced keeps its own attributes
    model = models.Watching()
    assert trace.trace(model, 1, (torch.randn(3, 4),))[0] is not None
    assert model.first.calls == 0 and "last_weights" not in vars(model.first)


def test_what_a_forward_leaves_on_its_modules_is_written_out(workdir):
    """``self.last_attn = attn.detach()``, ``self.aux_loss = ...`` in blocks and llama2.c's
    ``self.last_loss = F.cross_entropy(...)`` on the model itself are outputs left for the
    caller, not state a next call reads: the port writes each with a ``Store`` step, so the
    forwards are written out, and after every call the module holds what the original's
    would (the parity proof compares them too). Porting leaves the model as it was."""
    out = workdir / "inspected_flodl.py"
    example = "(torch.randn(2, 6, 8), torch.randint(0, 5, (2, 6)))"
    report = port(workdir / "stored.py", "Inspected", None, [example], out)
    assert report.written and report.parity.exact and report.opaque == [], report.to_dict()
    text = out.read_text()
    assert '.through(Store(m.first, "last_attn"))' in text
    assert '.through(Store(m.second, "aux_loss"))' in text
    assert '.fork(Store(m, "last_loss"))\n        .using("cross_entropy")' in text
    assert {c["max_abs_diff"]["attributes"] for c in report.parity.to_dict()["cases"]} == {0.0}
    models = sys.modules["stored"]
    original, twin = models.Inspected(), models.Inspected()
    twin.load_state_dict(original.state_dict())
    assert "last_loss" not in vars(original)  # (porting another instance left none)
    graph = load(out).from_torch(twin)
    for _ in range(2):
        x, targets = torch.randn(3, 4, 8), torch.randint(0, 5, (3, 4))
        graph.train()
        assert torch.equal(graph(x, targets=targets), original(x, targets))
        assert torch.equal(twin.last_loss, original.last_loss)
        assert twin.last_loss.requires_grad  # the loss to train with, as the original's
        for block in ("first", "second"):
            mine, theirs = getattr(twin, block), getattr(original, block)
            assert torch.equal(mine.last_attn, theirs.last_attn)
            assert torch.equal(mine.aux_loss, theirs.aux_loss)
    twin.last_loss.backward()  # the stored loss trains the graph's weights
    assert twin.head.weight.grad is not None
    built = load(out).build()  # a graph of its own: its holder gets the values
    built(torch.randn(2, 6, 8), targets=torch.randint(0, 5, (2, 6)))
    (store,) = [
        s for s in built.modules() if type(s).__name__ == "Store" and s.attribute == "last_loss"
    ]
    assert store.owner[0].last_loss.shape == ()


def test_a_constant_a_forward_leaves_is_written_too(workdir):
    """llama2.c without targets: ``self.last_loss = None`` is a constant left on the model,
    written by ``Store(m, "last_loss", None)`` on every call (a loss an earlier call left is
    gone after it, as from the original); with targets, the loss."""
    out = workdir / "loss_left.py"
    report = port(workdir / "stored.py", "LossLeft", None, ["torch.randn(2, 3, 8)"], out)
    assert report.written and report.parity.exact and report.opaque == [], report.to_dict()
    assert '.fork(Store(m, "last_loss", None))' in out.read_text()
    model = sys.modules["stored"].LossLeft()
    model.last_loss = torch.tensor(1.0)  # what an earlier call with targets left
    graph = load(out).from_torch(model)
    x = torch.randn(4, 2, 8)
    assert torch.equal(graph(x), model.head(x)) and model.last_loss is None
    example = "(torch.randn(2, 3, 8), torch.randint(0, 5, (2, 3)))"
    out = workdir / "loss_left_targets.py"
    report = port(workdir / "stored.py", "LossLeft", None, [example], out)
    assert report.written and report.parity.exact and report.opaque == [], report.to_dict()
    graph = load(out).from_torch(model)
    targets = torch.randint(0, 5, (4, 2))
    graph(x, targets=targets)
    want = torch.nn.functional.cross_entropy(model.head(x).flatten(0, 1), targets.flatten())
    assert torch.equal(model.last_loss, want)


def test_state_a_next_call_reads_keeps_its_module_whole(workdir):
    """An attribute read before it is assigned (a running mean, ``self.h = self.h * 0.5 +
    ...``), looked for first (``if not hasattr(self, "scale")``, a value cached on the first
    call) or assigned twice in one forward is state, not an output: a graph writing it would
    compute the next call from the first call's trace. Those modules are kept whole; the
    block leaving an output beside them is written out. The port is traced from the model as
    constructed: what the check of the example inputs left (a scale cached) is taken back."""
    out = workdir / "stateful_flodl.py"
    report = port(workdir / "stored.py", "Stateful", None, ["torch.randn(2, 6, 8)"], out)
    assert report.written and report.parity.exact, report.to_dict()
    reasons = {o.path: o.reason for o in report.opaque}
    assert set(reasons) == {"decaying", "cached", "twice"}
    assert reasons["decaying"].startswith("its forward assigns self.h: state")
    assert reasons["cached"].startswith("its forward assigns self.scale: state")
    assert reasons["twice"].startswith("its forward assigns self.last: state")
    assert 'Store(m.attention, "last_attn")' in out.read_text()
    models = sys.modules["stored"]
    model = models.Stateful()  # before any call: no scale cached
    graph = load(out).from_torch(model)
    twin = models.Stateful()
    twin.load_state_dict(model.state_dict())
    for _ in range(3):  # the running mean and the cached scale carry over, as the original's
        x = torch.randn(2, 6, 8)
        assert torch.equal(graph(x), twin(x))
    assert torch.equal(model.decaying.h, twin.decaying.h)


def test_parity_compares_what_a_forward_leaves_on_its_modules(workdir):
    """A graph that computes the output but does not leave the tensor the original's forward
    assigns is not a port of it: the parity proof says so (``attributes``), and gives each
    side the model as it was."""
    sys.path.insert(0, str(workdir))
    import stored

    class Silent(torch.nn.Module):  # the same computation, nothing left behind
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, x):
            q, k = self.inner.qk(x).chunk(2, dim=-1)
            attn = (q @ k.transpose(-2, -1)).softmax(-1)
            return self.inner.proj(attn @ x)

    model = stored.Attention()
    examples = [Example(1, 0, (torch.randn(2, 3, 8),))]
    found = parity.check(model, Silent(model), examples, lambda g, a: g(*a))
    assert not found.exact and found.max_abs_diff == float("inf")
    assert {c.attributes for c in found.cases} == {float("inf")}
    assert {c.outputs for c in found.cases} == {0.0}
    assert "last_attn" not in vars(model) and "aux_loss" not in vars(model)
    assert parity.check(model, model, examples, lambda g, a: g(*a)).exact


def test_a_model_whose_own_forward_keeps_state_is_kept_whole(workdir):
    """The model itself counting its calls: nothing of its forward can be written out without
    losing the count, so the port is the model kept whole, with the reason."""
    report = port(workdir / "settings.py", "Counted", None, ["torch.randn(3, 4)"], None)
    assert report.parity.exact
    (whole,) = report.opaque
    assert whole.path == "" and whole.reason == (
        "its forward assigns self.calls: state a port's graph does not keep (kept whole, the "
        "model keeps it; return the value instead to port the forward)"
    )
    model = sys.modules["settings"].Counted()
    assert trace.trace(model, 1, (torch.randn(3, 4),)) == (None, [whole])
    assert model.calls == 0


def test_no_grad_regions_are_written_out_and_autocast_keeps_its_module_whole(workdir):
    """fx records a forward's operations, not the mode they run in. What runs under
    ``torch.no_grad()`` (by ``with`` or a decorated forward, in a block or in the model's own
    forward) is written out, each step wrapped to run in that mode (``NoGrad(m.teacher.fc)``):
    the teacher gets no gradient, as the original's. ``autocast(enabled=False)`` would compute
    in half precision under autocast: that module runs its own forward."""
    out = workdir / "distilled.py"
    report = port(workdir / "modes.py", "Distilled", None, ["torch.randn(3, 4)"], out)
    assert report.written and report.parity.exact, report.to_dict()
    (precise,) = report.opaque
    assert precise.path == "precise"
    assert precise.reason.startswith("its forward enters torch.autocast()")
    text = out.read_text()
    assert ".fork(NoGrad(m.teacher.fc))" in text and ".through(NoGrad(m.frozen.fc))" in text
    assert "with torch.no_grad():" in text
    model = sys.modules["modes"].Distilled()
    graph = load(out).from_torch(model)
    graph(torch.randn(3, 4)).sum().backward()
    assert model.student.weight.grad is not None
    assert model.teacher.fc.weight.grad is None and model.frozen.fc.weight.grad is None
    x = torch.randn(3, 4)
    with torch.autocast("cpu", dtype=torch.bfloat16):  # the float32 part stays float32
        assert torch.equal(graph(x), model(x))
    with torch.no_grad():  # a region ends as it began: the caller's mode is kept
        assert graph(x).grad_fn is None
    out = workdir / "student.py"
    report = port(workdir / "modes.py", "Student", None, ["torch.randn(3, 4)"], out)
    assert report.written and report.parity.exact and report.opaque == [], report.to_dict()
    student = sys.modules["modes"].Student()
    graph = load(out).from_torch(student)
    graph(torch.randn(3, 4)).sum().backward()
    assert student.online.weight.grad is not None and student.target.weight.grad is None


def test_a_no_grad_region_writing_into_parameters_keeps_its_module_whole(workdir):
    """An EMA update in the forward (``t.mul_(m).add_(o)`` over ``self.target.parameters()``
    under no_grad) writes into the weights for real while traced, and fx records none of it:
    a port written out would never move the target. Seen by the parameters' version counters,
    the module entering no_grad is kept whole, so the graph moves the target as the original
    does."""
    out = workdir / "averaged.py"
    report = port(workdir / "modes.py", "Averaged", None, ["torch.randn(3, 4)"], out)
    assert report.written and report.parity.exact, report.to_dict()
    (whole,) = report.opaque
    assert whole.path == "" and whole.reason.startswith("its forward enters torch.no_grad()")
    models = sys.modules["modes"]
    model, twin = models.Averaged(), models.Averaged()
    twin.load_state_dict(model.state_dict())
    graph = load(out).from_torch(twin)
    start = model.target.weight.detach().clone()
    for _ in range(2):
        x = torch.randn(3, 4)
        assert torch.equal(graph(x), model(x))
    assert torch.equal(twin.target.weight, model.target.weight)
    assert not torch.equal(twin.target.weight, start)  # moved, by the graph too


def test_enum_and_device_settings_are_checked(workdir):
    """``self.pool is Pool.MEAN`` decides a branch, ``device=self.device`` places a tensor: the
    port is written for both, imports the enum from the script, and refuses other values."""
    out = workdir / "pooled_flodl.py"
    report = port(workdir / "settings.py", "Pooled", None, ["torch.randn(2, 3, 4)"], out)
    assert report.written and report.parity.exact and report.opaque == [], report.to_dict()
    models = sys.modules["settings"]
    assert report.settings == {"pool": models.Pool.MEAN, "device": torch.device("cpu")}
    assert report.to_dict()["settings"] == {"pool": "Pool.MEAN", "device": "cpu"}
    assert "settings: pool=Pool.MEAN, device=device(type='cpu')" in render_report(report)
    text = out.read_text()
    assert "from settings import Pool" in text
    assert '"": {"pool": Pool.MEAN, "device": torch.device("cpu")},' in text
    ported = load(out)
    x = torch.randn(2, 3, 4)
    model = models.Pooled()
    assert torch.equal(ported.from_torch(model)(x), model(x))
    with pytest.raises(
        ValueError, match=r"written for pool=Pool\.MEAN .* has pool=Pool\.MAX: port again"
    ):
        ported.from_torch(models.Pooled(pool=models.Pool.MAX))
    with pytest.raises(ValueError, match=r"written for device=device\(type='cpu'\)"):
        ported.from_torch(models.Pooled(device="meta"))


def test_the_port_says_it_does_not_keep_activation_checkpointing(workdir):
    """fx records what a checkpointed block computes, not that it was to be recomputed: the
    port is exact but keeps every activation, and its note says whose forward checkpoints (by
    ``torch.utils.checkpoint.checkpoint`` or a partial of it, as transformers keeps one)."""
    out = workdir / "recomputed.py"
    report = port(workdir / "modes.py", "Recomputed", None, ["torch.randn(3, 4)"], out)
    assert report.written and report.parity.exact and report.opaque == [], report.to_dict()
    assert report.note == (
        "the forwards of the model and stack call torch.utils.checkpoint, which the port does not: "
        "the same values and gradients, but the graph keeps every activation for the backward "
        "(more memory in training)"
    )
    assert report.to_dict()["note"] == report.note and f"# Note: {report.note}." in out.read_text()
    assert (
        "checkpoint"
        not in port(workdir / "modes.py", "Distilled", None, ["torch.randn(3, 4)"], None).note
    )


def test_an_autograd_function_and_a_scripted_function_are_one_call_each(workdir):
    """fx traced into ``GradReverse.apply`` and lost its backward (parity refused the port),
    and could not pass traced values to a ``@torch.jit.script`` function (the model was kept
    whole). Each is now recorded as one call, imported from the script and called as the
    original does; torch's ``Function.apply`` and the script's globals are given back."""
    apply = vars(torch.autograd.Function)["apply"]
    out = workdir / "adversarial.py"
    report = port(workdir / "functions.py", "Adversarial", None, ["torch.randn(3, 4)"], out)
    assert report.written and report.parity.exact and report.opaque == [], report.to_dict()
    text = out.read_text()
    assert "from functions import GradReverse" in text and "GradReverse.apply(x, 0.5)" in text
    assert "from functions import scripted_gelu" in text
    assert vars(torch.autograd.Function)["apply"] is apply
    functions = sys.modules["functions"]
    assert isinstance(functions.scripted_gelu, torch.jit.ScriptFunction)
    model = functions.Adversarial()
    graph = load(out).from_torch(model)
    x = torch.randn(3, 4, requires_grad=True)
    graph(x)[1].sum().backward()
    reversed_grad = x.grad.clone()
    x.grad = None
    model(x)[1].sum().backward()
    assert torch.equal(reversed_grad, x.grad)
