"""One module per built-in ``fdl`` command; each exposes ``register(app, make_group)``."""

__all__: list[str] = []  # a namespace: its modules are internal (docs/development.md)
