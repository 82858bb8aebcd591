"""fl.nn.init: return-a-tensor initialisers with the original's formulas and arithmetic."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from flodl.nn import init


def seeded(fn, *args, **kwargs):
    torch.manual_seed(0)
    return fn(*args, **kwargs)


def test_every_initialiser_returns_float32_of_the_requested_shape():
    cases = [
        init.kaiming_uniform((3, 4), 4),
        init.kaiming_normal((3, 4), 4),
        init.xavier_uniform((3, 4), 3, 4),
        init.xavier_normal((3, 4), 3, 4),
        init.uniform_bias(4, (3,)),
        init.uniform((3, 4), -1, 1),
        init.normal((3, 4), 0, 1),
        init.trunc_normal((3, 4)),
        init.orthogonal((3, 4)),
    ]
    for t in cases:
        assert t.dtype == torch.float32 and t.device.type == "cpu"
    assert [tuple(t.shape) for t in cases] == [(3, 4)] * 4 + [(3,)] + [(3, 4)] * 4
    assert init.normal(5).shape == (5,)


def test_uniform_family_is_rand_times_two_b_minus_b_under_the_global_seed():
    b = math.sqrt(3.0) * math.sqrt(2.0) / math.sqrt(16.0)  # a = 0: sqrt(6 / fan_in)
    expected = seeded(torch.rand, (8, 16)).mul(2 * b).add(-b)
    assert torch.equal(seeded(init.kaiming_uniform, (8, 16), 16), expected)
    xb = math.sqrt(6.0 / 24.0)
    assert torch.equal(
        seeded(init.xavier_uniform, (8, 16), 16, 8),
        seeded(torch.rand, (8, 16)).mul(2 * xb).add(-xb),
    )
    ub = 1.0 / math.sqrt(16.0)
    assert torch.equal(
        seeded(init.uniform_bias, 16, (8,)), seeded(torch.rand, (8,)).mul(2 * ub).add(-ub)
    )


@pytest.mark.parametrize(
    ("a", "bound"), [(0.0, math.sqrt(6 / 25)), (math.sqrt(5), 1 / math.sqrt(25))]
)
def test_kaiming_uniform_bounds(a, bound):
    t = seeded(init.kaiming_uniform, (5000,), 25, a)
    assert t.abs().max().item() <= bound * (1 + 1e-6)
    assert t.abs().max().item() > 0.95 * bound


def test_normal_family_std():
    t = seeded(init.kaiming_normal, (20000,), 50)
    assert t.std().item() == pytest.approx(math.sqrt(2 / 50), rel=0.03)
    t = seeded(init.xavier_normal, (20000,), 30, 70)
    assert t.std().item() == pytest.approx(math.sqrt(2 / 100), rel=0.03)
    t = seeded(init.normal, (10000,), 5.0, 0.1)
    assert t.mean().item() == pytest.approx(5.0, abs=0.05)
    assert t.std().item() == pytest.approx(0.1, abs=0.02)


def test_uniform_range_and_mean():
    t = seeded(init.uniform, (1000,), -2.0, 3.0)
    assert t.min().item() >= -2.0 and t.max().item() <= 3.0
    assert t.mean().item() == pytest.approx(0.5, abs=0.2)


def test_trunc_normal_bounds_are_in_std_units_and_clamped():
    t = seeded(init.trunc_normal, (10000,), 3.0, 0.5, -2.0, 2.0)
    assert t.min().item() >= 2.0 and t.max().item() <= 4.0
    assert t.mean().item() == pytest.approx(3.0, abs=0.1)
    narrow = seeded(init.trunc_normal, (10000,), 0.0, 1.0, -0.5, 0.5)
    at_bounds = (narrow.abs() == 0.5).float().mean().item()
    assert at_bounds == pytest.approx(0.617, abs=0.03)  # P(|z| > 0.5): mass piles up at the bounds
    # torch's trunc_normal_ resamples instead: nothing lands exactly on a bound
    ref = torch.nn.init.trunc_normal_(torch.empty(10000), 0.0, 1.0, -0.5, 0.5)
    assert (ref.abs() == 0.5).sum().item() == 0


def reference_orthogonal(data: np.ndarray) -> np.ndarray:
    """The original's loops, element by element (f32 storage, f64 accumulation)."""
    n = data.shape[0]
    d = [[np.float32(v) for v in row] for row in data]
    for i in range(n):
        for j in range(i):
            dot = 0.0
            for k in range(n):
                dot += float(d[i][k]) * float(d[j][k])
            for k in range(n):
                d[i][k] = np.float32(d[i][k] - np.float32(dot * float(d[j][k])))
        norm = 0.0
        for k in range(n):
            norm += float(d[i][k]) * float(d[i][k])
        norm = max(math.sqrt(norm), 1e-10)
        for k in range(n):
            d[i][k] = np.float32(float(d[i][k]) / norm)
    return np.array(d, dtype=np.float32)


