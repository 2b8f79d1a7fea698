"""Errors of a sleep's training, importable without torch.

The CLI catches :class:`TrainingError` around every command that may train; importing it from
:mod:`arena.distill.trainer` would load torch and transformers (seconds) before a bad flag is refused.
"""

from __future__ import annotations


class TrainingError(RuntimeError):
    """Training cannot go on (non-finite loss, no example fits); one line for stderr."""
