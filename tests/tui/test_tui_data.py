"""lessons.library.read_models: the TUI's queries and curation actions, on the fixture library (values by hand)."""

from __future__ import annotations

import sqlite3
from datetime import timedelta
from pathlib import Path

import pytest
import tui_fixture
from tui_fixture import add_adapter_tables

from lessons.library.curation import CurationError, Provenance
from lessons.library.read_models import ArenaData, DatabaseProblem, open_store
from lessons.library.store import LessonStore


@pytest.fixture
def fx_url(library_url: str, request: pytest.FixtureRequest) -> str:
    """The fixture library on the test's backend: ``fx`` on SQLite, built anew on PostgreSQL."""
    if library_url.startswith("postgresql"):
        return tui_fixture.build(library_url)
    return str(request.getfixturevalue("fx"))


@pytest.fixture
def data(fx_url: str):
    d = ArenaData(open_store(fx_url))
    yield d
    d.store.close()


# --------------------------------------------------------------------------- opening


def test_open_missing_and_empty_file_creates_nothing(tmp_path: Path):
    missing = tmp_path / "none.db"
    with pytest.raises(DatabaseProblem) as e:
        open_store(missing)
    assert e.value.kind == "missing" and not missing.exists()
    empty = tmp_path / "empty.db"
    empty.touch()
    with pytest.raises(DatabaseProblem) as e:
        open_store(empty)
    assert e.value.kind == "missing" and empty.stat().st_size == 0
    assert str(e.value).endswith("the file is empty (0 bytes)")


def test_open_corrupt_and_newer_schema_give_one_line(tmp_path: Path, fx: Path):
    bad = tmp_path / "bad.db"
    bad.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(DatabaseProblem) as e:
        open_store(bad)
    assert e.value.kind == "error" and "not a database" in str(e.value) and "\n" not in str(e.value)
    with sqlite3.connect(fx) as conn:
        conn.execute("UPDATE alembic_version SET version_num = '9999'")
    with pytest.raises(DatabaseProblem) as e:
        open_store(fx)
    assert e.value.kind == "error" and "9999" in str(e.value) and "upgrade lesson-arena" in str(e.value)


def test_fresh_schema_is_empty(tmp_path: Path):
    LessonStore(tmp_path / "a.db").close()
    d = ArenaData(open_store(tmp_path / "a.db"))
    assert d.is_empty() and d.sessions() == [] and d.lesson_page().total == 0
    d.store.close()


# --------------------------------------------------------------------------- sessions and episodes


def test_sessions_table_values(data: ArenaData):
    beta, alpha = data.sessions()  # newest first
    assert (beta.name, beta.status, beta.rounds, beta.episodes, beta.rollouts) == ("run-beta", "running", 0, 0, 0)
    assert beta.mean_reward is None and beta.pass_before is None
    assert (alpha.name, alpha.status, alpha.rounds, alpha.episodes, alpha.rollouts) == ("run-alpha", "finished", 2, 3, 14)
    assert alpha.mean_reward == pytest.approx(5 / 12)  # 2 + 0 + 3 successes of 12 unguided rollouts
    assert (alpha.pass_before, alpha.pass_after) == (0.25, 0.5)  # 1/4 and 2/4
    assert f"{alpha.started:%Y-%m-%d %H:%M}" == "2025-03-14 09:00"


def test_a_running_session_whose_owner_died_shows_stopped_and_the_fingerprint_moves(data: ArenaData):
    """Issue 32 §1: a crashed run is never left "running" forever: once its lease expires it lists as stopped."""
    from sqlalchemy import update

    from lessons.db.schema import SessionLeaseRow
    from lessons.library.leases import LeaseOwner

    fp = data.fingerprint()
    beta = data.store.get_session("run-beta")
    with data.store.write() as s, s.begin():  # the owner died an hour ago: its lease ran out
        s.execute(update(SessionLeaseRow).values(expires_at=beta.created_at - timedelta(hours=1)))
    assert data.store.get_session("run-beta").status == "running"  # the stored status is what it was
    assert data.sessions()[0].status == "stopped"
    assert data.fingerprint() != fp  # the TUI redraws though nothing else was written
    data.store.acquire_lease(beta.id, LeaseOwner("next:2:1", "next", 2), ttl_s=3600)  # a --resume took it over
    assert data.sessions()[0].status == "running"


def test_episodes_of_a_session(data: ArenaData):
    e1, e2, e3 = data.episodes(1)
    assert (e1.round, e1.task_key, e1.rewards, e1.guided_rewards, e1.lessons_in_context) == (
        1, "chain_sum/train/00000", [1.0, 0.0, 0.0, 1.0], [], [])
    assert (e2.rewards, e2.guided_rewards, e2.lessons_in_context) == ([0.0] * 4, [1.0, 0.0], ["chain_sum-00001"])
    assert (e3.round, e3.mean_reward) == (2, 0.75)
    assert data.episodes(2) == []


