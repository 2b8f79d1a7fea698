"""One reader of JSON Lines files: each non-blank line one JSON object.

Task files (:mod:`arena.tasks.jsonl`) and lesson exports (:mod:`lessons.library.transfer`)
are JSONL. :func:`read_json_objects` reads such a file and yields ``(line number, object)``
lazily, so a caller that validates each object reports the first bad line, whichever way it
is bad. Problems raise the subclasses of :class:`JsonlError`, which carry what went wrong but
no message: each caller words the one-line error its users see.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any


class JsonlError(ValueError):
    """A JSONL file cannot be read as one JSON object per line (see the subclasses)."""


class UnreadableFile(JsonlError):
    """The file cannot be opened or is not UTF-8 text.

    Attributes:
        cause: the ``OSError`` or ``UnicodeDecodeError`` raised by reading.
    """

    def __init__(self, cause: OSError | UnicodeDecodeError) -> None:
        super().__init__(str(cause))
        self.cause = cause


class InvalidJson(JsonlError):
    """A line is not JSON.

    Attributes:
        lineno: the line number, from 1.
        cause: the ``json.JSONDecodeError`` (``msg``, ``colno``).
    """

    def __init__(self, lineno: int, cause: json.JSONDecodeError) -> None:
        super().__init__(f"line {lineno}: {cause.msg} (column {cause.colno})")
        self.lineno = lineno
        self.cause = cause


class NotAnObject(JsonlError):
    """A line is JSON but not an object (a list, a string, a number...).

    Attributes:
        lineno: the line number, from 1.
        value: the parsed value.
    """

    def __init__(self, lineno: int, value: object) -> None:
        super().__init__(f"line {lineno}: expected a JSON object, got {type(value).__name__}")
        self.lineno = lineno
        self.value = value


def read_json_objects(path: str | os.PathLike[str]) -> Iterator[tuple[int, dict[str, Any]]]:
    """The JSON objects of a JSONL file with their line numbers, blank lines skipped.

    The file is read whole as UTF-8 (a byte-order mark is allowed) when iteration starts;
    lines are parsed one at a time as they are consumed.

    Args:
        path: the JSONL file.

    Yields:
        ``(lineno, obj)``: the 1-based line number and the parsed object.

    Raises:
        UnreadableFile: the file cannot be read or is not UTF-8 text.
        InvalidJson: a line is not JSON.
        NotAnObject: a line is JSON but not an object.
    """
    try:
        text = Path(path).read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as e:
        raise UnreadableFile(e) from None
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise InvalidJson(lineno, e) from None
        if not isinstance(obj, dict):
            raise NotAnObject(lineno, obj)
        yield lineno, obj
