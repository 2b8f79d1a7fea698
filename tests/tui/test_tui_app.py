"""The TUI driven by Textual's Pilot (`App.run_test()`): navigation, search, curation, refresh."""

from __future__ import annotations

import io
import sqlite3
import threading
from pathlib import Path

import pytest
from lesson_texts import DISTINCT_LESSONS
from rich.console import Console
from textual.widgets import DataTable, Input, Static, TextArea
from tui_fixture import add_adapter_tables, settle

from lessons.library.curation import Provenance
from lessons.library.store import LessonStore
from tui.app import ArenaApp
from tui.screens.adapters import NO_ADAPTERS, AdaptersScreen
from tui.screens.episode import EpisodeScreen
from tui.screens.lessons import LessonsScreen
from tui.screens.modals import EditLessonModal, HelpModal, RetireModal
from tui.screens.notice import NoticeScreen
from tui.screens.session import SessionScreen
from tui.screens.sessions import SessionsScreen

SIZE = (140, 40)
pytestmark = pytest.mark.anyio  # async tests run by anyio's pytest plugin (asyncio backend)


def rows(app) -> list[list[str]]:
    t = app.screen.query_one(DataTable)
    return [[str(c) for c in t.get_row_at(i)] for i in range(t.row_count)]


def text_of(app, selector: str) -> str:
    """The plain text of a Static's content (a string or rich renderables), lines joined."""
    console = Console(width=300, record=True, file=io.StringIO())
    console.print(app.screen.query_one(selector, Static).content)
    return " ".join(console.export_text().split())


def events(path: Path, origin: str = "tui") -> list[tuple[str, str, str | None, str | None, str]]:
    with sqlite3.connect(path) as conn:
        return conn.execute(
            "SELECT l.lesson_id, e.op, e.before, e.after, e.rationale FROM lesson_events e "
            "JOIN lessons l ON l.id = e.lesson_id WHERE e.origin LIKE ? ORDER BY e.id",
            (f'%"by": "{origin}"%',),
        ).fetchall()


async def test_navigation_sessions_session_episode_and_back(fx: Path):
    app = ArenaApp(fx, poll_interval=0)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert isinstance(app.screen, SessionsScreen)
        assert [r[0] for r in rows(app)] == ["run-beta", "run-alpha"]
        assert rows(app)[1][2:] == ["finished", "2", "3", "14", "0.417", "0.250 → 0.500"]
        await pilot.press("down", "enter")
        await settle(pilot)
        assert isinstance(app.screen, SessionScreen) and app.screen.session_name == "run-alpha"
        assert [r[3] for r in rows(app)] == ["1 0 0 1", "0 0 0 0", "1 1 0 1"]
        assert [r[4] for r in rows(app)] == ["-", "1 0", "-"]
        await pilot.press("down", "enter")
        await settle(pilot)
        assert isinstance(app.screen, EpisodeScreen) and app.screen.episode_id == 2
        body = text_of(app, "#episode-body")
        assert "Your sums miss the carry" in body and "guided rollout 0 · reward 1.00 · answer '83'" in body
        assert "UPVOTE" in body and "chain_sum-00001" in body
        await pilot.press("escape")
        await settle(pilot)
        assert isinstance(app.screen, SessionScreen)
        await pilot.press("escape")
        assert isinstance(app.screen, SessionsScreen)
        await pilot.press("escape")  # the root screen stays
        assert isinstance(app.screen, SessionsScreen)
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpModal)
        assert "Open session" in str(app.screen.query_one("#help-text", Static).render())
        await pilot.press("escape", "q")
    assert app.return_code == 0


async def test_faults_show_on_the_session_and_its_rollouts(fx: Path):
    """Faults by kind in the session's title; the kind on each rollout that had one (issue "Faults, bad input and speed")."""
    with sqlite3.connect(fx) as conn:
        conn.execute("UPDATE rollouts SET fault = 'verifier', reward = NULL, grading_status = 'ungraded' "
                     "WHERE episode_id = 2 AND idx = 1 AND guided = 0")
        conn.execute("UPDATE rollouts SET fault = 'empty_choices' WHERE episode_id = 1 AND idx = 0")
    app = ArenaApp(fx, poll_interval=0)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("down", "enter")  # run-alpha
        await settle(pilot)
        assert isinstance(app.screen, SessionScreen)
        title = str(app.screen.query_one("#session-title", Static).render())
        assert title.endswith("· faults: empty_choices 1, verifier 1"), title
        await pilot.press("down", "enter")  # episode 2
        await settle(pilot)
        assert "rollout 1 · reward ungraded · answer '82' · fault verifier" in text_of(app, "#episode-body")
        await pilot.press("escape", "escape", "q")


