"""Showcase: every FlowBuilder method in one coherent graph, trained, observed, profiled,
drawn and checkpointed.

    python examples/showcase.py [--out DIR]    # FLODL_SMOKE=1 for a 2-epoch check

Builder methods: ``FlowBuilder(entry)``, ``FlowBuilder()``, ``input``, ``tag``, ``through``,
``using`` (a backward ref, a keyword ref, a forward ref for state across calls, a tag group),
``fork``, ``split``, ``tag_group``, ``merge``, ``also``, ``also_with``, ``map`` with ``slices``,
``each``, ``over`` and ``batched``, ``loop_body`` with ``for_n``, ``while_cond`` and
``until_cond``, ``gate``, ``switch``, ``label``, ``internal`` and ``build``; sub-graphs used as
steps, branches and loop bodies.

Graph methods: forward with an auxiliary input, ``tagged``, ``collect`` / ``record_scalar`` /
``end_epoch``, ``trend``, ``end_step`` (truncated BPTT), ``reset_state``, ``train`` / ``eval``,
``freeze`` / ``thaw`` and ``paths``, ``enable_profiling`` / ``profile``, ``summary``, ``dot`` /
``svg``, ``save_checkpoint`` / ``load_checkpoint``; the Monitor's HTML report.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
from torch import nn

import flodl as fl

EPOCHS = fl.smoke.SMOKE_EPOCHS if fl.smoke.smoke_enabled() else 40
H = 16  # width of the stream


def ffn(label: str | None = None) -> fl.Graph:
    """A reusable block: Linear -> GELU -> LayerNorm, as its own graph."""
    builder = fl.FlowBuilder(nn.Linear(H, H)).through(nn.GELU()).through(nn.LayerNorm(H))
    return (builder.label(label) if label else builder).build()


class Blend(nn.Module):
    """Mixes the stream with the auxiliary ``ctx`` input (a keyword ref)."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = nn.Linear(4, H)

    def forward(self, x: torch.Tensor, ctx: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(self.gate(ctx))


class Attend(nn.Module):
    """Adds a projection of an earlier value (a positional backward ref)."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(H, H)

    def forward(self, x: torch.Tensor, earlier: torch.Tensor) -> torch.Tensor:
        return x + self.proj(earlier)


class PoolHeads(nn.Module):
    """Receives a tag group: the list of every head's value."""

    def forward(self, x: torch.Tensor, heads: list[torch.Tensor]) -> torch.Tensor:
        return x + torch.stack(heads).mean(0)


class Rows(nn.Module):
    """[B, H] <-> [B, 2, H/2]: an element axis for map(...).each()."""

    def __init__(self, split: bool) -> None:
        super().__init__()
        self.split = split

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.reshape(x.shape[0], 2, H // 2) if self.split else x.reshape(x.shape[0], H)


class PerRow(nn.Module):
    """Applied by map(...).each() to one sample's [2, H/2] block at a time."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(H // 2, H // 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.linear(x))


def build_showcase() -> fl.Graph:
    return (
        fl.FlowBuilder(nn.Linear(8, H))  # the entry step
        .input("ctx")  # an auxiliary graph input: model(x, ctx=...)
        .tag("entry")
        .through(Blend())
        .using(ctx="ctx")  # keyword ref to the input
        .fork(nn.Linear(H, 1))  # a side branch: runs, observed, the stream goes on unchanged
        .tag("aux")
        .split(ffn(), ffn(), nn.Linear(H, H))  # three parallel heads...
        .tag_group("heads")  # ...named heads_0, heads_1, heads_2
        .merge(fl.MergeOp.MEAN)
        .through(PoolHeads())
        .using("heads")  # a tag group: one list argument
        .also(nn.Linear(H, H))  # residual: x + f(x)
        .also_with(nn.Linear(H, H), ffn())  # residual with a projected skip: skip(x) + main(x)
        .through(Attend())
        .using("entry")  # positional backward ref
        .through(ffn("block"))  # a labelled sub-graph as a step: a child at path "block"
        .map(nn.Linear(2, 2))
        .slices(H // 2)  # the last dim in 8 slices of 2
        .through(Rows(split=True))
        .map(PerRow())
        .each()  # per sample: [2, H/2] blocks
        .tag("rows")
        .map(PerRow())
        .batched()
        .over("rows")  # over a tagged value, the whole batch in one call
        .through(Rows(split=False))
        .loop_body(ffn())
        .for_n(2)  # a sub-graph as the body, twice, shared weights
        .tag("refined")
        .gate(fl.nn.SoftmaxRouter(H, 2), nn.Linear(H, H), ffn())  # soft mixture of experts
        .using("refined")  # the router also sees the refined value
        .switch(fl.nn.ArgmaxSelector(H, 2), nn.Linear(H, H), ffn())  # hard routing per sample
        .through(fl.nn.StateAdd())  # x + the value "memory" had at the end of the last call
        .using("memory")  # a forward ref: state across calls
        .tag("memory")
        .loop_body(nn.Sequential(nn.Linear(H, H), nn.Tanh()))
        .while_cond(fl.nn.ThresholdHalt(50.0), 3)  # checked before each pass: 0..3 runs
        .loop_body(nn.Sequential(nn.Linear(H, H), nn.Tanh()))
        .until_cond(fl.nn.LearnedHalt(H), 3)  # checked after each pass: 1..3 runs
        .tag("_scratch")  # a leading underscore: internal already
        .through(nn.Linear(H, 1))
        .tag("prediction")
        .internal("aux")  # hidden from graphs that compose this one
        .label("showcase")
        .build()
    )


def main(argv: list[str] | None = None) -> float:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("example-output/showcase"))
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    fl.manual_seed(0)

    model = build_showcase()
    x, ctx = torch.randn(256, 8), torch.randn(256, 4)
    y = (x[:, :4] * ctx).sum(1, keepdim=True).tanh()
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-3)
    schedule = fl.optim.CosineScheduler(2e-3, 1e-5, EPOCHS)
    monitor = fl.Monitor(EPOCHS)
    monitor.save_html(args.out / "training.html")
    monitor.watch(model)
    for epoch in range(EPOCHS):
        began = time.perf_counter()
        model.train()
        model.reset_state()  # "memory" starts from zeros every epoch
        fl.optim.set_lr(optimizer, schedule.lr(epoch))
        for batch in torch.randperm(len(x)).split(32):
            out = model(x[batch], ctx=ctx[batch])
            loss = nn.functional.mse_loss(out, y[batch])
            aux = model.tagged("aux").pow(2).mean()  # the fork's side branch
            optimizer.zero_grad()
            (loss + 0.01 * aux).backward()
            fl.optim.clip_grad_norm(model.parameters(), 1.0)
            optimizer.step()
            model.end_step()  # keep "memory", cut its autograd history (truncated BPTT)
            model.record_scalar("loss", loss)
            model.collect("refined")
        model.end_epoch()
        monitor.log(epoch, time.perf_counter() - began, model)
    monitor.finish()

    print("\nlabel paths:", ", ".join(p for p in model.paths() if "." not in p)[:160], "...")
    frozen = model.freeze("block")
    print(f"freeze('block'): {frozen} parameters; thaw: {model.thaw('block')}")
    print(f"trend of 'refined': slope {model.trend('refined').slope():.4f}")

    model.eval()
    model.reset_state()  # "memory" was shaped by the training batches
    model.enable_profiling()
    with torch.no_grad():
        model(x[:8], ctx=ctx[:8])
    profile = model.profile()
    slowest = max(profile.names(), key=profile.timing)
    print(f"profile: {len(profile.names())} timed names, slowest {slowest!r}")
    model.disable_profiling()

    (args.out / "showcase.dot").write_text(model.dot())
    try:
        model.svg(args.out / "showcase.svg")
        drawn = "showcase.svg"
    except fl.GraphvizError as err:  # Graphviz's `dot` is optional
        drawn = f"no SVG ({err})"
    print(f"drew the graph: showcase.dot, {drawn}")
    print(model.summary().splitlines()[0])

    model.reset_state()
    path = args.out / "showcase.fdl"
    model.save_checkpoint(path)
    restored = build_showcase()
    restored.load_checkpoint(path)
    restored.eval()
    with torch.no_grad():
        same = torch.equal(restored(x[:8], ctx=ctx[:8]), model(x[:8], ctx=ctx[:8]))
    print(f"checkpoint round-trip identical: {same}")
    if not same:
        raise SystemExit("checkpoint round-trip changed the model")
    return model.trend("loss").last()


if __name__ == "__main__":
    main()
