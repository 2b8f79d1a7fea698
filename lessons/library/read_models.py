"""Read helpers and curation actions of the TUI, over :class:`lessons.library.store.LessonStore`.

Everything here is plain Python called from Textual thread workers: each call opens its
own short read transaction (the store's engine; SQLite in WAL mode lets these reads run
while ``arena run`` writes the same file) and returns frozen dataclasses, never ORM rows.
Writes (edit, retire, votes) go through :meth:`LessonStore.curate` and
:class:`lessons.library.curation.Curator`, exactly as ``arena lessons edit/retire/upvote/downvote``
do, with provenance ``{"by": "tui"}``.

Nothing here imports Textual, so the queries are tested on their own.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import case, func, inspect, select
from sqlalchemy import text as sql_text

from lessons.db.schema import (
    LESSON_STATUSES,
    EpisodeRow,
    EvaluationRow,
    HintRow,
    LessonEventRow,
    LessonRow,
    RolloutRow,
    SessionRow,
    TaskRow,
)
from lessons.library.curation import CurationPolicy, CurationResult, Provenance, TokenCounter
from lessons.library.lessons import lesson_info
from lessons.library.store import EventInfo, LessonInfo, LessonStore, StoreError
from lessons.outcomes import HELDOUT_AFTER, HELDOUT_BEFORE

PAGE_SIZE = 100  # lessons per page of the lessons table
SEARCH_LIMIT = 200  # at most this many search results
TUI_ORIGIN = "tui"  # ``origin.by`` of the events the TUI writes

_WORD = re.compile(r"\w+", re.UNICODE)


class DatabaseProblem(Exception):
    """The database cannot be shown: ``kind`` is ``"missing"`` (no file yet) or ``"error"``
    (not a database, newer schema, unreadable); ``args[0]`` is one line for the user."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


# --------------------------------------------------------------------------- records


@dataclass(frozen=True)
class SessionSummary:
    """One row of the sessions table."""

    id: int
    name: str
    started: datetime  # UTC
    status: str  # running | finished | failed | interrupted
    rounds: int  # highest round with a recorded episode (0: none yet)
    episodes: int
    rollouts: int  # guided included
    mean_reward: float | None  # over unguided rollouts; None without rollouts
    pass_before: float | None  # held-out pass@1 before the session (evaluation "heldout_before")
    pass_after: float | None  # held-out pass@1 after, with lessons ("heldout_after")


@dataclass(frozen=True)
class EpisodeSummary:
    """One row of a session's episodes table."""

    id: int
    round: int
    episode_key: str
    task_key: str
    family: str
    rewards: list[float | None]  # the group's unguided rollouts, by idx; None: ungraded (rubric judge failed)
    guided_rewards: list[float | None]  # the guided rollouts (empty: no hint)
    lessons_in_context: list[str]  # readable lesson ids, in prompt order
    mean_reward: float  # of the unguided group


@dataclass(frozen=True)
class LearningCurve:
    """Per-round figures of one session (input of the learning-curve plot).

    ``rounds[i]`` is a round number; ``mean_reward[i]`` the mean reward of its unguided
    rollouts; ``active_lessons[i]`` the number of ``active`` lessons in the library at the
    end of that round (replayed from the audit log). Held-out pass@1 is measured before the
    first round (plotted at round 0) and after the last (plotted at the last round).
    """

    rounds: list[int]
    mean_reward: list[float]
    active_lessons: list[int]
    heldout: list[tuple[int, float]]  # (round, held-out pass@1 with lessons)


@dataclass(frozen=True)
class RolloutView:
    """One rollout as the episode screen shows it."""

    id: int
    idx: int
    guided: bool
    completion: str
    extracted_answer: str | None
    reward: float | None  # None: ungraded (the rubric judge could not grade it)
    critique: str
    completion_tokens: int
    finish_reason: str


