"""The ``fdl.yml`` task runner: ``fdl <command> [-- args]`` inside a project.

One module per job:

- :mod:`fdl.tasks.source` — read a manifest file, remembering the line of every key.
- :mod:`fdl.tasks.discover` — find the nearest ``fdl.yml`` (and offer to copy ``fdl.yml.example``).
- :mod:`fdl.tasks.layers` — overlays (``fdl.<env>.yml``), ``inherit-from``, deep merge with provenance.
- :mod:`fdl.tasks.manifest` — the validated model: commands of kind run / path / preset.
- :mod:`fdl.tasks.schema` — typed options (``schema:``) and checking a command line against them.
- :mod:`fdl.tasks.schema_cache` — ``<entry> --fdl-schema``: probing and the per-entry cache.
- :mod:`fdl.tasks.config_args` — ``ddp:``/``training:``/``output:`` and preset options as flags.
- :mod:`fdl.tasks.interpreter` — ``python:`` and the note when a task's Python lacks torch/flodl.
- :mod:`fdl.tasks.compose` — build the shell command of a run-command (``append:``, ``--`` halves).
- :mod:`fdl.tasks.dispatch` — walk ``fdl a b c`` down nested manifests to one outcome.
- :mod:`fdl.tasks.execute` / :mod:`fdl.tasks.docker` — run it, on the host or in a service container.
- :mod:`fdl.tasks.help` — project, command and run help; :mod:`fdl.tasks.show` — ``fdl config show``.

Nothing here is imported by ``fdl --help`` outside a project; PyYAML and the Docker SDK are
imported only when a manifest is loaded or a container is started.
"""

__all__: list[str] = []  # a namespace: its modules are internal (docs/development.md)
