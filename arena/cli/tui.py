"""`arena tui`: the Textual app over a lesson library; the only importer of the `tui` package (lazily)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer

from arena.cli.support import fail, quiet_libraries


def tui(
    db: Annotated[str, typer.Option(help="Lesson library: SQLite path or SQLAlchemy URL (the one `arena run --db` writes).")] = "arena.db",
    library_tokens: Annotated[int, typer.Option(help="Token budget of all live lessons, applied to edits (as in `arena run`).")] = 4096,
    solver: Annotated[str, typer.Option(help="Whose tokenizer counts edited lessons' tokens: local (SmolLM2) or openai:MODEL.")] = "local",
) -> None:
    """Browse and curate sessions, episodes, rollouts, lessons and adapters in the terminal (Textual)."""
    quiet_libraries()
    from arena.cli.lessons import check_tokenizer_spec
    from arena.config import check_db
    from lessons.library.store import StoreError, check_database

    try:
        check_db(db)
        check_database(db)  # the directory exists and is writable (edits write), without creating the file
        if library_tokens < 1:
            raise ValueError(f"--library-tokens must be >= 1, got {library_tokens}")
        check_tokenizer_spec(solver)
        from lessons.library.read_models import DatabaseProblem, open_store

        try:
            open_store(db).close()  # a corrupt file or newer schema: one line here, not inside the app
        except DatabaseProblem as e:
            if e.kind != "missing":  # a missing database gets the app's how-to-create-one screen
                raise StoreError(str(e)) from None
    except (StoreError, ValueError) as e:
        raise fail(str(e)) from None
    from arena.cli.lessons import token_counter
    from tui.app import run as run_tui

    run_tui(db, library_tokens=library_tokens, token_counter=lambda: token_counter(solver),
            write_report=report_writer(db))


def report_writer(db: str) -> Callable[[str], Path]:
    """The session screen's ``r``: ``name -> report-NAME/report.html``, as ``arena report --session NAME`` writes it.

    :mod:`arena.report` (matplotlib) is imported on the first call, not at start-up; its
    ``ReportError`` is a ``ValueError``, which the TUI shows as one line.
    """

    def write(name: str) -> Path:
        from arena.cli.report import safe_name
        from arena.report import write_session_report

        return write_session_report(db, name, Path(f"report-{safe_name(name)}")).html

    return write
