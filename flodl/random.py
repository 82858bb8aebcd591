"""Seeding and seeded random number generation (``fl.manual_seed``, ``fl.Rng``)."""

__all__: list[str] = []
