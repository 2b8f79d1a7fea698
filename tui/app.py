"""``arena tui``: the Textual app that browses sessions, episodes, lessons and adapters.

It opens the same database a running ``arena run`` writes (SQLite WAL: readers never block
the writer) and polls it every :attr:`ArenaApp.poll_interval` seconds in a thread worker;
when the cheap fingerprint (:meth:`lessons.library.read_models.ArenaData.fingerprint`) changes, the current
screen reloads in its own worker. The event loop never runs a query.

Screens: Sessions (first), Session (episodes + learning-curve charts, ``r`` writes its HTML report
through the injected :attr:`ArenaApp.write_report`), Episode, Lessons, Adapters;
a notice screen when the database is missing, empty or cannot be opened.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from textual import work
from textual.app import App
from textual.binding import Binding

from lessons.db.engine import redact_credentials
from lessons.library.curation import TokenCounter
from lessons.library.read_models import ArenaData, DatabaseProblem, configure_budget, open_store
from tui.messages import DataChanged
from tui.screens.notice import NoticeScreen, empty_text, error_text, missing_text
from tui.screens.sessions import SessionsScreen

POLL_INTERVAL_S = 2.0  # how often the database is checked for changes


class ArenaApp(App):
    """The Lesson Arena TUI.

    Args:
        db: SQLite path or SQLAlchemy URL, as ``arena run --db``.
        library_tokens: library token budget applied to edits (``arena run --library-tokens``).
        token_counter: builds the solver's token count for edits (called once, in a worker);
            None: ~4 characters per token.
        poll_interval: seconds between database polls (≤ 0: no polling; tests).
        start_screen: ``"sessions"`` (default) or ``"lessons"`` / ``"adapters"``, shown on top
            of the sessions screen.
        write_report: writes the HTML report of the session named by its argument and returns
            the page's path (called in a thread worker; raises ``ValueError`` with a one-line
            message on user errors); None: the session screen's ``r`` points to ``arena report``.
            Injected by ``arena tui`` because ``tui`` imports only ``lessons``.
    """

    TITLE = "Lesson Arena"
    CSS_PATH = "app.tcss"
    BINDINGS = [
        Binding("q", "quit", "Quit"),
        Binding("question_mark", "help", "Help"),
        Binding("l", "lessons", "Lessons"),
        Binding("a", "adapters", "Adapters"),
        Binding("s", "sessions", "Sessions"),
    ]

    def __init__(
        self,
        db: str | os.PathLike[str],
        library_tokens: int = 4096,
        token_counter: Callable[[], TokenCounter] | None = None,
        poll_interval: float = POLL_INTERVAL_S,
        start_screen: str = "sessions",
        write_report: Callable[[str], Path] | None = None,
    ) -> None:
        super().__init__()
        self.db = os.fspath(db)
        self.library_tokens = library_tokens
        self.token_counter = token_counter
        self.poll_interval = poll_interval
        self.start_screen = start_screen
        self.write_report = write_report
        self.data: ArenaData | None = None  # set once the database is open
        self.state = "opening"  # opening | missing | empty | ready | error
        self._fingerprint: tuple | None = None
        self._polling = False  # a poll worker is running (set on the event loop, cleared by the worker)

    # ----------------------------------------------------------------- start-up

    def on_mount(self) -> None:
        self.sub_title = redact_credentials(self.db)  # the header shows no password
        self._open()
        if self.poll_interval > 0:
            self.set_interval(self.poll_interval, self.poll)

    @work(thread=True, exclusive=True, group="open", exit_on_error=False)
    def _open(self) -> None:
        """Open the store (Alembic may migrate an older schema: seconds, so off the event loop)."""
        try:
            store = open_store(self.db)
        except DatabaseProblem as e:
            self.call_from_thread(self._problem, e.kind, str(e))
            return
        configure_budget(store, self.library_tokens)
        data = ArenaData(store, self.token_counter)
        empty = data.is_empty()
        fp = data.fingerprint()
        self.call_from_thread(self._opened, data, empty, fp)

    def _problem(self, kind: str, message: str) -> None:
        if self.state == kind:
            return
        self.state = kind
        text = missing_text(self.db) if kind == "missing" else error_text(self.db, message)
        self._show_root(NoticeScreen(kind, text))

    def _opened(self, data: ArenaData, empty: bool, fp: tuple) -> None:
        self.data, self._fingerprint = data, fp
        if empty:
            self.state = "empty"
            self._show_root(NoticeScreen("empty", empty_text(self.db)))
            return
        self.state = "ready"
        self._show_root(SessionsScreen())
        if self.start_screen == "lessons":
            self.action_lessons()
        elif self.start_screen == "adapters":
            self.action_adapters()

    def _show_root(self, screen) -> None:
        """Make ``screen`` the only screen above Textual's default one."""
        while len(self.screen_stack) > 1:
            self.pop_screen()
        self.push_screen(screen)

    # ----------------------------------------------------------------- polling

    def poll(self) -> None:
        """Check the database for changes (thread worker; skipped while one is running)."""
        if self.state in ("ready", "empty", "missing") and not self._polling:
            self._polling = True
            self._poll()

    @work(thread=True, group="poll", exit_on_error=False)
    def _poll(self) -> None:
        try:
            self._check()
        finally:
            self._polling = False

    def _check(self) -> None:
        if self.state == "missing":
            path = Path(self.db)
            if path.exists() and path.stat().st_size > 0:
                self.call_from_thread(self._reopen)
            return
        data = self.data
        if data is None:
            return
        try:
            fp = data.fingerprint()
        except Exception as e:  # noqa: BLE001 - a broken database must not kill the poll loop
            self.call_from_thread(self.notify, " ".join(str(e).split()), title="database", severity="error")
            return
        if fp != self._fingerprint:
            empty = data.is_empty() if self.state == "empty" else False
            self.call_from_thread(self._changed, fp, empty)

    def _reopen(self) -> None:
        self.state = "opening"
        self._open()

    def _changed(self, fp: tuple, empty: bool) -> None:
        self._fingerprint = fp
        if self.state == "empty":
            if not empty and self.data is not None:
                self.state = "ready"
                self._show_root(SessionsScreen())
            return
        self.screen.post_message(DataChanged())

    # ----------------------------------------------------------------- navigation

    def action_lessons(self) -> None:
        from tui.screens.lessons import LessonsScreen

        if self.state == "ready" and not isinstance(self.screen, LessonsScreen):
            self.push_screen(LessonsScreen())

    def action_adapters(self) -> None:
        from tui.screens.adapters import AdaptersScreen

        if self.state == "ready" and not isinstance(self.screen, AdaptersScreen):
            self.push_screen(AdaptersScreen())

    def action_sessions(self) -> None:
        if self.state == "ready":
            while len(self.screen_stack) > 2:
                self.pop_screen()

    def action_help(self) -> None:
        from tui.screens.modals import HelpModal

        if not isinstance(self.screen, HelpModal):
            self.push_screen(HelpModal(self.screen))

    def on_unmount(self) -> None:
        if self.data is not None:
            self.data.store.close()


def run(
    db: str,
    library_tokens: int = 4096,
    token_counter: Callable[[], TokenCounter] | None = None,
    write_report: Callable[[str], Path] | None = None,
) -> None:
    """Run the app in the terminal until the user quits (``arena tui``); arguments as :class:`ArenaApp`."""
    ArenaApp(db, library_tokens=library_tokens, token_counter=token_counter, write_report=write_report).run()
