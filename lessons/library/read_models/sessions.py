"""Read models of the sessions, session and episode screens: sessions, episodes, learning curve.

Each method opens its own short read transaction (:meth:`LessonStore.read`) and returns the
frozen records of :mod:`lessons.library.read_models.views`. Audit-log events come from
:meth:`LessonStore.lesson_events`; the life cycle replayed for the learning curve follows
:func:`lessons.library.life_cycle.replay_status`.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import Any, NamedTuple

from sqlalchemy import case, func, select

from lessons.db.schema import (
    EpisodeRow,
    EvaluationRow,
    HintRow,
    LessonEventRow,
    LessonRow,
    RolloutRow,
    SessionLeaseRow,
    SessionRow,
    TaskRow,
)
from lessons.library.curation import approx_tokens
from lessons.library.leases import database_now, lease_info
from lessons.library.life_cycle import REPLAY_OPS, StatusHistory, replay_status
from lessons.library.read_models.views import (
    EpisodeDetail,
    EpisodeSummary,
    LearningCurve,
    LibraryTimeline,
    RolloutView,
    SessionSummary,
)
from lessons.library.records import shown_status
from lessons.library.store import EventInfo, LessonStore
from lessons.outcomes import HELDOUT_AFTER, HELDOUT_BEFORE, mean_pass_at_k
from lessons.vocab import LESSON_STATUSES, LIVE_STATUSES

TIMELINE_OPS = ("ADD", "EDIT", "MERGE", "RETIRE", "DISTILL")  # the curation events a library timeline marks


class _Event(NamedTuple):
    """The columns of one audit-log event that :func:`replay_status` reads."""

    op: str
    before: str | None
    after: str | None
    target: int | None  # lessons.id of a MERGE target
    episode_id: int | None
    created_at: datetime


def _as_utc(v: Any) -> datetime | None:
    """A timestamp from a raw SQL aggregate (SQLite returns text for max() of a datetime column).

    Args:
        v: None, a datetime, or ISO text.

    Returns:
        The datetime (naive text read as UTC), or None.
    """
    if v is None or isinstance(v, datetime):
        return v
    d = datetime.fromisoformat(str(v))
    return d if d.tzinfo else d.replace(tzinfo=UTC)


def _status_histories(s: Any) -> tuple[dict[int, StatusHistory], dict[int, datetime]]:
    """Every lesson's replayed status history and creation time, by ``lessons.id`` (one read transaction ``s``)."""
    lessons = s.execute(select(LessonRow.id, LessonRow.status, LessonRow.created_at)).all()
    events: dict[int, list[_Event]] = {}
    for lid, *cols, at in s.execute(
        select(LessonEventRow.lesson_id, LessonEventRow.op, LessonEventRow.before, LessonEventRow.after,
               LessonEventRow.target_lesson_id, LessonEventRow.episode_id, LessonEventRow.created_at)
        .where(LessonEventRow.op.in_(REPLAY_OPS))
        .order_by(LessonEventRow.id)
    ):
        events.setdefault(lid, []).append(_Event(*cols, _as_utc(at)))
    history = {lid: replay_status(status, events.get(lid, ())) for lid, status, _ in lessons}
    return history, {lid: _as_utc(at) for lid, _, at in lessons}


