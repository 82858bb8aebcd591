"""Loading into named tensors: partial loads, the LoadReport, casts, hashes, tied weights."""

from __future__ import annotations

import io
import logging

import pytest
import torch
from torch import nn

import flodl as fl
from tests.checkpoint.layout import Tiny, hash_of


def saved(params, buffers=None, digest=None, **kwargs) -> io.BytesIO:
    buf = io.BytesIO()
    fl.save_checkpoint(buf, params, buffers, digest, **kwargs)
    buf.seek(0)
    return buf


def test_round_trip_of_a_module_loads_everything(tiny):
    tiny.norm.running_mean.fill_(0.25)
    src = saved(tiny.named_parameters(), tiny.named_buffers())
    torch.manual_seed(1)
    fresh = Tiny()
    report = fl.load_checkpoint(src, fresh.named_parameters(), fresh.named_buffers())
    names = [n for n, _ in tiny.named_parameters()] + [n for n, _ in tiny.named_buffers()]
    assert report.loaded == names and report.complete and report.verified
    assert report.skipped == report.missing == report.mismatches == []
    for (_, a), (_, b) in zip(tiny.state_dict().items(), fresh.state_dict().items(), strict=True):
        assert torch.equal(a, b)


def test_partial_load_reports_skipped_and_missing_and_keeps_missing_values():
    src = saved({"a": torch.ones(2), "b": torch.ones(3), "old": torch.ones(1)})
    a, b, extra = torch.zeros(2), torch.zeros(3), torch.full((4,), 5.0)
    report = fl.load_checkpoint(src, [("a", a), ("b", b), ("extra", extra)])
    assert (report.loaded, report.skipped, report.missing) == (["a", "b"], ["old"], ["extra"])
    assert not report.complete
    assert torch.equal(extra, torch.full((4,), 5.0)) and torch.equal(a, torch.ones(2))
    text = str(report)
    assert "loaded 2, skipped 1, missing 1" in text and "missing: extra" in text


def _warnings(caplog) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "flodl.checkpoint" and r.levelno == logging.WARNING
    ]


def test_a_partial_load_logs_a_warning_naming_what_was_left_out(tmp_path, caplog):
    path = tmp_path / "m.fdl"
    fl.save_checkpoint(path, {"a": torch.ones(2), "b": torch.ones(3), "old": torch.ones(1)})
    with caplog.at_level(logging.WARNING, logger="flodl.checkpoint"):
        fl.load_checkpoint(path, {"a": torch.zeros(2), "b": torch.zeros(3)}, {"n": torch.zeros(1)})
        assert _warnings(caplog) == [
            f"{path}: partial load, 2 of 3 model entries loaded — not in the file (they keep "
            "their values): 'n' (1 entry); in the file but not in the model (skipped): 'old' "
            "(1 entry)"
        ]
        caplog.clear()
        fl.load_checkpoint(path, {"a": torch.zeros(5), "b": torch.zeros(3)}, strict_shapes=False)
        assert _warnings(caplog) == [
            f"{path}: partial load, 1 of 2 model entries loaded — skipped for their shape: "
            "'a' (1 entry); in the file but not in the model (skipped): 'old' (1 entry)"
        ]
        caplog.clear()
        graph = fl.FlowBuilder(nn.Linear(2, 2)).label("enc").build()
        host = fl.FlowBuilder(graph).through(nn.Linear(2, 1)).build()
        fl.save_checkpoint(tmp_path / "enc.fdl", {"linear_1.weight": torch.ones(2, 2)})
        host.load_subgraph_checkpoint("enc", tmp_path / "enc.fdl", strict_hash=False)
        (message,) = _warnings(caplog)  # in the composed model's names
        assert "1 of 2 model entries loaded" in message and "'enc.linear_1.bias'" in message
        caplog.clear()
        fl.load_checkpoint(path, {"a": torch.zeros(2), "b": torch.zeros(3), "old": torch.zeros(1)})
        assert _warnings(caplog) == []  # a complete load says nothing


def test_empty_file_and_empty_model():
    report = fl.load_checkpoint(saved({}), {})
    assert (report.loaded, report.skipped, report.missing) == ([], [], [])
    assert fl.load_checkpoint(saved({}), {"w": torch.zeros(1)}).missing == ["w"]


def test_shape_mismatch_is_an_error_and_changes_nothing():
    src = saved({"first": torch.ones(2), "w": torch.ones(4, 8)})
    first, w = torch.zeros(2), torch.zeros(8, 4)
    with pytest.raises(fl.CheckpointError) as info:
        fl.load_checkpoint(src, {"first": first, "w": w})
    message = str(info.value)
    assert 'parameter "w": shape mismatch: checkpoint=[4, 8] model=[8, 4]' in message
    assert "strict_shapes=False" in message and "nothing was loaded" in message
    assert torch.equal(first, torch.zeros(2))  # the valid entry before it was not applied


def test_buffer_shape_mismatch_is_named_as_a_buffer():
    with pytest.raises(fl.CheckpointError, match=r'buffer "m": shape mismatch'):
        fl.load_checkpoint(saved({}, {"m": torch.ones(3)}), {}, {"m": torch.zeros(2)})


def test_strict_shapes_false_skips_and_reports_mismatches():
    src = saved({"head": torch.ones(10, 4), "body": torch.ones(4)})
    head, body = torch.zeros(3, 4), torch.zeros(4)
    report = fl.load_checkpoint(src, {"head": head, "body": body}, strict_shapes=False)
    assert report.loaded == ["body"]
    assert [str(m) for m in report.mismatches] == ["head: shape checkpoint=[10, 4] model=[3, 4]"]
    assert not report.complete and torch.equal(head, torch.zeros(3, 4))


