"""What the monitor adds to an epoch: one small CPU epoch alone vs the same epoch + ``Monitor.log``.

Cases (interleaved, same run):
- ``epoch``: 20 SGD steps of a 256-wide MLP on a 64-sample batch (plain PyTorch);
- ``epoch + log``: the same, then ``mon.log`` (resource sample, terminal line to a buffer);
- ``epoch + log + dashboard``: the same with the dashboard served and 2 SSE clients connected;
- ``log alone``: ``mon.log`` by itself (its absolute cost per call), without and with the dashboard.
"""

from __future__ import annotations

import http.client
import io
import sys
import threading
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from harness import interleaved, ratio, write_report

import flodl as fl


def make_epoch():
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10)
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(64, 256), torch.randint(0, 10, (64,))

    def epoch() -> float:
        for _ in range(20):
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
        return loss.item()

    return epoch


def drain(url: str, stop: threading.Event) -> None:
    """An SSE client that reads everything (what a browser tab does)."""
    port = int(url.rsplit(":", 1)[1])
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    conn.request("GET", "/events")
    response = conn.getresponse()
    while not stop.is_set() and response.readline():
        pass
    conn.close()


def main(rounds: int = 15) -> list[dict[str, object]]:
    torch.set_num_threads(1)
    epoch = make_epoch()
    sink = io.StringIO()
    plain = fl.Monitor(10**9, stream=sink)
    served = fl.Monitor(10**9, stream=sink)
    url = served.serve(port=0)
    stop = threading.Event()
    readers = [threading.Thread(target=drain, args=(url, stop), daemon=True) for _ in range(2)]
    for t in readers:
        t.start()
    counters = {"plain": 0, "served": 0, "alone": 0, "alone_served": 0}

    def logged(mon: fl.Monitor, key: str):
        def run() -> None:
            loss = epoch()
            mon.log(counters[key], 0.01, {"loss": loss, "lr": 0.01})
            counters[key] += 1
            sink.seek(0)
            sink.truncate()

        return run

    alone = fl.Monitor(10**9, stream=sink)

    def log_only(mon: fl.Monitor, key: str):
        def run() -> None:
            mon.log(counters[key], 0.01, {"loss": 0.5, "lr": 0.01})
            counters[key] += 1

        return run

    results = interleaved(
        {
            "epoch": epoch,
            "epoch + log": logged(plain, "plain"),
            "epoch + log + dashboard": logged(served, "served"),
            "log alone": log_only(alone, "alone"),
            "log alone, dashboard + 2 clients": log_only(served, "alone_served"),
        },
        rounds=rounds,
        inner=5,
    )
    stop.set()
    for mon in (plain, served, alone):
        mon.close()
    rows = [
        {
            "case": name,
            "median_ms": m.median_s * 1e3,
            "ratio_vs_epoch": ratio(results, name, "epoch"),
        }
        for name, m in results.items()
    ]
    path = write_report(
        "Monitor overhead per epoch",
        rows,
        "monitor_overhead",
        f"median of per-round medians over {rounds} interleaved rounds; baseline: one plain "
        "PyTorch epoch (20 SGD steps, 256-wide MLP, batch 64, 1 CPU thread)",
    )
    print(path.read_text())
    return rows


if __name__ == "__main__":
    main()
