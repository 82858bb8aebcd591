"""Wrong hint (fixed): Rust's `?` gets an explanation, at line 7."""

from torch import nn

import flodl as fl

model = fl.FlowBuilder(nn.Linear(4, 2)).build()?
