"""Reference answers as text: the one validation rule of a task's ``answer`` field.

A task line (:class:`arena.tasks.jsonl.TaskLine`) and a proposer reply
(:class:`agents.roles.proposer.ProposedTask`) both accept an answer given as a JSON string or
number; this module decides what is valid, so both read answers the same way.
"""

from __future__ import annotations

import math


def answer_text(value: object, *, allow_empty: bool = False) -> object:
    """Check a raw ``answer`` value and turn a number into its text (a pydantic "before" validator body).

    Args:
        value: the raw JSON value: a string, an int or a float.
        allow_empty: keep a blank string (a later validator of the caller decides about it)
            instead of refusing it here.

    Returns:
        ``str(value)`` for a finite number, else ``value`` unchanged (a string, or any other
        type, which pydantic's own type check then refuses).

    Raises:
        ValueError: ``"must be a string or a number"`` for a bool or None, ``"must be a finite
            number"`` for NaN or ±inf, ``"must not be empty"`` for a blank string (unless
            ``allow_empty``).
    """
    if isinstance(value, bool) or value is None:
        raise ValueError("must be a string or a number")
    if isinstance(value, (int, float)):
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError("must be a finite number")
        return str(value)
    if not allow_empty and isinstance(value, str) and not value.strip():
        raise ValueError("must not be empty")
    return value
