"""What every `arena` command shares: one-line errors on stderr, exit codes, quiet libraries."""

from __future__ import annotations

import logging
import os
import sys

import typer

EXIT_USER_ERROR = 2
EXIT_INTERRUPTED = 130


def fail(message: str, code: int = EXIT_USER_ERROR) -> typer.Exit:
    """Print ``arena: error: <message>`` as one line on stderr and return the Exit to raise."""
    line = " ".join(str(message).split())
    print(f"arena: error: {line}", file=sys.stderr)
    return typer.Exit(code)


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