class SessionReads:
    """Sessions, their episodes and learning curves, and one episode in full.

    Args:
        store: an open store (the caller closes it).
    """

    def __init__(self, store: LessonStore) -> None:
        self.store = store

    def sessions(self) -> list[SessionSummary]:
        """Every session, newest first, with its counts, mean reward and held-out pass@1."""
        with self.store.read() as s:
            rows = s.execute(select(SessionRow).order_by(SessionRow.id.desc())).scalars().all()
            ep = {
                sid: (n, rnd)
                for sid, n, rnd in s.execute(
                    select(EpisodeRow.session_id, func.count(), func.max(EpisodeRow.round)).group_by(EpisodeRow.session_id)
                )
            }
            ro = {
                sid: (n, mean)
                for sid, n, mean in s.execute(
                    select(
                        EpisodeRow.session_id,
                        func.count(RolloutRow.id),
                        func.avg(case((~RolloutRow.guided, RolloutRow.reward))),
                    )
                    .join(RolloutRow, RolloutRow.episode_id == EpisodeRow.id)
                    .group_by(EpisodeRow.session_id)
                )
            }
            ev: dict[tuple[int, str], float | None] = {
                (sid, name): p if n else None  # n = 0: nothing graded, no pass@1
                for sid, name, p, n in s.execute(
                    select(EvaluationRow.session_id, EvaluationRow.name, EvaluationRow.pass_at_1, EvaluationRow.n).where(
                        EvaluationRow.name.in_([HELDOUT_BEFORE, HELDOUT_AFTER])
                    )
                )
            }
            now = database_now(s)
            leases = {row.session_id: lease_info(row, now) for row in s.scalars(select(SessionLeaseRow))}
            out = []
            for r in rows:
                n_ep, rnd = ep.get(r.id, (0, 0))
                n_ro, mean = ro.get(r.id, (0, None))
                out.append(
                    SessionSummary(
                        id=r.id,
                        name=r.name,
                        started=r.created_at,
                        status=shown_status(r.status, leases.get(r.id)),  # "stopped": running, but its owner is gone
                        rounds=int(rnd or 0),
                        episodes=int(n_ep),
                        rollouts=int(n_ro),
                        mean_reward=float(mean) if mean is not None else None,
                        pass_before=ev.get((r.id, HELDOUT_BEFORE)),
                        pass_after=ev.get((r.id, HELDOUT_AFTER)),
                    )
                )
            return out

    def faults(self, session_id: int) -> dict[str, int]:
        """The session's faults by kind (rollouts and held-out tasks: :meth:`LessonStore.fault_counts`)."""
        return self.store.fault_counts(session_id)

    def episodes(self, session_id: int) -> list[EpisodeSummary]:
        """The session's episodes in recording order, each with its group's rewards."""
        with self.store.read() as s:
            eps = s.execute(
                select(EpisodeRow, TaskRow.task_key, TaskRow.family)
                .join(TaskRow, EpisodeRow.task_id == TaskRow.id)
                .where(EpisodeRow.session_id == session_id)
                .order_by(EpisodeRow.id)
            ).all()
            rewards: dict[int, tuple[list[float | None], list[float | None]]] = {}
            for eid, guided, reward in s.execute(
                select(RolloutRow.episode_id, RolloutRow.guided, RolloutRow.reward)
                .join(EpisodeRow, RolloutRow.episode_id == EpisodeRow.id)
                .where(EpisodeRow.session_id == session_id)
                .order_by(RolloutRow.episode_id, RolloutRow.guided, RolloutRow.idx, RolloutRow.id)
            ):
                pair = rewards.setdefault(eid, ([], []))
                pair[1 if guided else 0].append(float(reward) if reward is not None else None)  # None: ungraded
            return [
                EpisodeSummary(
                    id=e.id,
                    round=e.round,
                    episode_key=e.episode_key,
                    task_key=key,
                    family=fam,
                    rewards=rewards.get(e.id, ([], []))[0],
                    guided_rewards=rewards.get(e.id, ([], []))[1],
                    lessons_in_context=list(e.lessons_in_context or []),
                    mean_reward=e.mean_reward,
                )
                for e, key, fam in eps
            ]

    def learning_curve(self, session_id: int) -> LearningCurve:
        """Mean train reward and active-lesson count per round, and held-out pass@1 before/after.

        The active-lesson count at the end of round r replays the audit log with
        :func:`lessons.library.life_cycle.replay_status`: a lesson counts from its
        ``created_at``, with its status at the cut-off, the latest event or finish time of
        the round's episodes.
        """
        per_round = self.store.round_rewards(session_id)
        rounds = sorted(per_round)
        means = [sum(sum(g) for g in per_round[r]) / max(1, sum(len(g) for g in per_round[r])) for r in rounds]
        with self.store.read() as s:
            cutoffs: dict[int, datetime] = {}
            for rnd, fin, ev_at in s.execute(
                select(EpisodeRow.round, func.max(EpisodeRow.finished_at), func.max(LessonEventRow.created_at))
                .outerjoin(LessonEventRow, LessonEventRow.episode_id == EpisodeRow.id)
                .where(EpisodeRow.session_id == session_id)
                .group_by(EpisodeRow.round)
            ):
                cutoffs[rnd] = max(t for t in (_as_utc(fin), _as_utc(ev_at)) if t is not None)
            history, created = _status_histories(s)
            evals = {
                name: (p, (lo, hi), n)
                for name, p, n, lo, hi in s.execute(
                    select(EvaluationRow.name, EvaluationRow.pass_at_1, EvaluationRow.n, EvaluationRow.ci_lo,
                           EvaluationRow.ci_hi).where(
                        EvaluationRow.session_id == session_id,
                        EvaluationRow.name.in_([HELDOUT_BEFORE, HELDOUT_AFTER]),
                    )
                )
                if n  # n = 0: nothing graded, no point on the curve
            }
        active = [
            sum(1 for lid in history if created[lid] <= cutoffs[rnd] and history[lid].at(cutoffs[rnd]) == "active")
            for rnd in rounds
        ]
        points = []
        if HELDOUT_BEFORE in evals:
            points.append((0, evals[HELDOUT_BEFORE]))
        if HELDOUT_AFTER in evals:
            points.append((rounds[-1] if rounds else 1, evals[HELDOUT_AFTER]))
        k, threshold = self._group_settings(session_id)
        return LearningCurve(
            rounds, means, active,
            heldout=[(x, p) for x, (p, _, _) in points],
            heldout_ci=[ci for _, (_, ci, _) in points],
            heldout_n=[n for _, (_, _, n) in points],
            pass_at_1=[mean_pass_at_k(per_round[r], 1, threshold) for r in rounds],
            pass_at_k=[mean_pass_at_k(per_round[r], k, threshold) if k else 0.0 for r in rounds],
            k=k,
        )

    def _group_settings(self, session_id: int) -> tuple[int, float]:
        """The session's group size k (``--rollouts``; 0 when not recorded) and success threshold (default 1.0)."""
        with self.store.read() as s:
            config = s.scalar(select(SessionRow.config).where(SessionRow.id == session_id))
        config = config if isinstance(config, dict) else {}
        k, threshold = config.get("rollouts"), config.get("success_threshold")
        return (k if isinstance(k, int) and k > 0 else 0,
                float(threshold) if isinstance(threshold, (int, float)) and 0 < threshold <= 1 else 1.0)

    def library_timeline(self, session_id: int) -> LibraryTimeline | None:
        """The library during the session (see :class:`LibraryTimeline`); None for an unknown session.

        One pass over the replayed status histories: the counts at the session's start, then one
        point per moment in the window when a lesson was created or changed status. Tokens are
        ``lessons.tokens`` (or :func:`lessons.library.curation.approx_tokens` when uncounted).
        """
        with self.store.read() as s:
            row = s.execute(select(SessionRow.created_at, SessionRow.finished_at).where(SessionRow.id == session_id)).first()
            if row is None:
                return None
            start = _as_utc(row[0])
            history, created = _status_histories(s)
            sizes = {lid: tok if tok is not None else approx_tokens(text)
                     for lid, tok, text in s.execute(select(LessonRow.id, LessonRow.tokens, LessonRow.text))}
            ops = s.execute(
                select(LessonEventRow.created_at, LessonEventRow.op, LessonRow.lesson_id)
                .join(LessonRow, LessonEventRow.lesson_id == LessonRow.id)
                .where(LessonEventRow.op.in_(TIMELINE_OPS), LessonEventRow.created_at >= start)
                .order_by(LessonEventRow.id)
            ).all()
        end = _as_utc(row[1]) or max([start, *(_as_utc(at) for at, *_ in ops)])
        events = [(at, op, lid) for at, op, lid in ((_as_utc(a), o, i) for a, o, i in ops) if at <= end]
        counts = {st: 0 for st in LESSON_STATUSES}
        tokens = 0
        moves: list[tuple[datetime, int, str | None, str]] = []  # (when, lesson, old status, new status)
        for lid, h in history.items():
            if created[lid] <= start:
                st = h.at(start)
                counts[st] = counts.get(st, 0) + 1
                tokens += sizes[lid] if st in LIVE_STATUSES else 0
            elif created[lid] <= end:
                moves.append((created[lid], lid, None, h.initial))
            old = h.initial
            for at, new in h.changes:
                if max(start, created[lid]) < at <= end:
                    moves.append((at, lid, old, new))
                old = new
        times, series, live = [start], {st: [n] for st, n in counts.items()}, [tokens]
        for at, lid, old, new in sorted(moves, key=lambda m: (m[0], m[1])):
            if old is not None:
                counts[old] -= 1
                tokens -= sizes[lid] if old in LIVE_STATUSES else 0
            counts[new] = counts.get(new, 0) + 1
            tokens += sizes[lid] if new in LIVE_STATUSES else 0
            if times[-1] == at:
                for st in series:
                    series[st][-1] = counts[st]
                live[-1] = tokens
            else:
                times.append(at)
                for st in series:
                    series[st].append(counts[st])
                live.append(tokens)
        return LibraryTimeline(start, end, times, series, live, events)

    def episode(self, episode_id: int) -> EpisodeDetail | None:
        """One episode with its rollouts, hint, lessons in context and curation ops; None if gone."""
        with self.store.read() as s:
            row = s.execute(
                select(EpisodeRow, TaskRow, SessionRow.name)
                .join(TaskRow, EpisodeRow.task_id == TaskRow.id)
                .join(SessionRow, EpisodeRow.session_id == SessionRow.id)
                .where(EpisodeRow.id == episode_id)
            ).first()
            if row is None:
                return None
            e, task, session = row
            rollouts = s.scalars(
                select(RolloutRow).where(RolloutRow.episode_id == episode_id).order_by(RolloutRow.guided, RolloutRow.idx, RolloutRow.id)
            ).all()
            hint_ids = {r.hint_id for r in rollouts if r.hint_id is not None}
            hint = None
            if hint_ids:
                h = s.get(HintRow, min(hint_ids))
                if h is not None:
                    hint = (h.mode, h.text)
            ids = list(e.lessons_in_context or [])
            current = {
                lid: (text, st)
                for lid, text, st in s.execute(
                    select(LessonRow.lesson_id, LessonRow.text, LessonRow.status).where(LessonRow.lesson_id.in_(ids))
                )
            } if ids else {}
            touched = s.scalars(
                select(LessonRow.lesson_id)
                .join(LessonEventRow, LessonEventRow.lesson_id == LessonRow.id)
                .where(LessonEventRow.episode_id == episode_id)
                .distinct()
            ).all()
            detail = EpisodeDetail(
                id=e.id,
                session=session,
                episode_key=e.episode_key,
                round=e.round,
                task_key=task.task_key,
                family=task.family,
                question=task.question,
                answer=task.answer,
                rollouts=[
                    RolloutView(r.id, r.idx, r.guided, r.completion, r.extracted_answer, r.reward, r.critique,
                                r.completion_tokens, r.finish_reason, r.fault)
                    for r in rollouts
                ],
                hint=hint,
                lessons_in_context=[(lid, *current.get(lid, (None, None))) for lid in ids],
                events=[],
                reflection_error=e.reflection_error,
                curation_rejected=[str(x) for x in e.curation_rejected or []],
                hint_rejected=[str(x) for x in e.hint_rejected or []],
            )
        return replace(detail, events=self._episode_events(episode_id, touched))

    def _episode_events(self, episode_id: int, lesson_ids: list[str]) -> list[EventInfo]:
        """The events of ``episode_id`` in the audit logs of the lessons it touched, in order."""
        events = [ev for lid in lesson_ids for ev in self.store.lesson_events(lid) if ev.episode_id == episode_id]
        return sorted(events, key=lambda ev: ev.id)

