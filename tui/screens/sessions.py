"""Sessions: every `arena run` session with its counts, reward and held-out pass@1 before → after."""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.widgets import DataTable, Footer, Header, Static

from lessons.library.read_models import SessionSummary
from tui.screens.base import DataScreen


def fmt_pass(p: float | None) -> str:
    return "-" if p is None else f"{p:.3f}"


class SessionsScreen(DataScreen):
    """The first screen: a table of sessions, newest first; ``enter`` opens one."""

    BINDINGS = [("enter", "open", "Open session")]

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static("Sessions", classes="title", id="sessions-title")
        table: DataTable = DataTable(id="sessions", cursor_type="row", zebra_stripes=True)
        # fixed widths: the table lays out at once instead of on the next idle (stable snapshots)
        for label, width in (("name", 24), ("started (UTC)", 16), ("status", 11), ("rounds", 6), ("episodes", 8),
                             ("rollouts", 8), ("mean reward", 11), ("held-out pass@1 before → after", 30)):
            table.add_column(label, width=width)
        yield table
        yield Footer()

    def on_mount(self) -> None:
        self.sub_title = "sessions"

    def fetch(self) -> list[SessionSummary]:
        return self.data.sessions()

    def show(self, rows: list[SessionSummary]) -> None:
        table = self.query_one("#sessions", DataTable)
        keep = table.cursor_row
        table.clear()
        for r in rows:
            mean = "-" if r.mean_reward is None else f"{r.mean_reward:.3f}"
            table.add_row(
                r.name, f"{r.started:%Y-%m-%d %H:%M}", r.status, str(r.rounds), str(r.episodes), str(r.rollouts),
                mean, f"{fmt_pass(r.pass_before)} → {fmt_pass(r.pass_after)}", key=f"{r.id}:{r.name}",
            )
        if rows:
            table.move_cursor(row=min(keep, len(rows) - 1))
        self.query_one("#sessions-title", Static).update(f"Sessions ({len(rows)})")

    @on(DataTable.RowSelected, "#sessions")
    def _selected(self, event: DataTable.RowSelected) -> None:
        self._open(str(event.row_key.value))

    def action_open(self) -> None:
        table = self.query_one("#sessions", DataTable)
        if table.row_count:
            key = table.coordinate_to_cell_key(table.cursor_coordinate).row_key
            self._open(str(key.value))

    def _open(self, key: str) -> None:
        from tui.screens.session import SessionScreen

        sid, name = key.split(":", 1)
        self.app.push_screen(SessionScreen(int(sid), name))
