"""The ``/port`` workflow: the static name check and smoke run behind ``fdl check``, and the
skill files ``fdl skill install`` writes for AI coding assistants."""

__all__: list[str] = []  # a namespace: its modules are internal (docs/development.md)
