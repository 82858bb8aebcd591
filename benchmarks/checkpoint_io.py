"""Checkpoint save/load time for a 100M-parameter model: .fdl vs torch.save/torch.load and safetensors.

Every case goes through a file in the same temporary directory (page cache warm for all of them),
interleaved by the harness. Loads include copying into the model's parameters, as a resume does:
``torch.load(weights_only=True)`` + ``load_state_dict`` and ``safetensors.load_file`` +
``load_state_dict`` against ``fl.load_checkpoint`` (memory-mapped, checksums verified) and
``fl.load_checkpoint(verify=False)``; load ratios are against safetensors, with an A/A row (the
safetensors case timed twice) as the noise floor. By default fl.save_checkpoint also fsyncs the
file and its directory (durability the others do not provide), computes digests and writes
atomically; the ``fsync=False`` rows compare the format itself.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from harness import interleaved, ratio, write_report

import flodl as fl


def model_of(params: int) -> nn.Module:
    width = 1000
    layers = max(1, params // (width * width + width))
    torch.manual_seed(0)
    return nn.Sequential(*[nn.Linear(width, width) for _ in range(layers)])


def main(params: int = 100_000_000, rounds: int = 5) -> list[dict[str, object]]:
    model = model_of(params)
    count = sum(p.numel() for p in model.parameters())
    state = model.state_dict()
    try:
        import safetensors.torch as st
    except ImportError:
        st = None
    with tempfile.TemporaryDirectory(dir=Path(__file__).resolve().parent) as tmp:
        d = Path(tmp)
        save = {
            "torch.save": lambda: torch.save(state, d / "m.pt"),
            "fl.save_checkpoint": lambda: fl.save_checkpoint(
                d / "m.fdl", model.named_parameters(), model.named_buffers()
            ),
            "fl.save_checkpoint fsync=False": lambda: fl.save_checkpoint(
                d / "nosync.fdl", model.named_parameters(), model.named_buffers(), fsync=False
            ),
            "fl.save_checkpoint fsync=False checksum=False": lambda: fl.save_checkpoint(
                d / "plain.fdl",
                model.named_parameters(),
                model.named_buffers(),
                fsync=False,
                checksum=False,
            ),
        }
        if st is not None:
            save["safetensors.save_file"] = lambda: st.save_file(state, d / "m.safetensors")
        saved = interleaved(save, rounds=rounds, inner=1, warmup=1)

        load = {
            "torch.load+load_state_dict": lambda: model.load_state_dict(
                torch.load(d / "m.pt", weights_only=True)
            ),
            "fl.load_checkpoint": lambda: fl.load_checkpoint(
                d / "m.fdl", model.named_parameters(), model.named_buffers()
            ),
            "fl.load_checkpoint verify=False": lambda: fl.load_checkpoint(
                d / "m.fdl", model.named_parameters(), model.named_buffers(), verify=False
            ),
        }
        if st is not None:
            load["safetensors.load_file+load_state_dict"] = lambda: model.load_state_dict(
                st.load_file(d / "m.safetensors")
            )
            # The same case twice: the spread between the two is the noise floor (A/A).
            load["safetensors (A/A)"] = lambda: model.load_state_dict(
                st.load_file(d / "m.safetensors")
            )
        # Loads are CPU-bound (the page cache is warm): process CPU time, including the kernel's
        # page-fault and copy work, so that time the scheduler gives other processes is not counted.
        loaded = interleaved(load, rounds=rounds, inner=1, warmup=1, clock=time.process_time)

    mb = count * 4 / 1e6
    rows: list[dict[str, object]] = []
    save_base = "safetensors.save_file" if st is not None else "torch.save"
    for name, m in saved.items():
        rows.append(
            {
                "case": f"save: {name}",
                "median_s": m.median_s,
                "MB_per_s": mb / m.median_s,
                "ratio": ratio(saved, name, save_base),
                "vs": save_base,
            }
        )
    load_base = (
        "safetensors.load_file+load_state_dict" if st is not None else "torch.load+load_state_dict"
    )
    for name, m in loaded.items():
        rows.append(
            {
                "case": f"load: {name}",
                "median_s": m.median_s,
                "MB_per_s": mb / m.median_s,
                "ratio": ratio(loaded, name, load_base),
                "vs": load_base,
            }
        )
    path = write_report(
        "checkpoint save/load",
        rows,
        "checkpoint_io",
        f"{count / 1e6:.1f}M float32 parameters ({mb:.0f} MB); median of per-round medians over "
        f"{rounds} interleaved rounds; ratio < 1 means faster than the baseline in `vs`.",
    )
    print(path.read_text())
    return rows


if __name__ == "__main__":
    main()
