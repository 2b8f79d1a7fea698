"""``arena report``: one self-contained HTML page and a PNG per figure of a session, or of several compared.

:func:`write_session_report` reads the session (:func:`arena.report.data.gather`), draws its
figures (:mod:`arena.report.figures`, matplotlib) and writes the page
(:mod:`arena.report.page`); :func:`write_compare_report` puts several sessions' held-out
pass@1 on one figure. Both read everything before they create the output directory, and raise
:class:`ReportError` (one line) on bad input.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from arena.report.data import ReportError, SessionData, gather
from arena.report.figures import Figure, compare_figure, session_figures
from arena.report.page import ReportFiles, check_out_dir, compare_page, session_page, write_files
from lessons.library.store import LessonStore, StoreError

__all__ = ["Figure", "ReportError", "ReportFiles", "SessionData", "gather", "open_library", "write_compare_report", "write_session_report"]


def open_library(db: str) -> LessonStore:
    """Open the existing library ``db`` for reading a report (the caller closes it).

    Raises:
        ReportError: a bare path that does not exist or is an empty file (opening would create a
            library there), or a file the store cannot open.
    """
    if "://" not in db and not Path(db).is_file():
        raise ReportError(f"no database at {db}; run `arena run --db {db}` first")
    if "://" not in db and Path(db).stat().st_size == 0:  # opening would write a schema into it: a report only reads
        raise ReportError(f"{db} is an empty file, not a library; run `arena run --db {db}` first")
    try:
        return LessonStore(db)
    except StoreError as e:
        raise ReportError(str(e)) from None


def write_session_report(db: str, session: str, out: Path) -> ReportFiles:
    """Write the report of ``session`` into ``out``: ``report.html`` and one PNG per figure.

    Args:
        db: the library (SQLite path or SQLAlchemy URL), which must exist.
        session: the session's name.
        out: the output directory (created when missing).

    Returns:
        The paths written: ``report.html`` and the PNGs.

    Raises:
        ReportError: ``out`` unwritable, no such session, or it has no held-out evaluation.
    """
    store = open_library(db)
    try:
        data = gather(store, session, db)
    finally:
        store.close()
    check_out_dir(out)  # after the reads: a session that cannot be reported leaves no empty directory behind
    figures = session_figures(data)
    return write_files(out, session_page(data, figures), figures)


def write_compare_report(db: str, sessions: Sequence[str], out: Path) -> ReportFiles:
    """Write one page with the held-out pass@1 of ``sessions`` on one figure (``compare.png`` beside it).

    Args:
        db: the library the session names are looked up in.
        sessions: two or more entries, each a session name in ``db`` or the path of another
            library file, which stands for its newest session with episodes (``arena bench
            learning`` writes one library per condition: ``--compare bench-learning/*.db``).
        out: the output directory.

    Raises:
        ReportError: ``out`` unwritable, fewer than two distinct sessions, an unknown session, or one
            with no held-out evaluation.
    """
    entries = list(dict.fromkeys(sessions))
    if len(entries) < 2:
        raise ReportError(f"--compare needs at least two different sessions, got {', '.join(entries) or 'none'}")
    series, seen = [], {}
    for entry in entries:
        from_file = "://" not in entry and Path(entry).is_file()
        source = entry if from_file else db
        store = open_library(source)
        try:
            name = store.latest_session_with_episodes() if from_file else entry
            if name is None:
                raise ReportError(f"{entry} has no session with episodes")
            key = (str(Path(source).resolve()) if "://" not in source else source, name)
            if key in seen:  # a file and a name (or two paths) can resolve to the same session
                raise ReportError(f"{entry} is the same session as {seen[key]} ({name}); compare different sessions")
            seen[key] = entry
            label = f"{Path(entry).stem}: {name}" if from_file else name
            series.append((label, gather(store, name, source).heldout))
        finally:
            store.close()
    check_out_dir(out)
    figure = compare_figure(series)
    return write_files(out, compare_page([label for label, _ in series], figure), [figure])
