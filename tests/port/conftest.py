"""Port tests run `fdl check` on what they write: the api-ref tests' private FLODL_HOME."""

from tests.apiref.conftest import private_flodl_home  # noqa: F401  (an autouse fixture)