async def test_lessons_search_filter_and_paging_keys(fx: Path):
    app = ArenaApp(fx, poll_interval=0, start_screen="lessons")
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert isinstance(app.screen, LessonsScreen)
        assert [r[0] for r in rows(app)] == ["chain_sum-00001", "global-00001", "global-00002"]
        assert "chain_sum-00001" in text_of(app, "#detail-body") and "PROMOTE" in text_of(app, "#detail-body")
        await pilot.press("slash")
        assert app.screen.focused is app.screen.query_one("#search", Input)
        await pilot.press(*"question")  # letters go to the search box, not to app keys (q quits)
        await settle(pilot)
        assert [r[0] for r in rows(app)] == ["global-00002"]
        assert "1 match(es) for 'question'" in text_of(app, "#page-info")
        await pilot.press("escape")  # clears the search
        await settle(pilot)
        assert len(rows(app)) == 3
        await pilot.press("escape")  # back to the table
        assert app.screen.focused is app.screen.query_one("#lessons", DataTable)
        app.screen.query_one("#status").value = "retired"
        await settle(pilot)
        assert [r[0] for r in rows(app)] == ["global-00002"]
        await pilot.press("down")
        await settle(pilot)
        assert "restating wastes the token budget" in text_of(app, "#detail-body")


async def test_edit_persists_through_the_modal(fx: Path):
    app = ArenaApp(fx, poll_interval=0, start_screen="lessons")
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("down", "e")  # global-00001
        assert isinstance(app.screen, EditLessonModal)
        app.screen.query_one("#edit-text", TextArea).text = "Write only the final answer on the last line."
        app.screen.query_one("#edit-why", Input).value = "shorter"
        await pilot.press("ctrl+s")
        await settle(pilot)
        assert isinstance(app.screen, LessonsScreen)
        assert rows(app)[1][6] == "Write only the final answer on the last line."
        assert "EDIT" in text_of(app, "#detail-body")
    assert events(fx) == [("global-00001", "EDIT", "Write the final answer alone on the last line.",
                           "Write only the final answer on the last line.", "shorter")]


async def test_edit_cancelled_and_rejected_write_nothing(fx: Path):
    app = ArenaApp(fx, poll_interval=0, start_screen="lessons")
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("e")
        await pilot.press("escape")
        await settle(pilot)
        assert isinstance(app.screen, LessonsScreen)
        await pilot.press("down", "down", "e")  # global-00002 is retired: the curator refuses
        await pilot.press("ctrl+s")
        await settle(pilot)
        assert isinstance(app.screen, LessonsScreen)
        assert any("only candidate or active lessons can be edited" in n.message for n in app._notifications)
    assert events(fx) == []


async def test_retire_and_votes_persist(fx: Path):
    app = ArenaApp(fx, poll_interval=0, start_screen="lessons")
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("down", "u")  # upvote global-00001
        await settle(pilot)
        await pilot.press("d")
        await settle(pilot)
        await pilot.press("r")
        assert isinstance(app.screen, RetireModal)
        await pilot.press(*"too vague", "enter")
        await settle(pilot)
        assert rows(app)[1][1] == "retired"
    ops = events(fx)
    assert [(lid, op) for lid, op, *_ in ops] == [
        ("global-00001", "UPVOTE"), ("global-00001", "DOWNVOTE"), ("global-00001", "RETIRE")]
    assert ops[2][2:] == ("active", "retired", "too vague")
    with sqlite3.connect(fx) as conn:
        assert conn.execute("SELECT helpful, harmful, status FROM lessons WHERE lesson_id='global-00001'").fetchone() == (
            1, 1, "retired")


async def test_paging_keys_on_a_large_library(tmp_path: Path):
    path = tmp_path / "many.db"
    LessonStore(path).close()
    with sqlite3.connect(path) as conn:
        conn.executemany(
            "INSERT INTO lessons (lesson_id, text, scope, status, helpful, harmful, neutral, times_in_context, "
            "utility_n, rank_score, created_at, updated_at) VALUES (?, ?, 'global', 'active', 0, 0, 0, 0, 0, 0, "
            "'2025-01-01 00:00:00', '2025-01-01 00:00:00')",
            [(f"global-{i:05d}", f"Lesson number {i} says check work.") for i in range(1, 251)],
        )
    app = ArenaApp(path, poll_interval=0, start_screen="lessons")
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert len(rows(app)) == 100 and rows(app)[0][0] == "global-00001"
        assert text_of(app, "#page-info").startswith("250 lessons · page 1/3")
        await pilot.press("right_square_bracket", "right_square_bracket")
        await settle(pilot)
        assert len(rows(app)) == 50 and rows(app)[0][0] == "global-00201"
        await pilot.press("left_square_bracket")
        await settle(pilot)
        assert rows(app)[0][0] == "global-00101"


