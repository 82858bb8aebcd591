"""The single source of the flodl / fdl version (read by hatchling and by `fdl --version`)."""

__version__ = "0.1.0"
