"""The graph_overhead models as straight-line torch calls: how fast any Python framework could be.

A FlowBuilder graph calls the same torch ops as the hand-written model (that is what keeps it
bit-exact), so the most it can save is the hand-written model's Python *between* those calls:
``nn.Module.__call__``, each ``forward``, argument checks. This script measures that bound.

It records every torch call the plain model's Python makes, at the outermost level (a
``TorchFunctionMode``: ``F.linear``, ``torch.layer_norm``, ``Tensor.__add__``, ``torch._VF.lstm``
...; not the calls torch makes inside them), then writes them out as one generated function of
consecutive calls, each on the recorded arguments (parameters, the input, earlier results),
and times it against the plain model and the flodl graph in the same interleaved rounds. The
replay is checked bit-exact against the plain model before anything is timed.

* ``floor`` = replay / plain: the ratio of a framework that made exactly the calls the
  hand-written code makes, with nothing between them. It is no hard limit: a framework may call
  a cheaper entry point than the one the model's code calls (``torch.layer_norm`` instead of
  ``F.layer_norm``'s Python wrapper), and flodl does where it is exact. But a goal well below it
  needs faster kernels, and faster kernels change the numbers (the bit-exact contract).
* ``taken`` = (1 - ratio) / (1 - floor): the share of the removable time flodl removes (above 1:
  more than the replay, through cheaper entry points).

The replay is valid for the input it was recorded on (a data-dependent loop runs the recorded
number of iterations: ``feedback_adaptive``'s row is the replay of its 10 iterations, with the
halt checks' ``.item()`` calls kept). While recording, ``torch.overrides.has_torch_function`` is
told nothing overrides torch (the mode would make it say so), so ``nn.MultiheadAttention`` takes
the same fused inference path as the unrecorded model; the ``F`` functions keep their own
references and are recorded as usual.

Per model, two modes as in ``graph_overhead.py``: ``train`` (forward, loss, zero_grad,
backward, Adam, ``loss.item()``: only the forward is replayed) and ``forward_b1`` (batch 1,
``no_grad``, eval).

Usage: ``python benchmarks/straight_line.py [--small] [--models a,b] [--rounds N] [--quick |
--smoke] [--out DIR]``. Report: ``straight_line`` (``straight_line_small``).
"""

from __future__ import annotations

import copy
import math
import statistics
import sys
import time
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

sys.path.insert(0, str(Path(__file__).resolve().parent))
from graph_overhead import MODEL_NAMES, Model, chosen_models, forward_only, suite, train_step
from harness import interleaved, ratio, timing_options, timing_parser, write_report

_LITERALS = (bool, int, str, type(None))


