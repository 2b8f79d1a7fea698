"""The session screen's charts (``c`` cycles them, one quantity per axis) and its report key ``r``
(the writer is injected into the app: ``tui`` may not import ``arena.report``)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from tui_fixture import settle

from lessons.library.read_models import LearningCurve
from tui.app import ArenaApp
from tui.screens.session import SessionScreen
from tui.widgets.curve import CHARTS, LearningCurvePlot

SIZE = (140, 40)
pytestmark = pytest.mark.anyio


async def open_session(pilot, row: int) -> SessionScreen:
    """From the sessions screen, open the session of ``row`` (0: run-beta, empty; 1: run-alpha)."""
    await settle(pilot)
    await pilot.press(*["down"] * row, "enter")
    await settle(pilot)
    screen = pilot.app.screen
    assert isinstance(screen, SessionScreen)
    return screen


def drawn(plot: LearningCurvePlot) -> str:
    """The plot as the terminal shows it (plain text)."""
    return str(plot.render())


async def test_c_cycles_the_three_charts(fx: Path):
    app = ArenaApp(fx, poll_interval=0)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_session(pilot, 1)  # run-alpha: 2 rounds, 3 groups of k = 4, held-out 0.25 → 0.50
        plot = screen.query_one(LearningCurvePlot)
        assert "c" in screen.active_bindings and screen.active_bindings["c"].binding.description == "Next chart"
        seen = []
        for _ in CHARTS:
            seen.append((plot.chart, plot.chart_title))
            assert plot.chart_title in drawn(plot)
            await pilot.press("c")
            await pilot.pause()
        assert seen == [
            ("heldout", "held-out pass@1 · 95% Wilson CI · n=4 tasks"),
            ("train", "train reward and pass@4 per round · n=3 groups"),
            ("library", "active lessons per round"),
        ]
        assert plot.chart == "heldout"  # wraps around
        text = drawn(plot)
        assert "0.25 [0.05, 0.70]" in text and "0.50 [0.15, 0.85]" in text  # the stored Wilson intervals
        assert "before" in text and "after round 2" in text
        await pilot.press("c")
        await pilot.pause()
        assert "pass@4" in drawn(plot) and "mean reward" in drawn(plot)  # the legend names the actual k


async def test_empty_session_charts_say_so(fx: Path):
    app = ArenaApp(fx, poll_interval=0)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_session(pilot, 0)  # run-beta: no episode, no evaluation
        assert screen.session_name == "run-beta"
        plot = screen.query_one(LearningCurvePlot)
        titles = []
        for _ in CHARTS:
            titles.append(plot.chart_title)
            assert plot.chart_title in drawn(plot)
            await pilot.press("c")
            await pilot.pause()
        assert titles == [
            "held-out pass@1: no held-out evaluation yet",
            "train reward and pass@k per round: no rounds yet",  # run-beta records no --rollouts: k unknown
            "active lessons per round: no rounds yet",
        ]


async def test_charts_of_partial_curves_do_not_crash(fx: Path):
    """A curve without intervals, without k, or with held-out points but no rounds still draws every chart."""
    app = ArenaApp(fx, poll_interval=0)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_session(pilot, 1)
        plot = screen.query_one(LearningCurvePlot)
        for curve in (
            LearningCurve([1], [0.5], [0], [(0, 0.25)]),  # no CI, k unknown, only "before"
            LearningCurve([], [], [], [(0, 0.1), (1, 0.2)], heldout_ci=[(0.0, 0.4), (0.05, 0.5)]),
            LearningCurve([1, 2], [0.0, 0.0], [0, 0], [], pass_at_1=[0.0, 0.0], pass_at_k=[0.0, 0.0], k=8),
        ):
            plot.show(curve, groups=0)
            for _ in CHARTS:
                assert plot.chart_title in drawn(plot)
                plot.next_chart()
        plot.show(LearningCurve([1], [0.5], [0], []))
        plot.chart = "train"
        assert plot.chart_title == "train reward and pass@k per round"  # k unknown: no pass@k line, no n


async def test_r_writes_the_report_of_the_session_on_screen(fx: Path, tmp_path: Path):
    calls: list[tuple[str, str]] = []

    def write_report(name: str) -> Path:
        calls.append((name, threading.current_thread().name))
        return tmp_path / f"report-{name}" / "report.html"

    app = ArenaApp(fx, poll_interval=0, write_report=write_report)
    async with app.run_test(size=SIZE) as pilot:
        await open_session(pilot, 1)
        await pilot.press("r")
        await settle(pilot)
        assert [name for name, _ in calls] == ["run-alpha"]
        assert calls[0][1] != threading.main_thread().name  # in a thread worker, not on the event loop
        messages = [(n.message, n.severity) for n in app._notifications]
        assert (f"Wrote {tmp_path / 'report-run-alpha' / 'report.html'}", "information") in messages


async def test_r_shows_the_writers_error_in_one_line(fx: Path):
    def write_report(name: str) -> Path:
        raise ValueError(f"cannot write report-{name}:\n  permission denied")

    app = ArenaApp(fx, poll_interval=0, write_report=write_report)
    async with app.run_test(size=SIZE) as pilot:
        await open_session(pilot, 1)
        await pilot.press("r")
        await settle(pilot)
        errors = [n.message for n in app._notifications if n.severity == "error"]
        assert errors == ["cannot write report-run-alpha: permission denied"]
        assert isinstance(app.screen, SessionScreen)  # the app goes on


async def test_r_without_a_writer_points_to_arena_report(fx: Path):
    app = ArenaApp(fx, poll_interval=0)
    async with app.run_test(size=SIZE) as pilot:
        await open_session(pilot, 1)
        await pilot.press("r")
        await pilot.pause()
        assert any("arena report --session run-alpha" in n.message for n in app._notifications)
