"""focal_loss against a hand computation (value and gradient); gaussian_blur_2d against a 2-D conv."""

from __future__ import annotations

import math

import pytest
import torch

from flodl.nn.functional import FunctionalError, focal_loss, gaussian_blur_2d, gaussian_kernel_size

LOGITS = [[2.0, 0.0, -1.0], [0.5, 1.5, 0.0]]
TARGET = [0, 2]


def softmax(row: list[float]) -> list[float]:
    exps = [math.exp(v) for v in row]
    return [e / sum(exps) for e in exps]


def hand_focal(alpha: float, gamma: float) -> tuple[float, list[list[float]]]:
    """Mean of -a(1-p)^g log p, and its gradient dL/dz_j = dL/dp_t * p_t (delta_tj - p_j) / B."""
    batch = len(LOGITS)
    loss, grad = 0.0, []
    for row, t in zip(LOGITS, TARGET, strict=True):
        p = softmax(row)
        pt = p[t]
        loss += -alpha * (1 - pt) ** gamma * math.log(pt)
        d_pt = -alpha * (-gamma * (1 - pt) ** (gamma - 1) * math.log(pt) + (1 - pt) ** gamma / pt)
        grad.append([d_pt * pt * ((j == t) - p[j]) / batch for j in range(len(row))])
    return loss / batch, grad


@pytest.mark.parametrize(("alpha", "gamma"), [(0.25, 2.0), (1.0, 0.5), (0.75, 3.0)])
def test_focal_loss_value_and_gradient_match_the_hand_computation(alpha, gamma):
    logits = torch.tensor(LOGITS, dtype=torch.float64, requires_grad=True)
    loss = focal_loss(logits, torch.tensor(TARGET), alpha, gamma)
    expected_loss, expected_grad = hand_focal(alpha, gamma)
    assert loss.item() == pytest.approx(expected_loss, rel=1e-12)
    loss.backward()
    assert logits.grad.tolist() == [pytest.approx(r, rel=1e-10, abs=1e-14) for r in expected_grad]


def test_focal_loss_passes_gradcheck():
    logits = torch.tensor(LOGITS, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda z: focal_loss(z, torch.tensor(TARGET)), (logits,))


def test_gamma_zero_is_alpha_times_cross_entropy():
    logits, target = torch.tensor(LOGITS), torch.tensor(TARGET)
    ce = torch.nn.functional.cross_entropy(logits, target)
    assert focal_loss(logits, target, alpha=0.5, gamma=0.0).item() == pytest.approx(0.5 * ce.item())


def test_reductions():
    logits, target = torch.tensor(LOGITS), torch.tensor(TARGET)
    per_sample = focal_loss(logits, target, reduction="none")
    assert per_sample.shape == (2,)
    assert focal_loss(logits, target, reduction="sum").item() == pytest.approx(
        per_sample.sum().item()
    )
    assert focal_loss(logits, target).item() == pytest.approx(per_sample.mean().item())
    with pytest.raises(FunctionalError, match="reduction must be"):
        focal_loss(logits, target, reduction="max")


def test_easy_examples_are_down_weighted():
    easy = focal_loss(torch.tensor([[5.0, 0.0]]), torch.tensor([0]), 1.0, 2.0)
    hard = focal_loss(torch.tensor([[0.0, 5.0]]), torch.tensor([0]), 1.0, 2.0)
    ce_easy = torch.nn.functional.cross_entropy(torch.tensor([[5.0, 0.0]]), torch.tensor([0]))
    assert easy.item() < ce_easy.item() / 100 < hard.item()


def test_extreme_logits_stay_finite():
    logits = torch.tensor([[1000.0, -1000.0], [-1000.0, 1000.0]], requires_grad=True)
    loss = focal_loss(logits, torch.tensor([0, 0]))
    loss.backward()
    assert math.isfinite(loss.item()) and torch.isfinite(logits.grad).all()
    assert loss.item() == pytest.approx(0.25 * 2000 / 2)


@pytest.mark.parametrize(
    ("logits", "target", "match"),
    [
        (torch.zeros(3), torch.zeros(3, dtype=torch.long), r"\[batch, classes\]"),
        (torch.zeros(3, 2), torch.zeros(2, dtype=torch.long), r"shape \[3\]"),
        (torch.zeros(3, 2), torch.zeros(3, 2), r"shape \[3\]"),
        (torch.zeros(3, 2), torch.zeros(3), "integer class indices"),
    ],
)
def test_focal_loss_bad_inputs(logits, target, match):
    with pytest.raises(FunctionalError, match=match):
        focal_loss(logits, target)


# -- gaussian blur --------------------------------------------------------------------------------


@pytest.mark.parametrize(("sigma", "size"), [(0.5, 5), (1.0, 7), (1.5, 11), (2.0, 13), (0.1, 3)])
def test_kernel_size_is_two_ceil_three_sigma_plus_one(sigma, size):
    assert gaussian_kernel_size(sigma) == size


