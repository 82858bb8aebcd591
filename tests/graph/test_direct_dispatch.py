"""Direct dispatch: the generated forward calls steps' ``forward`` without ``nn.Module.__call__``
only while nothing can tell; results are bit-identical to the ordinary path, and every way of
observing the call path (hooks, instance forwards, parametrizations, ...) falls back to it."""

from __future__ import annotations

import ast
import copy
import pickle
import warnings

import pytest
import torch
from torch import nn
from torch.nn.utils import parametrize

import flodl as fl
from flodl.graph import dispatch
from tests.graph.helpers import AddRef, direct_source, whole_tree_direct

# ---------------------------------------------------------------- models covering every node kind


def block(dim: int = 6) -> fl.Graph:
    return fl.FlowBuilder(nn.Linear(dim, dim)).through(nn.GELU()).through(nn.LayerNorm(dim)).build()


class Attend(nn.Module):
    """A step receiving a keyword ref (not a known type: reached through ordinary calls)."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(6, 6)

    def forward(self, x: torch.Tensor, ctx: torch.Tensor) -> torch.Tensor:
        return self.proj(x) + ctx


def every_kind() -> fl.Graph:
    """module, Fn, also (nested graph), split/merge, gate, for_n loop, until loop, switch-free
    refs (keyword, and positional into MHA), Select, Param, scan."""
    refine = fl.FlowBuilder().also(block()).build()
    mha = nn.MultiheadAttention(6, 2, batch_first=True)
    attn = fl.FlowBuilder().tag("q").through(mha).using(key="q", value="q")
    return (
        fl.FlowBuilder(nn.Linear(6, 6))
        .tag("first")
        .through(torch.tanh)
        .also(block())
        .split(nn.Linear(6, 6), block())
        .merge(fl.MergeOp.MEAN)
        .gate(fl.nn.SoftmaxRouter(6, 3), block(), block(), block())
        .loop_body(refine)
        .for_n(3)
        .loop_body(block())
        .until_cond(fl.nn.ThresholdHalt(100.0), 3)
        .loop_body(block())
        .while_cond(fl.nn.ThresholdHalt(100.0), 2)
        .through(Attend())
        .using(ctx="first")
        .through(fl.nn.Param(6, init=nn.init.normal_))
        .through(nn.Unflatten(-1, (1, 6)))
        .also(attn.through(fl.nn.Select(0)).build())
        .scan(nn.GRUCell(6, 6), dim=1)
        .through(fl.nn.Select((slice(None), -1)))
        .through(nn.Linear(6, 3))
        .build()
    )


def ordinary_twin(graph: fl.Graph, monkeypatch) -> fl.Graph:
    """A copy of ``graph`` rebuilt with direct dispatch switched off."""
    monkeypatch.setenv("FLODL_DIRECT_DISPATCH", "0")
    twin = copy.deepcopy(graph)  # deepcopy re-installs the forward: now without a direct variant
    monkeypatch.delenv("FLODL_DIRECT_DISPATCH")
    assert twin._direct_plan is None
    return twin


def direct_now(graph: fl.Graph) -> bool:
    """The graph's own steps run directly (nested graphs' perhaps through their ``forward``)."""
    plan = graph._direct_plan
    if plan is None:
        return False
    return dispatch.direct_ok(plan)


def test_direct_path_is_bit_identical_on_every_node_kind(monkeypatch):
    torch.manual_seed(0)
    graph = every_kind()
    twin = ordinary_twin(graph, monkeypatch)
    assert direct_now(graph)
    # every nested graph takes the direct path too
    assert all(direct_now(child) for child in graph.children_graphs().values())
    opts = [torch.optim.Adam(g.parameters(), lr=1e-2) for g in (graph, twin)]
    for step in range(3):
        x = torch.randn(4, 6)
        outs = []
        for g, opt in zip((graph, twin), opts, strict=True):
            out = g(x)
            loss = out.square().mean()
            opt.zero_grad()
            loss.backward()
            outs.append((out, [p.grad.clone() for p in g.parameters() if p.grad is not None]))
            opt.step()
        assert torch.equal(outs[0][0], outs[1][0]), step
        assert len(outs[0][1]) == len(outs[1][1]) > 20
        assert all(torch.equal(a, b) for a, b in zip(outs[0][1], outs[1][1], strict=True))
    for a, b in zip(graph.parameters(), twin.parameters(), strict=True):
        assert torch.equal(a, b)


def test_the_direct_variant_calls_forward_and_the_ordinary_one_calls_the_module():
    graph = fl.FlowBuilder(nn.Linear(2, 2)).through(torch.relu).through(nn.Softplus()).build()
    assert "_m['linear_1'](input)" in graph.code  # graph.code shows the ordinary variant
    assert "_m['relu_2'](v_linear_1)" in graph.code  # an Fn step too: its hooks fire
    direct = graph._direct_forward().__code__.co_filename
    import linecache

    source = "".join(linecache.cache[direct][2])
    assert "_m['relu_2'].fn(v_linear_1)" in source
    assert "_m['softplus_3'].forward(v_relu_2)" in source  # a layer not written out
    # a layer written out as its functional call, with its own parameters
    assert "_F.linear(input, (_q := _m['linear_1']._parameters)['weight'], _q['bias'])" in source


def test_train_eval_and_batchnorm_statistics_match(monkeypatch):
    torch.manual_seed(0)
    graph = (
        fl.FlowBuilder(nn.Linear(4, 4)).through(nn.BatchNorm1d(4)).through(nn.Dropout(0.5)).build()
    )
    twin = ordinary_twin(graph, monkeypatch)
    x = torch.randn(8, 4)
    for train in (True, False):
        graph.train(train)
        twin.train(train)
        torch.manual_seed(1)
        a = graph(x)
        torch.manual_seed(1)
        b = twin(x)
        assert torch.equal(a, b)
    assert torch.equal(graph.batchnorm1d_2.running_mean, twin.batchnorm1d_2.running_mean)


def test_autocast_gives_the_same_result(monkeypatch):
    graph = fl.FlowBuilder(nn.Linear(4, 4)).through(nn.GELU()).through(nn.Linear(4, 2)).build()
    twin = ordinary_twin(graph, monkeypatch)
    x = torch.randn(3, 4)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        a, b = graph(x), twin(x)
    assert a.dtype == torch.bfloat16 and torch.equal(a, b)


def test_deepcopy_pickle_and_state_dict_keep_their_own_plan():
    graph = fl.FlowBuilder(nn.Linear(2, 2)).also(block(2)).build()
    for clone in (copy.deepcopy(graph), pickle.loads(pickle.dumps(graph))):
        assert list(clone.state_dict()) == list(graph.state_dict())
        assert direct_now(clone)
        pairs = zip(clone._direct_plan.modules, graph._direct_plan.modules, strict=True)
        assert all(m is not n for m, n in pairs)
        seen: list[int] = []
        clone.linear_1.register_forward_hook(lambda *a, seen=seen: seen.append(1))
        clone(torch.ones(1, 2))
        assert seen == [1]
        assert direct_now(graph)  # the original is untouched by the clone's hook


# ---------------------------------------------------------------- fallback triggers

# (description, where the module sits) -> a function returning the module to observe
SITES = {
    "top-level step": lambda g: g.linear_1,
    "nested graph (also)": lambda g: g.graph_2,
    "step inside a nested graph": lambda g: g.graph_2.linear_1,
    "for_n loop body": lambda g: g.loop_4.body,
    "step inside a loop body": lambda g: g.loop_4.body.graph_2.linear_1,
    "gate router": lambda g: g.gate_5.router,
    "step inside the gate router": lambda g: g.gate_5.router.proj,
    "gate expert": lambda g: g.gate_5.experts[1],
    "step inside a gate expert": lambda g: g.gate_5.experts[1].linear_1,
    "scan cell": lambda g: g.grucell_7,
    "halting loop body": lambda g: g.loop_8.body,
    "halting condition": lambda g: g.loop_8.cond,
}


def sites_model() -> fl.Graph:
    refine = fl.FlowBuilder().also(block(4)).build()
    return (
        fl.FlowBuilder(nn.Linear(4, 4))
        .also(block(4))
        .loop_body(refine)
        .for_n(2)
        .gate(fl.nn.SoftmaxRouter(4, 2), block(4), block(4))
        .through(nn.Unflatten(-1, (2, 2)))
        .scan(nn.GRUCell(2, 3), dim=1)
        .loop_body(nn.Linear(3, 3))
        .until_cond(nn.Sequential(nn.Linear(3, 1), fl.nn.Fn(lambda h: h.mean() - 1e4)), 2)
        .build()
    )


@pytest.fixture
def model():
    torch.manual_seed(0)
    graph = sites_model()
    assert direct_now(graph)
    return graph


def run(graph: fl.Graph) -> torch.Tensor:
    out = graph(torch.randn(2, 4))
    out.sum().backward()
    return out


@pytest.mark.parametrize("site", list(SITES))
@pytest.mark.parametrize("kind", ["forward", "forward_pre", "full_backward", "full_backward_pre"])
def test_a_hook_registered_after_build_fires(model, site, kind):
    if site == "halting condition" and "backward" in kind:
        pytest.skip("a verdict is read on the host (.item()): no gradient flows through it")
    module = SITES[site](model)
    calls = []
    handle = getattr(module, f"register_{kind}_hook")(lambda *a: calls.append(kind))
    run(model)
    assert calls, f"{kind} hook on the {site} did not fire"
    handle.remove()
    assert whole_tree_direct(model)  # removing the hook restores the whole direct path


@pytest.mark.parametrize("site", ["top-level step", "step inside a nested graph", "gate expert"])
def test_a_hook_registered_before_build_fires(site):
    torch.manual_seed(0)
    calls = []
    hooked = nn.Linear(4, 4)
    hooked.register_forward_hook(lambda *a: calls.append(1))
    if site == "top-level step":
        graph = fl.FlowBuilder(hooked).build()
    elif site == "step inside a nested graph":
        graph = fl.FlowBuilder(nn.Identity()).also(fl.FlowBuilder(hooked).build()).build()
    else:
        graph = fl.FlowBuilder().gate(fl.nn.SoftmaxRouter(4, 2), hooked, nn.Linear(4, 4)).build()
    graph(torch.randn(1, 4))
    assert calls == [1]


@pytest.mark.parametrize("kind", ["forward", "forward_pre", "full_backward", "full_backward_pre"])
def test_global_module_hooks_fire_on_every_step(model, kind):
    register = getattr(nn.modules.module, f"register_module_{kind}_hook")
    seen: list[type] = []
    handle = register(lambda module, *a: seen.append(type(module)))
    try:
        assert not direct_now(model)
        run(model)
    finally:
        handle.remove()
    assert nn.GRUCell in seen and nn.LayerNorm in seen
    assert direct_now(model)


@pytest.mark.parametrize("site", list(SITES))
def test_an_instance_forward_replacement_is_called(model, site):
    module = SITES[site](model)
    original = module.forward
    calls = []

    def wrapped(*args, **kwargs):  # what accelerate's hooks do
        calls.append(1)
        return original(*args, **kwargs)

    module.forward = wrapped
    run(model)
    assert calls
    del module.forward
    assert direct_now(model)


def test_a_compiled_step_is_not_bypassed(model):
    step = model.graph_2.linear_1
    step.compile()  # lazy: sets the module's compiled call path, compiles on the first call
    assert step._compiled_call_impl is not None and not direct_now(model.graph_2)
    calls = []

    def compiled(*args, **kwargs):  # stands in for the compiled callable (no compile here)
        calls.append(1)
        return step._call_impl(*args, **kwargs)

    step._compiled_call_impl = compiled
    run(model)
    assert calls == [1]


def test_replacing_a_step_after_build_is_seen(model):
    calls = []
    new = nn.Linear(4, 4)
    new.register_forward_hook(lambda *a: calls.append(1))
    model.graph_2.linear_1 = new
    run(model)
    assert calls == [1]


class Doubled(nn.Module):
    def forward(self, w: torch.Tensor) -> torch.Tensor:
        return 2 * w


def test_parametrized_steps_fall_back_and_compute_the_same(model, monkeypatch):
    twin = ordinary_twin(model, monkeypatch)
    x = torch.randn(2, 4)
    for g in (model, twin):
        parametrize.register_parametrization(g.graph_2.linear_1, "weight", Doubled())
    assert not direct_now(model.graph_2) and direct_now(model)
    assert torch.equal(model(x), twin(x))


@pytest.mark.parametrize(
    "apply",
    [
        pytest.param(torch.nn.utils.parametrizations.weight_norm, id="parametrization"),
        pytest.param(torch.nn.utils.weight_norm, id="legacy-pre-hook"),
    ],
)
def test_weight_norm_falls_back(apply):
    torch.manual_seed(0)
    graph = fl.FlowBuilder(nn.Linear(4, 4)).through(nn.Linear(4, 2)).build()
    plain = nn.Sequential(copy.deepcopy(graph.linear_1), copy.deepcopy(graph.linear_2))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # the legacy form is deprecated
        apply(graph.linear_2)
        apply(plain[1])
    assert not direct_now(graph)
    with torch.no_grad():  # make the norm matter: the weight is recomputed from g and v
        for m in (graph.linear_2, plain[1]):
            g = (
                m.parametrizations.weight.original0
                if hasattr(m, "parametrizations")
                else m.weight_g
            )
            g.mul_(3)
    x = torch.randn(3, 4)
    assert torch.equal(graph(x), plain(x))
    assert not torch.equal(graph(x), nn.functional.linear(graph.linear_1(x), plain[1].weight / 3))


class LoudLinear(nn.Linear):
    calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        LoudLinear.calls += 1
        return super().forward(x) + 1


def test_a_subclass_overriding_forward_is_called_through_its_module():
    LoudLinear.calls = 0
    graph = fl.FlowBuilder(LoudLinear(2, 2)).through(nn.ReLU()).build()
    # not a known type: keeps its ordinary call; the ReLU after it is called directly
    assert graph._direct_plan.callees == [graph.relu_2] and direct_now(graph)
    seen = []
    graph.loudlinear_1.register_forward_hook(lambda *a: seen.append(1))
    assert direct_now(graph)  # its own __call__ runs the hook: nothing to fall back for
    out = graph(torch.zeros(1, 2))
    assert LoudLinear.calls == 1 and seen == [1]
    assert torch.equal(out, torch.relu(graph.loudlinear_1.bias + 1).unsqueeze(0))


def test_jit_trace_takes_the_ordinary_path():
    graph = fl.FlowBuilder(nn.Linear(3, 3)).through(nn.Tanh()).build()
    x = torch.randn(2, 3)
    traced = torch.jit.trace(graph, x)
    assert torch.equal(traced(x), graph(x))


def test_the_environment_switch_turns_direct_dispatch_off(monkeypatch):
    monkeypatch.setenv("FLODL_DIRECT_DISPATCH", "0")
    graph = fl.FlowBuilder(nn.Linear(2, 2)).build()
    assert graph._direct_plan is None and graph(torch.ones(1, 2)).shape == (1, 2)


@pytest.mark.slow
def test_torch_compile_matches_eager():
    torch.manual_seed(0)
    graph = fl.FlowBuilder(nn.Linear(4, 4)).through(nn.GELU()).also(block(4)).build()
    x = torch.randn(2, 4)
    compiled = torch.compile(graph, backend="eager")
    torch.testing.assert_close(compiled(x), graph(x), rtol=0, atol=0)


# Run in a child process that leaves with os._exit once it has checked: gloo's process-group
# destructor, run when DDP's reducer is freed, sometimes never joins its worker threads (a
# torch/gloo teardown race), and a hang there would stop the whole test session.
_DDP_CHILD = """
import copy, os, sys
import torch
import torch.distributed as dist
from torch import nn
import flodl as fl

