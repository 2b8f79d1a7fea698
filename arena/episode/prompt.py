"""Prompt assembly: the ``<lessons>`` section one task's solver prompt gets.

The library ranks (:func:`lessons.library.retrieval.rank_lessons`: BM25 plus the curation prior);
this module packs the ranked lessons into the section up to the solver's token budget with
:func:`agents.roles.solver.render_lessons`.
"""

from __future__ import annotations

from collections.abc import Callable, Collection

from agents.roles.solver import LessonView, render_lessons
from lessons.library.retrieval import rank_lessons
from lessons.library.store import LessonStore


def retrieve(
    store: LessonStore,
    family: str | None,
    task_text: str,
    budget_tokens: int,
    count_tokens: Callable[[str], int],
    exclude: Collection[str] = (),
    active_only: bool = False,
) -> tuple[str, list[list[str]]]:
    """The ``<lessons>`` section for one task and the ``[lesson_id, text]`` pairs it holds.

    Args:
        store: the library.
        family: the task's family.
        task_text: the task's question (the BM25 query).
        budget_tokens: cap on the section, in the solver's tokens (``--lesson-tokens``).
        count_tokens: the solver's tokenizer count.
        exclude: lesson ids to leave out.
        active_only: only ``active`` lessons (held-out evaluation); default candidates too.

    Returns:
        ``(section, [[id, text], ...])`` in prompt order; ``("", [])`` when nothing fits.
    """
    ranked = rank_lessons(store, family, task_text, exclude, active_only=active_only)
    views = [LessonView(r.lesson.lesson_id, r.lesson.text) for r in ranked]
    section, ids = render_lessons(views, budget_tokens, count_tokens)
    by_id = {v.lesson_id: v.text for v in views}
    return section, [[i, by_id[i]] for i in ids]
