"""``fdl port``: translate a PyTorch ``nn.Module`` into FlowBuilder code and prove it computes the same.

The pipeline, one module per stage: :mod:`.load` imports the script and builds the model and the
example inputs; :mod:`.trace` records the forward with ``torch.fx`` (untraceable parts become
opaque leaves); :mod:`.translate` turns the recorded data flow into builder calls; :mod:`.render`
writes the Python file; :mod:`.parity` runs the original and the generated graph side by side;
:mod:`.run` ties them together and makes the report.
"""

__all__: list[str] = []  # a namespace: its modules are internal (docs/development.md)
