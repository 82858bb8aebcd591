"""A user's main paths on a real CUDA device: training with the Trainer, the 11 benchmark models
as graphs against their hand-written twins, checkpoints across devices (background saves too),
the monitor's GPU readings, flodl's CUDA queries, autocast and compiling with inductor. They
skip on a machine without a GPU; ``benchmarks/gpu_check.sh`` runs them on one."""

from __future__ import annotations

import copy
import io
import sys
import warnings
from typing import Any

import pytest
import torch
from torch import nn

import flodl as fl
from flodl import device
from tests.conftest import REPO_ROOT
from tests.train import toy

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
import graph_overhead as go  # noqa: E402  (the benchmark's models, shared with gpu.py)


def test_trainer_trains_on_one_gpu_and_hands_back_cpu_tensors():
    data = toy.regression_data()
    seen: list[Any] = []
    state = (
        fl.Trainer.builder(toy.make_model, toy.make_sgd, toy.mse_step)
        .dataset(data)
        .batch_size(16)
        .devices(["cuda:0"])
        .num_epochs(3)
        .metrics_fn(seen.append)
        .run()
        .join()
    )
    assert [m.epoch for m in seen] == [0, 1, 2]
    assert seen[-1].avg_loss < seen[0].avg_loss
    model = state.load_into(toy.make_model("cpu"))
    x, y = data
    with torch.no_grad():
        assert float(nn.functional.mse_loss(model(x), y)) < 0.05


@pytest.mark.parametrize("name", go.MODEL_NAMES)
def test_graph_computes_what_the_hand_written_model_computes_on_the_gpu(name):
    compare_with_hand_written(name, "cuda")


def compare_with_hand_written(name: str, where: str) -> None:
    spec = go.suite(smoke=True)[name]
    torch.manual_seed(0)
    plain = spec.plain().to(where)
    twin_of: dict[int, Any] = {}  # deepcopy's memo: id(original) -> its copy
    graph = spec.graph(copy.deepcopy(plain, twin_of)).to(where)
    x, y = (t.to(where) for t in spec.data(spec.batch))
    with torch.no_grad():
        assert torch.equal(graph(x), plain(x))  # the same kernels in the same order
    spec.loss(plain(x), y).backward()
    spec.loss(graph(x), y).backward()
    graph_params = {id(p) for p in graph.parameters()}
    for pname, p in plain.named_parameters():
        twin = twin_of[id(p)]
        assert id(twin) in graph_params, pname
        # cuDNN and atomics may sum in another order between two backward passes: close
        torch.testing.assert_close(twin.grad, p.grad, msg=f"gradient of {pname}")


def _graph() -> fl.Graph:
    return fl.FlowBuilder(nn.Linear(8, 16)).through(nn.GELU()).through(nn.Linear(16, 4)).build()


def test_a_checkpoint_saved_on_the_gpu_loads_on_the_cpu_and_back(tmp_path):
    torch.manual_seed(0)
    gpu = _graph().cuda()
    opt = torch.optim.Adam(gpu.parameters(), lr=0.1)
    for _ in range(3):
        opt.zero_grad()
        gpu(torch.randn(32, 8, device="cuda")).square().mean().backward()
        opt.step()
    gpu.save_checkpoint(tmp_path / "m.fdl")
    torch.manual_seed(1)
    cpu = _graph()
    cpu.load_checkpoint(tmp_path / "m.fdl")
    for (name, a), b in zip(gpu.state_dict().items(), cpu.state_dict().values(), strict=True):
        assert b.device.type == "cpu" and torch.equal(a.cpu(), b), name
    back = _graph().cuda()
    back.load_checkpoint(tmp_path / "m.fdl")
    assert all(p.is_cuda for p in back.parameters())
    x = torch.randn(4, 8, device="cuda")
    assert torch.equal(back(x), gpu(x))


