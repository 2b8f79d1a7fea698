"""Task identity: when two tasks are the same task, whatever their spelling (held-out isolation).

A held-out task must never reach training, and a teacher's proposal, a JSONL line or a task of
another source can repeat one in another spelling: ``"…problem: 12+5 ="`` is the held-out
``"…problem: 12 + 5 ="`` to the chain_sum verifier (it parses either into the terms 12 and 5),
so comparing lower-cased text with whitespace collapsed lets it through (CASE-006). Every
place where a task may enter the session — the train/held-out draws
(:func:`arena.tasks.gym.make_family_tasks`), task files (:func:`arena.tasks.jsonl.load_tasks_file`),
both sources together (:func:`arena.tasks.sources.load_tasks`), the curriculum's draws and the
proposer's checks (:mod:`arena.session.curriculum`, :func:`agents.roles.proposer.check_proposal`)
— therefore compares :func:`task_identity` keys, never text; :func:`check_disjoint` checks a
session's splits with it.

The key is what a verifier would read of the question:

1. **text**: Unicode NFKC (full-width digits and letters, NBSP and other compatibility spaces
   become ASCII), dashes and the minus sign become ``-``, curly quotes straight ones, case
   folded, every whitespace, control and format character (zero-width space, BOM) removed,
   trailing sentence punctuation (``. ? ! ; : ,`` …) dropped. So spacing, case, punctuation
   spacing and trailing punctuation never make two tasks different.
2. **arithmetic**: when the text ends in a chain of integers joined by ``+`` / ``-``
   (chain_sum's ``"<prefix>: 31 - 48 + 7 ="``, the ``=`` optional), that chain is replaced by
   its sequence of signed integer terms, as the chain_sum verifier parses it: ``12 - 5``,
   ``12+-5`` and ``12 + -05`` are all the terms ``(12, -5)``.

Decisions, on purpose:

- **Term order counts.** ``5 + 12`` and ``12 + 5`` have the same answer but are different
  tasks, as reasoning-gym's generator draws them: identifying reorderings would shrink the
  distinct questions of a small family (1-digit, 2-term chain_sum) and change draws that stored
  sessions resume from. Equal-order spellings always collide; so do equal signed terms
  (``5 + -3`` is ``5 - 3``), so a ``chain_sum:allow_negation=true`` draw may skip an item that
  the old text comparison kept.
- **The family does not count.** The solver sees only the question, so a JSONL line that
  repeats a chain_sum held-out question under another family name is still that task.
- **The answer does not count** for isolation: a held-out question paired with another
  reference answer is still the held-out question to the solver, and keying on the answer too
  would let it through. :func:`answer_identity` (the normalised answer) tells a repeated
  line from a conflicting one where that matters (JSONL files warn).

The rule only merges: texts that :func:`arena.tasks.extract.normalise_text` (the comparison it
replaces) equates always get the same key.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable
from typing import Protocol

from arena.tasks.extract import normalise_number, normalise_text
from arena.tasks.model import Task, TaskError

__all__ = ["answer_identity", "check_disjoint", "task_identity"]


class HasQuestion(Protocol):
    """A task of any kind: :class:`~arena.tasks.model.Task`, a stored task, a JSONL line."""

    @property
    def question(self) -> str: ...

# Characters NFKC leaves alone that a reader (and a verifier's parser) takes for ASCII ones.
_FOLD = str.maketrans({
    "\u2212": "-",  # minus sign
    "\u2010": "-", "\u2011": "-", "\u2012": "-", "\u2013": "-", "\u2014": "-", "\u2015": "-",  # hyphens, dashes
    "\u201c": '"', "\u201d": '"', "\u201e": '"', "\u00ab": '"', "\u00bb": '"',
    "\u2018": "'", "\u2019": "'", "\u201a": "'",
})
# Sentence punctuation a question may end with or not (NFKC has already mapped the full-width
# "？！．：；，" to ASCII and "…" to "...").
_TRAILING = ".?!;:,。"
_CHAIN = re.compile(r"[+-]*\d+(?:[+-]+\d+)+")  # >= 2 integers joined by + / - (signs may repeat: "12+-5")
_TERM = re.compile(r"([+-]*)(\d+)")
_SEP = "\x00"  # between prefix and terms in a key; control characters are removed from the text


def _text_key(text: str) -> str:
    """Step 1 of the key: NFKC, ASCII dashes and quotes, case folded, no whitespace/control/format characters.

    Starts from :func:`normalise_text`, so texts that it equates get the same key.
    """
    t = unicodedata.normalize("NFKC", normalise_text(text)).translate(_FOLD).casefold()
    t = "".join(c for c in t if not c.isspace() and unicodedata.category(c) not in ("Cc", "Cf"))
    return t.rstrip(_TRAILING)


def _split_chain(text: str) -> tuple[str, str] | None:
    """``(prefix, chain)`` when ``text`` ends in a +/- integer chain (``=`` optional), else None. Linear time."""
    body = text[:-1] if text.endswith("=") else text
    start = len(body)
    while start > 0 and (body[start - 1].isdecimal() or body[start - 1] in "+-"):
        start -= 1
    chain = body[start:]
    return (body[:start], chain) if _CHAIN.fullmatch(chain) else None


def _signed(signs: str, digits: str) -> int:
    """A term's value: its digits, negated once per ``-`` before it (``+-5`` → -5, ``--5`` → 5)."""
    return -int(digits) if signs.count("-") % 2 else int(digits)


