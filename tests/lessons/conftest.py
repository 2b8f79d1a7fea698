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
def store(library_url: str) -> Iterator[LessonStore]:
    """A fresh, empty lesson library, closed after the test: at ``db_path`` on SQLite, or a new
    PostgreSQL database (tests/conftest.py runs each test on both)."""
    st = LessonStore(library_url)
    yield st
    st.close()
