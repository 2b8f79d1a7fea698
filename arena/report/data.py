"""What a session report shows, read from the library: :func:`gather` builds one :class:`SessionData`.

Every figure of ``arena report`` reads one field here, so the numbers of the page are tested
without drawing anything. The held-out points come from the stored evaluations (their own
95% Wilson intervals, never recomputed), the paired tests from their per-task rewards
(:func:`arena.evaluation.paired`: Newcombe interval, exact McNemar p), the per-round rates
from :func:`arena.session.summary.rounds_summary`, the library's course from
:meth:`lessons.library.read_models.SessionReads.library_timeline`.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any

from pydantic import ValidationError

from arena.config import SessionConfig
from arena.evaluation import paired
from arena.session.cycles import HeldoutEvals
from arena.session.summary import hint_summary, rounds_summary
from lessons.library.adapters import AdapterStore
from lessons.library.read_models import LibraryTimeline, SessionReads
from lessons.library.rubrics import RubricStore
from lessons.library.store import LessonStore
from lessons.outcomes import HELDOUT_AFTER, HELDOUT_AFTER_NO_LESSONS, HELDOUT_BEFORE, eval_name

TOP_LESSONS = 15  # rows of the lessons-in-context table


class ReportError(ValueError):
    """A report cannot be written (unknown session, nothing evaluated, unwritable directory): one line for the user."""


@dataclass(frozen=True)
class HeldoutPoint:
    """One held-out greedy evaluation of the session, placed on the report's x axis.

    ``stage`` orders the points: 0 before the session, then per cycle ``c`` the wake
    measurement at ``c - 0.5`` and the post-sleep one at ``c`` (a session without cycles has
    its "after" at 1).
    """

    name: str  # evaluations.name
    label: str  # "before", "cycle 1 wake", "cycle 1", "after"
    stage: float
    lessons: bool  # lessons in the prompt
    n: int  # tasks evaluated
    pass_at_1: float | None  # None: nothing graded (n = 0)
    ci95: tuple[float, float]  # the stored Wilson interval
    vs_before: dict[str, Any] | None  # paired comparison with heldout_before (diff, ci95, p_value, ...); None: not paired
    vs_no_lessons: dict[str, Any] | None = None  # a with-lessons point against the same stage without lessons


@dataclass(frozen=True)
class RoundRates:
    """Sampled train figures of one round and its groups' hint outcomes."""

    round: int
    episodes: int
    mean_reward: float
    pass_at_1: float
    pass_at_k: float
    all_fail: int  # groups whose unguided rollouts all failed
    guided: int  # groups re-attempted with a hint
    rescued: int  # guided groups with at least one guided success


@dataclass(frozen=True)
class LessonUse:
    """A lesson that was in the session's prompts: how often, and what the library knows of it."""

    lesson_id: str
    text: str
    status: str  # now, or "gone" when deleted
    in_context: int  # the session's episodes whose prompt showed it
    helpful: int  # library-wide counters
    harmful: int
    utility: float | None  # latest A/B effect on pass@1 (with − without)
    utility_ci: tuple[float, float] | None
    utility_n: int


@dataclass(frozen=True)
class AdapterProvenance:
    """One adapter trained on the session: what went in, what it scored."""

    adapter_id: str
    objective: str
    cycle: int | None
    parent: str | None
    examples: int | None  # training examples (None: not recorded)
    rollouts: int | None  # distinct rollouts behind them (None: not recorded)
    session: str  # the session its data came from
    distilled: list[str]  # lessons it keeps (they left the prompt)
    in_context: list[str]  # lessons that were in the prompts of its data
    heldout: dict[str, Any] | None  # {"pass_at_1", "n", "ci95"} of the adapter without lessons, or None
    base: dict[str, Any] | None  # the same of the base model on the same tasks


