"""Which torch build fits which machine: the release table, the arch rules and the resolver.

The facts live in ``torch_releases.json`` (shipped in the package); this package only reads them.
"""

from fdl.variants.archs import ComputeCapability, coverage, format_cc, parse_cc, sm_name
from fdl.variants.resolver import GpuTarget, Plan, Target, resolve
from fdl.variants.table import Build, Release, VariantTable, load_table

__all__ = [
    "Build",
    "ComputeCapability",
    "GpuTarget",
    "Plan",
    "Release",
    "Target",
    "VariantTable",
    "coverage",
    "format_cc",
    "load_table",
    "parse_cc",
    "resolve",
    "sm_name",
]
