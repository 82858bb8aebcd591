"""False failure (fixed): a script with a required argument is checked with its arguments
(`fdl check required_arguments.py -- --dataset fake`); without them the report shows argparse's
own message."""

import argparse

import flodl as fl

parser = argparse.ArgumentParser()
parser.add_argument("--dataset", choices=["fake"], required=True)
args = parser.parse_args()
print("dataset", args.dataset, "smoke", fl.smoke_enabled())
