"""A library written before the redesign (issue 13) reads back the same with today's code.

``data/fixture.db`` was written by the code at commit baff35b through its public APIs, and
``data/fixture_reads.json`` holds what that code read back from it; ``data/make_fixture_db.py``
made both (see its docstring). Here a copy of the database is opened with today's classes and
every read of ``make_fixture_db.read_all`` must give the same JSON values, one test per read.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import sqlite3
import sys
from pathlib import Path
from typing import Any

import pytest

DATA = Path(__file__).resolve().parent / "data"

# Where today's code keeps what read_all uses (name -> module); the old homes are in OLD_API_MODULES.
TODAY_API_MODULES = {
    "LessonStore": "lessons.library.store",
    "ArenaData": "lessons.library.read_models",
    "open_store": "lessons.library.read_models",
    "RubricStore": "lessons.library.rubrics",
    "AdapterStore": "lessons.library.adapters",
    "CurriculumRecords": "lessons.library.curriculum",
}


def _generator():
    spec = importlib.util.spec_from_file_location("make_fixture_db", DATA / "make_fixture_db.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the file runs
    spec.loader.exec_module(module)
    return module


GEN = _generator()
EXPECTED: dict[str, Any] = json.loads((DATA / GEN.READS_NAME).read_text())


@pytest.fixture(scope="module")
def today_reads(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Every read of a copy of the fixture database, through today's classes, as JSON values."""
    db = tmp_path_factory.mktemp("fixture-db") / GEN.DB_NAME
    shutil.copyfile(DATA / GEN.DB_NAME, db)
    reads = GEN.read_all(GEN.load_api(TODAY_API_MODULES), db)
    return json.loads(json.dumps(reads))  # the same round trip the expected values took


def test_fixture_files_are_small_and_complete():
    db = DATA / GEN.DB_NAME
    assert db.stat().st_size < 300_000
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        counts = {t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0]  # noqa: S608 - fixed table names
                  for t in ("sessions", "tasks", "episodes", "rollouts", "hints", "lessons", "lesson_events",
                            "evaluations", "rubrics", "criterion_verdicts", "adapters", "curriculum_steps")}
        guided = conn.execute("SELECT count(*) FROM rollouts WHERE guided").fetchone()[0]
        statuses = {s for (s,) in conn.execute("SELECT DISTINCT status FROM lessons")}
        fts = conn.execute("SELECT count(*) FROM lessons_fts").fetchone()[0]
    assert counts["sessions"] >= 2 and all(n > 0 for n in counts.values()), counts
    assert guided > 0 and fts == counts["lessons"]
    assert {"candidate", "active", "retired", "distilled"} <= statuses


def test_every_read_is_recorded(today_reads):
    assert sorted(today_reads) == sorted(EXPECTED)


@pytest.mark.parametrize("read", sorted(EXPECTED))
def test_read_matches_the_code_before_the_redesign(today_reads, read):
    assert _without_added_fields(read, today_reads[read]) == _with_changed_values(read, EXPECTED[read])


# Fields a read gained after the fixture was written: new data about the same rows, not a difference in them.
ADDED_FIELDS = {
    # the episode of each rollout (GRPO's groups), issue 15; the hint's modes (opcd keeps only plan parts), issue 15
    "training_rollouts": {"episode_id", "hint_mode"},
    "stored_tasks": {"source", "metadata"},  # what the verifier needs: the reward function of exported rollouts, issue 16
    "stored_tasks(run-alpha, heldout)": {"source", "metadata"},  # the episode of each rollout (GRPO's groups), issue 15
    "session_stats": {"curation_rejected"},  # the teacher ops the curator refused (migration 0009), issue 17
    # the same, on the TUI's episode screen; and each rollout's fault kind (the episode screen shows it)
    "episode": {"curation_rejected", "fault", "hint_rejected"},
    # the held-out points' stored intervals and the per-round pass rates (the TUI's charts), issue 18
    "learning_curve": {"heldout_ci", "heldout_n", "pass_at_1", "pass_at_k", "k"},
    "get_session": {"lease"},  # the session's owner, heartbeat and expiry (migration 0012), issue 32
    "group_outcomes": {"hint_rejected"},  # the hint parts refused while writing each group's hint (migration 0013), issue 31
}

# Values a read shows differently on purpose: read name -> ((record key, record value), field, old, new).
CHANGED_VALUES = {
    # a session stored "running" without a live lease reads "stopped" (its process is gone; --resume continues it),
    # issue 32 section 1; the fixture's run-beta was never finished and, written before leases, has none
    "tui: sessions": [(("name", "run-beta"), "status", "running", "stopped")],
}


def _without_added_fields(read: str, value: Any) -> Any:
    """``value`` with the fields in :data:`ADDED_FIELDS` for this read dropped, at any depth of its records."""
    added = next((f for name, f in ADDED_FIELDS.items() if read == name or read.endswith(f": {name}")), set())
    return _drop(value, added) if added else value


def _with_changed_values(read: str, expected: Any) -> Any:
    """``expected`` with the deliberate changes of :data:`CHANGED_VALUES` for this read applied.

    Raises:
        AssertionError: a listed record is missing or its recorded value is not the listed old one
            (the change list and the fixture disagree).
    """
    changes = CHANGED_VALUES.get(read)
    if not changes:
        return expected
    expected = json.loads(json.dumps(expected))  # a copy: EXPECTED is shared by every test
    for (key, wanted), field, old, new in changes:
        matches = [r for r in expected if r.get(key) == wanted]
        assert len(matches) == 1 and matches[0][field] == old, (read, key, wanted, matches)
        matches[0][field] = new
    return expected


def _drop(value: Any, fields: set[str]) -> Any:
    if isinstance(value, dict):
        return {k: _drop(v, fields) for k, v in value.items() if k not in fields}
    if isinstance(value, list):
        return [_drop(v, fields) for v in value]
    return value