@dataclass(frozen=True)
class SessionData:
    """Everything one session's report shows."""

    session: str
    status: str
    config: dict[str, Any]
    rollouts: int  # group size k
    cycles: int
    threshold: float  # success threshold of a pass
    library_tokens: int  # the budget of live lessons' tokens
    heldout: list[HeldoutPoint]
    rounds: list[RoundRates]
    timeline: LibraryTimeline | None
    lessons: list[LessonUse]
    adapters: list[AdapterProvenance]
    rubric: bool  # a rubric-reward session (adds calibration and hack flags)
    calibration: list[tuple[float, float]] = field(default_factory=list)  # (judge reward, verifier reward) per rollout
    hack_flags: dict[str, int] = field(default_factory=dict)  # flag kind -> rollouts flagged
    faults: dict[str, int] = field(default_factory=dict)


def _config(raw: dict[str, Any], db: str) -> SessionConfig | None:
    """The stored session config, or None when it no longer validates (an older or hand-edited row)."""
    try:
        return SessionConfig.model_validate({**raw, "db": db})
    except ValidationError:
        return None


def heldout_points(store: LessonStore, session_id: int, cycles: int) -> list[HeldoutPoint]:
    """The session's held-out evaluations in stage order, each paired with ``heldout_before`` when it can be.

    Args:
        store: the library.
        session_id: the session.
        cycles: wake–sleep cycles of the session (1: none).

    Returns:
        Points for ``heldout_before``, per cycle the wake and post-sleep evaluations with and
        without lessons, and ``heldout_after`` / ``heldout_after_no_lessons`` (placed at the
        last cycle); evaluations not recorded are left out.
    """
    infos = store.evaluations(session_id)
    evals = HeldoutEvals(store, session_id, [], 0, 0)
    before = evals.stored(HELDOUT_BEFORE)
    wanted: list[tuple[str, str, float, bool]] = [(HELDOUT_BEFORE, "before", 0.0, True)]
    for c in range(1, cycles + 1) if cycles > 1 else ():
        for lessons in (True, False):
            wanted.append((eval_name(c, lessons, wake=True), f"cycle {c} wake", c - 0.5, lessons))
            wanted.append((eval_name(c, lessons), f"cycle {c}", float(c), lessons))
    last = float(max(1, cycles))
    wanted += [(HELDOUT_AFTER, "after", last, True), (HELDOUT_AFTER_NO_LESSONS, "after", last, False)]
    out: list[HeldoutPoint] = []
    results = {}  # (stage, lessons) -> the stored result placed there
    for name, label, stage, lessons in wanted:
        e = infos.get(name)
        if e is None or (stage, lessons) in results:  # a cycles session's last cycle is also its "after"
            continue
        got = results[(stage, lessons)] = before if name == HELDOUT_BEFORE else evals.stored(name)
        out.append(HeldoutPoint(
            name=name, label=label, stage=stage, lessons=lessons, n=e.n,
            pass_at_1=e.pass_at_1 if e.n else None, ci95=(e.ci_lo, e.ci_hi),
            vs_before=None if name == HELDOUT_BEFORE else paired(got, before),
        ))
    return [replace(p, vs_no_lessons=paired(results[(p.stage, True)], results.get((p.stage, False))))
            if p.lessons and p.name != HELDOUT_BEFORE else p for p in out]


def round_rates(store: LessonStore, session_id: int, rollouts: int, threshold: float) -> list[RoundRates]:
    """Per round: the sampled train rates (:func:`rounds_summary`) and the hint outcomes (:func:`hint_summary`)."""
    groups_by_round: dict[int, list[Any]] = {}
    for g in store.group_outcomes(session_id):
        groups_by_round.setdefault(g.round, []).append(g)
    out = []
    for r in rounds_summary(store, session_id, rollouts, threshold):
        hints = hint_summary(groups_by_round.get(r.round, []), threshold)
        out.append(RoundRates(
            round=r.round, episodes=r.episodes, mean_reward=r.mean_reward, pass_at_1=r.pass_at_1,
            pass_at_k=r.pass_at_k, all_fail=hints.all_fail_groups, guided=hints.guided_groups,
            rescued=round(hints.guided_success_rate * hints.guided_groups),
        ))
    return out


