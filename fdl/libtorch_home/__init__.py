"""Where libtorch variants live on disk, shared with the Rust ``fdl``.

``<root>/libtorch/{.active, precompiled/<variant>/, builds/<sig>/}``; each variant has ``lib/``
and a ``.arch`` file of ``key=value`` lines. ``<root>`` is the project (a directory with
``libtorch/.active``, a pyproject.toml that depends on flodl, or a Cargo.toml that mentions it) or ``$FLODL_HOME``
(default ``~/.flodl``).
"""

from fdl.libtorch_home.install import install_prebuilt
from fdl.libtorch_home.layout import LibtorchHome, find_home, read_arch

__all__ = ["LibtorchHome", "find_home", "install_prebuilt", "read_arch"]
