"""False pass (fixed): an invented method under a flag the run does not set. Line 17 neither
runs nor can be checked statically: the check fails unless --allow-unverified."""

import argparse

from torch import nn

import flodl as fl

parser = argparse.ArgumentParser()
parser.add_argument("--save-model", action="store_true")
args = parser.parse_args()

model = fl.FlowBuilder(nn.Linear(4, 2)).build()
print("built")
if args.save_model:
    model.save_weights("model.fdl")
