"""The Trainer: one training loop on CPU, one GPU, N heterogeneous GPUs (El Che) and N machines.

Contract: DESIGN.md §3.5. Names listed in ``__all__`` are re-exported as ``flodl.<name>``
when they belong at the top level (see flodl/__init__.py).
"""

__all__: list[str] = []
