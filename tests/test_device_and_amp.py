"""cast_parameters, CUDA helpers without a GPU, and the autocast + GradScaler path on CPU (bf16)."""

from __future__ import annotations

import doctest
import importlib
import math

import pytest
import torch

import flodl as fl
from flodl import device
from flodl.device import DeviceError, cast_parameters

needs_no_gpu = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU behaviour")


def test_cast_parameters_round_trip_and_skip():
    net = torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.Linear(3, 1))
    weight = net[0].weight
    before = weight.detach().clone()
    assert cast_parameters(net, torch.float64) == 4
    assert net[0].weight is weight and weight.dtype == torch.float64  # same Parameter object
    assert cast_parameters(net.parameters(), torch.float64) == 0  # already there: no-op
    assert cast_parameters(list(net.parameters())[:1], torch.float32) == 1
    assert torch.equal(weight, before)  # f32 -> f64 -> f32 is exact


def test_cast_parameters_casts_gradients_so_training_continues():
    net = torch.nn.Linear(2, 1)
    net(torch.ones(1, 2)).sum().backward()
    cast_parameters(net, torch.float64)
    assert net.weight.grad.dtype == torch.float64
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    opt.step()
    net(torch.ones(1, 2, dtype=torch.float64)).sum().backward()


@needs_no_gpu
@pytest.mark.parametrize(
    "query",
    [
        device.cuda_memory_info,
        device.cuda_active_bytes,
        device.cuda_allocated_bytes,
        device.cuda_peak_active_bytes,
        device.cuda_peak_reserved_bytes,
    ],
)
def test_cuda_queries_without_a_gpu_raise_a_clear_error(query):
    with pytest.raises(DeviceError, match=r"needs a GPU.*fl\.cuda_available\(\)"):
        query()
    assert issubclass(DeviceError, fl.FlodlError)


@needs_no_gpu
def test_cuda_housekeeping_without_a_gpu_is_harmless():
    assert device.cuda_available() is False
    assert device.cuda_device_count() == 0
    assert device.cuda_utilization() is None
    device.cuda_empty_cache()
    device.cuda_reset_peak_stats()


# -- mixed precision: torch's autocast + GradScaler with flodl's helpers ---------------------------


def test_grad_scaler_skips_the_step_on_inf_and_backs_off():
    net = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu", init_scale=100.0)
    before = net.weight.detach().clone()
    loss = net(torch.tensor([[float("inf"), 1.0]])).sum()
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    assert torch.equal(net.weight, before)  # step skipped
    assert scaler.get_scale() == 50.0  # backoff 0.5


def amp_graph() -> fl.Graph:
    # A residual block and a LayerNorm: the add mixes a bf16 branch with the stream, and autocast
    # runs LayerNorm in float32, so the graph's dtypes really change along the way.
    return (
        fl.FlowBuilder(torch.nn.Linear(8, 32))
        .through(torch.nn.GELU())
        .also(torch.nn.Linear(32, 32))
        .tag("hidden")
        .through(torch.nn.LayerNorm(32))
        .through(torch.nn.Linear(32, 1))
        .build()
    )


def mlp() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.GELU(), torch.nn.Linear(32, 1))


@pytest.mark.parametrize("make_net", [mlp, amp_graph], ids=["sequential", "graph"])
@pytest.mark.parametrize("scaling", [True, False], ids=["scaler", "scaler-disabled"])
def test_bf16_autocast_with_grad_scaler_and_clipping(make_net, scaling):
    fl.manual_seed(0)
    net = make_net()
    opt = fl.optim.AdamW(net.parameters(), lr=1e-2)
    scaler = torch.amp.GradScaler("cpu", enabled=scaling)
    if scaling:
        assert scaler.get_scale() == 65536.0  # torch's default initial scale, 2**16
    x = torch.randn(64, 8)
    y = x.sum(dim=1, keepdim=True)
    losses = []
    for _ in range(30):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            pred = net(x)
            assert pred.dtype == torch.bfloat16  # the head ran in bf16
            if isinstance(net, fl.Graph):  # so did the residual block
                assert net.tagged("hidden").dtype == torch.bfloat16
            loss = torch.nn.functional.mse_loss(pred.float(), y)
        opt.zero_grad()
        scaled = scaler.scale(loss)
        assert scaled.item() == pytest.approx(loss.item() * (65536.0 if scaling else 1.0), rel=1e-3)
        scaled.backward()
        scaler.unscale_(opt)  # clip the true gradients, not the scaled ones
        norm = fl.optim.clip_grad_norm(net, 1.0)
        assert math.isfinite(norm) and norm < 1e4  # ~65536x larger without unscale_
        assert all(p.grad.dtype == torch.float32 for p in net.parameters())
        scaler.step(opt)
        scaler.update()
        losses.append(loss.item())
    assert all(p.dtype == torch.float32 for p in net.parameters())  # master weights stay fp32
    assert losses[-1] < losses[0] / 4
    with torch.no_grad():  # outside autocast the same graph computes in float32 again
        assert net(x).dtype == torch.float32


def test_docstring_examples():
    result = doctest.testmod(importlib.import_module("flodl.device"), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0, "flodl.device has no examples"
    assert result.failed == 0
