"""Each corpus port computes what its original computes: same seed, same weights, and then the
same outputs and the same gradients (of the inputs where they take one, and of every
parameter), compared with torch.equal, in train mode (dropout and sampling drawn from the same
seeded RNG) and in eval mode."""

from __future__ import annotations

import importlib.util
import itertools
import pickle
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest
import torch
from torch import nn

from tests.porting.support import CORPUS

_IDS = itertools.count()


def load(case: str, which: str) -> ModuleType:
    """``corpus/<case>/<which>.py`` imported as a module (its ``__main__`` block does not run)."""
    path = CORPUS / case / f"{which}.py"
    spec = importlib.util.spec_from_file_location(f"corpus_{case}_{which}_{next(_IDS)}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its classes pickle by name
    spec.loader.exec_module(module)
    return module


def seeded(make: Callable[[], nn.Module], seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return make()


def pair_parameters(
    a: nn.Module, b: nn.Module, rename: dict[str, str] | None = None
) -> list[tuple[str, torch.Tensor, torch.Tensor]]:
    """Each parameter of ``a`` with its twin in ``b``: by name when ``rename`` maps the original's
    name prefixes to the port's, else the first unused one of the same shape and value, in
    order (a port may register them in another order, e.g. ``pos`` first)."""
    if rename is not None:
        theirs = dict(b.named_parameters())
        pairs = []
        for name, p in a.named_parameters():
            prefix = next(k for k in rename if name.startswith(k))
            q = theirs.pop(rename[prefix] + name[len(prefix) :])
            assert torch.equal(p, q), f"{name}: the weights differ"
            pairs.append((name, p, q))
        assert not theirs, f"the port has parameters the original lacks: {list(theirs)}"
        return pairs
    free = list(b.named_parameters())
    pairs = []
    for name, p in a.named_parameters():
        index = next(i for i, (_, q) in enumerate(free) if q.shape == p.shape and torch.equal(q, p))
        pairs.append((name, p, free.pop(index)[1]))
    assert not free, f"the port has parameters the original lacks: {[n for n, _ in free]}"
    return pairs


def flat(value) -> list[torch.Tensor]:
    if isinstance(value, tuple | list):
        return [t for item in value for t in flat(item)]
    return [value]


def assert_parity(
    original: nn.Module,
    port: nn.Module,
    *inputs: torch.Tensor,
    rename: dict[str, str] | None = None,
    **kw,
) -> None:
    pairs = pair_parameters(original, port, rename)  # also proves the weights are the same
    for train in (True, False):
        original.train(train)
        port.train(train)
        original.zero_grad()
        port.zero_grad()
        xs_a = [x.clone().requires_grad_(x.is_floating_point()) for x in inputs]
        xs_b = [x.clone().requires_grad_(x.is_floating_point()) for x in inputs]
        torch.manual_seed(123)
        out_a = flat(original(*xs_a, **kw))
        torch.manual_seed(123)
        out_b = flat(port(*xs_b, **kw))
        assert len(out_a) == len(out_b)
        for u, v in zip(out_a, out_b, strict=True):
            assert torch.equal(u, v), f"outputs differ (train={train})"
        sum(t.float().sum() for t in out_a).backward()
        sum(t.float().sum() for t in out_b).backward()
        for name, p, q in pairs:
            assert torch.equal(p.grad, q.grad), f"gradient of {name} differs (train={train})"
        for x, y in zip(xs_a, xs_b, strict=True):
            if x.requires_grad:
                assert torch.equal(x.grad, y.grad), f"input gradient differs (train={train})"


def test_cnn_argparse():
    o, p = load("cnn_argparse", "original"), load("cnn_argparse", "port")
    assert_parity(seeded(o.Net), seeded(p.build_model), torch.randn(4, 1, 28, 28))


def test_lstm_classifier():
    o, p = load("lstm_classifier", "original"), load("lstm_classifier", "port")
    assert_parity(seeded(o.LSTMClassifier), seeded(p.build_model), torch.randn(4, 12, 8))


def test_vae_returns_the_same_three_values():
    o, p = load("vae", "original"), load("vae", "port")
    original = seeded(o.VAE)
    port, decoder = seeded(p.build_model)
    assert_parity(original, port, torch.rand(8, 64))
    z = torch.randn(3, 8)
    assert torch.equal(original.decode(z), decoder(z))  # sampling uses the same weights


def test_gan_generator_and_discriminator():
    o, p = load("gan", "original"), load("gan", "port")
    assert_parity(seeded(o.Generator), seeded(p.build_generator), torch.randn(16, 8))
    assert_parity(seeded(o.Discriminator), seeded(p.build_discriminator), torch.rand(16, 32))


@pytest.mark.parametrize("future", [0, 7])
def test_lstmcell_sequence_with_future_steps(future):
    o, p = load("lstmcell_lbfgs", "original"), load("lstmcell_lbfgs", "port")
    original = seeded(o.Sequence).double()
    port = seeded(p.build_model).double()
    x = torch.randn(5, 30, dtype=torch.double)
    if future:
        assert_parity(original, port, x, future=future)
    else:
        assert_parity(original, port, x)  # the default, as forward(input, future=0)


def test_lstmcell_lbfgs_closure_steps_stay_equal():
    """Two LBFGS steps (each many closure evaluations) leave the same weights."""
    o, p = load("lstmcell_lbfgs", "original"), load("lstmcell_lbfgs", "port")
    original = seeded(o.Sequence).double()
    port = seeded(p.build_model).double()
    x = torch.randn(6, 25, dtype=torch.double)
    target = torch.roll(x, -1, dims=1)
    for model in (original, port):
        optimizer = torch.optim.LBFGS(model.parameters(), lr=0.8)

        def closure(model=model, optimizer=optimizer):
            optimizer.zero_grad()
            loss = nn.functional.mse_loss(model(x), target)
            loss.backward()
            return loss

        for _ in range(2):
            optimizer.step(closure)
    for _, a, b in pair_parameters(original, port):
        assert torch.equal(a, b)


def test_transformer_block():
    o, p = load("transformer_block", "original"), load("transformer_block", "port")
    assert_parity(seeded(o.Classifier), seeded(p.build_model), torch.randn(4, 20, 16))


@pytest.mark.parametrize("upscale", [2, 3])
def test_super_resolution_with_per_layer_init(upscale):
    o, p = load("super_resolution", "original"), load("super_resolution", "port")
    original = seeded(lambda: o.Net(upscale))
    port = seeded(lambda: p.build_model(upscale))
    assert_parity(original, port, torch.rand(2, 1, 8, 8))


def test_resnet_downsample_block():
    """An earlier corpus case (its scripts train at import: a few steps, then the check)."""
    o, p = load("resnet_downsample", "original"), load("resnet_downsample", "port")
    rename = {  # the batch-norm weights are all ones: pair them by name, not by value
        "stem.": "conv2d_1.",
        "block.main.": "block.sequential_3.",
        "block.downsample.": "block.sequential_2.",
        "head.": "linear_4.",
    }
    original, port = seeded(o.ResNetTiny), seeded(p.build_model)
    assert_parity(original, port, torch.randn(4, 3, 16, 16), rename=rename)


def test_ddp_snapshots_model():
    o, p = load("ddp_snapshots", "original"), load("ddp_snapshots", "port")
    assert_parity(seeded(o.build_model), seeded(p.build_model), torch.rand(8, 20))


@pytest.mark.parametrize(
    ("case", "builder"),
    [
        ("lstm_classifier", "build_model"),
        ("lstmcell_lbfgs", "build_model"),
        ("transformer_block", "build_model"),
    ],
)
def test_ports_pickle_and_torch_save(case, builder, tmp_path):
    port = seeded(getattr(load(case, "port"), builder))
    twin = pickle.loads(pickle.dumps(port))
    path = tmp_path / "model.pt"
    torch.save(port, path)
    loaded = torch.load(path, weights_only=False)
    for a, b in zip(port.state_dict().values(), loaded.state_dict().values(), strict=True):
        assert torch.equal(a, b)
    assert [n for n, _ in twin.named_parameters()] == [n for n, _ in port.named_parameters()]


def test_every_new_case_has_a_parity_test():
    here = Path(__file__).read_text()
    for case in ("cnn_argparse", "lstm_classifier", "vae", "gan", "lstmcell_lbfgs",
                 "transformer_block", "ddp_snapshots", "resnet_downsample", "super_resolution"):  # fmt: skip
        assert f'load("{case}", "port")' in here