@dataclass(frozen=True)
class EpisodeDetail:
    """Everything the episode screen shows."""

    id: int
    session: str
    episode_key: str
    round: int
    task_key: str
    family: str
    question: str
    answer: str  # the reference answer
    rollouts: list[RolloutView]  # unguided then guided, each by idx
    hint: tuple[str, str] | None  # (mode, text) of the hint the guided rollouts used
    lessons_in_context: list[tuple[str, str | None, str | None]]  # (lesson id, current text, status); None: gone
    events: list[EventInfo]  # curation ops this episode caused, in order
    reflection_error: str | None


@dataclass(frozen=True)
class LessonPage:
    """One page of the lessons table, or the results of a search."""

    rows: list[LessonInfo]
    total: int  # lessons matching the filter (all pages), or search results shown
    page: int  # 0-based
    pages: int  # at least 1
    query: str = ""  # the search text ("" when browsing)


@dataclass(frozen=True)
class LessonDetail:
    """The lessons screen's detail pane."""

    lesson: LessonInfo
    events: list[EventInfo]  # full audit log, oldest first
    utility_history: list[dict[str, Any]]
    source_episodes: list[tuple[int, str]]  # (episode id, "session/episode_key") of ADD/EDIT/MERGE events
    merged_into: list[str]  # lessons this one was merged into
    merged_from: list[str]  # lessons merged into this one
    adapters: list[tuple[str, str]]  # (adapter id, relation "in_context" | "distilled")


@dataclass(frozen=True)
class AdapterView:
    """One adapter of ``arena distill`` (tables ``adapters`` / ``adapter_lessons``)."""

    adapter_id: str
    path: str
    objective: str
    created_at: str
    config: dict[str, Any]
    metrics: dict[str, Any]
    evaluation: dict[str, Any]
    lessons: list[tuple[str, str, str]] = field(default_factory=list)  # (lesson id, relation, current status)
    parent_adapter: str | None = None  # the adapter it followed in a session's wake–sleep cycles
    cycle: int | None = None  # the cycle of `arena run --cycles` that trained it (None: arena distill)


# --------------------------------------------------------------------------- opening


def open_store(db: str | os.PathLike[str]) -> LessonStore:
    """Open the library for the TUI without creating a file.

    Args:
        db: a SQLite path or SQLAlchemy URL (as ``arena run --db``).

    Returns:
        The open store (Alembic migrates an older schema, as every ``arena`` command does).

    Raises:
        DatabaseProblem: ``kind="missing"`` when the SQLite file does not exist or is empty
            (0 bytes); ``kind="error"`` with :class:`StoreError`'s one line when it is not a
            database, has a newer schema, or cannot be opened.
    """
    raw = os.fspath(db)
    if "://" not in raw:
        path = Path(raw)
        if not path.exists() or (path.is_file() and path.stat().st_size == 0):
            raise DatabaseProblem("missing", f"no database at {raw}")
    try:
        return LessonStore(raw)
    except StoreError as e:
        raise DatabaseProblem("error", str(e)) from None


