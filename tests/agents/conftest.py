"""Fixtures of the agents tests (tests/agents/)."""

from __future__ import annotations

from pathlib import Path

import pytest
from tiny_llama import make_sharp_tiny


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random Llama checkpoint with a large init scale (``tiny_llama.make_sharp_tiny``), one per test module."""
    return make_sharp_tiny(tmp_path_factory.mktemp("tiny-llama"))