def test_a_background_save_on_the_gpu_keeps_the_values_of_the_moment_it_was_asked(tmp_path):
    torch.manual_seed(0)
    gpu = _graph().cuda()
    wanted = {k: v.detach().cpu().clone() for k, v in gpu.state_dict().items()}
    gpu.save_checkpoint(tmp_path / "m.fdl", background=True)
    with torch.no_grad():  # training goes on at once, changing the parameters in place
        for p in gpu.parameters():
            p.add_(1.0)
    fl.checkpoint.flush()
    cpu = _graph()
    cpu.load_checkpoint(tmp_path / "m.fdl")
    for name, value in cpu.state_dict().items():
        assert torch.equal(value, wanted[name]), name


def test_the_monitor_reads_the_real_gpu():
    pytest.importorskip("pynvml")
    keep = torch.ones(256, 1024, 1024, device="cuda")  # 1 GiB, so VRAM use is visible
    out = io.StringIO()
    mon = fl.Monitor(2, stream=out, color=False)
    record = mon.log(0, 1.0, {"loss": 0.5})
    mon.close()
    resources = record.to_json()["resources"]
    gpus = resources["gpus"]
    assert [g["name"] for g in gpus] == [
        torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())
    ]
    total = torch.cuda.get_device_properties(0).total_memory
    assert abs(resources["vram_total"] - total) < 0.05 * total  # NVML's total, torch's total
    assert resources["vram_alloc"] >= keep.numel() * 4  # this process's reservation
    assert "VRAM: " in out.getvalue()


def test_cuda_queries_answer_on_a_gpu():
    assert device.cuda_available() is True
    assert device.cuda_device_count() == torch.cuda.device_count()
    device.cuda_reset_peak_stats()
    x = torch.empty(64, 1024, 1024, device="cuda")  # 256 MiB
    used, total = device.cuda_memory_info()  # the whole device, as the driver sees it
    assert x.numel() * 4 <= used <= total
    assert device.cuda_allocated_bytes() >= x.numel() * 4
    assert device.cuda_peak_active_bytes() >= x.numel() * 4
    del x
    device.cuda_empty_cache()
    util = device.cuda_utilization()
    assert util is None or 0 <= util <= 100


def test_bf16_autocast_trains_a_graph_on_the_gpu():
    torch.manual_seed(0)
    graph = _graph().cuda()
    opt = torch.optim.SGD(graph.parameters(), lr=0.1)
    x = torch.randn(64, 8, device="cuda")
    target = torch.zeros(64, 4, device="cuda")
    losses = []
    for _ in range(20):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = graph(x)
        assert out.dtype == torch.bfloat16
        loss = nn.functional.mse_loss(out.float(), target)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert all(p.dtype == torch.float32 for p in graph.parameters())
    assert losses[-1] < losses[0] / 2


def test_a_graph_compiles_with_inductor_on_the_gpu_and_trains_like_eager():
    torch.manual_seed(0)
    eager = _graph().cuda()
    compiled = copy.deepcopy(eager).compile(fullgraph=True)  # Triton kernels on the GPU
    x = torch.randn(64, 8, device="cuda")
    for model in (eager, compiled):
        model(x).square().mean().backward()
    torch.testing.assert_close(compiled(x), eager(x), rtol=1e-4, atol=1e-5)
    for a, b in zip(compiled.parameters(), eager.parameters(), strict=True):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-4, atol=1e-5)


def test_capturing_a_graph_with_tags_in_nested_graphs_reuses_nothing_of_the_warm_up():
    # The transformer benchmark's attention blocks tag their input: before the outer pass
    # released nested tags, the captured backward reused the warm-up's grad accumulators.
    torch.manual_seed(0)
    block = fl.FlowBuilder(nn.Linear(8, 8)).tag("x").through(nn.GELU()).build()
    model = fl.FlowBuilder(nn.Linear(8, 8)).also(block).through(nn.Linear(8, 4)).build().cuda()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2, capturable=True)

    def step(x, y):
        opt.zero_grad(set_to_none=True)
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        return loss

    x, y = torch.randn(16, 8, device="cuda"), torch.zeros(16, 4, device="cuda")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        captured = fl.cuda_graph_capture(step, x, y, optimizers=[opt])
        first = captured(x, y).item()
        for _ in range(20):
            last = captured(x, y).item()
    assert not [w for w in caught if "AccumulateGrad" in str(w.message)]
    assert last < first
