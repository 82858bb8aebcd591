"""Adam/AdamW/SGD factories (kernel choice) and the clipping helpers."""

from __future__ import annotations

import importlib
import math
from functools import partial
from types import SimpleNamespace

import pytest
import torch

import flodl as fl
from flodl._torch_release import TORCH_RELEASE
from flodl.optim import OptimError, clip_grad_norm, clip_grad_value, kernel_choice


def fake(device: str, dtype: torch.dtype = torch.float32) -> SimpleNamespace:
    # torch.device("cuda:0") is a plain value: no GPU is needed to describe one.
    return SimpleNamespace(device=torch.device(device), dtype=dtype)


@pytest.mark.parametrize(
    ("tensors", "expected"),
    [
        ([fake("cuda:0"), fake("cuda:1", torch.bfloat16)], {"fused": True}),
        ([fake("cuda:0", torch.float16)], {"fused": True}),
        ([fake("cuda:0"), fake("cpu")], {"foreach": True}),  # mixed devices
        ([fake("cuda:0", torch.int64)], {"foreach": True}),  # fused kernels are float-only
        ([fake("cpu"), fake("cpu", torch.float64)], {"fused": True}),  # CPU fused kernels
        ([fake("cpu", torch.int64)], {"foreach": True}),
        ([fake("meta")], {"foreach": True}),  # no fused kernels there
        ([], {"foreach": True}),
    ],
)
def test_kernel_choice(tensors, expected):
    assert kernel_choice(tensors) == expected


def model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))


@pytest.mark.parametrize(
    ("factory", "cls", "kwargs"),
    [
        (fl.optim.Adam, torch.optim.Adam, {"lr": 0.01}),
        (fl.optim.AdamW, torch.optim.AdamW, {"lr": 0.01}),
        (fl.optim.SGD, torch.optim.SGD, {"lr": 0.01, "momentum": 0.9}),
    ],
)
def test_factories_use_fused_on_cpu_and_train_like_torch(factory, cls, kwargs):
    x, y = torch.randn(32, 4, generator=torch.Generator().manual_seed(1)), torch.ones(32, 1)
    ours_model, ref_model = model(), model()
    ours = factory(ours_model.parameters(), **kwargs)
    ref = cls(ref_model.parameters(), **kwargs, foreach=False)
    assert type(ours) is cls
    assert ours.param_groups[0]["fused"] is True and not ours.param_groups[0]["foreach"]
    for m, opt in ((ours_model, ours), (ref_model, ref)):
        for _ in range(5):
            opt.zero_grad()
            torch.nn.functional.mse_loss(m(x), y).backward()
            opt.step()
    for a, b in zip(ours_model.parameters(), ref_model.parameters(), strict=True):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize(
    ("factory", "module", "kernel"),
    [
        (fl.optim.Adam, "torch.optim.adam", "_fused_adam"),
        # AdamW runs Adam's kernels (its own before torch 2.7)
        (
            fl.optim.AdamW,
            *(
                ("torch.optim.adam", "_fused_adam")
                if TORCH_RELEASE >= (2, 7)
                else ("torch.optim.adamw", "_fused_adamw")
            ),
        ),
        (fl.optim.SGD, "torch.optim.sgd", "_fused_sgd"),
    ],
)
def test_the_fused_choice_reaches_torchs_step_on_cpu(factory, module, kernel, monkeypatch):
    """Not just a recorded option: torch's step really dispatches to the fused kernel."""
    net = model()
    opt = factory(net.parameters(), lr=0.01)
    assert opt.defaults["fused"] is True and not opt.defaults["foreach"]
    calls = []
    module = importlib.import_module(module)
    real = getattr(module, kernel)
    monkeypatch.setattr(module, kernel, lambda *a, **k: calls.append(1) or real(*a, **k))
    net(torch.ones(2, 4)).sum().backward()
    opt.step()
    assert calls == [1]


def test_described_cuda_parameters_make_the_factory_ask_torch_for_fused(monkeypatch):
    """Without a GPU: the keyword torch's constructor receives for CUDA float parameters."""
    received = {}

    class Recording:
        def __init__(self, params, **kwargs):
            received.update(kwargs)

    monkeypatch.setattr(torch.optim, "AdamW", Recording)
    fl.optim.AdamW([fake("cuda:0"), fake("cuda:0", torch.bfloat16)], lr=0.01)
    assert received["fused"] is True and "foreach" not in received