async def test_adapters_screen_absent_and_present(fx: Path):
    app = ArenaApp(fx, poll_interval=0, start_screen="adapters")
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert isinstance(app.screen, AdaptersScreen)
        assert text_of(app, "#adapter-body") == NO_ADAPTERS
    add_adapter_tables(fx)
    app = ArenaApp(fx, poll_interval=0, start_screen="adapters")
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert rows(app) == [["adapter-0001", "guided", "2", "0.312 → 0.500"]]
        body = text_of(app, "#adapter-body")
        assert "adapter_lessons" in body and "0.469" in body and "final_loss" in body and "distilled: chain_sum-00001" in body


async def test_missing_database_screen_then_data_arrives(tmp_path: Path):
    path = tmp_path / "later.db"
    app = ArenaApp(path, poll_interval=0.05)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert isinstance(app.screen, NoticeScreen) and app.screen.kind == "missing"
        assert f"arena run --db {path}" in text_of(app, "#notice")
        assert not path.exists()  # the TUI does not create the file
        LessonStore(path).close()  # `arena run` creates the schema: still empty
        for _ in range(200):
            await pilot.pause(0.05)
            if isinstance(app.screen, NoticeScreen) and app.screen.kind == "empty":
                break
        assert app.screen.kind == "empty" and f"arena run --db {path}" in text_of(app, "#notice")
        with LessonStore(path) as store:
            store.create_session("run-new", {}, seed=0)
        for _ in range(200):
            await pilot.pause(0.05)
            if isinstance(app.screen, SessionsScreen):
                break
        await settle(pilot)
        assert isinstance(app.screen, SessionsScreen) and rows(app)[0][0] == "run-new"


async def test_corrupt_database_screen(tmp_path: Path):
    path = tmp_path / "bad.db"
    path.write_bytes(b"not a database at all" * 50)
    app = ArenaApp(path, poll_interval=0)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert isinstance(app.screen, NoticeScreen) and app.screen.kind == "error"
        assert "file is not a database" in text_of(app, "#notice")


async def test_case_005_a_library_url_password_with_a_slash_is_not_shown():
    """CASE-005: the header and the error notice of an unopenable ``postgresql://arena:ab/cd@…`` library mask the password."""
    app = ArenaApp("postgresql://arena:ab/cd@127.0.0.1:notaport/x", poll_interval=0)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert isinstance(app.screen, NoticeScreen) and app.screen.kind == "error"
        notice = text_of(app, "#notice")
        assert "postgresql://arena:***@127.0.0.1:notaport/x" in notice and "ab/cd" not in notice
        assert app.sub_title == "postgresql://arena:***@127.0.0.1:notaport/x"


async def test_reads_while_another_connection_writes(fx: Path):
    """A writer thread curates through its own LessonStore while the app polls and reloads:
    the app shows every write, and neither side sees "database is locked"."""
    app = ArenaApp(fx, poll_interval=0.05, start_screen="lessons")
    errors: list[BaseException] = []
    n_writes = 15

    def writer() -> None:
        try:
            with LessonStore(fx) as store:
                for i in range(n_writes):
                    with store.curate() as c:
                        c.vote("chain_sum-00001", "helpful", Provenance(origin={"by": "test"}), f"write {i}")
                    with store.curate() as c:
                        c.add(DISTINCT_LESSONS[i], "global", "", Provenance(origin={"by": "test"}), status="active")
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        t = threading.Thread(target=writer)
        t.start()
        seen_counts = set()
        while t.is_alive():
            await pilot.pause(0.02)
            seen_counts.add(len(rows(app)))
        t.join()
        for _ in range(60):
            await pilot.pause(0.05)
            if len(rows(app)) == 3 + n_writes and rows(app)[0][3] == str(2 + n_writes):
                break
        await settle(pilot)
        assert not any("locked" in n.message for n in app._notifications)
        assert len(rows(app)) == 3 + n_writes
        assert rows(app)[0][3] == str(2 + n_writes)  # helpful counter of chain_sum-00001
        assert len(seen_counts) > 1  # the table refreshed while the writer was still writing
    assert errors == []


async def test_ungraded_rollouts_show_as_dashes_not_an_empty_screen(fx: Path, tmp_path: Path):
    import shutil
    import sqlite3

    from tui.screens.session import fmt_rewards

    db = tmp_path / "ungraded.db"
    shutil.copy(fx, db)
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE rollouts SET reward = NULL WHERE id = (SELECT min(id) FROM rollouts)")
    from lessons.library.read_models import ArenaData, open_store

    d = ArenaData(open_store(db))
    eps = d.episodes(1)
    assert eps and None in eps[0].rewards
    assert fmt_rewards([None, 1.0, 0.5]) == "- 1 0.50"
    d.store.close()
