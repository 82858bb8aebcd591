"""``python -m fdl`` — the same entry point as the ``fdl`` console script."""

from fdl.main import main

raise SystemExit(main())
