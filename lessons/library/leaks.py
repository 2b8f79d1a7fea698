"""Held-out safety audit: does any stored lesson or hint contain a held-out task's question or answer?

A lesson or hint that quotes a held-out task inflates held-out pass@1 and voids the before/after
comparison. :func:`find_leaks` checks every stored lesson (any status) and hint against the
held-out tasks:

- **question**: the task's *fingerprint* — its normalised question minus the prefix that
  every question of its family shares (e.g. "state the final answer to the following
  arithmetic problem:" leaves "15 - 43") — appears in the text (whitespace ignored);
- **answer**: a *distinctive* reference answer appears as a whole token. An answer is too
  common to be evidence when it is a short number (at most 3 characters: "6", "-12", "3.5"),
  shorter than 3 characters, or the answer of more than one stored task; such an answer is
  only reported together with its question.
"""

from __future__ import annotations

import os
import re
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from lessons.library.store import LessonStore, TaskInfo
from lessons.text import contains_token

_NUMBER = re.compile(r"^-?\d+(?:\.\d+)?$")
MIN_FINGERPRINT_CHARS = 5  # a shorter fingerprint falls back to the whole question


@dataclass(frozen=True)
class Leak:
    """One match: which stored text (``lesson`` or ``hint`` and its id) leaks which held-out task, and how."""

    source: str  # "lesson" | "hint"
    source_id: str  # lesson id ("chain_sum-00003") or hint id ("hint-12")
    session: str  # the held-out task's session
    task_key: str
    kind: str  # "question", "answer" or "question+answer"
    excerpt: str  # the leaking text, shortened


def _norm(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip().lower()


def _squash(text: str) -> str:
    return re.sub(r"\s+", "", text).lower()


def fingerprints(tasks: Sequence[TaskInfo]) -> dict[tuple[str, str], str]:
    """``(session, task_key)`` → the task's question minus its family's shared prefix (normalised)."""
    by_family: dict[str, list[str]] = defaultdict(list)
    for t in tasks:
        by_family[t.family].append(_norm(t.question))
    prefix = {}
    for fam, qs in by_family.items():
        p = os.path.commonprefix(qs) if len(set(qs)) > 1 else ""
        prefix[fam] = p[: p.rfind(" ") + 1] if " " in p else ""  # cut back to a word boundary
    out = {}
    for t in tasks:
        q = _norm(t.question)
        fp = q[len(prefix[t.family]) :].strip(" =?.:")
        out[(t.session, t.task_key)] = fp if len(fp) >= MIN_FINGERPRINT_CHARS else q
    return out


def distinctive(answer: str, answer_counts: Counter) -> bool:
    """Whether ``answer`` alone is evidence of a leak (see the module docstring for the rule)."""
    a = _norm(answer)
    if len(a) < 3 or answer_counts[a] > 1:
        return False
    return not (_NUMBER.match(a) and len(a) <= 3)


def find_leaks(store: LessonStore, session: str | None = None) -> list[Leak]:
    """Every lesson and hint that contains a held-out task's question or distinctive answer.

    Args:
        store: the library.
        session: restrict the held-out tasks (and hints) to one session; lessons are shared
            by all sessions and always checked.

    Returns:
        One :class:`Leak` per (text, task) match, lessons first.
    """
    all_tasks = store.stored_tasks()
    heldout = [t for t in all_tasks if t.split == "heldout" and (session is None or t.session == session)]
    if not heldout:
        return []
    fps = fingerprints([t for t in all_tasks if session is None or t.session == session])
    counts = Counter(_norm(t.answer) for t in all_tasks)
    texts = [("lesson", les.lesson_id, les.text) for les in store.list_lessons()]
    sessions = {session} if session else {t.session for t in heldout}
    for name in sessions:
        info = store.get_session(name)
        if info is not None:
            texts += [("hint", f"hint-{h.id}", h.text) for h in store.hints(info.id)]
    leaks = []
    for source, sid, text in texts:
        norm, squashed = _norm(text), _squash(text)
        for t in heldout:
            q_hit = _squash(fps[(t.session, t.task_key)]) in squashed
            a_hit = contains_token(norm, _norm(t.answer))
            if q_hit or (a_hit and distinctive(t.answer, counts)):
                kind = "question+answer" if q_hit and a_hit else ("question" if q_hit else "answer")
                excerpt = text if len(text) <= 120 else text[:117] + "..."
                leaks.append(Leak(source, sid, t.session, t.task_key, kind, excerpt))
    return leaks
