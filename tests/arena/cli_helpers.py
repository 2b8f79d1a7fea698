"""Running the ``arena`` CLI in a subprocess and checking its one-line errors (tests/arena/)."""

from __future__ import annotations

import os
import subprocess
import sys


def arena(*args, env=None, cwd=None):
    """Run ``python -m arena.cli ARGS`` (120 s limit) and return the finished process (text stdout/stderr).

    Args:
        args: the command line after ``arena``.
        env: variables added to this process's environment.
        cwd: the working directory (None: this process's).
    """
    e = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, "-m", "arena.cli", *args], capture_output=True, text=True,
                          env=e, cwd=cwd, timeout=120)


def assert_one_line_error(proc, *fragments):
    """Assert the CLI's user-error contract: exit 2, one ``arena: error: …`` line with ``fragments``, no traceback, no stdout."""
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("arena: error: ")
    assert "Traceback" not in proc.stderr
    for f in fragments:
        assert f in lines[0], lines[0]
    assert proc.stdout == ""