def task_identity(task_or_question: HasQuestion | str) -> str:
    """The identity of a task for held-out isolation: two tasks are the same iff their keys are equal.

    See the module docstring for the rule (NFKC text without spacing, case or trailing
    punctuation; a trailing ``+``/``-`` integer chain read as its signed terms, in order).

    Args:
        task_or_question: a task (its ``question``: a :class:`~arena.tasks.model.Task`, a stored
            task) or a question.

    Returns:
        An opaque key (compare it, store it in sets; do not show it).

    >>> task_identity("State the final answer to the following arithmetic problem: 12+5 =") == \\
    ...     task_identity("state the final answer to the following arithmetic problem:  12 + 5")
    True
    >>> task_identity("What is 12 + 5?") == task_identity("What is 5 + 12?")
    False
    """
    question = task_or_question if isinstance(task_or_question, str) else task_or_question.question
    text = _text_key(question)
    parts = _split_chain(text)
    if parts is None:
        return text
    prefix, chain = parts
    terms = ",".join(str(_signed(signs, digits)) for signs, digits in _TERM.findall(chain))
    return f"{prefix}{_SEP}{terms}"


def answer_identity(answer: str) -> str:
    """A reference answer, normalised: a number in one canonical form, else the text key of step 1.

    ``"17"``, ``"17.0"``, ``"１７"`` and ``"+17."`` give the same key; ``"Paris"`` and ``"paris."`` too.

    Args:
        answer: the reference answer as text.

    Returns:
        An opaque key.
    """
    text = unicodedata.normalize("NFKC", answer).translate(_FOLD)
    value = normalise_number(text)
    if value is not None:
        return repr(value + 0.0)  # -0.0 + 0.0 == 0.0
    return _text_key(text)


def check_disjoint(train: Iterable[Task], heldout: Iterable[Task]) -> None:
    """Check that no held-out task is a train task in any spelling (same :func:`task_identity`).

    Args:
        train: the train tasks.
        heldout: the held-out tasks.

    Raises:
        TaskError: a held-out task shares its identity with a train task; the message names both.
    """
    keys = {task_identity(t): t.task_key for t in train}
    for t in heldout:
        other = keys.get(task_identity(t))
        if other is not None:
            raise TaskError(
                f"held-out task {t.task_key} is train task {other} written differently "
                f"({t.question[:60]!r}); a held-out task must never be trained on: remove one of them"
            )
