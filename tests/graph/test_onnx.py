"""ONNX export of graphs, checked by running the file in onnxruntime against the graph:
``torch.onnx.export(graph, (x,), dynamo=True)`` records the graph with ``torch.export`` (the
default from torch 2.9); ``dynamo=False`` is the TorchScript-based exporter, which traces one call
as ``torch.jit.trace`` does. onnxruntime's kernels are not torch's, so outputs agree to float32
rounding, not bit for bit."""

from __future__ import annotations

import importlib.util
import inspect
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

import flodl as fl
from flodl._torch_release import TORCH_RELEASE
from tests.graph.helpers import halting_loop, traceable

ort = pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")  # both exporters write through it

pytestmark = pytest.mark.slow  # a few seconds per export
# torch.onnx's torch.export-based exporter (onnxscript writes its ONNX)
dynamo_exporter = pytest.mark.skipif(
    TORCH_RELEASE < (2, 6) or importlib.util.find_spec("onnxscript") is None,
    reason="the torch.export-based exporter needs torch 2.6 and onnxscript",
)


# The TorchScript-based exporter: the only one before torch 2.5 (no `dynamo` argument there)
LEGACY = {"dynamo": False} if "dynamo" in inspect.signature(torch.onnx.export).parameters else {}


def to_onnx(module: nn.Module, path: Path, args: tuple, **options) -> ort.InferenceSession:
    with warnings.catch_warnings():  # the exporter's own notes on what it decomposed
        warnings.simplefilter("ignore")
        torch.onnx.export(module, args, dynamo=True, **options).save(str(path))
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def close(ran: np.ndarray, eager: torch.Tensor) -> bool:
    return np.allclose(ran, eager.detach().numpy(), rtol=1e-5, atol=1e-5)


@dynamo_exporter
@pytest.mark.parametrize("name", list(traceable()))
def test_an_exported_graph_computes_in_onnxruntime_what_the_graph_does(name, tmp_path):
    torch.manual_seed(0)
    graph = traceable()[name].eval()
    x = torch.randn(3, 6)
    session = to_onnx(graph, tmp_path / "g.onnx", (x,))
    (ran,) = session.run(None, {session.get_inputs()[0].name: x.numpy()})
    assert ran.shape == tuple(graph(x).shape) and close(ran, graph(x))


@dynamo_exporter
def test_a_dynamic_batch_and_named_inputs_including_auxiliary_ones(tmp_path):
    torch.manual_seed(0)
    plain = fl.FlowBuilder(nn.Linear(4, 4)).through(nn.GELU()).build().eval()
    batch = torch.export.Dim("batch")
    session = to_onnx(
        plain,
        tmp_path / "plain.onnx",
        (torch.randn(2, 4),),
        dynamic_shapes={"args": ({0: batch},)},  # Graph.forward(*args, **kwargs)
        input_names=["input"],
        output_names=["output"],
    )
    ((name, (rows, cols)),) = [(i.name, i.shape) for i in session.get_inputs()]
    assert name == "input" and isinstance(rows, str) and cols == 4  # "batch" ("s0" on 2.6)
    x = torch.randn(7, 4)  # a batch the export never saw
    assert close(session.run(["output"], {"input": x.numpy()})[0], plain(x))

    # Auxiliary inputs with dynamic dims: torch cannot map dynamic_shapes onto **kwargs, so a
    # module with a named signature holds the graph (as docs/graph-builder.md shows).
    aux = fl.FlowBuilder(nn.Linear(4, 4)).input("ctx").through(torch.add).using("ctx").build()

    class Named(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.body = aux

        def forward(self, x, ctx):
            return self.body(x, ctx=ctx)

    session = to_onnx(
        Named().eval(),
        tmp_path / "aux.onnx",
        (torch.randn(2, 4), torch.randn(2, 4)),
        dynamic_shapes={"x": {0: batch}, "ctx": {0: batch}},
    )
    x, ctx = torch.randn(5, 4), torch.randn(5, 4)
    (ran,) = session.run(None, {"x": x.numpy(), "ctx": ctx.numpy()})
    assert close(ran, aux(x, ctx=ctx))


@dynamo_exporter
def test_a_stateful_graph_exports_with_its_state_in_and_out_through_explicit_state(tmp_path):
    torch.manual_seed(0)
    cell = (
        fl.FlowBuilder(nn.Linear(3, 3))
        .through(fl.nn.StateAdd())
        .using("h")
        .through(nn.Tanh())
        .tag("h")
        .build()
        .eval()
    )
    step = cell.explicit_state()
    x = torch.randn(2, 3)
    state = fl.ExplicitState.zeros(step(x)[1])
    session = to_onnx(step, tmp_path / "cell.onnx", (x,), kwargs={"state": state})
    names = [i.name for i in session.get_inputs()]
    assert len(names) == 2 and len(session.get_outputs()) == 2  # input and h; output and h
    h_ran, state_eager = state["h"].numpy(), state
    for _ in range(3):  # the sequence carried by the caller, in both
        xs = torch.randn(2, 3)
        out_ran, h_ran = session.run(None, {names[0]: xs.numpy(), names[1]: h_ran})
        out_eager, state_eager = step(xs, state=state_eager)
        assert close(out_ran, out_eager) and close(h_ran, state_eager["h"])
    assert cell._state == {"h": None}  # exporting the wrapper left the graph's own state alone


REFUSED = {  # what reads a value on the host, and what the note names
    "halting loop": (lambda: halting_loop(4), "halting condition"),
    "switch": (
        lambda: (
            fl.FlowBuilder(nn.Linear(4, 4))
            .switch(fl.nn.ArgmaxSelector(4, 2), nn.Linear(4, 4), nn.Linear(4, 4))
            .build()
        ),
        "added by .switch(...)",
    ),
}


@dynamo_exporter
@pytest.mark.parametrize("name", list(REFUSED))
def test_what_reads_the_host_does_not_export_and_the_error_names_its_node(name):
    make, named = REFUSED[name]
    caught: BaseException | None = None
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        try:
            torch.onnx.export(make().eval(), (torch.randn(2, 4),), dynamo=True)
        except Exception as err:  # torch.onnx wraps torch.export's error
            caught = err
    if caught is None:
        # torch 2.6's exporter falls back to a TorchScript trace when torch.export refuses: it
        # records the example's iterations or branch, and says so with TracerWarning (docs say
        # to heed it)
        assert TORCH_RELEASE < (2, 9)
        assert any(issubclass(w.category, torch.jit.TracerWarning) for w in seen)
        return
    notes = []
    while caught is not None:  # the exporter wraps torch.export's error, which carries the note
        notes += getattr(caught, "__notes__", [])
        caught = caught.__cause__
    assert any(named in n for n in notes), notes


def test_the_torchscript_exporter_traces_one_call_with_a_dynamic_batch(tmp_path):
    torch.manual_seed(0)
    graph = fl.FlowBuilder(nn.Linear(6, 6)).tag("h").through(nn.GELU()).also(nn.Linear(6, 6))
    graph = graph.build().eval()
    path = tmp_path / "legacy.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # its deprecation notice on newer torch
        torch.onnx.export(
            graph,
            (torch.randn(3, 6),),
            str(path),
            **LEGACY,
            input_names=["input"],
            dynamic_axes={"input": {0: "batch"}},
        )
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    assert [(i.name, i.shape) for i in session.get_inputs()] == [("input", ["batch", 6])]
    x = torch.randn(5, 6)
    assert close(session.run(None, {"input": x.numpy()})[0], graph(x))