class _Recorder(TorchFunctionMode):
    """Every outermost torch call made while active: (function, args, kwargs, result)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any], Any]] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        kwargs = kwargs or {}
        result = func(*args, **kwargs)  # the mode is off inside: nested calls are not recorded
        self.calls.append((func, args, kwargs, result))
        return result


@contextmanager
def _fast_paths_kept():
    """``torch.overrides.has_torch_function`` says no while recording: modules that check it
    to choose a fused path (``nn.MultiheadAttention``) choose as they do unrecorded."""
    real = torch.overrides.has_torch_function
    torch.overrides.has_torch_function = lambda args: False  # type: ignore[assignment]
    try:
        yield
    finally:
        torch.overrides.has_torch_function = real  # type: ignore[assignment]


def record(model: nn.Module, x: torch.Tensor) -> Callable[[torch.Tensor], Any]:
    """``model``'s torch calls on ``x`` (run once, in the current grad mode) as a generated
    function of ``x``: the same calls on the same parameters, nothing between them."""
    recorder = _Recorder()
    with _fast_paths_kept(), recorder:
        out = model(x)
    names: dict[int, str] = {id(x): "x"}  # every recorded tensor stays alive: ids stay unique
    consts: list[Any] = []
    funcs: list[Callable[..., Any]] = []

    def const(value: Any) -> str:
        consts.append(value)
        return f"c[{len(consts) - 1}]"

    def render(value: Any) -> str:
        if isinstance(value, torch.Tensor):
            return names.get(id(value)) or const(value)
        if isinstance(value, float):
            return repr(value) if math.isfinite(value) else const(value)
        if isinstance(value, _LITERALS):
            return repr(value)
        if type(value) in (tuple, list):
            inner = ", ".join(render(v) for v in value)
            return f"({inner},)" if type(value) is tuple else f"[{inner}]"
        return const(value)  # slices, dtypes, sizes, ...

    lines = []
    for i, (func, args, kwargs, result) in enumerate(recorder.calls):
        funcs.append(func)
        call = ", ".join(
            [*(render(a) for a in args), *(f"{k}={render(v)}" for k, v in kwargs.items())]
        )
        if isinstance(result, torch.Tensor):
            names[id(result)] = f"v{i}"
            lines.append(f"    v{i} = f{i}({call})")
        elif isinstance(result, tuple) and any(isinstance(r, torch.Tensor) for r in result):
            targets = []
            for j, r in enumerate(result):
                targets.append(f"v{i}_{j}")
                if isinstance(r, torch.Tensor):
                    names[id(r)] = f"v{i}_{j}"
            lines.append(f"    {', '.join(targets)}, = f{i}({call})")
        else:  # a query (.dim(), .item(), ...): made, its value already baked in
            lines.append(f"    f{i}({call})")
    if not isinstance(out, torch.Tensor) or id(out) not in names:
        raise ValueError("the model's output is not a tensor its recorded calls made")
    source = "def replay(x):\n" + "\n".join(lines) + f"\n    return {names[id(out)]}\n"
    scope: dict[str, Any] = {f"f{i}": f for i, f in enumerate(funcs)} | {"c": consts}
    exec(compile(source, f"<{type(model).__name__} replayed>", "exec"), scope)
    replay = scope["replay"]
    replay.funcs = funcs  # type: ignore[attr-defined]
    # The recorded tensors (and, in training, the recording pass's autograd graph) are let go
    # here: they kept the ids unique while the names were given, and the replay needs none.
    return replay


class Replayed(nn.Module):
    """A module running ``replay`` (the recorded calls on ``model``'s own parameters)."""

    def __init__(self, model: nn.Module, replay: Callable[[torch.Tensor], Any]) -> None:
        super().__init__()
        self.model = model  # its parameters: the optimizer's, and the replay's
        self.replay = replay

    def forward(self, x: torch.Tensor) -> Any:
        return self.replay(x)


def replayed(model: nn.Module, x: torch.Tensor, *, train: bool) -> Replayed:
    """``model`` recorded on ``x``, checked bit-exact against it."""
    with torch.set_grad_enabled(train):
        replay = record(model, x)
        want, got = model(x), replay(x)
    if not torch.equal(want, got):
        raise AssertionError(f"{type(model).__name__}: the replay's output differs")
    return Replayed(model, replay)


def measure(name: str, spec: Model, rounds: int, inner: int, warmup: int) -> list[dict[str, Any]]:
    rows = []
    for mode in ("train", "forward_b1"):
        train = mode == "train"
        torch.manual_seed(0)
        original = spec.plain()
        plain, graph = copy.deepcopy(original), spec.graph(copy.deepcopy(original))
        straight = copy.deepcopy(original)
        x, y = spec.data(spec.batch if train else 1)
        if not train:
            for m in (plain, graph, straight):
                m.eval()
        line = replayed(straight, x, train=train)
        sides = {"plain": plain, "flodl": graph, "replay": line}
        if train:
            cases = {key: train_step(m, spec, x, y) for key, m in sides.items()}
        else:
            cases = {key: forward_only(m, x) for key, m in sides.items()}
        results = interleaved(
            cases, rounds=rounds, inner=inner, warmup=warmup, clock=time.process_time
        )
        floor = ratio(results, "replay", "plain")
        flodl = ratio(results, "flodl", "plain")
        row = {
            "model": name,
            "mode": mode,
            "calls": len(line.replay.funcs),  # type: ignore[attr-defined]
            "plain_ms": results["plain"].median_s * 1e3,
            "replay_ms": results["replay"].median_s * 1e3,
            "floor": floor,
            "ratio": flodl,
            "taken": (1 - flodl) / (1 - floor) if floor < 1 else float("nan"),
        }
        rows.append(row)
        print(
            f"{name:17s} {mode:10s} plain {row['plain_ms']:8.3f} ms  replay "
            f"{row['replay_ms']:8.3f} ms ({row['calls']} calls)  floor {floor:.3f}  flodl "
            f"{flodl:.3f}",
            flush=True,
        )
    return rows


def summary(rows: list[dict[str, Any]]) -> str:
    def median(mode: str, key: str) -> float:
        picked = [r[key] for r in rows if r["mode"] == mode and r["model"] != "feedback_adaptive"]
        return statistics.median(picked) if picked else float("nan")

    return (
        "Median over the models (feedback_adaptive left out, as graph_overhead's goal counts "
        f"them): forward_b1 floor {median('forward_b1', 'floor'):.3f}, flodl "
        f"{median('forward_b1', 'ratio'):.3f}; train floor {median('train', 'floor'):.3f}, flodl "
        f"{median('train', 'ratio'):.3f}."
    )


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    parser = timing_parser(__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="graph_overhead's small tier")
    parser.add_argument("--models", default=",".join(MODEL_NAMES))
    args = timing_options(argv, parser)
    names = chosen_models(parser, args.models)
    torch.set_num_threads(1)
    models = suite(smoke=args.smoke, small=args.small)
    rows: list[dict[str, Any]] = []
    for name in names:
        rows += measure(name, models[name], args.rounds, args.inner, 1 if args.smoke else 2)
    notes = (
        f"plain = the hand-written model, flodl = its FlowBuilder graph, replay = the plain "
        f"model's torch calls replayed as straight-line code (see the module docstring); median "
        f"of per-round medians over {args.rounds} interleaved rounds x {args.inner}, process CPU "
        f"time, 1 thread, torch {torch.__version__}. floor = replay / plain; ratio = flodl / "
        "plain; taken = (1 - ratio) / (1 - floor); calls = torch calls per forward. "
        + ("Small tier. " if args.small else "CPU sizes. ")
        + summary(rows)
    )
    if args.smoke:
        notes = "SMOKE RUN (toy sizes, 1 round): not a measurement."
    stem = "straight_line_small" if args.small else "straight_line"
    title = "The models as straight-line torch calls: the floor for a Python framework" + (
        " (small tier)" if args.small else ""
    )
    path = write_report(title, rows, stem, notes, args.out)
    print(path.read_text())
    return rows


if __name__ == "__main__":
    main(sys.argv[1:])
