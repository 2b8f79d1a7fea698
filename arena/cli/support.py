"""What every `arena` command shares: one-line errors on stderr, exit codes, quiet libraries, opening a library."""

from __future__ import annotations

import logging
import os
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import typer

if TYPE_CHECKING:
    from pydantic import ValidationError

    from lessons.library.store import LessonStore

EXIT_USER_ERROR = 2
EXIT_STORE_FAULT = 3  # the database or its disk failed under a run (lessons.db.faults.StoreFault)
EXIT_INTERRUPTED = 130

_FLAG_OF_FIELD = {"families": "family", "hint_modes": "hint-mode"}  # config fields whose flag is named otherwise


def fmt_rate(x: float | None) -> str:
    """A pass rate to 3 places, or ``n/a`` where nothing was measured (n = 0 gives None)."""
    return "n/a" if x is None else f"{x:.3f}"


def fail(message: str, code: int = EXIT_USER_ERROR) -> typer.Exit:
    """Print ``arena: error: <message>`` as one line on stderr (URL passwords as ``***``, those of the command line's
    values too: :func:`lessons.credentials.redact_command_line`) and return the Exit to raise."""
    from lessons.credentials import redact_command_line

    line = redact_command_line(" ".join(str(message).split()), sys.argv[1:])
    print(f"arena: error: {line}", file=sys.stderr)
    return typer.Exit(code)


def stop_on_sigterm() -> None:
    """Make SIGTERM (``kill``, ``timeout``) raise KeyboardInterrupt in the main thread, so it stops like Ctrl-C:
    sessions are marked interrupted and child processes (a benchmark's server) are ended on the way out."""
    signal.signal(signal.SIGTERM, _raise_interrupt)


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def exit_now(code: int) -> None:
    """Exit at once with ``code``, skipping interpreter finalization (after Ctrl-C or SIGTERM).

    A local model's decoder thread may be inside a torch kernel when the session is
    interrupted; finalizing the interpreter under it aborts the process from C++
    ("terminate called without an active exception", SIGABRT) instead of exiting with the
    interrupt's code. Everything the session wrote is committed by then (each episode and
    checkpoint is its own transaction), so only the buffered output is flushed.
    """
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe: nothing more to say on it
            pass
    os._exit(code)


def quiet_libraries() -> None:
    """Keep library chatter (conversion progress bars, generation warnings) off the user's terminal."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    logging.getLogger("transformers").setLevel(logging.ERROR)
    import warnings

    warnings.filterwarnings("ignore", category=UserWarning)
    warnings.filterwarnings("ignore", category=FutureWarning)


def config_error(e: ValidationError) -> str:
    """The first error of a config validation as ``--flag: message`` (the flag that sets the field).

    Args:
        e: pydantic's error from building a config (``SessionConfig``, ``DistillConfig``).

    Returns:
        ``"--flag: message"``, or the bare message when the error names no field.
    """
    err = e.errors()[0]
    field = str(err["loc"][0]) if err["loc"] else ""
    msg = err["msg"].removeprefix("Value error, ")
    flag = _FLAG_OF_FIELD.get(field, field.replace("_", "-"))
    return f"--{flag}: {msg}" if field else msg


def require_db_file(db: str) -> None:
    """A bare SQLite path must exist (opening would create an empty library).

    Args:
        db: a SQLite path or a SQLAlchemy URL (URLs are not checked here).

    Raises:
        StoreError: ``no database at DB; run `arena run --db DB` first``.
    """
    from lessons.library.store import StoreError

    if "://" not in db and not Path(db).exists():
        raise StoreError(f"no database at {db}; run `arena run --db {db}` first")


def open_existing(db: str) -> LessonStore:
    """Open a library that must already exist (see :func:`require_db_file`).

    Raises:
        StoreError: no database at a bare path, or one the store cannot open.
    """
    from lessons.library.store import LessonStore

    require_db_file(db)
    return LessonStore(db)
