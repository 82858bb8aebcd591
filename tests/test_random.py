"""fl.manual_seed and fl.Rng: reproducibility within a process, across processes, across runs."""

from __future__ import annotations

import copy
import doctest
import importlib
import json
import os
import random
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch

import flodl as fl
from flodl.random import RngError

REPO_ROOT = Path(__file__).resolve().parents[1]


def test_names_are_top_level():
    assert fl.manual_seed is fl.random.manual_seed and fl.Rng is fl.random.Rng
    assert {"manual_seed", "Rng"} <= set(fl.__all__)


def test_manual_seed_seeds_torch_python_and_numpy():
    def draw():
        return torch.rand(3).tolist(), random.random(), np.random.rand(2).tolist()

    fl.manual_seed(123)
    first = draw()
    fl.manual_seed(123)
    assert draw() == first
    fl.manual_seed(124)
    assert draw() != first
    assert torch.initial_seed() == 124


def test_manual_seed_accepts_64_bit_seeds_and_rejects_others():
    fl.manual_seed(2**64 - 1)  # numpy gets seed % 2**32
    assert torch.initial_seed() == 2**64 - 1
    for bad in (-1, 2**64):
        with pytest.raises(RngError, match=r"\[0, 2\*\*64\)"):
            fl.manual_seed(bad)
    with pytest.raises(RngError, match="integer"):
        fl.manual_seed(1.5)


# Golden values: the stream must never change with the machine, the process or a release.
def test_rng_stream_is_fixed_by_the_seed():
    assert [fl.Rng(42).u64() for _ in range(1)] == [14276969152011380360]
    r = fl.Rng(42)
    assert [r.u64() for _ in range(3)] == [
        14276969152011380360,
        8095878257575067585,
        15838336090824644132,
    ]
    r = fl.Rng(42)
    assert r.f64() == 0.7739560485559633
    assert r.f32() == 0.4388784170150757
    assert r.usize(1000) == 858
    assert r.range(-5, 5) == 1
    assert r.permutation(10) == [7, 3, 4, 1, 2, 9, 5, 6, 8, 0]
    assert r.normal() == -1.7439053396670585
    assert fl.Rng(2**64 - 1).u64() == 12544278110101001871


def test_different_seeds_give_different_streams():
    assert fl.Rng(1).permutation(20) != fl.Rng(2).permutation(20)


def test_ranges_and_errors():
    r = fl.Rng(0)
    assert all(0 <= r.usize(7) < 7 for _ in range(500))
    assert all(-3 <= r.range(-3, 2) < 2 for _ in range(500))
    assert r.randint(5, 6) == 5
    assert all(0.0 <= r.f64() < 1.0 for _ in range(500))
    assert all(float(np.float32(x)) == x for x in (r.f32() for _ in range(100)))
    with pytest.raises(RngError, match=r"usize\(0\) is undefined"):
        r.usize(0)
    with pytest.raises(RngError, match=r"Rng\.range requires low < high, got 3 >= 3"):
        r.range(3, 3)
    with pytest.raises(RngError, match="non-empty"):
        r.choice([])
    with pytest.raises(RngError, match="seed"):
        fl.Rng(-5)


def test_usize_is_unbiased_for_huge_bounds():
    # A modulo reduction of 64-bit draws would put ~1/2 (not 2/3) of them below 2**63 here.
    n = 3 * 2**62
    r = fl.Rng(9)
    below = sum(r.usize(n) < 2**63 for _ in range(6000)) / 6000
    assert below == pytest.approx(2 / 3, abs=0.03)


def test_bernoulli_limits_and_rate():
    r = fl.Rng(3)
    assert not any(r.bernoulli(0.0) for _ in range(200))
    assert not any(r.bernoulli(-1.0) for _ in range(50))
    assert all(r.bernoulli(1.0) for _ in range(200))
    assert sum(r.bernoulli(0.3) for _ in range(10_000)) / 10_000 == pytest.approx(0.3, abs=0.02)


def test_normal_statistics():
    r = fl.Rng(5)
    xs = np.array([r.normal(5.0, 0.1) for _ in range(10_000)])
    assert xs.mean() == pytest.approx(5.0, abs=0.01)
    assert xs.std() == pytest.approx(0.1, abs=0.01)


def test_shuffle_is_a_uniform_permutation():
    r = fl.Rng(11)
    counts = Counter()
    for _ in range(6000):
        items = ["a", "b", "c"]
        r.shuffle(items)
        counts[tuple(items)] += 1
    assert len(counts) == 6
    assert all(800 < c < 1200 for c in counts.values())
    assert r.choice("xyz") in "xyz"


def test_shuffle_moves_tensor_and_array_rows_whole_in_the_list_order():
    order = list(range(6))
    fl.Rng(1).shuffle(order)
    assert order == [1, 5, 2, 0, 4, 3]  # lists keep their order for a seed (ported runs rely on it)

    t = torch.arange(6)
    fl.Rng(1).shuffle(t)  # swapping through views used to give [0, 0, 2, 0, 4, 3]
    assert t.tolist() == order

    base = torch.arange(12.0).reshape(2, 6)
    fl.Rng(1).shuffle(base.t())  # a non-contiguous view: its rows move, in place in `base`
    assert base.tolist() == [[float(i) for i in order], [float(6 + i) for i in order]]

    a = np.arange(12).reshape(6, 2)
    fl.Rng(1).shuffle(a)  # rows used to be duplicated
    assert a.tolist() == [[2 * i, 2 * i + 1] for i in order]

    w = torch.zeros(4, requires_grad=True)
    fl.Rng(1).shuffle(w)  # a leaf that requires grad is reordered too
    assert w.requires_grad and w.shape == (4,)


