"""Fixtures for checkpoint tests (helpers live in layout.py)."""

from __future__ import annotations

import pytest
import torch

from tests.checkpoint.layout import Tiny


@pytest.fixture
def tiny() -> Tiny:
    torch.manual_seed(0)
    return Tiny()
