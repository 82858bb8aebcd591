"""The typed node model: one kind enum, one frozen options class and one emit function per
kind; the stored form (pickles, structural hash) stays plain names and dicts; composites run
the same semantics inside and outside a graph."""

from __future__ import annotations

import dataclasses
import pickle

import pytest
import torch
from torch import nn

import flodl as fl
from flodl.graph.codegen import EMITTERS
from flodl.graph.composites import FOR_N, GATE_SUM, Gate, Loop, combine_gate
from flodl.graph.nodes import OPTIONS, LoopKind, LoopOptions, MapOptions, Node, NodeKind


class Sel(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x[:, 0] > 0).long()


def every_kind() -> fl.Graph:
    return (
        fl.FlowBuilder()
        .input("ctx")
        .through(nn.Linear(4, 4))
        .tag("a")
        .also(nn.Linear(4, 4))
        .split(nn.Linear(4, 4), nn.Tanh())
        .merge(fl.MergeOp.CAT(-1))
        .through(nn.Linear(8, 4))
        .loop_body(nn.Linear(4, 4))
        .for_n(2)
        .loop_body(nn.Linear(4, 4))
        .while_cond(fl.nn.ThresholdHalt(5.0), 3)
        .gate(fl.nn.SoftmaxRouter(4, 2), nn.Linear(4, 4), nn.Linear(4, 4))
        .switch(Sel(), nn.Linear(4, 4), nn.Tanh())
        .map(nn.Linear(2, 2))
        .slices(2)
        .through(fl.nn.StateAdd())
        .using("later")
        .tag("later")
        .through(nn.Unflatten(-1, (1, 4)))
        .scan(nn.GRUCell(4, 4), dim=1, final="h")
        .build()
    )


def test_every_kind_has_one_options_class_and_one_emit_function():
    assert set(OPTIONS) == set(NodeKind) == set(EMITTERS)
    assert all(cls.KIND is kind for kind, cls in OPTIONS.items())
    assert {n.kind for n in every_kind().nodes} == set(NodeKind)


def test_stored_options_are_plain_names_and_values():
    graph = every_kind()
    stored = {n.kind.value: n.serialized_options() for n in graph.nodes}
    assert stored["loop"] == {"kind": "while", "n": 3}  # the last loop of the chain
    assert stored["map"] == {"mode": "slices", "batched": False, "n": 2, "over": None}
    assert stored["merge"] == {"op": fl.MergeOp.CAT(-1)}
    assert stored["input"] == {"name": "ctx"}
    assert stored["gate"] == {"n": 2} and stored["switch"] == {"n": 2}
    assert stored["scan"] == {"dim": 1, "state": None}
    assert stored["identity"] == stored["add"] == stored["scan_state"] == {}
    assert graph.node("state_add_15").serialized_options() == {"writes_state": ["later"]}
    assert all(type(k) is str for n in graph.nodes for k in n.serialized_options())
    assert type(stored["loop"]["kind"]) is str and type(stored["map"]["mode"]) is str


def test_a_pickled_node_holds_no_typed_classes_and_loads_typed():
    graph = every_kind()
    data = pickle.dumps(graph.nodes)
    for name in (b"NodeKind", b"LoopOptions", b"LoopKind", b"MapMode", b"Options"):
        assert name not in data
    state = graph.node("loop_10").__getstate__()
    assert type(state["kind"]) is str and state["options"] == {"kind": "for_n", "n": 2}
    back = pickle.loads(data)
    assert back == graph.nodes
    assert back[9].opts(LoopOptions).kind is LoopKind.FOR_N
    clone = pickle.loads(pickle.dumps(graph))
    assert clone.structural_hash() == graph.structural_hash()
    assert type(clone.module_of("loop_10").kind) is LoopKind


def test_a_node_in_the_untyped_stored_form_loads():
    node = Node.__new__(Node)
    node.__setstate__(
        {
            "id": "map_3",
            "kind": "map",
            "method": "each",
            "site": None,
            "inputs": ["linear_2"],
            "refs": [],
            "tags": [],
            "options": {
                "mode": "each",
                "batched": True,
                "n": 0,
                "over": None,
                "writes_state": ["t"],
            },
            "attr": "map_3",
            "branch": None,
        }
    )
    assert node.kind is NodeKind.MAP and node.writes_state == ["t"]
    assert node.opts(MapOptions).batched is True