def lessons_in_context(store: LessonStore, session_id: int, limit: int = TOP_LESSONS) -> list[LessonUse]:
    """The ``limit`` lessons most often in the session's prompts, most first (ties: lesson id)."""
    seen = Counter(lid for e in SessionReads(store).episodes(session_id) for lid in e.lessons_in_context)
    out = []
    for lid, n in sorted(seen.items(), key=lambda kv: (-kv[1], kv[0]))[:limit]:
        info = store.get_lesson(lid)
        out.append(LessonUse(
            lesson_id=lid, text=info.text if info else "", status=info.status if info else "gone", in_context=n,
            helpful=info.helpful if info else 0, harmful=info.harmful if info else 0,
            utility=info.utility if info else None, utility_ci=info.utility_ci if info else None,
            utility_n=info.utility_n if info else 0,
        ))
    return out


def adapter_provenance(store: LessonStore, session: str) -> list[AdapterProvenance]:
    """The adapters trained on ``session`` (its sleeps and ``arena distill --session``), oldest first."""
    out = []
    for a in AdapterStore(store).list_adapters():
        trained_on = a.session or a.data.get("session")
        if trained_on != session:
            continue
        examples = a.data.get("examples")
        rollout_ids = a.data.get("rollout_ids")
        ev = a.eval or {}
        out.append(AdapterProvenance(
            adapter_id=a.adapter_id, objective=a.objective, cycle=a.cycle, parent=a.parent_adapter,
            examples=examples if isinstance(examples, int) else None,
            rollouts=len(set(rollout_ids)) if isinstance(rollout_ids, list) else None,
            session=session, distilled=list(a.distilled), in_context=list(a.in_context),
            heldout=_summary(ev.get("adapter")), base=_summary(ev.get("base")),
        ))
    return out


def _summary(v: Any) -> dict[str, Any] | None:
    """An adapter evaluation's ``{"pass_at_1", "n", "ci95"}`` when well formed, else None."""
    return v if isinstance(v, dict) and "pass_at_1" in v and "n" in v else None


def gather(store: LessonStore, session: str, db: str) -> SessionData:
    """Read everything the report of ``session`` shows.

    Args:
        store: the open library.
        session: the session's name.
        db: the library's path or URL (only to validate the stored config).

    Returns:
        The :class:`SessionData`.

    Raises:
        ReportError: no such session, or it has no held-out evaluation yet (nothing to report).
    """
    info = store.get_session(session)
    if info is None:
        names = [s.name for s in SessionReads(store).sessions()][:5]
        raise ReportError(f"no session named {session!r} in {db}" + (f" (sessions: {', '.join(names)})" if names else " (it has no session)"))
    cfg = _config(info.config, db)
    raw = info.config
    cycles = cfg.cycles if cfg else int(raw.get("cycles") or 1)
    rollouts = cfg.rollouts if cfg else int(raw.get("rollouts") or 1)
    threshold = cfg.success_threshold if cfg else float(raw.get("success_threshold") or 1.0)
    heldout = heldout_points(store, info.id, cycles)
    if not heldout:
        raise ReportError(f"session {session!r} has no held-out evaluation yet: run it past its first evaluation "
                          f"(`arena run --resume {session}`) before writing its report")
    rubric = (cfg.reward if cfg else raw.get("reward", "verifier")) != "verifier"
    rubrics = RubricStore(store)
    return SessionData(
        session=session, status=info.shown_status, config=dict(raw), rollouts=rollouts, cycles=cycles, threshold=threshold,
        library_tokens=cfg.library_tokens if cfg else int(raw.get("library_tokens") or 0),
        heldout=heldout,
        rounds=round_rates(store, info.id, rollouts, threshold),
        timeline=SessionReads(store).library_timeline(info.id),
        lessons=lessons_in_context(store, info.id),
        adapters=adapter_provenance(store, session),
        rubric=rubric,
        calibration=[(j, v) for _, j, v in rubrics.calibration_pairs(info.id)] if rubric else [],
        hack_flags=dict(rubrics.grading_stats(info.id).get("hack_flags") or {}) if rubric else {},
        faults=store.fault_counts(info.id),
    )
