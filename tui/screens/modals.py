"""Modal dialogs: edit a lesson, retire a lesson with a reason, and the key help."""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen, Screen
from textual.widgets import Button, Input, Label, Static, TextArea


class EditLessonModal(ModalScreen[tuple[str, str] | None]):
    """Edit a lesson's text; dismisses with ``(new text, why)`` or None (cancelled)."""

    BINDINGS = [Binding("escape", "cancel", "Cancel"), Binding("ctrl+s", "save", "Save", priority=True)]

    def __init__(self, lesson_id: str, text: str) -> None:
        super().__init__()
        self.lesson_id = lesson_id
        self.text = text

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(f"Edit {self.lesson_id}  (ctrl+s save · escape cancel)", classes="dialog-title")
            yield TextArea(self.text, id="edit-text", soft_wrap=True)
            yield Input(placeholder="why (kept in the history)", id="edit-why")
            with Horizontal(classes="buttons"):
                yield Button("Save", variant="primary", id="save")
                yield Button("Cancel", id="cancel")

    def action_save(self) -> None:
        text = self.query_one("#edit-text", TextArea).text
        why = self.query_one("#edit-why", Input).value.strip()
        self.dismiss((text, why))

    def action_cancel(self) -> None:
        self.dismiss(None)

    @on(Button.Pressed, "#save")
    def _save(self) -> None:
        self.action_save()

    @on(Button.Pressed, "#cancel")
    def _cancel(self) -> None:
        self.action_cancel()

    @on(Input.Submitted, "#edit-why")
    def _submitted(self) -> None:
        self.action_save()


class RetireModal(ModalScreen[str | None]):
    """Ask for the reason of a retirement; dismisses with it, or None (cancelled)."""

    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, lesson_id: str) -> None:
        super().__init__()
        self.lesson_id = lesson_id

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(f"Retire {self.lesson_id}: why?  (enter retire · escape cancel)", classes="dialog-title")
            yield Input(placeholder="reason, e.g. misleads on negative numbers", id="retire-why")
            with Horizontal(classes="buttons"):
                yield Button("Retire", variant="error", id="retire")
                yield Button("Cancel", id="cancel")

    @on(Input.Submitted, "#retire-why")
    @on(Button.Pressed, "#retire")
    def _retire(self) -> None:
        self.dismiss(self.query_one("#retire-why", Input).value)

    @on(Button.Pressed, "#cancel")
    def action_cancel(self) -> None:
        self.dismiss(None)


class HelpModal(ModalScreen[None]):
    """The keys of the screen underneath and of the app; any of escape / ? / q closes it."""

    BINDINGS = [Binding("escape,question_mark,q", "close", "Close")]

    def __init__(self, screen: Screen) -> None:
        super().__init__()
        self.under = screen

    def compose(self) -> ComposeResult:
        lines = [f"Keys — {type(self.under).__name__.removesuffix('Screen')}", ""]
        seen: set[str] = set()
        for source in (self.under, self.app):
            for b in source.BINDINGS:
                key, desc = (b.key, b.description) if isinstance(b, Binding) else (b[0], b[2] if len(b) > 2 else b[1])
                if key in seen or not desc:
                    continue
                seen.add(key)
                lines.append(f"  {key:<14} {desc}")
        with Vertical(classes="dialog"):
            yield Static("\n".join(lines), id="help-text")

    def action_close(self) -> None:
        self.dismiss(None)
