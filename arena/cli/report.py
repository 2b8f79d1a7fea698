"""`arena report`: a session's figures as one self-contained HTML page and PNGs (:mod:`arena.report`)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Annotated, Optional

import typer

from arena.cli.support import fail, quiet_libraries


def safe_name(session: str) -> str:
    """A session name as one path component (``/``, ``..`` and the like cannot leave the working directory)."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", session).lstrip(".") or "session"


def report(
    sessions: Annotated[Optional[list[str]], typer.Argument(help="With --compare: two or more sessions of --db, or library files (each: its newest session).",
                                                            show_default=False)] = None,
    db: Annotated[str, typer.Option(help="Lesson library: SQLite path or SQLAlchemy URL.")] = "arena.db",
    session: Annotated[Optional[str], typer.Option(help="The session (default: the newest one with episodes).")] = None,
    out: Annotated[Optional[Path], typer.Option(help="Output directory (default: report-SESSION, or report-compare).")] = None,
    compare: Annotated[bool, typer.Option("--compare", help="Put the held-out pass@1 of the SESSIONS on one figure.")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print the written files as one JSON object.")] = False,
) -> None:
    """Write the report of a session: held-out pass@1 with CIs and paired tests, train rates, hints, the library, lessons and adapters.

    `arena report --compare S1 S2 ...` compares sessions; a library file stands for its newest session, so
    `arena report --compare bench-learning/*.db` compares the conditions of `arena bench learning`.
    Exit code 2 on bad input (unknown session, no evaluation yet, unwritable --out).
    """
    quiet_libraries()
    from arena.report import ReportError, open_library, write_compare_report, write_session_report
    from lessons.library.store import StoreError

    try:
        if not db.strip():
            raise ValueError("--db must name a library (a SQLite path or an SQLAlchemy URL)")
        if compare:
            if session is not None:
                raise ValueError("--compare takes the sessions as arguments, not --session")
            files = write_compare_report(db, sessions or [], out or Path("report-compare"))
        else:
            if sessions:
                raise ValueError(f"unexpected argument {sessions[0]!r}: name one session with --session, or several with --compare")
            if session is None:
                with open_library(db) as store:
                    session = store.latest_session_with_episodes()
                if session is None:
                    raise ValueError(f"no session with episodes in {db}; run `arena run --db {db}` first")
            files = write_session_report(db, session, out or Path(f"report-{safe_name(session)}"))
    except (ReportError, StoreError, ValueError) as e:
        raise fail(str(e)) from None
    if json_out:
        print(json.dumps({"html": str(files.html), "figures": [str(p) for p in files.figures]}))
    else:
        print(f"wrote {files.html} and {len(files.figures)} figure(s) in {files.html.parent}")
