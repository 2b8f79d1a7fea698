"""Episodes, their rollouts and hints: :class:`EpisodeRepository`.

An episode is one task's group of rollouts (unguided, then guided ones with a hint when the
whole group failed) plus the teacher's reflection, whose ops
:meth:`EpisodeRepository.record_episode` applies to the library in the same transaction
(through :class:`lessons.library.curation.Curator`).
"""

from __future__ import annotations

import statistics
from datetime import datetime
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from lessons.credentials import redact_credentials
from lessons.db.schema import CriterionVerdictRow, EpisodeRow, HintRow, LessonRow, RolloutRow, TaskRow, utcnow
from lessons.library.curation import Curator, Provenance, apply_reflection
from lessons.library.records import (
    EpisodeRecord,
    EpisodeResult,
    GroupOutcome,
    HintInfo,
    RolloutGrading,
    RolloutRecord,
    StoreError,
)
from lessons.library.repository import Repository
from lessons.library.sessions import require_session
from lessons.outcomes import passes


def _hint_info(row: HintRow, task_key: str) -> HintInfo:
    return HintInfo(
        id=row.id,
        task_key=task_key,
        mode=row.mode,
        text=row.text,
        source_rollout_ids=list(row.source_rollout_ids),
        times_used=row.times_used,
        successes=row.successes,
        created_at=row.created_at,
    )


def _reflection_json(rec: EpisodeRecord) -> dict[str, Any] | None:
    """The ``episodes.reflection`` value: the teacher's raw reply, the parsed ops, the error; None without any."""
    if rec.reflection is None and not rec.reflection_raw and not rec.reflection_error:
        return None
    return {
        "raw": rec.reflection_raw,
        "parsed": rec.reflection.model_dump(mode="json") if rec.reflection is not None else None,
        "error": rec.reflection_error,
    }


def _grading_columns(r: RolloutRecord) -> dict[str, Any]:
    """The grading columns of a rollout row: a rubric grading's, else only ``ungraded`` for a failed rollout.

    A rubric-graded rollout always gets ``grading_status`` and a ``hack_flags`` list (``[]``:
    none), so a stored rubric rollout with NULL status is one whose grading was never recorded
    (:func:`lessons.library.rubrics.exclusion_reason`: ``grading_undecided``).
    """
    g: RolloutGrading | None = r.grading
    if g is None:
        return {"grading_status": "ungraded" if r.fault and r.reward is None else None}
    return {
        "grading_status": "graded" if g.graded and r.reward is not None else "ungraded",
        "reward_kind": g.reward_kind,
        "rubric_id": g.rubric_id,
        "judge_rating": g.judge_rating,
        "verifier_reward": g.verifier_reward,
        "hack_flags": list(g.hack_flags),
    }


def _insert_episode(
    s: Session, rec: EpisodeRecord, task_id: int, context_ids: list[str], now: datetime
) -> tuple[EpisodeRow, list[RolloutRow]]:
    """Add the episode row, its rollout rows with their grading and the judge's verdicts (flushed: all have ids).

    ``mean_reward`` is the mean reward of the graded unguided rollouts (of all graded ones if
    every one is guided; 0.0 without any). Critiques and the episode's error are stored with the
    password of any URL in them masked (:func:`lessons.credentials.redact_credentials`): a fault's
    message names its endpoint.
    """
    graded = [r for r in rec.rollouts if r.reward is not None]
    unguided = [r.reward for r in graded if not r.guided] or [r.reward for r in graded]
    episode = EpisodeRow(
        session_id=rec.session_id,
        episode_key=rec.episode_key,
        round=rec.round,
        task_id=task_id,
        system_prompt=rec.system_prompt,
        lessons_in_context=list(context_ids),
        reflection=_reflection_json(rec),
        # a fault's message names its endpoint: no password reaches the shared database (CASE-005)
        reflection_error=redact_credentials(rec.reflection_error) if rec.reflection_error is not None else None,
        hint_rejected=[redact_credentials(r) for r in rec.hint_rejected] or None,
        mean_reward=statistics.fmean(unguided) if unguided else 0.0,
        started_at=rec.started_at or now,
        finished_at=rec.finished_at or now,
    )
    s.add(episode)
    s.flush()
    rollouts = [
        RolloutRow(
            episode_id=episode.id,
            idx=r.idx,
            guided=r.guided,
            messages=[dict(m) for m in r.messages],
            completion=r.completion,
            extracted_answer=r.extracted_answer,
            reward=float(r.reward) if r.reward is not None else None,
            critique=redact_credentials(r.critique),
            prompt_tokens=r.prompt_tokens,
            completion_tokens=r.completion_tokens,
            finish_reason=r.finish_reason,
            latency_s=float(r.latency_s),
            token_ids=list(r.token_ids) if r.token_ids is not None else None,
            logprobs=list(r.logprobs) if r.logprobs is not None else None,
            unguided_messages=[dict(m) for m in r.unguided_messages] if r.unguided_messages else None,
            adapter_id=rec.adapter_id,
            fault=r.fault,
            **_grading_columns(r),
        )
        for r in rec.rollouts
    ]
    s.add_all(rollouts)
    s.flush()
    s.add_all(
        CriterionVerdictRow(rollout_id=row.id, criterion_id=v.criterion_id, met=v.met, reason=v.reason)
        for row, r in zip(rollouts, rec.rollouts)
        for v in (r.grading.verdicts if r.grading is not None else ())
    )
    return episode, rollouts