def test_factory_defaults_are_torchs_and_the_originals():
    p = [torch.zeros(1, requires_grad=True)]
    adam = fl.optim.Adam(p).param_groups[0]
    assert (adam["lr"], adam["betas"], adam["eps"], adam["weight_decay"]) == (
        1e-3,
        (0.9, 0.999),
        1e-8,
        0.0,
    )
    assert fl.optim.AdamW(p, 1e-3, 0.05).param_groups[0]["weight_decay"] == 0.05
    assert fl.optim.AdamW(p).param_groups[0]["weight_decay"] == 0.01
    assert fl.optim.SGD(p, 0.1, 0.9).param_groups[0]["momentum"] == 0.9


def test_explicit_kernel_keyword_wins():
    p = [torch.zeros(1, requires_grad=True)]
    group = fl.optim.Adam(p, fused=False).param_groups[0]
    assert group["fused"] is False and group["foreach"] is None
    group = fl.optim.Adam(p, foreach=False).param_groups[0]
    assert group["foreach"] is False


def test_param_groups_and_named_parameters():
    net = model()
    opt = fl.optim.Adam(
        [{"params": net[0].parameters(), "lr": 0.1}, {"params": net[2].parameters()}], lr=0.01
    )
    assert [g["lr"] for g in opt.param_groups] == [0.1, 0.01]
    assert len(fl.optim.SGD(net.named_parameters(), 0.1).param_groups[0]["params"]) == 4
    # named, in a group too: torch keeps the names from 2.6; before it the tensors alone go in
    named = fl.optim.SGD([{"params": net[0].named_parameters(), "lr": 0.2}], 0.1).param_groups[0]
    assert [p is q for p, q in zip(named["params"], net[0].parameters(), strict=True)] == [True] * 2
    assert named.get("param_names") == (["weight", "bias"] if TORCH_RELEASE >= (2, 6) else None)
    group = {"params": net[0].weight, "lr": 0.5}
    fl.optim.SGD([group], 0.1)
    assert group == {"params": net[0].weight, "lr": 0.5}  # the caller's dict is left alone


def test_empty_parameters_are_a_clear_error():
    with pytest.raises(OptimError, match="empty parameter list"):
        fl.optim.Adam([])
    with pytest.raises(OptimError, match="'params'"):
        fl.optim.Adam([{"lr": 0.1}])


@pytest.mark.parametrize(
    ("params", "match"),
    [
        # a tensor iterates row by row: torch would report "can't optimize a non-leaf Tensor"
        (lambda net: net[0].weight, r"got a single Tensor of shape \[8, 4\]: wrap it in a list"),
        # a dict iterates key by key: the strings used to fail on `.device`
        (lambda net: {"params": net.parameters()}, r"got a single dict \(keys \['params'\]\)"),
        (lambda net: 3, "iterable of tensors or of param-group dicts, got int"),
        (lambda net: ["weight"], "can only optimize tensors.*params is str 'weight'"),
        (lambda net: [{"params": 0.5}], "can only optimize tensors.*params is float 0.5"),
        (lambda net: [("w", None)], "can only optimize tensors.*params is NoneType None"),
    ],
    ids=["tensor", "dict", "int", "string", "group of a float", "named None"],
)
@pytest.mark.parametrize("factory", [fl.optim.Adam, fl.optim.AdamW, partial(fl.optim.SGD, lr=0.1)])
def test_params_that_are_not_tensors_or_groups_are_a_clear_error(factory, params, match):
    with pytest.raises(OptimError, match=match):
        factory(params(model()))


# -- clipping -------------------------------------------------------------------------------------


def with_grad(*values: float) -> torch.Tensor:
    p = torch.zeros(len(values), requires_grad=True)
    p.grad = torch.tensor(values)
    return p


def test_clip_norm_scales_above_the_limit_and_returns_the_norm_before():
    p = with_grad(3.0, 4.0)
    total = clip_grad_norm([p], 1.0)
    assert type(total) is float and total == 5.0
    scale = 1.0 / (5.0 + 1e-6)
    assert p.grad.tolist() == pytest.approx([3.0 * scale, 4.0 * scale], rel=1e-6)
    assert p.grad.norm().item() == pytest.approx(1.0, abs=1e-5)


def test_clip_norm_below_the_limit_changes_nothing():
    p = with_grad(0.5)
    assert clip_grad_norm(p, 10.0) == 0.5
    assert p.grad.tolist() == [0.5]


