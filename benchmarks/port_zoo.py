"""How much of real model-zoo code ``fdl port`` writes out: torchvision and timm classifiers,
transformers' GPT-2, BERT, T5's encoder and Llama.

Each model is wrapped in a small ``nn.Module`` (``self.net = <zoo constructor>``), randomly
initialised with a fixed seed, and ported by ``fdl port --json`` in a fresh process with one
example input, ``torch.randn`` images (token ids for the language models, whose wrapper
returns the output's first field) drawn under seeds 0 and 1 (the port's default). The language
models are 12 layers deep and narrow: ``port_s`` shows how the port's time grows with depth. A row says what
came out: ``exact`` (written, bit-exact outputs and gradients in eval and train mode on both
draws), ``noted`` (exact on both draws, but the port notes that it reads a value in another
order than the original, so gradients can differ in the last bits on other inputs), ``whole`` (exact, but the whole model is one opaque step),
``refused`` (a difference was found: nothing written) or ``error``; ``translated`` counts the
operations written as builder calls, ``kept_whole`` the submodules kept as opaque steps (and
``kept_why`` their classes and reasons), ``settings`` the module settings the port is written
for (read by the forward as constants, checked by ``flow(m)``), and ``port_s`` is the wall time
of the ``fdl port`` call.

The zoos are not dependencies of flodl: install them to run this (``pip install torchvision
timm``; transformers comes with ``flodl[hf]``). A zoo that does not import is reported as missing and skipped.

Usage: ``python benchmarks/port_zoo.py [--smoke] [--only NAME,...] [--out DIR]``. ``--smoke``
ports the first model of each installed zoo.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import write_report

from fdl.port.trace import CONSTANT_REASON, MODE_REASON

SHORT_REASONS = {
    MODE_REASON: "depends on self.training",
    CONSTANT_REASON: "makes a constant too big to write out",
}

# zoo -> (import line, {model: (constructor expression, image size or example input)})
ZOOS: dict[str, tuple[str, dict[str, tuple[str, int | str]]]] = {
    "torchvision": (
        "import torchvision.models as zoo",
        {
            "resnet18": ("zoo.resnet18(num_classes=10)", 32),
            "mobilenet_v3_small": ("zoo.mobilenet_v3_small(num_classes=10)", 32),
            "efficientnet_b0": ("zoo.efficientnet_b0(num_classes=10)", 32),
            "convnext_tiny": ("zoo.convnext_tiny(num_classes=10)", 32),
            "densenet121": ("zoo.densenet121(num_classes=10)", 32),
            "shufflenet_v2_x0_5": ("zoo.shufflenet_v2_x0_5(num_classes=10)", 32),
            "squeezenet1_1": ("zoo.squeezenet1_1(num_classes=10)", 32),
            "vit": (
                "zoo.VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=2,"
                " hidden_dim=32, mlp_dim=64, num_classes=10)",
                32,
            ),
            "swin_t": ("zoo.swin_t(num_classes=10)", 32),
            "regnet_y_400mf": ("zoo.regnet_y_400mf(num_classes=10)", 32),
            "googlenet": ("zoo.googlenet(num_classes=10, aux_logits=False, init_weights=True)", 32),
            "mnasnet0_5": ("zoo.mnasnet0_5(num_classes=10)", 32),
        },
    ),
    "timm": (
        "import timm",
        {
            name: (f"timm.create_model({name!r}, num_classes=10{extra})", size)
            for name, extra, size in [
                ("resnet18", "", 32),
                ("resnet50d", "", 32),
                ("efficientnet_b0", "", 32),
                ("mobilenetv3_small_100", "", 32),
                ("convnext_atto", "", 32),
                ("vit_tiny_patch16_224", ", img_size=32, patch_size=8", 32),
                ("deit_tiny_patch16_224", ", img_size=32, patch_size=8", 32),
                ("mixer_s32_224", ", img_size=64", 64),
                ("regnetx_002", "", 32),
                ("dla34", "", 32),
                ("densenet121", "", 32),
                ("cspresnet50", "", 32),
                ("ghostnet_100", "", 32),
                ("rexnet_100", "", 32),
                ("levit_128s", ", img_size=64", 64),
                ("poolformer_s12", "", 32),
                ("coatnet_nano_rw_224", ", img_size=64", 64),
                ("mobilevit_xxs", ", img_size=64", 64),
                ("edgenext_xx_small", "", 32),
                ("repvgg_a0", "", 32),
                ("hrnet_w18_small", "", 32),
                ("tinynet_e", "", 32),
                ("fastvit_t8", "", 32),
                ("maxvit_nano_rw_256", ", img_size=64", 64),
                ("swin_tiny_patch4_window7_224", ", img_size=64, window_size=2", 64),
                ("beit_base_patch16_224", ", img_size=32, patch_size=8, depth=2", 32),
                ("caformer_s18", "", 32),
                ("nfnet_l0", "", 32),
                ("xcit_nano_12_p16_224", ", img_size=32", 32),
            ]
        },
    ),
    # language models at full depth (12 layers), narrow: the port's time grows with depth
    "transformers": (
        "import transformers",
        {
            "gpt2_12_layers": (
                "transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=12, n_embd=64,"
                " n_head=4, vocab_size=100, n_positions=32, bos_token_id=0, eos_token_id=0))",
                "torch.randint(0, 100, (2, 16))",
            ),
            "bert_12_layers": (
                "transformers.BertModel(transformers.BertConfig(num_hidden_layers=12,"
                " hidden_size=64, num_attention_heads=4, intermediate_size=128, vocab_size=100,"
                " max_position_embeddings=32), add_pooling_layer=False)",
                "torch.randint(0, 100, (2, 16))",
            ),
            "t5_encoder_12_layers": (
                "transformers.T5EncoderModel(transformers.T5Config(num_layers=12, d_model=64,"
                " d_kv=16, d_ff=128, num_heads=4, vocab_size=100))",
                "torch.randint(0, 100, (2, 16))",
            ),
            "llama_12_layers": (
                "transformers.LlamaForCausalLM(transformers.LlamaConfig(num_hidden_layers=12,"
                " hidden_size=64, intermediate_size=128, num_attention_heads=4,"
                " num_key_value_heads=2, vocab_size=100, max_position_embeddings=32))",
                "torch.randint(0, 100, (2, 16))",
            ),
        },
    ),
}
# what a zoo's wrapper returns of its model's output (a language model's ModelOutput: a tensor)
OUTPUTS = {"transformers": "[0]"}
FDL = [sys.executable, "-m", "fdl"]


def script_for(import_line: str, models: dict[str, tuple[str, int | str]], output: str = "") -> str:
    """One module with a wrapper class per model, named after it (``output``: what the wrapper
    returns of the model's output, ``[0]`` for a ModelOutput's first field)."""
    lines = ["import torch", import_line, ""]
    for name, (constructor, _) in models.items():
        lines += [
            f"class {class_name(name)}(torch.nn.Module):",
            "    def __init__(self):",
            "        super().__init__()",
            "        torch.manual_seed(0)",
            f"        self.net = {constructor}",
            "",
            "    def forward(self, x):",
            f"        return self.net(x){output}",
            "",
            "",
        ]
    return "\n".join(lines)


def class_name(model: str) -> str:
    return "Zoo_" + "".join(c if c.isalnum() else "_" for c in model)


def kept_why(parts: list[dict[str, str]]) -> str:
    """The parts kept whole, by class and reason: ``DropPath x22: depends on self.training``."""
    counts = Counter((p["class"], p["reason"]) for p in parts)
    return "; ".join(
        f"{cls} x{n}: {SHORT_REASONS.get(reason, reason)[:60]}"
        for (cls, reason), n in counts.most_common()
    )


def port_one(work: Path, script: str, model: str, size: int | str) -> dict[str, object]:
    example = size if isinstance(size, str) else f"torch.randn(2, 3, {size}, {size})"
    argv = [*FDL, "port", script, "--model", class_name(model), "--example-input", example,
            "-o", f"port_{class_name(model)}.py", "--overwrite", "--json"]  # fmt: skip
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=work, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - start
    row: dict[str, object] = {"model": model, "result": "error", "translated": 0,
                              "kept_whole": 0, "settings": 0, "port_s": round(seconds, 2),
                              "note": "",
                              "kept_why": ""}  # fmt: skip
    try:
        report = json.loads(done.stdout)
    except json.JSONDecodeError:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        row["note"] = last[:120]
        return row
    whole = [o for o in report["opaque"] if o["module"] == "<model>"]
    exact = report["parity"] and report["parity"]["exact"]
    row["translated"] = len(report["translated"])
    row["kept_whole"] = len(report["opaque"]) - len(whole)
    row["kept_why"] = kept_why([o for o in report["opaque"] if o["module"] != "<model>"])
    row["settings"] = len(report.get("settings", {}))
    if not exact:
        row["result"] = "refused"
        row["note"] = "; ".join(
            ["parity not exact", *([report["note"]] if report.get("note") else [])]
        )[:120]
    elif report.get("note"):  # exact here, but the layout reads a value in another order
        row["result"] = "noted"
        row["note"] = report["note"][:120]
    elif whole:
        row["result"] = "whole"
        row["note"] = whole[0]["reason"][:120]
    else:
        row["result"] = "exact"
    return row


def main(argv: list[str] | None = None) -> list[dict[str, object]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="the first model of each zoo")
    parser.add_argument("--only", default="", help="comma-separated model names")
    parser.add_argument("--out", type=Path, default=None, help="report folder")
    args = parser.parse_args(argv)
    only = {m for m in args.only.split(",") if m}
    rows: list[dict[str, object]] = []
    env_note = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for zoo, (import_line, models) in ZOOS.items():
            probe = subprocess.run([sys.executable, "-c", import_line], capture_output=True,
                                   text=True, check=False)  # fmt: skip
            if probe.returncode != 0:
                env_note.append(f"{zoo}: not installed, skipped")
                continue
            chosen = {m: v for m, v in models.items() if not only or m in only}
            if args.smoke:
                chosen = dict(list(chosen.items())[:1])
            script = f"zoo_{zoo}.py"
            (work / script).write_text(script_for(import_line, chosen, OUTPUTS.get(zoo, "")))
            for model, (_, size) in chosen.items():
                row = {"zoo": zoo, **port_one(work, script, model, size)}
                rows.append(row)
                print(" ".join(f"{v}" for v in row.values()), flush=True)
    kinds = ("exact", "noted", "whole", "refused")
    counts = {r: sum(row["result"] == r for row in rows) for r in kinds}
    notes = " ".join([
        f"{len(rows)} models: {counts['exact']} ported exactly with their layers written out, "
        f"{counts['noted']} exactly with an order note, {counts['whole']} kept whole, "
        f"{counts['refused']} refused.",
        *(f"{note}." for note in env_note),
        f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}.",
    ])  # fmt: skip
    print(write_report("fdl port on model-zoo code", rows, "port_zoo", notes, args.out))
    return rows


if __name__ == "__main__":
    main()
