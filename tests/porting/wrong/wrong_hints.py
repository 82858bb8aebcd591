"""Wrong hints (fixed): torch names under fl. get their flodl or torch equivalent."""

import flodl as fl

schedule = fl.optim.StepLR(0.1, 10, 0.5)
loss_fn = fl.nn.functional.nll_loss
layer = fl.nn.LSTM(4, 8)