def test_options_are_typed_frozen_and_checked():
    node = every_kind().node("loop_10")
    with pytest.raises(TypeError, match="node 'loop_10' is a loop node, not a map node"):
        node.opts(MapOptions)
    with pytest.raises(dataclasses.FrozenInstanceError):
        node.options.n = 5  # type: ignore[misc]
    with pytest.raises(ValueError, match="sometimes"):
        LoopOptions("sometimes", 3)  # type: ignore[arg-type]


def test_generated_for_n_and_gate_are_filled_from_the_composite_definitions():
    graph = fl.FlowBuilder().loop_body(nn.Linear(3, 3)).for_n(2).build()
    filled = FOR_N.fill(
        state="v_loop_2", x="input", free="", i="_i_loop_2", n="2", step="_b_loop_2(v_loop_2)"
    )
    assert "\n".join("    " * (2 + i) + text for i, text, _ in filled) in graph.code
    gate = fl.FlowBuilder().gate(nn.Linear(3, 2), nn.Linear(3, 3), nn.Linear(3, 3)).build()
    names = "_o0_gate_2, _o1_gate_2"
    filled = GATE_SUM.fill(
        out="v_gate_2", stacked="_s_gate_2", outs=names, free=f"del {names}", weights="_w_gate_2"
    )
    assert "\n".join("    " * (2 + i) + text for i, text, _ in filled) in gate.code


def test_a_loop_and_a_gate_compute_the_same_inside_and_outside_a_graph():
    torch.manual_seed(0)
    body = nn.Linear(3, 3)
    graph = fl.FlowBuilder().loop_body(body).for_n(3).build()
    x = torch.randn(2, 3)
    assert torch.equal(graph(x), Loop(body, LoopKind.FOR_N, 3)(x))
    router, experts = nn.Sequential(nn.Linear(3, 2), nn.Softmax(-1)), [nn.Linear(3, 3)] * 2
    in_graph = fl.FlowBuilder().gate(router, *experts).build()
    assert torch.equal(in_graph(x), Gate(router, experts)(x))
    outs = [e(x) for e in experts]
    expected = outs[0] * router(x)[:, :1] + outs[1] * router(x)[:, 1:]
    assert torch.allclose(combine_gate(outs, router(x)), expected)