def test_learning_curve_replays_the_audit_log(data: ArenaData):
    c = data.learning_curve(1)
    assert c.rounds == [1, 2]
    assert c.mean_reward == [pytest.approx(2 / 8), pytest.approx(3 / 4)]
    # round 1: chain_sum-00001 still a candidate; round 2: promoted. Hand-written global
    # lessons come after the session and are not counted.
    assert c.active_lessons == [0, 1]
    assert c.heldout == [(0, 0.25), (2, 0.5)]


def test_learning_curve_ignores_curation_after_the_session(fx: Path):
    with LessonStore(fx) as store:
        with store.curate() as c:
            c.retire("chain_sum-00001", "superseded", Provenance(origin={"by": "cli"}))
    d = ArenaData(open_store(fx))
    # the retirement is after the session: the curve is unchanged
    assert d.learning_curve(1).active_lessons == [0, 1]
    d.store.close()


def test_episode_detail(data: ArenaData):
    d = data.episode(2)
    assert d is not None
    assert (d.session, d.episode_key, d.question, d.answer) == ("run-alpha", "r001-chain_sum/train/00001", "What is 45 + 38?", "83")
    assert [(r.guided, r.idx, r.reward, r.extracted_answer) for r in d.rollouts] == [
        (False, 0, 0.0, "73"), (False, 1, 0.0, "82"), (False, 2, 0.0, "84"), (False, 3, 0.0, "93"),
        (True, 0, 1.0, "83"), (True, 1, 0.0, "73"),
    ]
    assert d.hint == ("feedback", "Your sums miss the carry from the ones column.")
    assert d.lessons_in_context == [("chain_sum-00001", tui_fixture.LESSON_TEXT, "active")]
    assert [(ev.op, ev.lesson_id) for ev in d.events] == [("UPVOTE", "chain_sum-00001")]
    assert data.episode(3).events[-1].op == "PROMOTE"
    assert data.episode(99) is None


# --------------------------------------------------------------------------- lessons


def test_lesson_page_filters(data: ArenaData):
    p = data.lesson_page()
    assert [les.lesson_id for les in p.rows] == ["chain_sum-00001", "global-00001", "global-00002"]
    assert (p.total, p.page, p.pages) == (3, 0, 1)
    assert [les.lesson_id for les in data.lesson_page(status="retired").rows] == ["global-00002"]
    assert [les.lesson_id for les in data.lesson_page(family="global", status="active").rows] == ["global-00001"]
    assert data.families() == ["chain_sum", "global"]
    with pytest.raises(ValueError, match="status"):
        data.lesson_page(status="bogus")


def test_lesson_pages_of_250(tmp_path: Path):
    path = tmp_path / "many.db"
    LessonStore(path).close()
    with sqlite3.connect(path) as conn:
        conn.executemany(
            "INSERT INTO lessons (lesson_id, text, scope, status, helpful, harmful, neutral, times_in_context, "
            "utility_n, rank_score, created_at, updated_at) VALUES (?, ?, 'global', 'active', 0, 0, 0, 0, 0, 0, "
            "'2025-01-01 00:00:00', '2025-01-01 00:00:00')",
            [(f"global-{i:05d}", f"Lesson number {i} says check work.") for i in range(1, 251)],
        )
    d = ArenaData(open_store(path))
    p0, p2 = d.lesson_page(0), d.lesson_page(2)
    assert (p0.total, p0.pages, len(p0.rows), p0.rows[0].lesson_id) == (250, 3, 100, "global-00001")
    assert (len(p2.rows), p2.rows[0].lesson_id, p2.rows[-1].lesson_id) == (50, "global-00201", "global-00250")
    assert d.lesson_page(9).page == 2  # clamped to the last page
    d.store.close()


def test_search_every_word_prefix_and_filters(data: ArenaData):
    assert [les.lesson_id for les in data.search("carry").rows] == ["chain_sum-00001"]
    assert [les.lesson_id for les in data.search("numb carr").rows] == ["chain_sum-00001"]  # prefixes, all words
    assert data.search("carry answer").rows == []
    assert {les.lesson_id for les in data.search("the").rows} == {"chain_sum-00001", "global-00001", "global-00002"}
    assert [les.lesson_id for les in data.search("the", status="retired").rows] == ["global-00002"]
    assert [les.lesson_id for les in data.search('"quoted" AND').rows] == []  # FTS syntax is inert
    assert data.search("   ").query == ""  # nothing to search: the first page


def test_lesson_detail_history_and_lineage(data: ArenaData):
    d = data.lesson_detail("chain_sum-00001")
    assert [ev.op for ev in d.events] == ["ADD", "UPVOTE", "UPVOTE", "PROMOTE"]
    assert d.source_episodes == [(1, "run-alpha/r001-chain_sum/train/00000")]
    assert (d.merged_into, d.merged_from, d.adapters) == ([], [], [])
    assert data.lesson_detail("nope-00001") is None


