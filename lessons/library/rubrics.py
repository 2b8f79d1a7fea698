"""Rubric storage: rubric versions with criterion lineage, per-criterion verdicts, grading status and hack flags.

Kept apart from :mod:`lessons.library.store` (it works on the same database through the
:class:`~lessons.library.store.LessonStore`'s public ``read()`` / ``write()`` sessions). What it stores:

- ``rubrics`` / ``rubric_criteria``: version 1 of each rubric task's rubric (from its task
  file line), and every later version written by online rubrics (OnlineRubrics,
  arXiv 2510.07284). A new version copies its parent's criteria (``inherited_from_id`` links
  each copy to the criterion it copies) and appends the new ones, each with the rollouts that
  motivated it (``motivating_rollout_ids``) and the comparison it came from (``motivation``).
- ``criterion_verdicts``: the judge's met / not-met on each criterion of each rollout.
- on ``rollouts``: ``grading_status`` (``graded`` / ``ungraded``; NULL on rows graded by the
  verifier path or written before this schema = graded), ``reward_kind``, ``rubric_id``,
  ``judge_rating``, ``verifier_reward`` and ``hack_flags``. These and the verdicts are written in
  the episode's own transaction (:meth:`lessons.library.episodes.EpisodeRepository.record_episode`,
  from each rollout's :class:`lessons.library.records.RolloutGrading`), so no crash leaves a
  rubric rollout stored without its hack flags.

What may become training data is decided in one place, :func:`exclusion_reason` (ungraded,
cut ``oversized``, rubric grading never recorded, reward-hack flagged), applied by
:meth:`lessons.library.adapters.AdapterStore.training_rollouts` for every objective and the export;
reflection uses the looser :func:`eligible_for_reflection`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import func, select

from lessons.criteria import MAX_CRITERIA, criterion_category
from lessons.db.schema import (
    CriterionVerdictRow,
    EpisodeRow,
    RolloutRow,
    RubricCriterionRow,
    RubricRow,
    TaskRow,
    utcnow,
)
from lessons.library.store import LessonStore, StoreError

# --------------------------------------------------------------------------- training eligibility

#: Why a stored rollout is never training data, in the order :func:`exclusion_reason` checks them.
EXCLUSION_REASONS = ("ungraded", "oversized", "fault", "grading_undecided", "reward_hack_flagged")


def is_flagged(rollout: Any) -> bool:
    """Whether a rollout (a ``RolloutRow`` or any object with ``hack_flags``) carries a reward-hack flag."""
    return bool(getattr(rollout, "hack_flags", None))


def is_ungraded(rollout: Any) -> bool:
    """Whether grading failed for a rollout (``grading_status == "ungraded"`` or no reward)."""
    return getattr(rollout, "grading_status", None) == "ungraded" or getattr(rollout, "reward", 0.0) is None


def exclusion_reason(rollout: Any, rubric_graded: bool = False, include_flagged: bool = False) -> str | None:
    """Why a stored rollout may not become training data, or None when it may: THE rule, in one place.

    Every objective of ``arena distill`` and ``arena run --sleep`` and ``arena export rollouts`` read
    rollouts through :meth:`lessons.library.adapters.AdapterStore.training_rollouts`, which keeps
    exactly the rollouts this returns None for. A rollout is left out when it is (first match):

    - ``ungraded``: no reward (an endpoint fault, a judge that never answered, a verifier crash);
    - ``oversized``: a reply cut to ``--max-tokens`` (fault ``oversized``): its completion is not
      what the policy wrote, so it is graded and shown to the teacher, but never trained on;
      ``fault``: any other fault on a graded rollout (none is written today; a new kind is
      excluded until someone decides otherwise);
    - ``grading_undecided``: graded by a rubric (``rubric_graded``) but its grading record —
      ``grading_status`` and the reward-hack flags, written with the episode — is missing, so
      whether it is a reward hack was never decided (defence in depth: rows written before the
      grading was made atomic with the episode, or by any writer that skips it);
    - ``reward_hack_flagged``: a reward-hack flag (unless ``include_flagged``).

    Args:
        rollout: a :class:`lessons.db.schema.RolloutRow` or any object with ``reward``,
            ``grading_status``, ``hack_flags`` and (optionally) ``fault`` attributes.
        rubric_graded: the rollout's task is graded by a rubric in its session (a stored rubric).
        include_flagged: do not leave flagged rollouts out (counting only; nothing trains on them).

    Returns:
        One of :data:`EXCLUSION_REASONS`, or None.
    """
    if is_ungraded(rollout):
        return "ungraded"
    fault = getattr(rollout, "fault", None)
    if fault:
        return "oversized" if fault == "oversized" else "fault"
    if rubric_graded and getattr(rollout, "grading_status", None) is None:
        return "grading_undecided"
    if not include_flagged and is_flagged(rollout):
        return "reward_hack_flagged"
    return None


def eligible_for_training(rollout: Any, rubric_graded: bool = False, include_flagged: bool = False) -> bool:
    """Whether a stored rollout may become training data: :func:`exclusion_reason` is None.

    Args:
        rollout: a :class:`lessons.db.schema.RolloutRow` or an object with the same grading attributes.
        rubric_graded: its task is rubric-graded in its session.
        include_flagged: also accept rollouts with reward-hack flags (off by default).
    """
    return exclusion_reason(rollout, rubric_graded, include_flagged) is None


def eligible_for_reflection(rollout: Any, include_flagged: bool = False) -> bool:
    """Whether the teacher may reflect on a rollout: graded, and unflagged unless ``include_flagged``.

    Looser than :func:`eligible_for_training`: a cut (``oversized``) reply is still a graded
    attempt worth reflecting on; it is only its tokens that are never trained on.

    Args:
        rollout: an object with ``reward``, ``grading_status`` and ``hack_flags`` (e.g.
            :class:`arena.episode.state.GradeStatus`).
        include_flagged: let reward-hack-flagged rollouts in (``--include-flagged``).
    """
    if is_ungraded(rollout):
        return False
    return include_flagged or not is_flagged(rollout)


# --------------------------------------------------------------------------- records out


@dataclass(frozen=True)
class CriterionInfo:
    """One stored criterion of one rubric version."""

    id: int
    position: int  # 0-based
    title: str
    description: str
    weight: float
    category: str  # essential | important | optional | pitfall
    source: str  # "task" or "online"
    inherited_from_id: int | None  # the same criterion in the parent version
    motivating_rollout_ids: list[int]
    motivation: dict[str, Any] | None

    def as_dict(self) -> dict[str, Any]:
        """``{"title", "description", "weight"}``: the rubric file format."""
        return {"title": self.title, "description": self.description, "weight": self.weight}


@dataclass(frozen=True)
class RubricInfo:
    """One stored rubric version with its criteria in order."""

    id: int
    task_key: str
    version: int
    parent_id: int | None
    source: str
    note: str | None
    created_at: datetime
    criteria: tuple[CriterionInfo, ...]


@dataclass(frozen=True)
class VerdictInfo:
    """The judge's verdict on one criterion for one rollout."""

    rollout_id: int
    criterion_id: int
    title: str
    weight: float
    met: bool
    reason: str


