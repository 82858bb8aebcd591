"""One module per built-in ``fdl`` command; each exposes ``register(app, make_group)``."""
