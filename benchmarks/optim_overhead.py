"""Per-step cost of flodl's training utilities against their torch counterparts (same run, interleaved).

- lr scheduling: ``fl.optim.apply(CosineScheduler)`` and ``fl.optim.ScheduledLR.step()`` vs
  ``torch.optim.lr_scheduler.CosineAnnealingLR.step()`` (100 steps per call).
- clipping: ``fl.optim.clip_grad_norm`` (returns a float) vs ``torch.nn.utils.clip_grad_norm_``
  followed by ``.item()`` (what a loop that logs the norm does) on a 48-tensor MLP, in the
  common case where the norm is under the limit (flodl then skips the multiply; torch does not).
- optimizer step: ``fl.optim.Adam`` (fused on CPU) vs ``torch.optim.Adam`` with its CPU
  default (per-tensor loop), and ``foreach=True`` for reference.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from harness import interleaved, ratio, write_report

import flodl as fl

STEPS = 100


def _mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    layers: list[torch.nn.Module] = []
    for _ in range(24):  # 48 parameter tensors
        layers += [torch.nn.Linear(64, 64), torch.nn.Tanh()]
    return torch.nn.Sequential(*layers)


def _with_grads(model: torch.nn.Module) -> torch.nn.Module:
    for p in model.parameters():
        p.grad = torch.randn_like(p)
    return model


def scheduling_cases() -> dict[str, object]:
    def torch_cosine():
        opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=STEPS, eta_min=1e-4)
        for _ in range(STEPS):
            opt.step()
            sched.step()

    def flodl_apply():
        opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)
        sched = fl.optim.CosineScheduler(0.1, 1e-4, STEPS)
        for step in range(STEPS):
            fl.optim.apply(sched, opt, step)
            opt.step()

    def flodl_bridge():
        opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)
        sched = fl.optim.ScheduledLR(opt, fl.optim.CosineScheduler(0.1, 1e-4, STEPS))
        for _ in range(STEPS):
            opt.step()
            sched.step()

    def baseline_no_schedule():
        opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)
        for _ in range(STEPS):
            opt.step()

    return {
        "sgd steps, no schedule": baseline_no_schedule,
        "torch CosineAnnealingLR": torch_cosine,
        "fl.optim.apply(Cosine)": flodl_apply,
        "fl.optim.ScheduledLR": flodl_bridge,
    }


def clip_cases() -> dict[str, object]:
    model = _with_grads(_mlp())
    params = list(model.parameters())
    return {
        "torch clip_grad_norm_ + item()": lambda: torch.nn.utils.clip_grad_norm_(
            params, 1e9
        ).item(),
        "fl.optim.clip_grad_norm": lambda: fl.optim.clip_grad_norm(params, 1e9),
    }


def adam_cases() -> dict[str, object]:
    a, b, c = _with_grads(_mlp()), _with_grads(_mlp()), _with_grads(_mlp())
    ours = fl.optim.Adam(a.parameters(), lr=1e-3)
    assert ours.defaults["fused"], "fl.optim.Adam should pick the CPU fused kernel"
    theirs = torch.optim.Adam(b.parameters(), lr=1e-3)
    foreach = torch.optim.Adam(c.parameters(), lr=1e-3, foreach=True)
    return {
        "torch Adam (CPU default)": theirs.step,
        "fl.optim.Adam (fused)": ours.step,
        "torch Adam foreach=True": foreach.step,
    }


def main(rounds: int = 15) -> list[dict[str, object]]:
    torch.set_num_threads(1)
    rows: list[dict[str, object]] = []
    for group, cases, baseline, per in (
        ("lr schedule", scheduling_cases(), "torch CosineAnnealingLR", STEPS),
        ("clip 48 grads", clip_cases(), "torch clip_grad_norm_ + item()", 1),
        ("adam step 48 tensors", adam_cases(), "torch Adam (CPU default)", 1),
    ):
        results = interleaved(cases, rounds=rounds, inner=5, warmup=2)  # type: ignore[arg-type]
        rows += [
            {
                "group": group,
                "case": name,
                "us_per_step": m.median_s / per * 1e6,
                "ratio_vs_torch": ratio(results, name, baseline),
            }
            for name, m in results.items()
        ]
    path = write_report(
        "flodl training utilities: per-step overhead",
        rows,
        "optim_overhead",
        f"median of per-round medians over {rounds} interleaved rounds, 1 CPU thread; "
        "ratio against the torch counterpart measured in the same run",
    )
    print(path.read_text())
    return rows


if __name__ == "__main__":
    main()