def test_orthogonal_is_bit_identical_to_the_original_arithmetic():
    drawn = seeded(torch.randn, (6, 6), dtype=torch.float32).numpy()
    ours = seeded(init.orthogonal, (6, 4))
    expected = reference_orthogonal(drawn)[:6, :4]
    assert np.array_equal(ours.numpy(), expected)


@pytest.mark.parametrize(("shape", "gram"), [((4, 4), "rows"), ((6, 4), "cols"), ((4, 6), "rows")])
def test_orthogonal_is_orthonormal(shape, gram):
    q = seeded(init.orthogonal, shape)
    product = q @ q.T if gram == "rows" else q.T @ q
    assert torch.allclose(product, torch.eye(min(shape)), atol=0.01)


def test_orthogonal_gain():
    q = seeded(init.orthogonal, (4, 4), 2.0)
    assert q.norm(dim=1).tolist() == pytest.approx([2.0] * 4, abs=0.1)
    assert torch.equal(
        seeded(init.orthogonal, (4, 4), 1.0 + 1e-12), seeded(init.orthogonal, (4, 4))
    )


def test_orthogonal_requires_2d():
    with pytest.raises(init.InitError, match="2D shape, got \\[2, 3, 4\\]"):
        init.orthogonal((2, 3, 4))


def test_initialisers_follow_manual_seed():
    import flodl as fl

    fl.manual_seed(5)
    a = init.xavier_uniform((3, 3), 3, 3)
    fl.manual_seed(5)
    assert torch.equal(a, init.xavier_uniform((3, 3), 3, 3))


# -- bad arguments: an InitError naming the argument, never a ZeroDivisionError or a silent value --


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: init.kaiming_uniform((2, 3), fan_in=0), "fan_in must be >= 1, got 0"),
        (lambda: init.kaiming_normal((2, 3), fan_in=-4), "fan_in must be >= 1, got -4"),
        (lambda: init.kaiming_uniform((2, 3), fan_in=3.5), "fan_in must be an integer, got float"),
        (lambda: init.uniform_bias(0, (3,)), "fan_in must be >= 1, got 0"),
        (lambda: init.xavier_uniform((2, 3), 0, 0), r"fan_in \+ fan_out >= 1, got 0 \+ 0"),
        (lambda: init.xavier_normal((2, 3), 0, 0), r"fan_in \+ fan_out >= 1, got 0 \+ 0"),
        (lambda: init.xavier_normal((2, 3), 4, -1), "fan_out must be >= 0, got -1"),
        # a negative std swapped the bounds: every value was mean + 2 * 1.0 = -2 ... clamped
        (lambda: init.trunc_normal(5, 0.0, -1.0), "std must be a number >= 0, got -1.0"),
        (lambda: init.trunc_normal(5, std=math.nan), "std must be a number >= 0, got nan"),
        (lambda: init.trunc_normal(5, a=2.0, b=-2.0), "a < b .* got a=2.0, b=-2.0"),
        (lambda: init.trunc_normal(5, a=1.0, b=1.0), "a < b .* got a=1.0, b=1.0"),
        (lambda: init.normal(5, std=-0.1), "std must be a number >= 0, got -0.1"),
        (lambda: init.normal((2.7, 3)), "integer sizes, got float 2.7"),  # was (2, 3)
        (lambda: init.normal(2.0), "an integer or a sequence of integers, got float 2.0"),
        (lambda: init.uniform((2, -1), 0.0, 1.0), "sizes >= 0, got -1"),
        # low > high drew from [high, low) without a word; NaN bounds or slope filled with NaN
        (lambda: init.uniform(5, 1.0, -1.0), "low <= high, got low=1.0, high=-1.0"),
        (lambda: init.uniform(5, torch.tensor([0.0, 1.0]), 2.0), "low must be a finite number"),
        (lambda: init.uniform(5, math.nan, 1.0), "low must be a finite number, got nan"),
        (lambda: init.uniform(5, 0.0, math.inf), "high must be a finite number, got inf"),
        (lambda: init.kaiming_uniform(5, 5, a=math.nan), "a .* must be a finite number, got nan"),
        (lambda: init.kaiming_normal(5, 5, a="0.1"), "a .* must be a finite number, got '0.1'"),
    ],
)
def test_bad_arguments_raise_init_error(call, match):
    with pytest.raises(init.InitError, match=match):
        call()


def test_numpy_and_tensor_integers_are_sizes_and_fans():
    assert init.normal(np.int64(3)).shape == (3,)  # was "'numpy.int64' object is not iterable"
    assert init.normal((np.int64(2), torch.tensor(3))).shape == (2, 3)
    assert init.kaiming_uniform(np.int32(4), fan_in=np.int64(4)).shape == (4,)
    assert init.xavier_uniform((3, 0), 0, 3).shape == (3, 0)  # one empty side is allowed
    torch.manual_seed(0)
    assert bool((init.trunc_normal(50, std=0.0) == 0.0).all())  # std 0: the mean itself