def test_blur_equals_a_zero_padded_2d_gaussian_convolution():
    x = torch.randn(2, 3, 9, 11, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    sigma = 1.2
    radius = math.ceil(3 * sigma)
    w = [math.exp(-(d * d) / (2 * sigma * sigma)) for d in range(-radius, radius + 1)]
    k1 = torch.tensor(w, dtype=torch.float64) / sum(w)
    k2 = torch.outer(k1, k1).expand(3, 1, -1, -1)
    expected = torch.nn.functional.conv2d(x, k2, padding=radius, groups=3)
    torch.testing.assert_close(gaussian_blur_2d(x, sigma), expected, rtol=1e-6, atol=1e-7)


def test_blur_keeps_shape_preserves_constant_interior_and_smooths():
    ones = gaussian_blur_2d(torch.ones(1, 1, 20, 20), 1.0)
    assert ones.shape == (1, 1, 20, 20)
    assert ones[0, 0, 5:15, 5:15] == pytest.approx(torch.ones(10, 10), abs=1e-6)
    assert ones[0, 0, 0, 0].item() < 0.6  # zero padding darkens the corners (torchvision reflects)
    noise = torch.randn(1, 1, 8, 8, generator=torch.Generator().manual_seed(1))
    assert gaussian_blur_2d(noise, 2.0).var() < noise.var()  # kernel wider than the image: fine


def test_blur_is_differentiable():
    x = torch.randn(1, 2, 6, 6, requires_grad=True)
    gaussian_blur_2d(x, 0.8).sum().backward()
    assert x.grad is not None and x.grad.shape == x.shape


@pytest.mark.parametrize(
    ("x", "sigma", "match"),
    [
        (torch.zeros(3, 8, 8), 1.0, r"\[B, C, H, W\]"),
        (torch.zeros(1, 1, 8, 8, dtype=torch.long), 1.0, "floating-point"),
        (torch.zeros(1, 1, 8, 8), 0.0, "sigma must be a finite number > 0, got 0.0"),
        (torch.zeros(1, 1, 8, 8), math.inf, "sigma must be a finite number > 0, got inf"),
        (torch.zeros(1, 1, 8, 8), math.nan, "sigma must be a finite number > 0, got nan"),
        (torch.zeros(1, 1, 8, 8), "1", "sigma must be a finite number > 0, got '1'"),
    ],
)
def test_blur_bad_inputs(x, sigma, match):
    with pytest.raises(FunctionalError, match=match):
        gaussian_blur_2d(x, sigma)


def test_gaussian_blur_module_is_the_functional_without_state():
    from flodl.nn.blur import GaussianBlur

    blur = GaussianBlur(1.0)
    x = torch.randn(2, 3, 10, 10)
    assert torch.equal(blur(x), gaussian_blur_2d(x, 1.0))
    assert list(blur.parameters()) == [] and blur.state_dict() == {}
    assert blur.kernel_size == 7
    with pytest.raises(FunctionalError, match="GaussianBlur sigma must be a finite number > 0"):
        GaussianBlur(-1.0)
    with pytest.raises(FunctionalError, match=r"GaussianBlur sigma .* got inf"):
        GaussianBlur(math.inf)  # was an OverflowError from the kernel size
    with pytest.raises(FunctionalError, match=r"gaussian_kernel_size sigma .* got inf"):
        gaussian_kernel_size(math.inf)


def test_float64_blur_uses_a_float64_kernel():
    # The docstring promises float64 weights; they were rounded to float32 first (~1e-8 error).
    x = torch.zeros(1, 1, 21, 21, dtype=torch.float64)
    x[0, 0, 10, 10] = 1.0
    w = torch.tensor([math.exp(-d * d / 2.0) for d in range(-3, 4)], dtype=torch.float64)
    k = w / w.sum()
    torch.testing.assert_close(
        gaussian_blur_2d(x, 1.0)[0, 0, 7:14, 7:14], torch.outer(k, k), rtol=0, atol=1e-15
    )


def test_float32_blur_keeps_the_rust_flodls_float32_kernel_bit_for_bit():
    # Rust flodl: weights computed in f64, stored as f32, divided by (their f64 sum as f32).
    sigma = 1.3
    radius = math.ceil(3 * sigma)
    w64 = [math.exp(-(d * d) / (2 * sigma * sigma)) for d in range(-radius, radius + 1)]
    k = torch.tensor(w64, dtype=torch.float32) / torch.tensor(sum(w64), dtype=torch.float32)
    x = torch.zeros(1, 1, 2 * radius + 1, 2 * radius + 1)
    x[0, 0, radius, radius] = 1.0
    y = gaussian_blur_2d(x, sigma)[0, 0]
    assert torch.equal(y[radius], k * k[radius]) and torch.equal(y[:, radius], k * k[radius])
