"""Fixtures of the TUI tests (tests/tui/): the deterministic fixture library of ``tui_fixture``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import tui_fixture

from lessons.library.store import LessonStore


@pytest.fixture
def fx(tmp_path: Path) -> Path:
    """The fixture library (``tui_fixture.build``) at ``tmp_path/arena.db``."""
    return tui_fixture.build(tmp_path / "arena.db")


@pytest.fixture
def store(tmp_path: Path) -> Iterator[LessonStore]:
    """A fresh, empty lesson library at ``tmp_path/arena.db``, closed after the test."""
    st = LessonStore(str(tmp_path / "arena.db"))
    yield st
    st.close()
