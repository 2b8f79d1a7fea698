"""Messages the TUI's screens and widgets exchange (small classes handled with ``@on``)."""

from __future__ import annotations

from textual.message import Message


class DataChanged(Message):
    """The database changed since the last poll (another process or this app wrote to it)."""


class LessonChanged(Message):
    """This app applied a curation op to a lesson; screens showing it reload."""

    def __init__(self, lesson_id: str) -> None:
        super().__init__()
        self.lesson_id = lesson_id  # readable lesson id, e.g. "chain_sum-00012"