def _count_in_context(s: Session, context_ids: list[str]) -> None:
    """Add 1 to ``times_in_context`` of every stored lesson among ``context_ids`` (unknown ids are skipped)."""
    if not context_ids:
        return
    ids = list(s.scalars(select(LessonRow.id).where(LessonRow.lesson_id.in_(context_ids))))
    if ids:
        s.execute(update(LessonRow).where(LessonRow.id.in_(ids)).values(times_in_context=LessonRow.times_in_context + 1))


class EpisodeRepository(Repository):
    """Recorded episodes (with their rollouts, hints and curation) and the rewards of their groups."""

    def finished_episode_keys(self, session_id: int) -> set[str]:
        """The keys of every episode recorded for the session (a resumed session skips them)."""
        with self.read() as s:
            return set(s.scalars(select(EpisodeRow.episode_key).where(EpisodeRow.session_id == session_id)))

    def recorded_episode_keys(self, session_id: int) -> list[str]:
        """The keys of the session's recorded episodes in recording order (what cadences like online rubrics count)."""
        with self.read() as s:
            return list(s.scalars(select(EpisodeRow.episode_key).where(EpisodeRow.session_id == session_id)
                                  .order_by(EpisodeRow.id)))

    def reflected_episodes(self, session_id: int, round: int) -> int:
        """How many of the session's stored episodes of ``round`` carry a teacher reflection (reply or error)."""
        with self.read() as s:  # counted in Python: a JSON column may hold SQL NULL or JSON null for "none"
            rows = s.scalars(select(EpisodeRow.reflection).where(EpisodeRow.session_id == session_id, EpisodeRow.round == round))
            return sum(r is not None for r in rows)

    def record_episode(self, rec: EpisodeRecord) -> EpisodeResult | None:
        """Store a finished episode and apply its curation, in one transaction.

        Writes the episode and its rollouts (with a rubric reward, each rollout's grading —
        status, hack flags, verdicts — in the same transaction: a crash leaves all of it or
        none), adds 1 to ``times_in_context`` of each lesson
        in ``rec.lessons_in_context``, then applies ``rec.reflection``:

        tags, RETIRE, MERGE, EDIT and ADD ops, each through :class:`lessons.library.curation.Curator`
        with this episode and its rollouts as provenance (see
        :func:`lessons.library.curation.apply_reflection`): a new lesson starts as a ``candidate``
        ``f"{scope}-{n:05d}"``, a near-duplicate ADD upvotes the existing lesson, ops on
        lessons not in context and ops over the library budget are rejected (listed in
        ``rejected_ops`` and stored with the episode as ``curation_rejected``), and votes move
        lessons along the life cycle.

        Lesson ids in context that are not in the library are skipped. ``mean_reward`` is
        the mean reward of the unguided rollouts (of all rollouts if every one is guided;
        0.0 without rollouts).

        Args:
            rec: the episode.

        Returns:
            What was applied (:class:`EpisodeResult`), or None if ``(rec.session_id,
            rec.episode_key)`` was already recorded; then nothing is written.

        Raises:
            StoreError: no such session, or the task key was not stored with
                :meth:`upsert_tasks`.
        """
        now = utcnow()
        context_ids = list(dict.fromkeys(rec.lessons_in_context))
        with self.write() as s, s.begin():
            require_session(s, rec.session_id)
            exists = s.scalar(
                select(EpisodeRow.id).where(
                    EpisodeRow.session_id == rec.session_id, EpisodeRow.episode_key == rec.episode_key
                )
            )
            if exists is not None:
                return None
            task_id = s.scalar(
                select(TaskRow.id).where(TaskRow.session_id == rec.session_id, TaskRow.task_key == rec.task_key)
            )
            if task_id is None:
                raise StoreError(
                    f"task {rec.task_key} is not stored for session {rec.session_id}; call upsert_tasks first"
                )
            episode, rollouts = _insert_episode(s, rec, task_id, context_ids, now)
            result = EpisodeResult(episode_id=episode.id)
            if rec.hint is not None:
                result.hint_id = self._record_hint(s, rec, task_id, episode.id, rollouts)
            _count_in_context(s, context_ids)
            if rec.reflection is not None:
                curator = Curator(s, self.curation_policy, self.count_tokens, now)
                apply_reflection(curator, rec.reflection, context_ids, Provenance(episode.id, [r.id for r in rollouts]))
                c = curator.result
                result.lessons_added = c.added
                result.upvoted, result.downvoted, result.neutral = c.upvoted, c.downvoted, c.neutral
                result.edited, result.merged, result.retired, result.promoted = c.edited, c.merged, c.retired, c.promoted
                result.rejected_ops = c.rejected
                episode.curation_rejected = list(c.rejected) or None
            return result

    def _record_hint(
        self, s: Session, rec: EpisodeRecord, task_id: int, episode_id: int, rollouts: list[RolloutRow]
    ) -> int:
        """Create or reuse the episode's hint, link its guided rollouts, update its counters."""
        assert rec.hint is not None
        guided = [r for r in rollouts if r.guided]
        success = any(passes(r.reward) for r in guided)
        if rec.hint.hint_id is not None:
            hint = s.get(HintRow, rec.hint.hint_id)
            if hint is None or hint.task_id != task_id:
                raise StoreError(f"hint {rec.hint.hint_id} does not belong to task {rec.task_key}")
        else:
            hint = HintRow(
                task_id=task_id,
                episode_id=episode_id,
                mode=rec.hint.mode,
                text=rec.hint.text,
                source_rollout_ids=[r.id for r in rollouts if not r.guided],
                times_used=0,
                successes=0,
            )
            s.add(hint)
            s.flush()
        s.execute(
            update(HintRow)
            .where(HintRow.id == hint.id)
            .values(times_used=HintRow.times_used + 1, successes=HintRow.successes + int(success))
        )
        for r in guided:
            r.hint_id = hint.id
        return hint.id

    def find_hint(self, session_id: int, task_key: str, mode: str, max_failures: int = 2) -> HintInfo | None:
        """The stored hint to reuse for a task before writing a new one, or None.

        Among the session's hints for ``task_key`` with this ``mode``, the one with the best
        success rate (then the newest); a hint used ``max_failures`` times without a single
        guided success is not reused, so a new one gets written.
        """
        with self.read() as s:
            rows = s.execute(
                select(HintRow, TaskRow.task_key)
                .join(TaskRow, HintRow.task_id == TaskRow.id)
                .where(TaskRow.session_id == session_id, TaskRow.task_key == task_key, HintRow.mode == mode)
            ).all()
        usable = [(h, k) for h, k in rows if not (h.successes == 0 and h.times_used >= max_failures)]
        if not usable:
            return None
        h, k = max(usable, key=lambda hk: (hk[0].successes / max(1, hk[0].times_used), hk[0].id))
        return _hint_info(h, k)

    def hints(self, session_id: int | None = None) -> list[HintInfo]:
        """Stored hints (of one session, or all), oldest first."""
        q = select(HintRow, TaskRow.task_key).join(TaskRow, HintRow.task_id == TaskRow.id).order_by(HintRow.id)
        if session_id is not None:
            q = q.where(TaskRow.session_id == session_id)
        with self.read() as s:
            return [_hint_info(h, k) for h, k in s.execute(q).all()]

    def group_outcomes(self, session_id: int) -> list[GroupOutcome]:
        """Every recorded episode's unguided and guided rewards and its refused hint parts, in episode order."""
        with self.read() as s:
            rows = s.execute(
                select(EpisodeRow.id, EpisodeRow.round, TaskRow.task_key, EpisodeRow.hint_rejected,
                       RolloutRow.guided, RolloutRow.reward)
                .join(TaskRow, EpisodeRow.task_id == TaskRow.id)
                .join(RolloutRow, RolloutRow.episode_id == EpisodeRow.id)
                .where(EpisodeRow.session_id == session_id, RolloutRow.reward.is_not(None))
                .order_by(EpisodeRow.id, RolloutRow.id)
            ).all()
        groups: dict[int, GroupOutcome] = {}
        for eid, rnd, key, hint_rejected, guided, reward in rows:
            g = groups.setdefault(eid, GroupOutcome(rnd, key, [], [], [str(x) for x in hint_rejected or []]))
            (g.guided if guided else g.unguided).append(float(reward))
        return list(groups.values())
