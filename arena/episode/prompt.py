"""Prompt assembly: the ``<lessons>`` section one task's solver prompt gets.

The library ranks (:func:`lessons.library.retrieval.rank_lessons`: BM25 plus the curation prior);
this module packs the ranked lessons into the section up to the solver's token budget with
:func:`agents.roles.solver.render_lessons`. :func:`retrieve_for_task` is the one entry point the
episode graph, held-out evaluation, utility A/Bs, cycles and distillation share.
"""

from __future__ import annotations

from collections.abc import Callable, Collection

from agents.roles.solver import LessonView, render_lessons
from arena.tasks.model import Task
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


def retrieve_for_task(
    store: LessonStore,
    task: Task,
    budget_tokens: int,
    count_tokens: Callable[[str], int],
    exclude: Collection[str] = (),
) -> tuple[str, list[list[str]]]:
    """The lessons section for ``task`` and the ``[id, text]`` pairs it holds.

    Live lessons of the task's family and global ones, ranked by BM25 relevance to the
    question and by their curation prior (:mod:`lessons.library.retrieval`), cut to
    ``budget_tokens`` of the solver's tokenizer; ``exclude`` leaves lesson ids out. Shared
    by the graph, evaluation and utility A/Bs.

    Visibility: a train task sees candidates and active lessons (candidates gather their
    evidence there); any other task (held-out evaluation) sees ``active`` lessons only, so an
    untested lesson never reaches a held-out prompt.

    Args:
        store: the library.
        task: the task (its family, question and split).
        budget_tokens: cap on the section, in the solver's tokens.
        count_tokens: the solver's tokenizer count.
        exclude: lesson ids to leave out (those distilled into the solver's adapter).

    Returns:
        ``(section, [[id, text], ...])`` as :func:`retrieve`.
    """
    return retrieve(store, task.family, task.question, budget_tokens, count_tokens, exclude,
                    active_only=task.split != "train")
