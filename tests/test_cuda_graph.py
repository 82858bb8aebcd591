"""``cuda_graph_capture``: replaying a captured training step trains exactly like running it.

The GPU tests run where CUDA is present; the error paths run everywhere.
"""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

import flodl as fl

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error without CUDA")


@no_cuda
def test_without_cuda_capture_raises_a_flodl_error_saying_why():
    with pytest.raises(fl.CudaGraphError, match=r"needs a CUDA device.*is_available\(\) is False"):
        fl.cuda_graph_capture(lambda x: x * 2, torch.ones(2))
    with pytest.raises(fl.FlodlError, match="needs a CUDA device"):
        fl.cuda_graph_pool_handle()
    assert issubclass(fl.CudaGraphError, RuntimeError)


def model() -> fl.Graph:
    return (
        fl.FlowBuilder(nn.Linear(8, 16))
        .through(nn.GELU())
        .also(nn.Linear(16, 16))
        .loop_body(nn.Linear(16, 16))
        .for_n(2)
        .through(nn.Linear(16, 4))
        .build()
    )


def trainer(net: nn.Module):
    opt = torch.optim.Adam(net.parameters(), lr=1e-2, capturable=True)

    def step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        opt.zero_grad(set_to_none=True)
        loss = nn.functional.mse_loss(net(x), y)
        loss.backward()
        opt.step()
        return loss

    return opt, step


@cuda
def test_replay_trains_like_the_eager_step_on_the_same_data():
    torch.manual_seed(0)
    eager_net = model().cuda()
    graph_net = copy.deepcopy(eager_net)
    batches = [
        (torch.randn(32, 8, device="cuda"), torch.randn(32, 4, device="cuda")) for _ in range(6)
    ]
    _, eager_step = trainer(eager_net)
    opt, graph_step = trainer(graph_net)
    x0, y0 = (t.clone() for t in batches[0])
    captured = fl.cuda_graph_capture(graph_step, x0, y0, warmup=3, optimizers=[opt])
    for _ in range(3):  # the warm-up steps: real steps on the first batch
        eager_step(*batches[0])
    for x, y in batches[1:]:
        want = eager_step(x, y)
        got = captured(x, y)
        torch.testing.assert_close(got, want)
    torch.cuda.synchronize()
    for a, b in zip(eager_net.parameters(), graph_net.parameters(), strict=True):
        torch.testing.assert_close(a, b)
    assert captured.inputs[0] is x0  # the static buffers are the tensors given at capture


@cuda
def test_replay_without_new_inputs_reruns_on_the_static_buffers():
    a = torch.ones(4, device="cuda")
    out = torch.zeros(4, device="cuda")

    def step(a: torch.Tensor) -> torch.Tensor:
        out.add_(a)
        return out

    captured = fl.cuda_graph_capture(step, a, warmup=1)
    out.zero_()
    captured.replay()
    a.fill_(2.0)
    captured.replay()
    torch.cuda.synchronize()
    assert out.tolist() == [3.0] * 4


@cuda
def test_bad_inputs_and_optimizers_are_refused():
    x = torch.ones(2, 3, device="cuda")
    with pytest.raises(fl.CudaGraphError, match="must be a CUDA tensor"):
        fl.cuda_graph_capture(lambda t: t * 2, torch.ones(2))
    with pytest.raises(fl.CudaGraphError, match="warmup=0"):
        fl.cuda_graph_capture(lambda t: t * 2, x, warmup=0)
    net = nn.Linear(3, 3).cuda()
    with pytest.raises(fl.CudaGraphError, match="capturable=True"):
        fl.cuda_graph_capture(
            lambda t: net(t).sum(), x, optimizers=[torch.optim.Adam(net.parameters())]
        )
    captured = fl.cuda_graph_capture(lambda t: t * 2, x, warmup=1)
    with pytest.raises(fl.CudaGraphError, match=r"shape \(2, 3\)"):
        captured(torch.ones(3, 3, device="cuda"))
    with pytest.raises(fl.CudaGraphError, match="takes 1 input"):
        captured(x, x)
