"""Capture a fixed-shape training step as a CUDA graph and replay it with one launch.

A training step of a small model is hundreds of short kernels, each launched from Python; a CUDA
graph records those launches once and replays them all with one call, so the per-kernel launch
cost disappears. :func:`cuda_graph_capture` does the capture the way ``torch.cuda.graphs``
requires: warm-up runs on a side stream (autotuners and the allocator settle, ``.grad`` tensors
and optimizer state are created), then one run recorded into a :class:`torch.cuda.CUDAGraph`.
The returned :class:`CapturedStep` copies new data into the static input tensors and replays::

    x, y = next(batches)                     # the static buffers: fixed shapes from now on
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, capturable=True)

    def step(x, y):
        opt.zero_grad(set_to_none=True)
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        return loss

    captured = fl.cuda_graph_capture(step, x, y, warmup=3, optimizers=[opt])
    for x, y in batches:
        loss = captured(x, y)                # copy into the static inputs, replay

What replay can and cannot do (CUDA graphs record kernels, not Python):

* **Fixed shapes, dtypes and devices.** New data must match the static inputs exactly; a last
  partial batch needs its own capture, or dropping (``drop_last=True``).
* **No CPU synchronisation in the step** (no ``.item()``, ``.cpu()``, ``print(tensor)``, no
  ``torch.cuda.synchronize()``): capture fails on it.
* **No data-dependent control flow**: the branch taken at capture is replayed every time. A
  graph with halting loops or switches is not capturable; ``for_n`` loops, gates and maps are.
* **Optimizers must be capturable**: Adam/AdamW/... with ``capturable=True`` (their step count
  lives on the GPU); ``optimizers=`` checks this before capturing. A learning-rate change must
  write into a tensor the step reads (a float ``lr`` is baked into the graph).
* **Memory**: the graph owns a private memory pool holding every intermediate of the step for
  its lifetime; ``pool=`` (from :func:`cuda_graph_pool_handle`) lets several captures share one.
  The returned value is a static tensor overwritten by each replay: ``.clone()`` what you keep.
* **Randomness**: dropout and other ops on the default CUDA generator draw fresh numbers on
  each replay (torch advances the generator's offset), so replays are not bit-identical to an
  eager run with the same seed.
* **Warm-up runs are real steps**: they update the parameters using the static inputs as given
  (pass the first batch; the warm-up steps count as training on it).

Without a CUDA device, capture raises :class:`CudaGraphError`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch

from flodl.errors import CudaGraphError

__all__ = ["CapturedStep", "CudaGraphError", "cuda_graph_capture", "cuda_graph_pool_handle"]


def _need_cuda(what: str) -> None:
    if not torch.cuda.is_available():
        raise CudaGraphError(
            f"{what} needs a CUDA device, and torch.cuda.is_available() is False: CUDA graphs "
            "record GPU kernel launches. On CPU, call the step function directly (or use "
            "graph.compile() to cut Python overhead)"
        )


def cuda_graph_pool_handle() -> Any:
    """A memory-pool handle to pass as ``pool=`` to several captures, so that graphs replayed one
    after another reuse each other's memory instead of each holding its own."""
    _need_cuda("cuda_graph_pool_handle()")
    return torch.cuda.graph_pool_handle()


class CapturedStep:
    """A step captured by :func:`cuda_graph_capture`: call it with new inputs, or :meth:`replay`.

    ``inputs`` are the static input tensors (the step reads them at every replay), ``output`` is
    what the step returned at capture (static tensors, overwritten by each replay), ``graph`` the
    underlying :class:`torch.cuda.CUDAGraph`.
    """

    def __init__(self, graph: torch.cuda.CUDAGraph, inputs: tuple[torch.Tensor, ...], output: Any):
        self.graph = graph
        self.inputs = inputs
        self.output = output

    def replay(self) -> Any:
        """Run the captured step again on whatever the static inputs hold; returns ``output``."""
        self.graph.replay()
        return self.output

    def __call__(self, *inputs: torch.Tensor) -> Any:
        """Copy ``inputs`` into the static inputs (same shapes and dtypes; tensors on another
        device are copied over), then replay; returns ``output``."""
        if len(inputs) != len(self.inputs):
            raise CudaGraphError(
                f"the captured step takes {len(self.inputs)} input(s), got {len(inputs)}"
            )
        for k, (new, static) in enumerate(zip(inputs, self.inputs, strict=True)):
            if (
                not isinstance(new, torch.Tensor)
                or new.shape != static.shape
                or new.dtype != static.dtype
            ):
                got = (
                    (tuple(new.shape), new.dtype)
                    if isinstance(new, torch.Tensor)
                    else type(new).__name__
                )
                raise CudaGraphError(
                    f"input {k} must match the captured one, shape {tuple(static.shape)} and "
                    f"dtype {static.dtype}, got {got}: a CUDA graph replays fixed shapes "
                    "(capture another step for another shape)"
                )
            static.copy_(new, non_blocking=True)
        return self.replay()


def _check_optimizers(optimizers: Iterable[torch.optim.Optimizer]) -> None:
    for opt in optimizers:
        for group in opt.param_groups:
            if group.get("capturable") is False:
                raise CudaGraphError(
                    f"{type(opt).__name__} was created with capturable=False: its step count "
                    "lives on the CPU and cannot be replayed; create it with capturable=True "
                    f"(torch.optim.{type(opt).__name__}(params, ..., capturable=True))"
                )


def cuda_graph_capture(
    step: Callable[..., Any],
    *inputs: torch.Tensor,
    warmup: int = 3,
    pool: Any = None,
    optimizers: Sequence[torch.optim.Optimizer] = (),
) -> CapturedStep:
    """Capture ``step(*inputs)`` (forward, backward, optimizer step) as a replayable CUDA graph.

    ``inputs`` become the static input tensors (CUDA tensors; they are used as given, not
    copied). ``warmup`` real runs happen first on a side stream, then one run is recorded (a
    recorded run computes nothing: call or :meth:`~CapturedStep.replay` the result to run it).
    ``pool`` shares a memory pool with other captures (:func:`cuda_graph_pool_handle`);
    ``optimizers`` are checked to be capturable. See the module documentation for the limits.
    """
    _need_cuda("cuda_graph_capture()")
    if warmup < 1:
        raise CudaGraphError(
            f"warmup={warmup}: at least one warm-up run is needed before capture (it creates the "
            ".grad tensors and optimizer state the recorded step writes into)"
        )
    for k, t in enumerate(inputs):
        if not isinstance(t, torch.Tensor) or t.device.type != "cuda":
            where = t.device if isinstance(t, torch.Tensor) else type(t).__name__
            raise CudaGraphError(f"input {k} must be a CUDA tensor, got {where}")
    _check_optimizers(optimizers)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warmup):
            step(*inputs)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, pool=pool):
        output = step(*inputs)
    return CapturedStep(graph, tuple(inputs), output)
