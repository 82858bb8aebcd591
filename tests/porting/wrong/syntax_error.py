"""A port with a syntax error."""

import flodl as fl

model = fl.FlowBuilder(
    .through(None)