class ArenaData:
    """The TUI's view of one library.

    Args:
        store: an open store; the TUI's edits use its ``curation_policy``.
        token_counter: builds the solver's token count for edits (called once, lazily, in a
            worker: the local tokenizer takes seconds to load); None: ~4 chars/token.

    Thread-safe: every method opens its own transaction; the lineage graph cache is guarded
    by a lock.
    """

    def __init__(self, store: LessonStore, token_counter: Callable[[], TokenCounter] | None = None) -> None:
        self.store = store
        self._token_counter = token_counter
        self._counter_lock = threading.Lock()
        self._has_adapters: bool | None = None

    # ----------------------------------------------------------------- change detection

    def fingerprint(self) -> tuple[Any, ...]:
        """A cheap tuple that changes whenever a session, episode, lesson or event is written.

        Max ids (indexed) plus per-session status and lesson ``updated_at``, so polling every
        few seconds costs a handful of index lookups.
        """
        with self.store.read() as s:  # noqa: SLF001 - read-only, one short transaction
            return (
                s.scalar(select(func.max(SessionRow.id))),
                s.scalar(select(func.count()).select_from(SessionRow).where(SessionRow.status == "running")),
                s.scalar(select(func.max(SessionRow.finished_at))),
                s.scalar(select(func.max(EpisodeRow.id))),
                s.scalar(select(func.max(EvaluationRow.created_at))),
                s.scalar(select(func.max(LessonRow.id))),
                s.scalar(select(func.max(LessonEventRow.id))),
            )

    def is_empty(self) -> bool:
        """True when the library has no session and no lesson yet."""
        with self.store.read() as s:  # noqa: SLF001
            return s.scalar(select(SessionRow.id).limit(1)) is None and s.scalar(select(LessonRow.id).limit(1)) is None

    # ----------------------------------------------------------------- sessions

    def sessions(self) -> list[SessionSummary]:
        """Every session, newest first, with its counts, mean reward and held-out pass@1."""
        with self.store.read() as s:  # noqa: SLF001
            rows = s.execute(select(SessionRow).order_by(SessionRow.id.desc())).scalars().all()
            ep = dict(
                (sid, (n, rnd))
                for sid, n, rnd in s.execute(
                    select(EpisodeRow.session_id, func.count(), func.max(EpisodeRow.round)).group_by(EpisodeRow.session_id)
                )
            )
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
            ev: dict[tuple[int, str], float] = {
                (sid, name): p
                for sid, name, p in s.execute(
                    select(EvaluationRow.session_id, EvaluationRow.name, EvaluationRow.pass_at_1).where(
                        EvaluationRow.name.in_([HELDOUT_BEFORE, HELDOUT_AFTER])
                    )
                )
            }
            out = []
            for r in rows:
                n_ep, rnd = ep.get(r.id, (0, 0))
                n_ro, mean = ro.get(r.id, (0, None))
                out.append(
                    SessionSummary(
                        id=r.id,
                        name=r.name,
                        started=r.created_at,
                        status=r.status,
                        rounds=int(rnd or 0),
                        episodes=int(n_ep),
                        rollouts=int(n_ro),
                        mean_reward=float(mean) if mean is not None else None,
                        pass_before=ev.get((r.id, HELDOUT_BEFORE)),
                        pass_after=ev.get((r.id, HELDOUT_AFTER)),
                    )
                )
            return out

    def episodes(self, session_id: int) -> list[EpisodeSummary]:
        """The session's episodes in recording order, each with its group's rewards."""
        with self.store.read() as s:  # noqa: SLF001
            eps = s.execute(
                select(EpisodeRow, TaskRow.task_key, TaskRow.family)
                .join(TaskRow, EpisodeRow.task_id == TaskRow.id)
                .where(EpisodeRow.session_id == session_id)
                .order_by(EpisodeRow.id)
            ).all()
            rewards: dict[int, tuple[list[float], list[float]]] = {}
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

        The active-lesson count at the end of round r replays the audit log: a lesson
        exists from its ``created_at`` with the status it had before its first status
        change (the ``before`` of that event, or its current status if it never changed);
        RETIRE / PROMOTE / DISTILL events carry the new status in ``after``, and a MERGE
        with a target retires the source. Events count up to the latest event or finish
        time of the round's episodes.
        """
        store = self.store
        per_round = store.round_rewards(session_id)
        rounds = sorted(per_round)
        means = [
            sum(sum(g) for g in per_round[r]) / max(1, sum(len(g) for g in per_round[r])) for r in rounds
        ]
        with store.read() as s:  # noqa: SLF001
            cutoffs: dict[int, datetime] = {}
            for rnd, fin, ev_at in s.execute(
                select(EpisodeRow.round, func.max(EpisodeRow.finished_at), func.max(LessonEventRow.created_at))
                .outerjoin(LessonEventRow, LessonEventRow.episode_id == EpisodeRow.id)
                .where(EpisodeRow.session_id == session_id)
                .group_by(EpisodeRow.round)
            ):
                fin = _as_dt(fin)
                ev_at = _as_dt(ev_at)
                cutoffs[rnd] = max(t for t in (fin, ev_at) if t is not None)
            lessons = s.execute(select(LessonRow.id, LessonRow.status, LessonRow.created_at)).all()
            changes = s.execute(
                select(LessonEventRow.lesson_id, LessonEventRow.op, LessonEventRow.before, LessonEventRow.after,
                       LessonEventRow.target_lesson_id, LessonEventRow.created_at, LessonEventRow.episode_id)
                .where(
                    (LessonEventRow.op.in_(["ADD", "RETIRE", "PROMOTE", "DISTILL"]))
                    | ((LessonEventRow.op == "MERGE") & LessonEventRow.target_lesson_id.is_not(None))
                )
                .order_by(LessonEventRow.id)
            ).all()
            evals = {
                name: p
                for name, p in s.execute(
                    select(EvaluationRow.name, EvaluationRow.pass_at_1).where(
                        EvaluationRow.session_id == session_id,
                        EvaluationRow.name.in_([HELDOUT_BEFORE, HELDOUT_AFTER]),
                    )
                )
            }
        timeline: dict[int, list[tuple[datetime, str]]] = {}
        initial: dict[int, str] = {}  # status from creation until the first change
        for lid, op, before, after, _target, at, episode_id in changes:
            if op == "ADD":
                # the only status change is a MERGE: teacher lessons start as candidates, hand-written ones active
                initial.setdefault(lid, "candidate" if episode_id is not None else "active")
                continue
            new = "retired" if op == "MERGE" else after
            if new not in LESSON_STATUSES:
                continue
            if lid not in timeline and op != "MERGE" and before in LESSON_STATUSES:
                initial[lid] = before
            timeline.setdefault(lid, []).append((_as_dt(at), new))
        active: list[int] = []
        for rnd in rounds:
            cut = cutoffs[rnd]
            n = 0
            for lid, status, created in lessons:
                if _as_dt(created) > cut:
                    continue
                st = initial.get(lid, status) if lid in timeline else status
                for at, new in timeline.get(lid, []):
                    if at <= cut:
                        st = new
                n += st == "active"
            active.append(n)
        heldout = []
        if HELDOUT_BEFORE in evals:
            heldout.append((0, evals[HELDOUT_BEFORE]))
        if HELDOUT_AFTER in evals:
            heldout.append((rounds[-1] if rounds else 1, evals[HELDOUT_AFTER]))
        return LearningCurve(rounds, means, active, heldout)

    # ----------------------------------------------------------------- episodes

    def episode(self, episode_id: int) -> EpisodeDetail | None:
        """One episode with its rollouts, hint, lessons in context and curation ops; None if gone."""
        with self.store.read() as s:  # noqa: SLF001
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
                                r.completion_tokens, r.finish_reason)
                    for r in rollouts
                ],
                hint=hint,
                lessons_in_context=[(lid, *current.get(lid, (None, None))) for lid in ids],
                events=[],
                reflection_error=e.reflection_error,
            )
        return replace(detail, events=self._events(LessonEventRow.episode_id == episode_id))

    def _events(self, where: Any) -> list[EventInfo]:
        from sqlalchemy.orm import aliased

        target = aliased(LessonRow)
        q = (
            select(LessonEventRow, LessonRow.lesson_id, target.lesson_id)
            .join(LessonRow, LessonEventRow.lesson_id == LessonRow.id)
            .outerjoin(target, LessonEventRow.target_lesson_id == target.id)
            .where(where)
            .order_by(LessonEventRow.id)
        )
        with self.store.read() as s:  # noqa: SLF001
            return [
                EventInfo(
                    id=ev.id, lesson_id=lid, op=ev.op, before=ev.before, after=ev.after, rationale=ev.rationale,
                    episode_id=ev.episode_id, rollout_ids=list(ev.rollout_ids or []), created_at=ev.created_at,
                    target=tid, origin=dict(ev.origin) if ev.origin else None,
                )
                for ev, lid, tid in s.execute(q)
            ]

    # ----------------------------------------------------------------- lessons

    def families(self) -> list[str]:
        """The scopes present in the library (task families and ``global``), sorted."""
        with self.store.read() as s:  # noqa: SLF001
            return sorted(s.scalars(select(LessonRow.scope).distinct()))

    def lesson_page(self, page: int = 0, status: str | None = None, family: str | None = None,
                    page_size: int = PAGE_SIZE) -> LessonPage:
        """One page of lessons, oldest first, filtered by status and family.

        Args:
            page: 0-based page number; clamped to the last page.
            status: one of ``lessons.db.schema.LESSON_STATUSES`` or None (every status).
            family: a scope (task family or ``global``) or None.
            page_size: rows per page (≥ 1).

        Raises:
            ValueError: unknown status or ``page_size`` < 1.
        """
        if page_size < 1:
            raise ValueError(f"page_size must be >= 1, got {page_size}")
        if status is not None and status not in LESSON_STATUSES:
            raise ValueError(f"lesson status must be one of {', '.join(LESSON_STATUSES)}, not {status!r}")
        q = select(func.count()).select_from(LessonRow)
        if status is not None:
            q = q.where(LessonRow.status == status)
        if family is not None:
            q = q.where(LessonRow.scope == family)
        with self.store.read() as s:  # noqa: SLF001
            total = int(s.scalar(q) or 0)
        pages = max(1, -(-total // page_size))
        page = min(max(0, page), pages - 1)
        rows = self.store.list_lessons(status=status, scope=family, limit=page_size, offset=page * page_size)
        return LessonPage(rows, total, page, pages)

    def search(self, text: str, status: str | None = None, family: str | None = None,
               limit: int = SEARCH_LIMIT) -> LessonPage:
        """Lessons containing every word of ``text`` (word prefixes match), best BM25 first.

        SQLite FTS5 (``lessons_fts``, porter stemming) where the database has it; otherwise a
        case-insensitive substring match of every word, newest first. Filters as
        :meth:`lesson_page`.
        """
        words = _WORD.findall(text.lower())
        if not words:
            return self.lesson_page(0, status, family)
        params: dict[str, Any] = {"limit": int(limit)}
        filt = ""
        if status is not None:
            filt += " AND l.status = :status"
            params["status"] = status
        if family is not None:
            filt += " AND l.scope = :family"
            params["family"] = family
        with self.store.read() as s:  # noqa: SLF001
            if self.store.has_fts():
                params["match"] = " AND ".join('"' + w.replace('"', '""') + '"*' for w in words)
                sql = (
                    "SELECT l.id FROM lessons_fts JOIN lessons AS l ON l.id = lessons_fts.rowid "
                    f"WHERE lessons_fts MATCH :match{filt} ORDER BY bm25(lessons_fts) LIMIT :limit"
                )
            else:
                likes = []
                for i, w in enumerate(words):
                    likes.append(f"lower(l.text) LIKE :w{i}")
                    params[f"w{i}"] = f"%{w}%"
                sql = f"SELECT l.id FROM lessons AS l WHERE {' AND '.join(likes)}{filt} ORDER BY l.id DESC LIMIT :limit"
            ids = [r[0] for r in s.execute(sql_text(sql), params)]
            t = LessonRow.__table__
            by_id = {m["id"]: m for m in s.execute(select(t).where(t.c.id.in_(ids))).mappings()} if ids else {}
        rows = [lesson_info(by_id[i]) for i in ids if i in by_id]
        return LessonPage(rows, len(rows), 0, 1, query=text)

    def lesson_detail(self, lesson_id: str) -> LessonDetail | None:
        """A lesson with its full history, utility A/Bs and lineage; None if there is no such lesson.

        Lineage: the episodes named by its ADD/EDIT/MERGE/IMPORT events (and its source
        episode), the lessons it was merged into / from (MERGE targets), and the adapters
        that trained on or distilled it (``adapter_lessons``, when the table exists) — the
        one-hop neighbourhood of :func:`lessons.library.provenance.build_graph`, read with indexed
        queries so a 100k-lesson library answers at once.
        """
        les = self.store.get_lesson(lesson_id)
        if les is None:
            return None
        with self.store.read() as s:  # noqa: SLF001
            row_id, src_ep = s.execute(
                select(LessonRow.id, LessonRow.source_episode_id).where(LessonRow.lesson_id == lesson_id)
            ).one()
        events = self._events(LessonEventRow.lesson_id == row_id)
        merged_from_ev = self._events((LessonEventRow.target_lesson_id == row_id) & (LessonEventRow.op == "MERGE"))
        ep_ids = [ev.episode_id for ev in events if ev.episode_id is not None and ev.op in ("ADD", "EDIT", "MERGE", "IMPORT")]
        if src_ep is not None:
            ep_ids.insert(0, src_ep)
        ep_ids = list(dict.fromkeys(ep_ids))
        with self.store.read() as s:  # noqa: SLF001
            labels = {
                eid: f"{name}/{key}"
                for eid, name, key in s.execute(
                    select(EpisodeRow.id, SessionRow.name, EpisodeRow.episode_key)
                    .join(SessionRow, EpisodeRow.session_id == SessionRow.id)
                    .where(EpisodeRow.id.in_(ep_ids))
                )
            } if ep_ids else {}
        adapters: list[tuple[str, str]] = []
        if self.has_adapters():
            with self.store.read() as s:  # noqa: SLF001
                adapters = [
                    (str(a), str(rel))
                    for a, rel in s.execute(
                        sql_text(
                            "SELECT a.adapter_id, al.relation FROM adapter_lessons AS al "
                            "JOIN adapters AS a ON a.id = al.adapter_id WHERE al.lesson_id = :lid ORDER BY a.id, al.relation"
                        ),
                        {"lid": row_id},
                    )
                ]
        return LessonDetail(
            lesson=les,
            events=events,
            utility_history=self.store.utility_history(lesson_id),
            source_episodes=[(eid, labels[eid]) for eid in ep_ids if eid in labels],
            merged_into=list(dict.fromkeys(ev.target for ev in events if ev.op == "MERGE" and ev.target)),
            merged_from=list(dict.fromkeys(ev.lesson_id for ev in merged_from_ev)),
            adapters=adapters,
        )

    # ----------------------------------------------------------------- adapters

    def has_adapters(self) -> bool:
        """Whether the database has the distillation tables ``adapters`` and ``adapter_lessons``.

        A True answer is cached; False is looked up again next time, so tables created by a
        later ``arena distill`` show up without restarting the TUI.
        """
        if not self._has_adapters:
            with self.store.read() as s:  # noqa: SLF001
                names = set(inspect(s.connection()).get_table_names())
            self._has_adapters = {"adapters", "adapter_lessons"} <= names
        return bool(self._has_adapters)

    def adapters(self) -> list[AdapterView] | None:
        """Every adapter, oldest first, with its lesson set; None when the tables do not exist.

        Reads the columns ``arena distill`` writes (``adapter_id, path, objective, config,
        metrics, eval, created_at``); missing columns read as empty.
        """
        import json

        if not self.has_adapters():
            return None
        with self.store.read() as s:  # noqa: SLF001
            cols = {c["name"] for c in inspect(s.connection()).get_columns("adapters")}
            rows = [dict(m) for m in s.execute(sql_text("SELECT * FROM adapters ORDER BY id")).mappings()]
            links = s.execute(
                sql_text(
                    "SELECT al.adapter_id, l.lesson_id, al.relation, l.status FROM adapter_lessons AS al "
                    "JOIN lessons AS l ON l.id = al.lesson_id ORDER BY al.adapter_id, al.relation, l.id"
                )
            ).all()
        by_adapter: dict[int, list[tuple[str, str, str]]] = {}
        for aid, lid, rel, st in links:
            by_adapter.setdefault(aid, []).append((str(lid), str(rel), str(st)))

        def js(v: Any) -> dict[str, Any]:
            if isinstance(v, str):
                try:
                    v = json.loads(v)
                except ValueError:
                    return {"value": v}
            return v if isinstance(v, dict) else {}

        out = []
        for r in rows:
            out.append(
                AdapterView(
                    adapter_id=str(r.get("adapter_id") if "adapter_id" in cols else r["id"]),
                    path=str(r.get("path") or ""),
                    objective=str(r.get("objective") or ""),
                    created_at=str(r.get("created_at") or "")[:16],
                    config=js(r.get("config")),
                    metrics=js(r.get("metrics")),
                    evaluation=js(r.get("eval", r.get("evaluation"))),
                    lessons=by_adapter.get(r["id"], []),
                    parent_adapter=r.get("parent_adapter"),
                    cycle=r.get("cycle"),
                )
            )
        return out

    # ----------------------------------------------------------------- curation (writes)

    def _prepare(self) -> None:
        with self._counter_lock:
            if self._token_counter is not None and self.store.count_tokens is None:
                self.store.count_tokens = self._token_counter()

    def edit(self, lesson_id: str, text: str, why: str) -> CurationResult:
        """EDIT a lesson's text (``Curator.edit``), origin ``{"by": "tui"}``.

        Raises:
            lessons.library.curation.CurationError: unknown or not live lesson, bad or unchanged
                text, over the library budget.
        """
        self._prepare()
        with self.store.curate() as c:
            c.edit(lesson_id, text, why or "edited in the TUI", _prov(why))
            return c.result

    def retire(self, lesson_id: str, why: str) -> CurationResult:
        """RETIRE a lesson with a reason (``Curator.retire``).

        Raises:
            lessons.library.curation.CurationError: unknown or already retired lesson, empty reason.
        """
        with self.store.curate() as c:
            c.retire(lesson_id, why, _prov(why))
            return c.result

    def vote(self, lesson_id: str, tag: str, why: str = "") -> CurationResult:
        """UPVOTE (``tag="helpful"``) or DOWNVOTE (``"harmful"``) a lesson (``Curator.vote``),
        then its life cycle (promotion or retirement on the votes).

        Raises:
            lessons.library.curation.CurationError: unknown or retired lesson, unknown tag.
        """
        with self.store.curate() as c:
            c.vote(lesson_id, tag, _prov(why), why or f"{'up' if tag == 'helpful' else 'down'}voted in the TUI")
            return c.result


def _prov(why: str = "") -> Provenance:
    return Provenance(origin={"by": TUI_ORIGIN, **({"why": why} if why else {})})


def _as_dt(v: Any) -> datetime | None:
    """A timestamp from a raw SQL aggregate (SQLite returns text for max() of a datetime column)."""
    if v is None or isinstance(v, datetime):
        return v
    from datetime import UTC

    d = datetime.fromisoformat(str(v))
    return d if d.tzinfo else d.replace(tzinfo=UTC)


def configure_budget(store: LessonStore, library_tokens: int) -> None:
    """The library budget of the TUI's edits (``arena run --library-tokens``).

    Raises:
        ValueError: ``library_tokens`` < 1.
    """
    if library_tokens < 1:
        raise ValueError(f"--library-tokens must be >= 1, got {library_tokens}")
    store.curation_policy = CurationPolicy(library_tokens=library_tokens)


__all__: Sequence[str] = (
    "AdapterView", "ArenaData", "DatabaseProblem", "EpisodeDetail", "EpisodeSummary", "LearningCurve",
    "LessonDetail", "LessonPage", "PAGE_SIZE", "RolloutView", "SessionSummary", "configure_budget", "open_store",
)
