"""torch's Transformer encoder in a FlowBuilder graph vs on its own: same weights, same run.

Ported models often hold an ``nn.TransformerEncoderLayer`` or an ``nn.TransformerEncoder`` (a
stack of them) as one step. Each model here is timed on its own (``plain``), as the only step of
a graph built from a deep copy (``flodl``), and as a second copy on its own (``A/A``, the noise
floor), interleaved, one thread, process CPU clock:

* ``forward_b1``: eval mode, ``torch.no_grad()``, batch 1 x 16 tokens: inference, where
  ``forward`` takes its fused fast path (``torch._transformer_encoder_layer_fwd``) after some
  30 checks in Python;
* ``train``: a training step (forward, loss, backward, SGD step), batch 8 x 16 tokens.

``ratio`` = flodl / plain (< 1: the graph is faster), ``a_a_ratio`` = A/A / plain.

Usage: ``python benchmarks/encoder_overhead.py [--quick | --smoke] [--rounds N] [--out DIR]``.
``--smoke`` runs each case once at tiny sizes (the test suite runs it): it measures nothing.
"""

from __future__ import annotations

import copy
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from harness import interleaved, ratio, sgd_step, timing_options, write_report

import flodl as fl

TOKENS = 16


def _layer(width: int) -> nn.TransformerEncoderLayer:
    return nn.TransformerEncoderLayer(width, 4, 4 * width, batch_first=True)


# name -> (factory, width)
MODELS: dict[str, tuple[Callable[[int], nn.Module], int]] = {
    "layer d64": (_layer, 64),
    "stack d64 x4": (lambda w: nn.TransformerEncoder(_layer(w), 4, enable_nested_tensor=False), 64),
    "stack d256 x4": (
        lambda w: nn.TransformerEncoder(_layer(w), 4, enable_nested_tensor=False),
        256,
    ),
}


def _forward(model: nn.Module, x: torch.Tensor) -> Callable[[], None]:
    def run() -> None:
        with torch.no_grad():
            model(x)

    return run


def main(argv: list[str] | None = None) -> list[dict[str, object]]:
    args = timing_options(argv, description=__doc__.splitlines()[0])
    torch.set_num_threads(1)
    rows = []
    for name, (make, width) in MODELS.items():
        width = 8 if args.smoke else width
        for mode_name, batch, timed in (("forward_b1", 1, _forward), ("train", 8, sgd_step)):
            torch.manual_seed(0)
            plain = make(width)
            models = {"plain": plain, "A/A": copy.deepcopy(plain)}
            models["flodl"] = fl.FlowBuilder(copy.deepcopy(plain)).build()
            for model in models.values():
                model.train(mode_name == "train")
            x = torch.randn(batch, TOKENS, width)
            if mode_name == "forward_b1":
                with torch.no_grad():  # the same function: the graph changes no result
                    assert torch.equal(models["flodl"](x), plain(x)), name
            cases = {case: timed(model, x) for case, model in models.items()}
            results = interleaved(
                cases, rounds=args.rounds, inner=args.inner, clock=time.process_time
            )
            rows.append(
                {
                    "model": name,
                    "mode": mode_name,
                    "plain_ms": results["plain"].median_s * 1e3,
                    "flodl_ms": results["flodl"].median_s * 1e3,
                    "ratio": ratio(results, "flodl", "plain"),
                    "a_a_ratio": ratio(results, "A/A", "plain"),
                }
            )
            print(rows[-1], flush=True)
    smoke = "SMOKE RUN (tiny sizes, one round: checks the script, measures nothing); "
    path = write_report(
        "torch's Transformer encoder in a graph vs on its own (CPU, one thread)",
        rows,
        "encoder_overhead",
        f"{smoke if args.smoke else ''}{TOKENS} tokens; forward_b1: batch 1, eval, no_grad; "
        f"train: batch 8, forward + backward + SGD step; median of per-round medians over "
        f"{args.rounds} interleaved rounds of {args.inner} (process CPU time); ratio = flodl / "
        "plain, a_a_ratio = a second copy / the first",
        results_dir=args.out,
    )
    print(path.read_text())
    return rows


if __name__ == "__main__":
    main(sys.argv[1:])