torch.manual_seed(0)
block = fl.FlowBuilder(nn.Linear(4, 4)).through(nn.GELU()).through(nn.LayerNorm(4)).build()
graph = fl.FlowBuilder(nn.Linear(4, 4)).also(block).build()
os.environ["FLODL_DIRECT_DISPATCH"] = "0"
twin = copy.deepcopy(graph)  # rebuilt without a direct variant
del os.environ["FLODL_DIRECT_DISPATCH"]
assert graph._direct_plan is not None and twin._direct_plan is None
dist.init_process_group("gloo", init_method="file://" + sys.argv[1], rank=0, world_size=1)
ddp = nn.parallel.DistributedDataParallel(graph)
x = torch.randn(3, 4)
ddp(x).sum().backward()
twin(x).sum().backward()
pairs = list(zip(graph.parameters(), twin.parameters(), strict=True))
print("grads equal" if all(torch.equal(a.grad, b.grad) for a, b in pairs) else "grads differ")
sys.stdout.flush()
os._exit(0)
"""


def run_child(script: str, *args: str, direct: str | None = None) -> str:
    """Run ``script`` in a fresh Python on this checkout; its stdout (it must exit 0).
    ``direct``: FLODL_DIRECT_DISPATCH for the child (None: unset)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": root}
    env.pop("FLODL_DIRECT_DISPATCH", None)
    if direct is not None:
        env["FLODL_DIRECT_DISPATCH"] = direct
    done = subprocess.run(
        [sys.executable, "-c", script, *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.slow
def test_distributed_data_parallel_single_rank(tmp_path):
    stdout = run_child(_DDP_CHILD, str(tmp_path / "store"))
    # torch before 2.11 has gloo print a line of its own when the group forms
    printed = [line for line in stdout.splitlines() if not line.startswith("[Gloo]")]
    assert printed == ["grads equal"]


@pytest.mark.slow
def test_torch_compile_traces_the_graph_without_breaks():
    graph = fl.FlowBuilder(nn.Linear(4, 4)).through(nn.GELU()).also(block(4)).build()
    explained = torch._dynamo.explain(graph)(torch.randn(2, 4))
    assert explained.graph_break_count == 0 and explained.graph_count == 1


# torch raises this warning once per process (TORCH_WARN_ONCE): one child per case
_WARNING_CHILD = """
import warnings
import torch
from torch import nn
import flodl as fl

graph = fl.FlowBuilder(nn.Conv1d(2, 2, 4, padding="same")).build()  # even kernel: a warning
with warnings.catch_warnings(record=True) as seen:
    warnings.simplefilter("always")
    warnings.filterwarnings("ignore", module="torch")
    graph(torch.randn(1, 2, 8))
print([w.filename for w in seen if "padding='same'" in str(w.message)])
"""


@pytest.mark.slow
@pytest.mark.parametrize("direct", ["1", "0"])
def test_a_kernel_warning_names_the_generated_forward_unless_direct_dispatch_is_off(direct):
    # as docs/graph-builder.md says: a filter on torch's module matches only the ordinary path
    shown = ast.literal_eval(run_child(_WARNING_CHILD, direct=direct).strip())  # not filtered
    if direct == "1":
        assert len(shown) == 1 and shown[0].startswith("<flodl graph direct forward #")
    else:
        assert shown == []  # attributed to torch/nn/modules/conv.py: filtered


# ---------------------------------------------------------------- forward_named steps


def named_steps() -> dict[str, tuple[fl.Graph, nn.Module]]:
    """A step, a gate router and a loop body called with refs through ``forward_named``."""
    state_add = fl.nn.StateAdd()
    router = fl.nn.SoftmaxRouter(4, 2)
    body = AddRef()
    return {
        "step": (fl.FlowBuilder().through(state_add).using("m").tag("m").build(), state_add),
        "gate router": (
            fl.FlowBuilder(nn.Linear(4, 4))
            .tag("e")
            .gate(router, nn.Linear(4, 4), nn.Linear(4, 4))
            .using("e")
            .build(),
            router,
        ),
        "loop body": (
            fl.FlowBuilder(nn.Linear(4, 4)).tag("e").loop_body(body).for_n(2).using("e").build(),
            body,
        ),
    }


@pytest.mark.parametrize("site", ["step", "gate router", "loop body"])
@pytest.mark.parametrize("direct", ["1", "0"])
def test_a_forward_named_step_called_with_refs_runs_its_hooks(site, direct, monkeypatch):
    monkeypatch.setenv("FLODL_DIRECT_DISPATCH", direct)
    torch.manual_seed(0)
    graph, module = named_steps()[site]
    twin = copy.deepcopy(graph)
    x = torch.randn(2, 4)
    assert torch.equal(graph(x), twin(x))
    seen = []
    pre = module.register_forward_pre_hook(lambda m, args: seen.append(("pre", type(args[1]))))
    post = module.register_forward_hook(lambda m, args, out: seen.append(("post", type(out))))
    out = graph(x)
    assert seen and seen[:2] == [("pre", dict), ("post", torch.Tensor)]
    assert torch.equal(out, twin(x))  # same values through __call__
    assert "forward" not in vars(module)  # the stand-in forward is gone
    pre.remove()
    post.remove()
    seen.clear()
    assert torch.equal(graph(x), twin(x)) and seen == []
    if direct == "1":  # no hook: the direct forward calls a known type's forward_named itself
        called = "_named(" if site == "loop body" else ".forward_named("  # AddRef: not known
        assert direct_now(graph) and called in direct_source(graph)


def test_a_pre_hook_can_change_what_forward_named_receives():
    state_add = fl.nn.StateAdd()
    graph = fl.FlowBuilder().through(state_add).using("m").tag("m").build()
    state_add.register_forward_pre_hook(lambda m, args: (args[0] * 10, args[1]))
    x = torch.ones(1, 2)
    assert graph(x).tolist() == [[10.0, 10.0]]
    assert graph(x).tolist() == [[20.0, 20.0]]


_FSDP_CHILD = """
import sys
import torch
import torch.distributed as dist
from torch import nn
import flodl as fl

try:
    from torch.distributed.fsdp import fully_shard
except ImportError:  # FSDP2 is public from torch 2.6 on
    print("no fully_shard")
    sys.exit(0)
torch.manual_seed(0)
router = fl.nn.SoftmaxRouter(4, 2)
graph = fl.FlowBuilder(nn.Linear(4, 4)).tag("e").gate(router, nn.Linear(4, 4), nn.Linear(4, 4))
graph = graph.using("e").build()
dist.init_process_group("gloo", init_method="file://" + sys.argv[1], rank=0, world_size=1)
fully_shard(router)  # its pre-forward hook gathers the router's parameters
fully_shard(graph)
graph(torch.randn(2, 4)).sum().backward()
print("trained")
sys.stdout.flush()
import os
os._exit(0)
"""


@pytest.mark.slow
def test_fully_shard_a_router_called_with_refs(tmp_path):
    printed = run_child(_FSDP_CHILD, str(tmp_path / "store")).splitlines()
    assert [line for line in printed if not line.startswith("[Gloo]")][-1:] in (
        ["trained"],
        ["no fully_shard"],
    )


def _mode_shift(x, *, training):
    return x + 1.0 if training else x - 1.0


def _mode_mix(x, extra, *, training):
    return x + extra if training else x - extra


def test_a_step_passed_the_mode_follows_train_and_eval_on_every_path():
    # fl.nn.Fn(f, pass_training=True): the direct variant passes the Fn's own mode too
    first = nn.Linear(2, 2)
    graph = (
        fl.FlowBuilder(first)
        .tag("h")
        .through(fl.nn.Fn(_mode_shift, pass_training=True))
        .through(fl.nn.Fn(_mode_mix, pass_training=True))
        .using("h")
        .build()
    )
    import linecache

    source = "".join(linecache.cache[graph._direct_forward().__code__.co_filename][2])
    assert "_m['mode_shift_2'].fn(v_linear_1, training=_m['mode_shift_2'].training)" in source
    x = torch.randn(3, 2)
    h = first(x)
    assert torch.equal(graph(x), (h + 1.0) + h)
    assert torch.equal(graph.eval()(x), (h - 1.0) - h)
    seen = []
    graph.module_of("mode_shift_2").register_forward_hook(lambda m, a, out: seen.append(m.training))
    assert torch.equal(graph(x), (h - 1.0) - h) and seen == [False]  # the hooked call path
    assert torch.equal(graph.train()(x), (h + 1.0) + h) and seen == [False, True]
    # the mode counts as passed when refs are checked: one ref too many is still an error
    too_many = fl.FlowBuilder(nn.Linear(2, 2)).tag("h")
    with pytest.raises(fl.GraphBuildError, match="does not accept them"):
        too_many.through(fl.nn.Fn(_mode_shift, pass_training=True)).using("h").build()
