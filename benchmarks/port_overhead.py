"""What a mechanical port costs at run time: ``fdl port``'s graph vs the original nn.Module.

Each model of the port test suite (``tests/port/models``) is ported with ``fdl port`` (the
parity proof included), then a training step (forward, loss, backward, SGD step) of the
original and of ``from_torch(copy of the original)`` is timed with interleaved rounds, one
thread, the process CPU clock. ``ratio`` = port / original (1.00 = identical) and
``a_a_ratio`` = a second copy of the original against the first (the noise floor).
``port_s`` is the wall time of the ``fdl port`` call itself (trace, translate, parity, write).

Usage: ``python benchmarks/port_overhead.py [--quick | --smoke] [--rounds N] [--out DIR]``.
``--smoke`` runs each case once at tiny sizes (the test suite runs it): it measures nothing.
"""

from __future__ import annotations

import copy
import importlib.util
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from harness import interleaved, ratio, sgd_step, timing_options, write_report

from fdl.port.run import port

MODELS = Path(__file__).resolve().parent.parent / "tests" / "port" / "models"
# name -> (script, class, example input at a batch size b)
CASES: dict[str, tuple[str, str, Callable[[int], str]]] = {
    "cnn": ("cnn.py", "CNN", lambda b: f"torch.randn({b}, 3, 32, 32)"),
    "resnet": ("resnet.py", "ResNet", lambda b: f"torch.randn({b}, 3, 16, 16)"),
    "vae": ("vae.py", "VAE", lambda b: f"torch.rand({b}, 64)"),
    "lstm": ("lstm.py", "LSTMClassifier", lambda b: f"torch.randint(0, 50, ({b}, 20))"),
    "transformer": ("transformer.py", "EncoderBlock", lambda b: f"torch.randn({b}, 16, 32)"),
}


def _load(path: Path):
    spec = importlib.util.spec_from_file_location(f"bench_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main(argv: list[str] | None = None) -> list[dict[str, object]]:
    args = timing_options(argv, description=__doc__.splitlines()[0])
    batch = 2 if args.smoke else 16
    torch.set_num_threads(1)
    rows: list[dict[str, object]] = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for script in MODELS.glob("*.py"):
            shutil.copy(script, work / script.name)
        for name, (script, cls, example) in CASES.items():
            out = work / f"{name}_port.py"
            started = time.perf_counter()
            report = port(work / script, cls, None, [example(batch)], out)
            port_s = time.perf_counter() - started
            assert report.written and report.parity.exact, report.to_dict()
            torch.manual_seed(0)
            original = getattr(sys.modules[Path(script).stem], cls)()
            graph = _load(out).from_torch(copy.deepcopy(original))
            twin = copy.deepcopy(original)
            x = eval(example(batch), {"torch": torch})
            cases = {
                "original": sgd_step(original, x),
                "port": sgd_step(graph, x),
                "original_again": sgd_step(twin, x),
            }
            results = interleaved(
                cases, rounds=args.rounds, inner=args.inner, warmup=1, clock=time.process_time
            )
            rows.append(
                {
                    "model": name,
                    "original_ms": results["original"].median_s * 1e3,
                    "port_ms": results["port"].median_s * 1e3,
                    "ratio": ratio(results, "port", "original"),
                    "a_a_ratio": ratio(results, "original_again", "original"),
                    "port_s": port_s,
                }
            )
    notes = (
        f"port / original, same weights, training step, batch {batch}; median of per-round "
        f"medians over {args.rounds} interleaved rounds x {args.inner}; torch {torch.__version__}, "
        "CPU, 1 thread, process CPU clock. a_a_ratio = a second copy of the original against the "
        "first: the noise floor. port_s = wall time of the fdl port call (trace, translate, "
        "parity proof, write)."
    )
    if args.smoke:
        notes = f"SMOKE RUN (batch {batch}, 1 round): not a measurement."
    path = write_report("fdl port: the ported graph vs the original", rows, "port_overhead",
                        notes, args.out)  # fmt: skip
    print(path.read_text())
    return rows


if __name__ == "__main__":
    main(sys.argv[1:])
