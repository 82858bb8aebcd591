"""fl.optim.param_groups: per-path learning rates, checked on a real optimizer step."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import flodl as fl

from .trees import composed, letter


def test_groups_by_path_with_per_group_lr_on_a_real_step():
    model = composed()
    groups = fl.optim.param_groups(model, {"encoder.hidden": 0.0, "head": 0.1})
    assert [g["name"] for g in groups] == ["encoder.hidden", "head", "(rest)"]
    opt = torch.optim.SGD(groups, lr=0.01)
    assert [g["lr"] for g in opt.param_groups] == [0.0, 0.1, 0.01]
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    model(torch.randn(4, 2)).pow(2).sum().backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    opt.step()
    for n, p in model.named_parameters():
        lr = 0.0 if n.startswith("encoder.hidden") else 0.1 if n.startswith("head") else 0.01
        torch.testing.assert_close(p, before[n] - lr * grads[n])


def test_options_dicts_and_rest_false():
    model = letter()
    groups = fl.optim.param_groups(
        model, {"letter.read": {"lr": 1e-4, "weight_decay": 0.0}}, rest=False
    )
    assert len(groups) == 1 and groups[0]["weight_decay"] == 0.0
    assert len(groups[0]["params"]) == 2
    torch.optim.AdamW(groups, lr=1e-3)  # accepted by torch


def test_overlapping_paths_are_an_error_naming_both():
    with pytest.raises(fl.optim.OptimError, match=r"'letter' and 'letter\.read' overlap"):
        fl.optim.param_groups(letter(), {"letter": 1e-3, "letter.read": 1e-4})


def test_unmatched_paths_and_bad_values():
    with pytest.raises(fl.PathError) as err:
        fl.optim.param_groups(composed(), {"encoder.hiden": 1e-3})
    assert "encoder.hidden" in err.value.suggestions
    with pytest.raises(fl.optim.OptimError, match="learning rate"):
        fl.optim.param_groups(composed(), {"head": "fast"})
    with pytest.raises(fl.optim.OptimError, match="no paths"):
        fl.optim.param_groups(composed(), {})
    with pytest.raises(fl.optim.OptimError, match="needs a flodl Graph"):
        fl.optim.param_groups(nn.Linear(2, 2), {"weight": 1e-3})
    relu = fl.FlowBuilder(nn.Linear(2, 2)).through(nn.ReLU()).tag("act").build()
    with pytest.raises(fl.optim.OptimError, match="holds no parameters"):
        fl.optim.param_groups(relu, {"act": 1e-3})