def test_lineage_through_a_merge_and_an_adapter(fx: Path):
    with LessonStore(fx) as store, store.curate() as c:
        merged = c.merge(["chain_sum-00001", "global-00001"], "Carry each column, then write the answer alone.",
                         "same advice", Provenance(origin={"by": "cli"}))
    add_adapter_tables(fx)
    d = ArenaData(open_store(fx))
    src = d.lesson_detail("chain_sum-00001")
    assert src.merged_into == [merged] == ["global-00003"]
    assert src.adapters == [("adapter-0001", "distilled"), ("adapter-0001", "in_context")]
    new = d.lesson_detail(merged)
    assert new.merged_from == ["chain_sum-00001", "global-00001"]
    d.store.close()


# --------------------------------------------------------------------------- adapters


def test_adapters_absent_then_present(fx: Path):
    d = ArenaData(open_store(fx))
    assert d.adapters() == []  # the tables exist (migration 0005) and are empty
    add_adapter_tables(fx)
    (a,) = d.adapters()
    assert (a.adapter_id, a.objective, a.path) == ("adapter-0001", "guided", "/runs/adapters/adapter-0001")
    assert a.metrics["steps"] == 120 and a.evaluation["adapter"]["pass_at_1"] == 0.5
    assert a.lessons == [("chain_sum-00001", "distilled", "active"), ("chain_sum-00001", "in_context", "active")]
    d.store.close()


# --------------------------------------------------------------------------- curation


def test_edit_retire_vote_write_events_like_the_cli(data: ArenaData, fx: Path):
    data.edit("global-00001", "Write only the final answer on the last line.", "shorter")
    data.vote("global-00001", "harmful")
    data.vote("chain_sum-00001", "helpful")
    data.retire("chain_sum-00001", "misleads on negative numbers")
    with sqlite3.connect(fx) as conn:
        rows = conn.execute(
            "SELECT l.lesson_id, e.op, e.before, e.after, e.rationale, e.origin FROM lesson_events e "
            "JOIN lessons l ON l.id = e.lesson_id WHERE e.origin LIKE '%tui%' ORDER BY e.id"
        ).fetchall()
        texts = dict(conn.execute("SELECT lesson_id, text || '|' || status FROM lessons"))
    assert [(r[0], r[1]) for r in rows] == [
        ("global-00001", "EDIT"), ("global-00001", "DOWNVOTE"), ("chain_sum-00001", "UPVOTE"), ("chain_sum-00001", "RETIRE"),
    ]
    assert rows[0][2:5] == ("Write the final answer alone on the last line.", "Write only the final answer on the last line.", "shorter")
    assert rows[3][2:5] == ("active", "retired", "misleads on negative numbers")
    assert '"by": "tui"' in rows[0][5]
    assert texts["global-00001"] == "Write only the final answer on the last line.|active"
    assert texts["chain_sum-00001"].endswith("|retired")
    assert data.lesson_detail("global-00001").lesson.harmful == 1


def test_curation_errors_write_nothing(data: ArenaData, fx: Path):
    with sqlite3.connect(fx) as conn:
        before = conn.execute("SELECT count(*) FROM lesson_events").fetchone()[0]
    with pytest.raises(CurationError, match="already retired"):
        data.retire("global-00002", "again")
    with pytest.raises(CurationError, match="reason"):
        data.retire("global-00001", "  ")
    with pytest.raises(CurationError, match="retired"):
        data.edit("global-00002", "A new text for a retired lesson.", "")
    with pytest.raises(CurationError, match="already has this text"):
        data.edit("global-00001", "Write the final answer alone on the last line.", "")
    with sqlite3.connect(fx) as conn:
        assert conn.execute("SELECT count(*) FROM lesson_events").fetchone()[0] == before


def test_edit_uses_the_token_counter_once(fx: Path):
    calls = []

    def make():
        calls.append(1)
        return lambda text: len(text.split())  # a word count stands in for the solver's tokenizer

    d = ArenaData(open_store(fx), token_counter=make)
    d.edit("global-00001", "Put the final answer alone on the last line.", "")
    d.edit("global-00001", "Put only the final answer on the last line.", "")
    assert calls == [1]
    assert d.store.get_lesson("global-00001").tokens == 9
    d.store.close()


def test_fingerprint_changes_on_writes(data: ArenaData):
    fp = data.fingerprint()
    assert data.fingerprint() == fp
    data.vote("global-00001", "helpful")
    assert data.fingerprint() != fp


def test_curator_rejections_show_on_the_episode(data: ArenaData, fx: Path):
    from rich.console import Console

    from tui.screens.episode import render_episode

    assert data.episode(2).curation_rejected == []  # none recorded (and NULL in rows written before migration 0009)
    with sqlite3.connect(fx) as c:
        c.execute("UPDATE episodes SET curation_rejected = ? WHERE id = 2",
                  ('["ADD: library budget of 512 tokens is full and no lesson can be evicted"]',))
    d = data.episode(2)
    assert d.curation_rejected == ["ADD: library budget of 512 tokens is full and no lesson can be evicted"]
    console = Console(width=160, record=True)
    console.print(render_episode(d))
    assert "curator rejected: ADD: library budget of 512 tokens is full" in console.export_text()