def _criterion_info(row: RubricCriterionRow) -> CriterionInfo:
    return CriterionInfo(
        id=row.id, position=row.position, title=row.title, description=row.description, weight=row.weight,
        category=row.category, source=row.source, inherited_from_id=row.inherited_from_id,
        motivating_rollout_ids=list(row.motivating_rollout_ids or []),
        motivation=dict(row.motivation) if row.motivation is not None else None,
    )


def _rubric_info(row: RubricRow, task_key: str) -> RubricInfo:
    return RubricInfo(
        id=row.id, task_key=task_key, version=row.version, parent_id=row.parent_id, source=row.source,
        note=row.note, created_at=row.created_at, criteria=tuple(_criterion_info(c) for c in row.criteria),
    )


# --------------------------------------------------------------------------- the store


class RubricStore:
    """Rubric versions, verdicts, grading status and hack flags in a :class:`LessonStore`'s database.

    Args:
        store: an open lesson store (its schema includes the rubric tables, revision 0004).
    """

    def __init__(self, store: LessonStore) -> None:
        self._store = store

    @staticmethod
    def _task_id(s, session_id: int, task_key: str) -> int:
        tid = s.scalar(select(TaskRow.id).where(TaskRow.session_id == session_id, TaskRow.task_key == task_key))
        if tid is None:
            raise StoreError(f"task {task_key} is not stored for session {session_id}; call upsert_tasks first")
        return tid

    @staticmethod
    def _add_criteria(s, rubric_id: int, items: Sequence[Mapping[str, Any]], start: int) -> None:
        """Add ``items`` as criteria ``start, start+1, ...``; the category comes from each description (``""`` if none)."""
        for i, c in enumerate(items):
            s.add(
                RubricCriterionRow(
                    rubric_id=rubric_id, position=start + i, title=str(c["title"]), description=str(c["description"]),
                    weight=float(c["weight"]), category=criterion_category(str(c["description"])) or "",
                    source=str(c.get("source", "task")), inherited_from_id=c.get("inherited_from_id"),
                    motivating_rollout_ids=list(c.get("motivating_rollout_ids") or []),
                    motivation=dict(c["motivation"]) if c.get("motivation") is not None else None,
                )
            )

    def ensure_task_rubrics(self, session_id: int, rubrics: Mapping[str, Sequence[Mapping[str, Any]]]) -> int:
        """Store version 1 (source ``task``) of each task's rubric, unless the task has one already.

        Args:
            session_id: the session.
            rubrics: task_key → criteria as ``{"title", "description", "weight"}`` dicts.

        Returns:
            The number of rubrics written (0 on a resumed session).

        Raises:
            StoreError: a task key is not stored for the session.
        """
        written = 0
        with self._store.write() as s, s.begin():
            for key, items in rubrics.items():
                tid = self._task_id(s, session_id, key)
                if s.scalar(select(RubricRow.id).where(RubricRow.task_id == tid).limit(1)) is not None:
                    continue
                row = RubricRow(task_id=tid, version=1, parent_id=None, source="task", note=None, created_at=utcnow())
                s.add(row)
                s.flush()
                self._add_criteria(s, row.id, items, 0)
                written += 1
        return written

    def _versions(self, s, session_id: int, task_key: str) -> list[RubricRow]:
        q = (
            select(RubricRow)
            .join(TaskRow, RubricRow.task_id == TaskRow.id)
            .where(TaskRow.session_id == session_id, TaskRow.task_key == task_key)
            .order_by(RubricRow.version)
        )
        return list(s.scalars(q))

    def current_rubric(self, session_id: int, task_key: str) -> RubricInfo | None:
        """The newest rubric version of a task, or None when it has no rubric."""
        with self._store.read() as s:
            rows = self._versions(s, session_id, task_key)
            return _rubric_info(rows[-1], task_key) if rows else None

    def rubric_history(self, session_id: int, task_key: str) -> list[RubricInfo]:
        """Every rubric version of a task, oldest first."""
        with self._store.read() as s:
            return [_rubric_info(r, task_key) for r in self._versions(s, session_id, task_key)]

    def add_version(
        self,
        session_id: int,
        task_key: str,
        new_criteria: Sequence[Mapping[str, Any]],
        *,
        parent_id: int,
        note: str | None = None,
    ) -> RubricInfo:
        """Write a new rubric version: the parent's criteria (linked by ``inherited_from_id``) plus ``new_criteria``.

        Args:
            session_id, task_key: the task.
            new_criteria: dicts with ``title``, ``description``, ``weight`` and optionally
                ``motivating_rollout_ids`` (rollouts.id) and ``motivation`` (JSON object);
                stored with source ``online``.
            parent_id: the version the new criteria were proposed against; it must still be
                the newest (optimistic check: another writer's version in between is an error).
            note: why the version exists (e.g. the teacher's analysis).

        Returns:
            The new :class:`RubricInfo`.

        Raises:
            ValueError: no new criteria, or the version would hold more than
                :data:`lessons.criteria.MAX_CRITERIA` (the parent's criteria plus the new ones).
            StoreError: no such task or rubric, or ``parent_id`` is not the newest version.
        """
        if not new_criteria:
            raise ValueError("a new rubric version needs at least one new criterion")
        with self._store.write() as s, s.begin():
            rows = self._versions(s, session_id, task_key)
            if not rows:
                raise StoreError(f"task {task_key} has no rubric in session {session_id}")
            parent = rows[-1]
            if parent.id != parent_id:
                raise StoreError(f"rubric {parent_id} of {task_key} is not the newest version (that is {parent.id})")
            if len(parent.criteria) + len(new_criteria) > MAX_CRITERIA:
                raise ValueError(f"a rubric version holds at most {MAX_CRITERIA} criteria: {len(parent.criteria)} "
                                 f"inherited plus {len(new_criteria)} new is too many; add at most "
                                 f"{max(0, MAX_CRITERIA - len(parent.criteria))}")
            row = RubricRow(task_id=parent.task_id, version=parent.version + 1, parent_id=parent.id, source="online",
                            note=note, created_at=utcnow())
            s.add(row)
            s.flush()
            inherited = [
                {**{"title": c.title, "description": c.description, "weight": c.weight}, "source": c.source,
                 "inherited_from_id": c.id, "motivating_rollout_ids": c.motivating_rollout_ids, "motivation": c.motivation}
                for c in parent.criteria
            ]
            self._add_criteria(s, row.id, inherited, 0)
            self._add_criteria(s, row.id, [{**c, "source": "online"} for c in new_criteria], len(inherited))
            s.flush()
            s.refresh(row)
            return _rubric_info(row, task_key)

    def criterion_lineage(self, criterion_id: int) -> list[CriterionInfo]:
        """A criterion and its ancestors through ``inherited_from_id``, newest first (the last is where it was written)."""
        out: list[CriterionInfo] = []
        with self._store.read() as s:
            cid: int | None = criterion_id
            while cid is not None:
                row = s.get(RubricCriterionRow, cid)
                if row is None:
                    break
                out.append(_criterion_info(row))
                cid = row.inherited_from_id
        return out

    # ----------------------------------------------------------------- grading

    def verdicts(self, rollout_id: int) -> list[VerdictInfo]:
        """A rollout's per-criterion verdicts, in rubric order."""
        q = (
            select(CriterionVerdictRow, RubricCriterionRow)
            .join(RubricCriterionRow, CriterionVerdictRow.criterion_id == RubricCriterionRow.id)
            .where(CriterionVerdictRow.rollout_id == rollout_id)
            .order_by(RubricCriterionRow.position)
        )
        with self._store.read() as s:
            return [VerdictInfo(rollout_id, c.id, c.title, c.weight, v.met, v.reason) for v, c in s.execute(q)]

    def episode_rollouts(self, session_id: int, episode_keys: Iterable[str]) -> list[RolloutRow]:
        """The rollout rows of some episodes (detached copies), with their task key in ``.task_key``.

        Used by online rubrics (the current policy's recent rollouts) and by tests.
        """
        keys = list(episode_keys)
        q = (
            select(RolloutRow, TaskRow.task_key)
            .join(EpisodeRow, RolloutRow.episode_id == EpisodeRow.id)
            .join(TaskRow, EpisodeRow.task_id == TaskRow.id)
            .where(EpisodeRow.session_id == session_id, EpisodeRow.episode_key.in_(keys))
            .order_by(RolloutRow.id)
        )
        with self._store.read() as s:
            out = []
            for row, key in s.execute(q):
                s.expunge(row)
                row.task_key = key  # type: ignore[attr-defined]
                out.append(row)
            return out

    def grading_stats(self, session_id: int) -> dict[str, Any]:
        """Counts for the run summary.

        Returns:
            ``graded_rollouts``, ``ungraded_rollouts``, ``flagged_rollouts`` (rollouts with at least one
            hack flag), ``hack_flags`` (flag → count), ``rubric_versions_added`` (online versions
            written in this session).
        """
        with self._store.read() as s:
            rows = s.execute(
                select(RolloutRow.grading_status, RolloutRow.reward, RolloutRow.hack_flags)
                .join(EpisodeRow, RolloutRow.episode_id == EpisodeRow.id)
                .where(EpisodeRow.session_id == session_id)
            ).all()
            online = s.scalar(
                select(func.count(RubricRow.id)).join(TaskRow, RubricRow.task_id == TaskRow.id)
                .where(TaskRow.session_id == session_id, RubricRow.source == "online")
            ) or 0
        flags: dict[str, int] = {}
        ungraded = flagged = 0
        for status, reward, hf in rows:
            if status == "ungraded" or reward is None:
                ungraded += 1
            if hf:
                flagged += 1
                for f in hf:
                    flags[f] = flags.get(f, 0) + 1
        return {
            "graded_rollouts": len(rows) - ungraded,
            "ungraded_rollouts": ungraded,
            "flagged_rollouts": flagged,
            "hack_flags": dict(sorted(flags.items())),
            "rubric_versions_added": online,
        }

    def calibration_pairs(self, session_id: int | None = None) -> list[tuple[str, float, float]]:
        """``(family, judge_reward, verifier_reward)`` of every graded rubric rollout whose task has a verifier.

        Args:
            session_id: one session, or None for the whole library.
        """
        q = (
            select(TaskRow.family, RolloutRow.reward, RolloutRow.verifier_reward)
            .join(EpisodeRow, RolloutRow.episode_id == EpisodeRow.id)
            .join(TaskRow, EpisodeRow.task_id == TaskRow.id)
            .where(RolloutRow.reward.is_not(None), RolloutRow.verifier_reward.is_not(None),
                   RolloutRow.reward_kind.like("rubric-%"))
            .order_by(RolloutRow.id)
        )
        if session_id is not None:
            q = q.where(EpisodeRow.session_id == session_id)
        with self._store.read() as s:
            return [(f, float(r), float(v)) for f, r, v in s.execute(q)]

    def session_rollouts(self, session_id: int, episode_key: str | None = None) -> list[tuple[RolloutRow, str]]:
        """``(rollout row, episode key)`` of a session's rollouts (or one episode's), detached, in order."""
        q = (
            select(RolloutRow, EpisodeRow.episode_key)
            .join(EpisodeRow, RolloutRow.episode_id == EpisodeRow.id)
            .where(EpisodeRow.session_id == session_id)
            .order_by(EpisodeRow.id, RolloutRow.idx)
        )
        if episode_key is not None:
            q = q.where(EpisodeRow.episode_key == episode_key)
        with self._store.read() as s:
            out = []
            for row, key in s.execute(q):
                s.expunge(row)
                out.append((row, key))
            return out
