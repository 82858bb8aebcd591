"""``fdl init``: render ``scaffold_templates/project`` into a new project, and update it later.

- :mod:`fdl.scaffold.names` — validate a project name, derive the Python package name.
- :mod:`fdl.scaffold.render` — render every template into memory (path -> bytes).
- :mod:`fdl.scaffold.answers` — ``.fdl/project.toml``: the answers and a hash of each file written.
- :mod:`fdl.scaffold.create` — write a new project atomically (temp dir, then one rename).
- :mod:`fdl.scaffold.update` — ``fdl init --update``: re-render, diff, apply what is safe.
"""

__all__: list[str] = []  # a namespace: its modules are internal (docs/development.md)