class FailsSecond(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        if self.calls == 2:
            raise ValueError("boom")
        return x

    def reset(self) -> None:  # a reset keeps the loop from being unrolled
        self.calls = 0


def looped(body: nn.Module, kind: str, cond: nn.Module | None = None) -> fl.Graph:
    b = fl.FlowBuilder().loop_body(body)
    never = cond if cond is not None else fl.nn.Fn(lambda x: x.sum() * 0 - 1)
    if kind == "for_n":
        return b.for_n(3).build()
    return (b.while_cond(never, 3) if kind == "while" else b.until_cond(never, 3)).build()


@pytest.mark.parametrize("kind", ["for_n", "while", "until"])
@pytest.mark.parametrize("reset", [True, False])
def test_an_iteration_failure_names_the_same_iteration_on_both_paths(reset, kind):
    body = FailsSecond()
    if not reset:
        body.reset = None  # type: ignore[assignment,method-assign]
    graph = looped(body, kind)
    # Without a reset or a trace the generated forward writes the loop out; else Loop.run runs it.
    assert ("for _i_loop_2" in graph.code) is not reset
    assert (".run(" in graph.code) is reset
    with pytest.raises(ValueError, match="boom") as info:
        graph(torch.ones(1))
    bound = "" if kind == "for_n" else "at most "
    assert f"loop_2 (Loop; iteration 2 of {bound}3)" in info.value.__notes__[0]


@pytest.mark.parametrize("kind", ["while", "until"])
@pytest.mark.parametrize("reset", [True, False])
def test_a_halting_condition_failure_names_its_iteration_on_both_paths(reset, kind):
    body = nn.Identity()
    if reset:
        body.reset = lambda: None  # type: ignore[method-assign]
    calls = []

    def cond(x: torch.Tensor) -> torch.Tensor:
        calls.append(1)
        if len(calls) == 2:
            raise ValueError("bad verdict")
        return x.sum() * 0 - 1

    graph = looped(body, kind, fl.nn.Fn(cond))
    with pytest.raises(ValueError, match="bad verdict") as info:
        graph(torch.ones(1))
    assert "loop_2 (Loop; halting condition at iteration 2)" in info.value.__notes__[0]


@pytest.mark.parametrize("kind", ["while", "until"])
def test_halting_is_the_same_written_out_and_run_by_the_loop(kind):
    # Per-sample verdicts (halted samples keep their state) and a whole-batch verdict.
    torch.manual_seed(0)
    body = nn.Linear(3, 3)
    per_sample = fl.nn.Fn(lambda x: x[:, 0])
    whole = fl.nn.Fn(lambda x: x.mean() - 0.3)
    x = torch.randn(5, 3)
    for cond in (per_sample, whole):
        graph = looped(body, kind, cond)
        assert ".run(" not in graph.code
        loop = Loop(body, LoopKind(kind), 3, cond)
        assert torch.equal(graph(x), loop(x))


def test_the_structural_hash_is_computed_when_first_asked_then_kept():
    from torch.nn.utils.parametrizations import weight_norm

    def make() -> fl.Graph:
        return fl.FlowBuilder(nn.Linear(3, 3)).through(nn.ReLU()).build()

    asked, late = make(), make()
    kept = asked.structural_hash()
    assert kept == make().structural_hash()  # same architecture, same hash
    weight_norm(asked.module_of("linear_1"))
    assert asked.structural_hash() == kept  # fixed once asked
    assert asked.short_hash() == kept[:8]
    weight_norm(late.module_of("linear_1"))  # changed before anyone asked: the hash says so
    assert late.structural_hash() != kept


@pytest.mark.parametrize("direct", ["1", "0"])
def test_a_gate_frees_its_experts_outputs_once_combined(direct, monkeypatch):
    # as a hand-written gate's list of outputs goes once stacked: kept to the end of the pass,
    # they raised the peak memory of a training step by all of the experts' outputs
    import weakref

    monkeypatch.setenv("FLODL_DIRECT_DISPATCH", direct)
    made: list[weakref.ref] = []
    alive: list[int] = []

    def expert(x):
        out = x * 2
        made.append(weakref.ref(out))
        return out

    def after(x):
        alive.append(sum(r() is not None for r in made))
        return x

    graph = (
        fl.FlowBuilder()
        .gate(nn.Sequential(nn.Linear(3, 2), nn.Softmax(-1)), fl.nn.Fn(expert), fl.nn.Fn(expert))
        .through(fl.nn.Fn(after))
        .build()
    )
    graph(torch.randn(2, 3, requires_grad=True)).sum().backward()
    assert len(made) == 2 and alive == [0]


def _peak_bytes(run) -> int:
    """Peak bytes allocated during ``run()`` above those live before, from the allocator's own
    records (deterministic: no timing)."""
    from torch.profiler import ProfilerActivity, profile

    run()  # warm: anything allocated once is allocated before the profile
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        run()
    events = sorted(
        (e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"),
        key=lambda e: e.start_ns(),
    )
    live = peak = 0
    for e in events:
        live += e.nbytes()
        peak = max(peak, live)
    return peak


def test_a_gate_peaks_at_the_memory_of_the_same_gate_written_by_hand():
    torch.manual_seed(0)
    router = fl.nn.SoftmaxRouter(64, 8)
    experts = [nn.Sequential(nn.Linear(64, 64), nn.GELU()) for _ in range(8)]
    graph = fl.FlowBuilder().gate(router, *experts).build()
    x = torch.randn(16, 64)

    def by_hand() -> torch.Tensor:
        w = router(x)
        outs = torch.stack([e(x) for e in experts], dim=1)
        return (outs * w.unsqueeze(-1)).sum(dim=1)

    assert torch.equal(graph(x), by_hand())
    assert _peak_bytes(lambda: graph(x)) == _peak_bytes(by_hand)


@pytest.mark.parametrize("kind", ["for_n", "until_cond"])
def test_a_loop_lets_its_input_go_as_the_same_loop_written_by_hand(kind):
    # `x = body(x)` by hand frees the input on the first iteration; a loop node held it to the
    # end of the loop: one activation more at inference
    from flodl.graph.composites import halt_verdict, keep_halted

    torch.manual_seed(0)
    entry, body, cond = nn.Linear(64, 64), nn.Linear(64, 64), fl.nn.ThresholdHalt(1e9)
    b = fl.FlowBuilder(entry).loop_body(body)
    graph = (b.for_n(4) if kind == "for_n" else b.until_cond(cond, 4)).build()
    x = torch.randn(32, 64)

    def by_hand() -> torch.Tensor:  # per-sample halting: halted rows keep their state
        h, done = entry(x), None
        for i in range(4):
            h = body(h) if done is None else keep_halted(done, h, body(h))
            if kind == "until_cond" and i < 3:
                stop, done = halt_verdict(cond(h), h, done)
                if stop:
                    break
        return h

    with torch.no_grad():
        assert torch.equal(graph(x), by_hand())
        assert _peak_bytes(lambda: graph(x)) == _peak_bytes(by_hand)
