"""How often ``fdl port`` proves a random data flow exact: code nobody wrote with a layout in mind.

Each model is generated from its seed: 5 to 10 values over a ``(B, 4)`` input, each one of a
linear layer, an activation (``torch.relu``, ``F.gelu``, ``.sigmoid()``, ``F.softmax``), ``+``
``-`` ``*`` of earlier values (two or three), a layer on a concatenation, a gated ``chunk``, an
in-place write (``t.add_(v)``), a dropout, a bilinear layer (whose stream may be its second
argument), a layer norm; with ``--writes`` also item assignments (``t[:, 1] = v[:, 3]``, a
masked ``t[v > 0] = 0.0``) and a ``torch.zeros(x.shape[0], 4)`` filled in slices; with ``--ops``
also tensor operations real forwards use (``torch.where``, ``masked_fill``, slices joined by
``torch.cat``, ``torch.stack``, reshapes and transposes, ``F.normalize``, a free parameter read
directly, ``@`` with one). The forward
returns the last value or the last two. Values may go
unread, as in real code (a layer called for its effects). Each is ported by ``fdl port --json`` in
a fresh process (one thread) with one example input drawn under seeds 0 and 1. A row says what
came out: ``exact`` (written, bit-exact in eval and train mode on both draws), ``whole`` (exact,
kept as one opaque step), ``refused`` (a difference was found: nothing written) or ``error``.

Usage: ``python benchmarks/port_random.py [--start S] [--count N] [--writes] [--ops] [--out DIR]``
(default seeds 0 to 99; a seed gives the same model on every run, and without ``--writes`` and
``--ops`` the same model it gave before those options existed).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import write_report

FDL = [sys.executable, "-m", "fdl"]
KINDS = ["linear", "linear", "activation", "binary", "binary", "cat", "chunk", "in_place",
         "dropout", "bilinear", "norm", "sum3"]  # fmt: skip
ACTIVATIONS = ["torch.relu({a})", "torch.tanh({a})", "F.gelu({a})", "{a}.sigmoid()",
               "F.softmax({a}, dim=-1)"]  # fmt: skip
WRITE_KINDS = ["assign", "masked", "filled"]
OP_KINDS = ["where", "masked_fill", "slices", "stack", "reshape", "normalize", "scale", "matmul"]


def model_source(seed: int, writes: bool = False, ops: bool = False) -> str:
    """The script defining ``class M`` for ``seed`` (the same text on every run); ``writes``:
    item assignments and a tensor factory among the operations; ``ops``: more tensor
    operations."""
    rng = random.Random(seed)
    kinds = KINDS + (WRITE_KINDS if writes else []) + (OP_KINDS if ops else [])
    layers: list[str] = []
    body = ["        v0 = x"]
    values = ["v0"]
    for i in range(rng.randint(5, 10)):
        kind = rng.choice(kinds)
        a, b, c = (rng.choice(values) for _ in range(3))
        if kind == "linear":
            layers.append(f"self.l{i} = nn.Linear(4, 4)")
            expr = f"self.l{i}({a})"
        elif kind == "activation":
            expr = rng.choice(ACTIVATIONS).format(a=a)
        elif kind == "binary":
            expr = f"{a} {rng.choice(['+', '-', '*'])} {b}"
        elif kind == "cat":
            layers.append(f"self.p{i} = nn.Linear(8, 4)")
            expr = f"self.p{i}(torch.cat([{a}, {b}], dim=1))"
        elif kind == "chunk":
            layers.append(f"self.q{i} = nn.Linear(4, 8)")
            body.append(f"        h{i}, g{i} = self.q{i}({a}).chunk(2, dim=1)")
            expr = f"h{i} * torch.sigmoid(g{i})"
        elif kind == "in_place":
            body += [f"        t{i} = {a} * 1.5", f"        t{i}.add_({b})"]
            expr = f"t{i}"
        elif kind == "dropout":
            layers.append(f"self.d{i} = nn.Dropout(0.3)")
            expr = f"self.d{i}({a})"
        elif kind == "bilinear":
            layers.append(f"self.b{i} = nn.Bilinear(4, 4, 4)")
            expr = f"self.b{i}({a}, {b})"
        elif kind == "assign":  # a * 1.5 keeps nothing for its backward: a write is legal
            body += [
                f"        t{i} = {a} * 1.5",
                f"        t{i}[:, {rng.randrange(4)}] = {b}[:, 3]",
            ]
            expr = f"t{i}"
        elif kind == "masked":
            body += [f"        t{i} = {a} * 1.5", f"        t{i}[{b} > 0] = 0.0"]
            expr = f"t{i}"
        elif kind == "filled":
            body += [
                f"        z{i} = torch.zeros(x.shape[0], 4)",
                f"        z{i}[:, :2] = {a}[:, 2:]",
            ]
            expr = f"z{i} + {b}"
        elif kind == "where":
            expr = f"torch.where({a} > 0, {a}, {b})"
        elif kind == "masked_fill":
            expr = f"{a}.masked_fill({b} < 0, 0.0)"
        elif kind == "slices":
            expr = f"torch.cat([{a}[:, :2], {b}[:, 2:]], dim=1)"
        elif kind == "stack":
            expr = f"torch.stack([{a}, {b}, {c}], dim=0).mean(0)"
        elif kind == "reshape":
            expr = f"{a}.reshape(-1, 2, 2).transpose(1, 2).reshape({a}.shape[0], 4)"
        elif kind == "normalize":
            expr = f"F.normalize({a}, dim=-1)"
        elif kind == "scale":
            layers.append(f"self.s{i} = nn.Parameter(torch.rand(4) + 0.5)")
            expr = f"{a} * self.s{i}"
        elif kind == "matmul":
            layers.append(f"self.w{i} = nn.Parameter(torch.randn(4, 4) / 2)")
            expr = f"{a} @ self.w{i}"
        elif kind == "norm":
            layers.append(f"self.n{i} = nn.LayerNorm(4)")
            expr = f"self.n{i}({a})"
        else:
            expr = f"{a} + {b} + {c}"
        body.append(f"        v{i + 1} = {expr}")
        values.append(f"v{i + 1}")
    returned = ", ".join(values[-rng.choice([1, 1, 2]) :])
    return "\n".join([
        "import torch", "import torch.nn.functional as F", "from torch import nn", "", "",
        "class M(nn.Module):", "    def __init__(self):", "        super().__init__()",
        *(f"        {line}" for line in layers), "", "    def forward(self, x):", *body,
        f"        return {returned}", "",
    ])  # fmt: skip


def port_one(work: Path, seed: int, writes: bool = False, ops: bool = False) -> dict[str, object]:
    script = work / f"flow_{seed}.py"
    script.write_text(model_source(seed, writes, ops))
    argv = [*FDL, "port", script.name, "--model", "M", "--example-input", "torch.randn(3, 4)",
            "--overwrite", "--json"]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(argv, cwd=work, capture_output=True, text=True, check=False, env=env)
    row: dict[str, object] = {"seed": seed, "result": "error", "translated": 0, "note": ""}
    try:
        report = json.loads(done.stdout)
    except json.JSONDecodeError:
        row["note"] = (done.stderr.strip().splitlines() or ["no output"])[-1][:120]
        return row
    row["translated"] = len(report["translated"])
    if not (report["parity"] and report["parity"]["exact"]):
        row["result"] = "refused"
        row["note"] = report.get("note", "")[:120]
    elif report["opaque"]:
        row["result"] = "whole"
        row["note"] = report["opaque"][0]["reason"][:120]
    else:
        row["result"] = "exact"
    return row


def main(argv: list[str] | None = None) -> list[dict[str, object]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--start", type=int, default=0, help="first seed")
    parser.add_argument("--count", type=int, default=100, help="how many models")
    parser.add_argument("--writes", action="store_true", help="item assignments too")
    parser.add_argument("--ops", action="store_true", help="more tensor operations too")
    parser.add_argument("--out", type=Path, default=None, help="report folder")
    args = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in range(args.start, args.start + args.count):
            rows.append(port_one(Path(tmp), seed, args.writes, args.ops))
            print(" ".join(f"{v}" for v in rows[-1].values()), flush=True)
    counts = {
        k: sum(r["result"] == k for r in rows) for k in ("exact", "whole", "refused", "error")
    }
    extras = [
        w for w, on in (("item assignments", args.writes), ("more operations", args.ops)) if on
    ]
    what = "random flows" + (f" with {' and '.join(extras)}" if extras else "")
    notes = (
        f"{len(rows)} {what} (seeds {args.start}-{args.start + args.count - 1}): "
        + ", ".join(f"{n} {k}" for k, n in counts.items())
        + "."
    )
    print(write_report("fdl port on random data flows", rows, "port_random", notes, args.out))
    return rows


if __name__ == "__main__":
    main()