def test_shuffle_of_a_computed_tensor_routes_gradients_with_the_rows():
    order = fl.Rng(1).permutation(6)
    w = torch.arange(6.0, requires_grad=True)
    x = w * 1  # not a leaf: the shuffle is part of the computation
    fl.Rng(1).shuffle(x)
    c = torch.arange(10.0, 16.0)
    (x * c).sum().backward()
    # x[k] = w[order[k]], so w[order[k]] receives c[k]
    expected = torch.empty(6)
    expected[torch.tensor(order)] = c
    assert x.tolist() == [float(i) for i in order]
    assert w.grad is not None and torch.equal(w.grad, expected)

    v = torch.zeros(3, 2, requires_grad=True)
    fl.Rng(1).shuffle(v.t())  # a view of a parameter is reordered as data (autograd refuses)


@pytest.mark.parametrize("items", [(1, 2, 3), "abc", range(3)])
def test_shuffle_refuses_what_it_cannot_shuffle_in_place(items):
    with pytest.raises(RngError, match=f"shuffles in place.*got {type(items).__name__}"):
        fl.Rng(1).shuffle(items)
    with pytest.raises(RngError, match="at least one dimension"):
        fl.Rng(1).shuffle(torch.tensor(3))


def test_clone_continues_the_same_stream_independently():
    r = fl.Rng(8)
    r.u64()
    twin, shallow, deep = r.clone(), copy.copy(r), copy.deepcopy(r)
    ahead = [r.u64() for _ in range(300)]  # crosses a buffer refill
    assert [twin.u64() for _ in range(300)] == ahead
    assert [deep.u64() for _ in range(300)] == ahead
    assert [shallow.u64() for _ in range(300)] == ahead  # not disturbed by r's draws


def test_state_dict_round_trips_through_json():
    r = fl.Rng(13)
    for _ in range(37):
        r.u64()
    state = json.loads(json.dumps(r.state_dict()))
    restored = fl.Rng(0)
    restored.load_state_dict(state)
    assert [restored.u64() for _ in range(500)] == [r.u64() for _ in range(500)]
    with pytest.raises(RngError, match="not an Rng state"):
        restored.load_state_dict({"bit_generator": "MT19937"})


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"state": -1}, "outside"),
        ({"inc": 1 << 128}, "outside"),
        ({"has_uint32": 2}, "outside"),
        ({"uinteger": "7"}, "expected an integer"),
        ({"buffer": [1, 2, 1 << 64]}, "outside"),
        ({"buffer": [1] * 257}, "at most 256"),
        ({"buffer": None}, "malformed"),
    ],
)
def test_a_malformed_state_is_refused_and_changes_nothing(change, message):
    good = fl.Rng(5)
    for _ in range(3):
        good.u64()
    target = fl.Rng(9)
    twin = target.clone()
    state = {**good.state_dict(), **change}
    with pytest.raises(RngError, match=message):
        target.load_state_dict(state)
    assert [target.u64() for _ in range(300)] == [twin.u64() for _ in range(300)]


def test_torch_generator_is_seeded_from_the_stream():
    a, b = fl.Rng(21).torch_generator(), fl.Rng(21).torch_generator()
    assert torch.equal(torch.randperm(50, generator=a), torch.randperm(50, generator=b))
    r = fl.Rng(21)
    first, second = r.torch_generator(), r.torch_generator()
    assert first.initial_seed() != second.initial_seed()  # each call advances the stream


def test_from_entropy_differs_between_calls():
    assert fl.Rng.from_entropy().u64() != fl.Rng.from_entropy().u64()


# -- across processes: the same seed gives the same values and the same training run ----------

SCRIPT = """
import json, torch, flodl as fl
from flodl.nn.functional import focal_loss
torch.set_num_threads(1)
rng = fl.Rng(2024)
print([rng.u64() for _ in range(3)], rng.permutation(12), rng.normal().hex())
fl.manual_seed(7)
net = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.ReLU(), torch.nn.Dropout(0.1), torch.nn.Linear(16, 3))
opt = fl.optim.Adam(net.parameters(), lr=0.01)
sched = fl.optim.WarmupScheduler(fl.optim.CosineScheduler(0.01, 1e-4, 20), 0.01, 5)
x, y = torch.randn(64, 6), torch.randint(0, 3, (64,))
losses = []
for step in range(25):
    order = rng.permutation(64)[:16]
    fl.optim.apply(sched, opt, step)
    loss = focal_loss(net(x[order]), y[order], 0.25, 2.0)
    opt.zero_grad()
    loss.backward()
    fl.optim.clip_grad_norm(net, 1.0)
    opt.step()
    losses.append(loss.item().hex())
print(json.dumps(losses))
"""


def run_script(hash_seed: str) -> str:
    env = {**os.environ, "PYTHONHASHSEED": hash_seed, "OMP_NUM_THREADS": "1"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_seeded_runs_are_bit_identical_in_separate_processes():
    first, second = run_script("1"), run_script("2")
    assert first == second
    rng_line, losses_line = first.splitlines()
    same_seed_here = fl.Rng(2024)
    assert rng_line.startswith(str([same_seed_here.u64() for _ in range(3)]))
    losses = [float.fromhex(h) for h in json.loads(losses_line)]
    assert len(set(losses)) > 1 and losses[-1] < losses[0]  # it really trained


def test_docstring_examples():
    result = doctest.testmod(importlib.import_module("flodl.random"), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0, "flodl.random has no examples"
    assert result.failed == 0
