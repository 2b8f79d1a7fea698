"""Session: its episodes (group rewards, guided or not, lessons in context), its learning-curve charts
(``c`` cycles them) and ``r``, which writes the session's HTML report through the app's injected writer."""

from __future__ import annotations

from pathlib import Path

from textual import on, work
from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.widgets import DataTable, Footer, Header, Static

from lessons.library.read_models import USER_ERRORS, EpisodeSummary, LearningCurve
from tui.screens.base import DataScreen, one_line
from tui.widgets.curve import LearningCurvePlot


def fmt_reward(r: float | None) -> str:
    """One reward compactly (``1``, ``0``, ``0.50``); ``-`` for an ungraded rollout."""
    return "-" if r is None else f"{r:g}" if r in (0.0, 1.0) else f"{r:.2f}"


def fmt_rewards(rs: list[float | None]) -> str:
    """Rewards of a group, compactly: ``1 0 0.5 -`` (``-``: ungraded)."""
    return " ".join(fmt_reward(r) for r in rs)


class SessionScreen(DataScreen):
    """One session: an episodes table and a learning-curve panel; ``enter`` opens an episode,
    ``c`` shows the next chart, ``r`` writes the session's HTML report."""

    BINDINGS = [
        ("enter", "open", "Open episode"),
        ("c", "next_chart", "Next chart"),
        ("r", "write_report", "Write report"),
        ("escape", "back", "Back"),
    ]

    def __init__(self, session_id: int, name: str) -> None:
        super().__init__()
        self.session_id = session_id
        self.session_name = name

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static(f"Session {self.session_name}", classes="title", id="session-title")
        with Horizontal():
            table: DataTable = DataTable(id="episodes", cursor_type="row", zebra_stripes=True)
            for label, width in (("round", 5), ("task", 24), ("family", 12), ("rewards", 16), ("guided", 8),
                                 ("mean", 4), ("lessons in context", 30)):
                table.add_column(label, width=width)
            yield table
            yield LearningCurvePlot(id="curve")
        yield Footer()

    def on_mount(self) -> None:
        self.sub_title = self.session_name

    def fetch(self) -> tuple[list[EpisodeSummary], LearningCurve, dict[str, int]]:
        return self.data.episodes(self.session_id), self.data.learning_curve(self.session_id), self.data.faults(self.session_id)

    def show(self, result: tuple[list[EpisodeSummary], LearningCurve, dict[str, int]]) -> None:
        episodes, curve, faults = result
        table = self.query_one("#episodes", DataTable)
        keep = table.cursor_row
        table.clear()
        for e in episodes:
            guided = fmt_rewards(e.guided_rewards) if e.guided_rewards else "-"
            lessons = ", ".join(e.lessons_in_context) if e.lessons_in_context else "-"
            table.add_row(str(e.round), e.task_key, e.family, fmt_rewards(e.rewards), guided, "-" if e.mean_reward is None else f"{e.mean_reward:.2f}",
                          lessons, key=str(e.id))
        if episodes:
            table.move_cursor(row=min(keep, len(episodes) - 1))
        n_guided = sum(1 for e in episodes if e.guided_rewards)
        by_kind = ", ".join(f"{kind} {n}" for kind, n in faults.items())
        self.query_one("#session-title", Static).update(
            f"Session {self.session_name} · {len(episodes)} episodes · {n_guided} with hints"
            + (f" · faults: {by_kind}" if by_kind else "")
        )
        self.query_one(LearningCurvePlot).show(curve, groups=len(episodes))

    @on(DataTable.RowSelected, "#episodes")
    def _selected(self, event: DataTable.RowSelected) -> None:
        self._open(int(str(event.row_key.value)))

    def action_open(self) -> None:
        table = self.query_one("#episodes", DataTable)
        if table.row_count:
            self._open(int(str(table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value)))

    def _open(self, episode_id: int) -> None:
        from tui.screens.episode import EpisodeScreen

        self.app.push_screen(EpisodeScreen(episode_id))

    def action_next_chart(self) -> None:
        self.query_one(LearningCurvePlot).next_chart()

    def action_write_report(self) -> None:
        if self.arena.write_report is None:
            self.notify(f"Reports are written by `arena report --session {self.session_name}`.", title="report")
            return
        if self._reporting:
            self.notify(f"Still writing the report of {self.session_name}…", title="report")
            return
        self._reporting = True
        self.notify(f"Writing the report of {self.session_name}…", title="report")
        self._write_report(self.session_name)

    _reporting = False  # a report worker is running (set on the event loop, cleared by the worker)

    @work(thread=True, group="report", exit_on_error=False)
    def _write_report(self, name: str) -> None:
        """Call the app's report writer (seconds: figures and HTML), then notify its path or its one-line error.

        The notification goes through the app, so it still shows after ``escape`` left the screen.
        """
        try:
            path: Path = self.arena.write_report(name)
        except (*USER_ERRORS, OSError) as e:
            self.app.call_from_thread(self.app.notify, one_line(e), title="report", severity="error")
            return
        finally:
            self._reporting = False
        self.app.call_from_thread(self.app.notify, f"Wrote {path}", title="report")

    def action_back(self) -> None:
        self.app.pop_screen()
