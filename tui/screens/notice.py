"""A full-screen notice: no database yet, an empty one, or one that cannot be opened."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Center, Middle
from textual.screen import Screen
from textual.widgets import Footer, Header, Static

from lessons.db.engine import redact_credentials


def missing_text(db: str) -> str:
    db = redact_credentials(db)
    return (
        f"No lesson library at {db} yet.\n\n"
        f"Create one by running a session:\n\n    arena run --db {db}\n\n"
        f"or add a lesson by hand:\n\n    arena lessons add --db {db} \"Check each step before answering.\"\n\n"
        "This screen switches to the sessions as soon as the database has data."
    )


def empty_text(db: str) -> str:
    db = redact_credentials(db)
    return (
        f"The lesson library {db} is empty: no session and no lesson yet.\n\n"
        f"Start a session that writes to it:\n\n    arena run --db {db}\n\n"
        "This screen switches to the sessions as soon as the first data arrives."
    )


def error_text(db: str, message: str) -> str:
    db, message = redact_credentials(db), redact_credentials(message)
    return f"Cannot open {db}:\n\n{message}\n\nPress q to quit."


class NoticeScreen(Screen):
    """A message in the middle of the screen (``kind``: missing, empty or error)."""

    def __init__(self, kind: str, text: str) -> None:
        super().__init__()
        self.kind = kind
        self.text = text

    def compose(self) -> ComposeResult:
        yield Header()
        with Middle(), Center():
            yield Static(self.text, id="notice", classes=f"notice {self.kind}")
        yield Footer()
