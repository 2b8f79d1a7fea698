"""Fixtures of the lessons tests (tests/lessons/)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from lessons.library.store import LessonStore


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    """Where the test's library lives: ``tmp_path/arena.db`` (not created until a store opens it)."""
    return tmp_path / "arena.db"


@pytest.fixture
def store(db_path: Path) -> Iterator[LessonStore]:
    """A fresh, empty lesson library at ``db_path``, closed after the test."""
    st = LessonStore(str(db_path))
    yield st
    st.close()
