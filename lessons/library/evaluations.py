"""Evaluations (stored pass@1 measurements) and a session's statistics: :class:`EvaluationRepository`.

The statistics (episodes, rollouts, rewards per round, lessons added) are read models over
episodes and rollouts for the session's summary line, pass@k per round and the rollout
budget.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import func, select

from lessons.db.schema import EpisodeRow, EvaluationRow, LessonEventRow, LessonRow, RolloutRow, utcnow
from lessons.library.records import EvaluationInfo
from lessons.library.repository import Repository
from lessons.library.sessions import require_session
from lessons.outcomes import count_passes


def _evaluation_info(row: EvaluationRow) -> EvaluationInfo:
    return EvaluationInfo(
        name=row.name,
        split=row.split,
        with_lessons=row.with_lessons,
        n=row.n,
        passes=row.passes,
        pass_at_1=row.pass_at_1,
        ci_lo=row.ci_lo,
        ci_hi=row.ci_hi,
        details=dict(row.details or {}),
        created_at=row.created_at,
    )


class EvaluationRepository(Repository):
    """A session's evaluations (record, read) and the counts behind its summary and curves."""

    def record_evaluation(
        self,
        session_id: int,
        name: str,
        split: str,
        with_lessons: bool,
        rewards: Sequence[float],
        ci: tuple[float, float],
        details: dict[str, Any],
    ) -> None:
        """Store (or replace) the evaluation ``name`` of a session.

        Args:
            session_id: the session's id.
            name: e.g. "heldout_before", "heldout_after", "heldout_after_no_lessons";
                recording the same name again replaces the earlier row.
            split: the split evaluated ("heldout", "train").
            with_lessons: whether the solver had the lessons in context.
            rewards: one reward in [0, 1] per task; a task passes when reward >= 1 (up to
                1e-9); n = len(rewards), pass_at_1 = passes / n (0.0 when n = 0).
            ci: (low, high) confidence interval of pass_at_1.
            details: stored as given, with ``details["rewards"] = list(rewards)`` added
                unless the caller set that key.

        Raises:
            StoreError: no such session.
        """
        n = len(rewards)
        k = count_passes(rewards)
        payload = dict(details)
        payload.setdefault("rewards", [float(r) for r in rewards])
        values = dict(
            split=split,
            with_lessons=bool(with_lessons),
            n=n,
            passes=k,
            pass_at_1=k / n if n else 0.0,
            ci_lo=float(ci[0]),
            ci_hi=float(ci[1]),
            details=payload,
            created_at=utcnow(),
        )
        with self.write() as s, s.begin():
            require_session(s, session_id)
            row = s.scalar(
                select(EvaluationRow).where(EvaluationRow.session_id == session_id, EvaluationRow.name == name)
            )
            if row is None:
                s.add(EvaluationRow(session_id=session_id, name=name, **values))
            else:
                for key, value in values.items():
                    setattr(row, key, value)

    def evaluations(self, session_id: int) -> dict[str, EvaluationInfo]:
        """The session's evaluations by name, in the order they were first recorded."""
        q = select(EvaluationRow).where(EvaluationRow.session_id == session_id).order_by(EvaluationRow.id)
        with self.read() as s:
            return {row.name: _evaluation_info(row) for row in s.scalars(q)}

    # ----------------------------------------------------------------- stats

    def session_stats(self, session_id: int) -> dict[str, Any]:
        """Counts for a session's summary line.

        Returns:
            ``episodes``; ``rollouts`` (all, guided included); ``guided_rollouts``;
            ``mean_reward`` (mean over unguided rollouts, 0.0 if none); ``lessons_added``
            (ADD events from this session's episodes); ``lessons_active`` and
            ``lessons_candidate`` (lessons with that status in the whole library, all
            sessions); ``lessons_retired`` (likewise); ``reflections_failed`` (episodes stored
            with a ``reflection_error``); ``curation_rejected`` (teacher ops the curator refused).
        """
        in_session = EpisodeRow.session_id == session_id
        with self.read() as s:
            episodes = s.scalar(select(func.count()).select_from(EpisodeRow).where(in_session)) or 0
            rollouts = s.scalar(select(func.count(RolloutRow.id)).join(EpisodeRow).where(in_session)) or 0
            guided = (
                s.scalar(select(func.count(RolloutRow.id)).join(EpisodeRow).where(in_session, RolloutRow.guided)) or 0
            )
            mean = s.scalar(select(func.avg(RolloutRow.reward)).join(EpisodeRow).where(in_session, ~RolloutRow.guided))
            added = (
                s.scalar(
                    select(func.count(LessonEventRow.id))
                    .join(EpisodeRow, LessonEventRow.episode_id == EpisodeRow.id)
                    .where(in_session, LessonEventRow.op == "ADD")
                )
                or 0
            )
            by_status = dict(s.execute(select(LessonRow.status, func.count()).group_by(LessonRow.status)).all())
            failed = (
                s.scalar(select(func.count(EpisodeRow.id)).where(in_session, EpisodeRow.reflection_error.is_not(None)))
                or 0
            )
            refused = sum(len(r or []) for r in s.scalars(select(EpisodeRow.curation_rejected).where(
                in_session, EpisodeRow.curation_rejected.is_not(None))))
        return {
            "episodes": episodes,
            "rollouts": rollouts,
            "guided_rollouts": guided,
            "mean_reward": float(mean) if mean is not None else 0.0,
            "lessons_added": added,
            "lessons_active": int(by_status.get("active", 0)),
            "lessons_candidate": int(by_status.get("candidate", 0)),
            "lessons_retired": int(by_status.get("retired", 0)),
            "reflections_failed": failed,
            "curation_rejected": refused,
        }

    def fault_counts(self, session_id: int) -> dict[str, int]:
        """Endpoint faults of a session by kind: its rollouts' ``fault`` plus its evaluations' ``details["faults"]``.

        Returns:
            kind -> count (rollouts that failed or were cut, held-out tasks that failed), kinds sorted; ``{}`` if none.
        """
        counts: dict[str, int] = {}
        q = (
            select(RolloutRow.fault, func.count(RolloutRow.id))
            .join(EpisodeRow)
            .where(EpisodeRow.session_id == session_id, RolloutRow.fault.is_not(None))
            .group_by(RolloutRow.fault)
        )
        with self.read() as s:
            for kind, n in s.execute(q):
                counts[kind] = counts.get(kind, 0) + int(n)
            for details in s.scalars(select(EvaluationRow.details).where(EvaluationRow.session_id == session_id)):
                for kind, n in ((details or {}).get("faults") or {}).items():
                    counts[kind] = counts.get(kind, 0) + int(n)
        return dict(sorted(counts.items()))

    def rollouts_by_round(self, session_id: int) -> dict[int, int]:
        """Stored rollouts (unguided and guided) of the session per round: the rollout budget spent."""
        q = (
            select(EpisodeRow.round, func.count(RolloutRow.id))
            .join(RolloutRow, RolloutRow.episode_id == EpisodeRow.id)
            .where(EpisodeRow.session_id == session_id)
            .group_by(EpisodeRow.round)
        )
        with self.read() as s:
            return {int(rnd): int(n) for rnd, n in s.execute(q)}

    def round_rewards(self, session_id: int) -> dict[int, list[list[float]]]:
        """The rewards of each episode's group, by round: the input of pass@k per round.

        Returns:
            round -> one list per episode (in recording order) of its unguided rollouts'
            rewards (by ``idx``). Rounds without episodes are absent.
        """
        q = (
            select(EpisodeRow.round, EpisodeRow.id, RolloutRow.reward)
            .join(RolloutRow, RolloutRow.episode_id == EpisodeRow.id)
            .where(EpisodeRow.session_id == session_id, ~RolloutRow.guided, RolloutRow.reward.is_not(None))
            .order_by(EpisodeRow.round, EpisodeRow.id, RolloutRow.idx, RolloutRow.id)
        )
        groups: dict[int, dict[int, list[float]]] = {}
        with self.read() as s:
            for rnd, episode_id, reward in s.execute(q):
                groups.setdefault(rnd, {}).setdefault(episode_id, []).append(reward)
        return {rnd: list(by_episode.values()) for rnd, by_episode in groups.items()}
