"""What every data screen shares: its loader runs in a thread worker and reloads on change."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from textual import on, work
from textual.screen import Screen
from textual.worker import get_current_worker

from lessons.library.read_models import USER_ERRORS
from tui.messages import DataChanged

if TYPE_CHECKING:
    from lessons.library.read_models import ArenaData
    from tui.app import ArenaApp


def one_line(e: BaseException) -> str:
    """An exception as one line for a notification."""
    return " ".join(str(e).split()) or type(e).__name__


class DataScreen(Screen):
    """A screen whose content comes from :class:`lessons.library.read_models.ArenaData`.

    Subclasses implement :meth:`fetch` (runs in a thread, returns plain data) and
    :meth:`show` (runs on the event loop, updates widgets). :meth:`reload` starts the
    worker; it runs on mount, on resume (coming back with ``escape``) and whenever the
    app's poll sees the database change.
    """

    @property
    def arena(self) -> ArenaApp:
        return self.app  # type: ignore[return-value]

    @property
    def data(self) -> ArenaData:
        return self.arena.data

    def fetch(self) -> Any:
        raise NotImplementedError

    def show(self, result: Any) -> None:
        raise NotImplementedError

    def on_screen_resume(self) -> None:
        # sent when the screen becomes current: first shown, and back from a screen above it
        self.reload()

    @on(DataChanged)
    def _changed(self) -> None:
        self.reload()

    def reload(self) -> None:
        """Fetch in a worker and show the result (a newer reload cancels an older one)."""
        self._load()

    _shown: Any = None  # the last result shown (a reload with equal data redraws nothing)

    @work(thread=True, exclusive=True, group="load", exit_on_error=False)
    def _load(self) -> None:
        self.run_in_thread(self.fetch, self._show_if_new)

    def _show_if_new(self, result: Any) -> None:
        if self._shown is not None and result == self._shown:
            return
        self._shown = result
        self.show(result)

    def run_in_thread(self, fetch: Callable[[], Any], show: Callable[[Any], None]) -> None:
        """Call ``fetch()`` (this thread), then ``show(result)`` on the event loop unless cancelled;
        database errors become an error notification."""
        worker = get_current_worker()
        try:
            result = fetch()
        except USER_ERRORS as e:
            if not worker.is_cancelled:
                self.app.call_from_thread(self.app.notify, one_line(e), title="database", severity="error")
            return
        if not worker.is_cancelled:
            self.app.call_from_thread(show, result)
