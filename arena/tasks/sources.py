"""All task sources together: the session's train and held-out tasks from family specs and a JSONL file."""

from __future__ import annotations

from pathlib import Path

from arena.tasks.gym import make_family_tasks, parse_family_spec
from arena.tasks.identity import check_disjoint, task_identity
from arena.tasks.jsonl import load_tasks_file
from arena.tasks.model import Task, TaskError, TaskSplits


def load_tasks(
    families: list[str],
    tasks_file: Path | None,
    n_train: int,
    n_heldout: int,
    seed: int,
) -> TaskSplits:
    """Build the session's tasks from reasoning-gym family specs and/or a JSONL file.

    Each family spec contributes ``n_train`` train and ``n_heldout`` held-out tasks (so
    totals scale with the number of families); the task file contributes its own split
    (:func:`load_tasks_file`). No task appears twice across sources or splits, in any spelling
    (compared by :func:`arena.tasks.identity.task_identity`, not text): file tasks are read first
    and excluded from the families' draws.

    Args:
        families: family specs, e.g. ``["chain_sum:min_terms=2,max_terms=2", "letter_counting"]``.
        tasks_file: a JSONL task file, or None.
        n_train: train tasks per source (≥ 1).
        n_heldout: held-out tasks per source (≥ 1).
        seed: the session seed.

    Returns:
        :class:`TaskSplits`, family tasks first (in the order given), then file tasks.

    Raises:
        TaskError: no source, or any error of :func:`parse_family_spec`,
            :func:`make_family_tasks` or :func:`load_tasks_file`.
    """
    if not families and tasks_file is None:
        raise TaskError("no tasks: give at least one task family (e.g. chain_sum) or a JSONL tasks file")
    specs = [parse_family_spec(s) for s in families]
    file_train: list[Task] = []
    file_heldout: list[Task] = []
    if tasks_file is not None:
        file_train, file_heldout = load_tasks_file(tasks_file, n_train, n_heldout, seed)
    clash = {t.family for t in file_train + file_heldout} & {spec.name for spec in specs}
    if clash:
        raise TaskError(
            f"task family {sorted(clash)[0]!r} comes both from reasoning-gym and from {tasks_file}; "
            'rename the "family" in the file'
        )
    used = {task_identity(t) for t in file_train + file_heldout}
    train: list[Task] = []
    heldout: list[Task] = []
    occurrences: dict[str, int] = {}
    for spec in specs:
        occ = occurrences.get(spec.name, 0)
        occurrences[spec.name] = occ + 1
        tr, ho = make_family_tasks(spec, n_train, n_heldout, seed, occurrence=occ, exclude=used)
        used |= {task_identity(t) for t in tr + ho}
        train += tr
        heldout += ho
    splits = TaskSplits(train=train + file_train, heldout=heldout + file_heldout)
    check_disjoint(splits.train, splits.heldout)  # disjoint by construction; checked, as isolation depends on it
    return splits