def test_clip_norm_is_global_over_parameters_and_accepts_modules():
    assert clip_grad_norm([with_grad(3.0), with_grad(4.0)], 100.0) == 5.0
    net = torch.nn.Linear(3, 1)
    net(torch.ones(2, 3)).sum().backward()
    expected = torch.linalg.vector_norm(torch.cat([p.grad.flatten() for p in net.parameters()]))
    assert clip_grad_norm(net, 1e9) == pytest.approx(expected.item(), rel=1e-6)


def test_clip_norm_matches_torch_when_clipping():
    gen = torch.Generator().manual_seed(3)
    ours = [with_grad(*torch.randn(5, generator=gen).tolist()) for _ in range(3)]
    ref = [with_grad(*p.grad.tolist()) for p in ours]
    total = clip_grad_norm(ours, 0.5)
    ref_total = torch.nn.utils.clip_grad_norm_(ref, 0.5)
    assert total == pytest.approx(ref_total.item(), rel=1e-6)
    for a, b in zip(ours, ref, strict=True):
        torch.testing.assert_close(a.grad, b.grad)


def test_clip_norm_of_float32_gradients_is_bit_identical_to_torchs():
    gen = torch.Generator().manual_seed(4)
    ours = [with_grad(*(torch.randn(n, generator=gen) * 10).tolist()) for n in (1, 7, 1000, 33_333)]
    ref = [with_grad(*p.grad.tolist()) for p in ours]
    assert clip_grad_norm(ours, 1e9) == torch.nn.utils.clip_grad_norm_(ref, 1e9).item()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_clip_norm_measures_half_precision_gradients_in_float32(dtype):
    # 100,000 gradients of 300: a norm of ~94,868, above float16's largest value (65,504). Measured
    # in float16 it was inf, so the "skip the step when the norm is not finite" advice never
    # let a float16 run step.
    p = torch.zeros(100_000, dtype=dtype, requires_grad=True)
    p.grad = torch.full((100_000,), 300.0, dtype=dtype)
    other = with_grad(3.0, 4.0)  # float32 alongside: one global norm over both dtypes
    total = clip_grad_norm([p, other], 1.0)
    assert total == pytest.approx(math.hypot(300.0 * math.sqrt(100_000), 5.0), rel=1e-3)
    assert p.grad.dtype == dtype and bool(p.grad.isfinite().all())
    clipped = math.hypot(p.grad.double().norm().item(), other.grad.double().norm().item())
    assert clipped == pytest.approx(1.0, rel=1e-2)


@pytest.mark.parametrize(
    "grads",
    [
        [(math.inf, 1.0), (2.0,)],  # an infinite gradient
        [(-math.inf,), (math.nan, 1.0)],
        [(math.nan, 1.0), (2.0,)],  # a NaN gradient
        [(3e38, 3e38), (1.0,)],  # finite gradients whose float32 norm overflows
    ],
    ids=["inf", "-inf and nan", "nan", "overflow"],
)
def test_clip_norm_leaves_gradients_untouched_when_the_norm_is_not_finite(grads):
    """A deliberate deviation from the original, which scales by max_norm / (inf + 1e-6) = 0."""
    params = [with_grad(*g) for g in grads]
    total = clip_grad_norm(params, 1.0)
    assert not math.isfinite(total)
    for p, g in zip(params, grads, strict=True):
        expected = torch.tensor(g)
        assert torch.equal(p.grad, expected) or (
            torch.equal(p.grad.isnan(), expected.isnan())
            and torch.equal(p.grad.nan_to_num(), expected.nan_to_num())
        )


def test_clip_norm_without_gradients_is_zero():
    assert clip_grad_norm([torch.zeros(2, requires_grad=True)], 1.0) == 0.0


def test_clip_value_clamps_and_returns_the_largest_before():
    p = with_grad(10.0, -5.0)
    assert clip_grad_value([p], 2.0) == 10.0
    assert p.grad.tolist() == [2.0, -2.0]
    q = with_grad(0.25)
    assert clip_grad_value(q, 1.0) == 0.25 and q.grad.tolist() == [0.25]
    assert clip_grad_value([torch.zeros(1, requires_grad=True)], 1.0) == 0.0


def test_clip_value_ignores_a_nan_maximum():
    nan, ok = with_grad(math.nan, 3.0), with_grad(-1.5)
    assert clip_grad_value([nan, ok], 10.0) == 1.5


@pytest.mark.parametrize("helper", [clip_grad_norm, clip_grad_value])
def test_clip_limits_must_be_non_negative(helper):
    with pytest.raises(OptimError, match=">= 0"):
        helper([with_grad(1.0)], -1.0)
