"""SVG snapshots of the main TUI screens on the fixture library (pytest-textual-snapshot).

Stable by construction: fixed terminal size, timestamps pinned in the fixture database,
the database named by a relative path (the header shows it), polling off.
Update after an intended change with ``pytest tests/tui/test_tui_snapshots.py --snapshot-update``
and review the SVGs in ``tests/tui/__snapshots__/``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import tui_fixture
from tui_fixture import add_adapter_tables, settle

from tui.app import ArenaApp

SIZE = (140, 40)


@pytest.fixture
def db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.chdir(tmp_path)
    tui_fixture.build(Path("arena.db"))
    return "arena.db"


def test_sessions_screen(snap_compare, db):
    assert snap_compare(ArenaApp(db, poll_interval=0), terminal_size=SIZE, run_before=settle)


def test_session_screen_with_learning_curve(snap_compare, db):
    async def go(pilot):
        await settle(pilot)
        await pilot.press("down", "enter")
        await settle(pilot)

    assert snap_compare(ArenaApp(db, poll_interval=0), terminal_size=SIZE, run_before=go)


def test_session_screen_train_chart(snap_compare, db):
    """``c``: the second chart, train reward, pass@1 and pass@k per round on one 0–1 axis."""
    async def go(pilot):
        await settle(pilot)
        await pilot.press("down", "enter")
        await settle(pilot)
        await pilot.press("c")
        await settle(pilot)

    assert snap_compare(ArenaApp(db, poll_interval=0), terminal_size=SIZE, run_before=go)


def test_episode_screen_with_hint_and_guided_rollouts(snap_compare, db):
    async def go(pilot):
        await settle(pilot)
        await pilot.press("down", "enter")
        await settle(pilot)
        await pilot.press("down", "enter")
        await settle(pilot)

    assert snap_compare(ArenaApp(db, poll_interval=0), terminal_size=SIZE, run_before=go)


def test_lessons_screen_with_detail(snap_compare, db):
    assert snap_compare(ArenaApp(db, poll_interval=0, start_screen="lessons"), terminal_size=SIZE, run_before=settle)


def test_edit_modal(snap_compare, db):
    async def go(pilot):
        await settle(pilot)
        await pilot.press("down", "e")
        await settle(pilot)

    assert snap_compare(ArenaApp(db, poll_interval=0, start_screen="lessons"), terminal_size=SIZE, run_before=go)


def test_adapters_screen(snap_compare, db):
    add_adapter_tables(Path(db))
    assert snap_compare(ArenaApp(db, poll_interval=0, start_screen="adapters"), terminal_size=SIZE, run_before=settle)


def test_missing_database_screen(snap_compare, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert snap_compare(ArenaApp("arena.db", poll_interval=0), terminal_size=SIZE, run_before=settle)
