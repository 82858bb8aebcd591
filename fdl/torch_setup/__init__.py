"""Install the chosen torch wheel into an environment and prove it works there."""

from fdl.torch_setup.install import InstallCommand, install_command
from fdl.torch_setup.verify import Verification, VerifyScope, scope_for, verify_torch

__all__ = [
    "InstallCommand",
    "Verification",
    "VerifyScope",
    "install_command",
    "scope_for",
    "verify_torch",
]