@pytest.mark.parametrize("kind", ["param", "buffer"])
def test_dtype_differences_are_cast_and_reported(kind):
    target = torch.zeros(3, dtype=torch.float64)
    args = ({"x": target}, None) if kind == "param" else ({}, {"x": target})
    src = saved(*(({"x": torch.ones(3)}, None) if kind == "param" else ({}, {"x": torch.ones(3)})))
    report = fl.load_checkpoint(src, *args)
    assert report.loaded == ["x"] and target.dtype == torch.float64
    assert torch.equal(target, torch.ones(3, dtype=torch.float64))
    assert [(m.kind, m.checkpoint, m.model) for m in report.mismatches] == [
        ("dtype", "float32", "float64")
    ]
    assert report.complete  # a cast is not a gap


def test_a_name_that_is_both_parameter_and_buffer_goes_to_the_parameter():
    p, b = torch.zeros(1), torch.zeros(1)
    report = fl.load_checkpoint(saved({"x": torch.ones(1)}), {"x": p}, {"x": b})
    assert report.loaded == ["x"] and report.missing == ["x"] and p.item() == 1 and b.item() == 0


def test_same_hash_loads_and_different_hash_is_an_architecture_mismatch():
    mine, other = hash_of("mine"), hash_of("other")
    w = torch.zeros(2)
    assert fl.load_checkpoint(
        saved({"w": torch.ones(2)}, None, mine), {"w": w}, None, mine
    ).loaded == ["w"]
    with pytest.raises(fl.CheckpointError) as info:
        fl.load_checkpoint(saved({"w": torch.full((2,), 3.0)}, None, other), {"w": w}, None, mine)
    message = str(info.value)
    assert (
        "architecture mismatch" in message
        and f"file={other}" in message
        and f"model={mine}" in message
    )
    assert "structural_hash=None" in message  # the opt-out is named
    assert torch.equal(w, torch.ones(2))


def test_a_zero_hash_on_either_side_skips_the_check():
    w = torch.zeros(1)
    assert fl.load_checkpoint(saved({"w": torch.ones(1)}), {"w": w}, None, hash_of("m")).loaded == [
        "w"
    ]
    assert fl.load_checkpoint(saved({"w": torch.ones(1)}, None, hash_of("f")), {"w": w}).loaded == [
        "w"
    ]
    with pytest.raises(fl.CheckpointError, match="expected 64 hex chars"):
        fl.load_checkpoint(saved({"w": torch.ones(1)}), {"w": w}, None, "not-a-hash")


def test_gz_with_hash(tmp_path):
    path = tmp_path / "m.fdl.gz"
    fl.save_checkpoint(path, {"w": torch.ones(2)}, None, hash_of("a"))
    assert fl.load_checkpoint(path, {"w": torch.zeros(2)}, None, hash_of("a")).verified
    with pytest.raises(fl.CheckpointError, match="architecture mismatch"):
        fl.load_checkpoint(path, {"w": torch.zeros(2)}, None, hash_of("b"))


class TiedLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(10, 4)
        self.out = nn.Linear(4, 10, bias=False)
        self.out.weight = self.embed.weight


@pytest.mark.parametrize("remove_duplicate", [True, False])
def test_tied_weights_round_trip_and_stay_tied(remove_duplicate):
    torch.manual_seed(0)
    model = TiedLM()
    src = saved(model.named_parameters(remove_duplicate=remove_duplicate))
    torch.manual_seed(1)
    fresh = TiedLM()
    report = fl.load_checkpoint(src, fresh.named_parameters(remove_duplicate=remove_duplicate))
    assert report.complete
    assert fresh.out.weight is fresh.embed.weight
    assert torch.equal(fresh.embed.weight, model.embed.weight)


def test_loading_into_parameters_that_require_grad_keeps_them_leaves():
    p = nn.Parameter(torch.zeros(3))
    fl.load_checkpoint(saved({"p": torch.ones(3)}), {"p": p})
    assert (
        p.requires_grad
        and p.is_leaf
        and p.grad_fn is None
        and torch.equal(p.detach(), torch.ones(3))
    )


def test_the_originals_v1_file_loads_by_name(tmp_path):
    from tests.checkpoint.layout import FIXTURES

    w = torch.zeros(3, 4)
    report = fl.load_checkpoint(FIXTURES / "original_v1.fdl", {"linear_0/weight": w})
    assert report.version == 1 and report.loaded == ["linear_0/weight"] and len(report.skipped) == 6
    assert torch.equal(w, torch.arange(12.0).reshape(3, 4) / 4)


@pytest.mark.parametrize(
    "stored", [torch.full((3,), 2.0), torch.full((3,), 2.0, dtype=torch.float64)], ids=str
)
def test_a_load_into_a_tensor_saved_for_backward_is_seen_by_autograd(stored):
    """Regression: the memcpy path (same dtype) bypassed the version counter, so backward used
    the loaded values silently; torch's copy_ (the cast path) always raised."""
    p = nn.Parameter(torch.ones(3))
    loss = (p * p).sum()  # saves p for backward
    version = p._version
    fl.load_checkpoint(saved({"p": stored}), {"p": p})
    assert p._version > version and torch.equal(p.detach(), torch.full((3,), 2.0))
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()


def test_a_training_state_load_is_seen_by_autograd():
    net = nn.Linear(2, 1)
    buf = io.BytesIO()
    fl.save_training_state(buf, nn.Linear(2, 1), rng=False)
    buf.seek(0)
    loss = net.weight.pow(2).sum()  # saves the weight for backward
    fl.load_training_state(buf, net, restore_rng=False)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()
