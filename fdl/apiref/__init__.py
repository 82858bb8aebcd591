"""Static extraction of flodl's public API, and its renderings (text, JSON, Markdown, llms.txt).

Nothing here imports torch or the package being described: :mod:`fdl.apiref.extract` reads the
source with griffe. Entry points::

    from fdl.apiref import load_reference
    ref = load_reference()            # the installed flodl, cached by version + content hash
    ref.to_dict()                     # the JSON document `fdl api-ref --json` prints

The JSON schema is ``fdl/apiref/schema.json`` (documented in docs/cli.md).
"""

from __future__ import annotations

from fdl.apiref.model import SCHEMA_ID, ApiEntry, ApiReference, Member
from fdl.apiref.service import load_reference

__all__ = ["SCHEMA_ID", "ApiEntry", "ApiReference", "Member", "load_reference"]
