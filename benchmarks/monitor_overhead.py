"""What the monitor adds to an epoch: one small CPU epoch alone vs the same epoch + ``Monitor.log``.

Cases (interleaved, same run):
- ``epoch``: 20 SGD steps of a 256-wide MLP on a 64-sample batch (plain PyTorch);
- ``epoch + log``: the same, then ``mon.log`` (resource sample, terminal line to a buffer);
- ``epoch + log + dashboard``: the same with the dashboard served and 2 SSE clients connected;
- ``log alone``: ``mon.log`` by itself (its absolute cost per call), without and with the dashboard.

Then the latency of ``mon.log`` on the training thread, call by call (wall time: waiting for the
GIL counts), with a small CPU epoch between calls, while 0, 16 or 64 live SSE clients in another
process (browser tabs) drain the dashboard: p50, p99 and max per case, interleaved rounds, against
a monitor without a dashboard and an identical A/A copy of it (the noise floor).

    python benchmarks/monitor_overhead.py            # both parts
    python benchmarks/monitor_overhead.py latency    # the latency part only
"""

from __future__ import annotations

import http.client
import io
import statistics
import subprocess
import sys
import threading
import time
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


def overhead(rounds: int = 15) -> list[dict[str, object]]:
    """What ``mon.log`` adds to an epoch (see the module docstring)."""
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


# A process holding ``n`` SSE connections open and reading everything (what n browser tabs do).
TABS = """
import selectors, socket, sys
port, n = int(sys.argv[1]), int(sys.argv[2])
sel = selectors.DefaultSelector()
for _ in range(n):
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"GET /events HTTP/1.1\\r\\nHost: localhost\\r\\n\\r\\n")
    s.setblocking(False)
    sel.register(s, selectors.EVENT_READ)
print("connected", flush=True)
open_ = n
while open_:
    for key, _ in sel.select(1.0):
        try:
            data = key.fileobj.recv(1 << 16)
        except BlockingIOError:
            continue
        if not data:
            sel.unregister(key.fileobj)
            open_ -= 1
"""


def tabs(url: str, n: int) -> subprocess.Popen[str]:
    port = url.rsplit(":", 1)[1]
    proc = subprocess.Popen(
        [sys.executable, "-c", TABS, port, str(n)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "connected"
    return proc


def server_cpu(mon: fl.Monitor) -> float:
    """CPU seconds the dashboard's server thread has used (0 without a dashboard): the work of
    fanning epochs out, which the scheduler cannot hide the way it blurs wall-time tails."""
    import psutil

    server = mon._server
    if server is None:
        return 0.0
    native = server._thread.native_id
    for thread in psutil.Process().threads():
        if thread.id == native:
            return thread.user_time + thread.system_time
    return 0.0


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def latency(rounds: int = 20, per_round: int = 50) -> list[dict[str, object]]:
    """``mon.log`` wall time per call with 0/16/64 live clients (see the module docstring)."""
    torch.set_num_threads(1)
    x = torch.randn(128, 128)

    def small_epoch() -> None:  # ~1-3 ms of CPU work between two logs, like a tiny epoch
        y = x
        for _ in range(20):
            y = torch.tanh(y @ x)

    sink = io.StringIO()
    monitors = {
        "no dashboard": fl.Monitor(10**9, stream=sink, gpu=False),
        "no dashboard (A/A)": fl.Monitor(10**9, stream=sink, gpu=False),
        "dashboard, 0 clients": fl.Monitor(10**9, stream=sink, gpu=False),
        "dashboard, 16 clients": fl.Monitor(10**9, stream=sink, gpu=False),
        "dashboard, 64 clients": fl.Monitor(10**9, stream=sink, gpu=False),
    }
    procs = []
    for name, mon in monitors.items():
        if name.startswith("dashboard"):
            url = mon.serve(port=0, max_clients=64)
            clients = int(name.split(", ")[1].split()[0])
            if clients:
                procs.append(tabs(url, clients))
    for name, mon in monitors.items():
        if mon._server is not None and name != "dashboard, 0 clients":
            want = int(name.split(", ")[1].split()[0])
            deadline = time.monotonic() + 30
            while mon._server.active_streams < want and time.monotonic() < deadline:
                time.sleep(0.01)
    samples: dict[str, list[float]] = {name: [] for name in monitors}
    epochs = dict.fromkeys(monitors, 0)
    serving = {name: server_cpu(mon) for name, mon in monitors.items()}
    names = list(monitors)
    metrics = {f"metric_{k}": 0.5 for k in range(8)}
    for r in range(rounds + 1):  # round 0 warms up
        for name in names[r % len(names) :] + names[: r % len(names)]:
            mon = monitors[name]
            for _ in range(per_round):
                small_epoch()
                start = time.perf_counter()
                mon.log(epochs[name], 0.01, metrics)
                took = time.perf_counter() - start
                epochs[name] += 1
                if r:
                    samples[name].append(took)
            sink.seek(0)
            sink.truncate()
    serving = {
        name: (server_cpu(mon) - serving[name]) / max(1, epochs[name])
        for name, mon in monitors.items()
    }
    for mon in monitors.values():
        mon.close()
    for proc in procs:
        proc.wait(timeout=30)
    base = percentile(samples["no dashboard"], 0.99)
    rows = [
        {
            "case": name,
            "p50_ms": statistics.median(v) * 1e3,
            "p99_ms": percentile(v, 0.99) * 1e3,
            "max_ms": max(v) * 1e3,
            "p99_vs_no_dashboard": percentile(v, 0.99) / base,
            "server_cpu_ms_per_epoch": serving[name] * 1e3,
        }
        for name, v in samples.items()
    ]
    path = write_report(
        "Monitor.log latency with live dashboard clients",
        rows,
        "monitor_log_latency",
        f"wall time of each mon.log call on the training thread, {rounds} interleaved rounds x "
        f"{per_round} calls per case, a ~ms CPU epoch between calls; SSE clients are another "
        "process reading every stream; baseline: a monitor without a dashboard (A/A: an "
        "identical second one); server_cpu_ms_per_epoch: CPU time of the dashboard's server "
        "thread per logged epoch (the fan-out, off the training thread)",
    )
    print(path.read_text())
    return rows


def main() -> list[dict[str, object]]:
    return overhead() + latency()


if __name__ == "__main__":
    if sys.argv[1:] == ["latency"]:
        latency()
    else:
        main()
