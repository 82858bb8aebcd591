"""Unchecked value (fixed): a Graph returned by the script's own function is checked: line 16."""

from torch import nn

import flodl as fl


def build_model(width: int) -> fl.Graph:
    return fl.FlowBuilder(nn.Linear(4, width)).through(nn.ReLU()).build()


def main() -> None:
    model = build_model(8)
    for p in model.parameters():
        p.requires_grad_(False)
    model.save_checkpoint("model.fdl", compresion=True)


main()
