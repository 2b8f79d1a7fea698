"""CASE-005: a session stores and names its library without the password, whatever characters the password holds."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from arena.config import SessionConfig
from arena.session.runner import open_session
from arena.tasks.sources import load_tasks
from lessons.library.store import LessonStore, StoreError

FAMILY = "chain_sum:min_terms=2,max_terms=2,min_digits=1,max_digits=1"


@pytest.mark.parametrize(
    "db, stored_db",
    [
        ("postgresql://arena:ab/cd@127.0.0.1:5432/x", "postgresql://arena:***@127.0.0.1:5432/x"),
        ("postgresql+psycopg://arena:p@ss:w#rd?@db/x?password=q/r", "postgresql+psycopg://arena:***@db/x?password=***"),
    ],
)
def test_case_005_the_stored_session_config_holds_no_password(store: LessonStore, db: str, stored_db: str) -> None:
    """CASE-005: ``sessions.config`` of a session whose ``--db`` password holds "/", "@", ":", "#", "?"."""
    cfg = SessionConfig(db=db, families=[FAMILY])
    open_session(store, cfg, load_tasks([FAMILY], None, 1, 1, 0), "s", resume=False)
    info = store.get_session("s")
    assert info is not None and info.config["db"] == stored_db
    for secret in ("ab/cd", "p@ss", "q/r"):
        assert secret not in json.dumps(info.config)


def test_case_005_a_resume_of_a_missing_session_names_the_library_without_its_password() -> None:
    """The error names ``store.location`` (password masked), never ``store.url`` (the one the driver connects with)."""
    store = SimpleNamespace(get_session=lambda name: None, url="postgresql+psycopg://arena:ab/cd@db/x",
                            location="postgresql+psycopg://arena:***@db/x")
    cfg = SessionConfig(db="postgresql://arena:ab/cd@db/x", families=[FAMILY])
    with pytest.raises(StoreError) as err:
        open_session(store, cfg, load_tasks([FAMILY], None, 1, 1, 0), "gone", resume=True)  # type: ignore[arg-type]
    assert "postgresql+psycopg://arena:***@db/x" in str(err.value) and "ab/cd" not in str(err.value)
