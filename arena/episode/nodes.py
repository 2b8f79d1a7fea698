"""The episode graph's nodes and routers (wired in :mod:`arena.episode.graph`).

Each node is a module-level function ``node(state, runtime) -> dict`` that reads the
:class:`~arena.episode.state.EpisodeState`, takes what it needs beyond the state (policies, the
store, tasks, settings, the reward strategy) from ``runtime.context`` (an
:class:`~arena.episode.context.EpisodeContext`), and returns only the keys it writes.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from datetime import datetime, timezone

from langgraph.runtime import Runtime

from agents.policy import EndpointFault
from agents.roles.hints import FailedAttempt, HintRefused, write_hint
from agents.roles.solver import guided_messages, solver_messages
from agents.roles.teacher import LIBRARY_FULL_NOTE, ReflectResult, RolloutView
from agents.roles.teacher import reflect as teacher_reflect
from arena.episode.context import EpisodeContext
from arena.episode.prompt import retrieve_for_task
from arena.episode.state import (
    CompletionEntry,
    EpisodeState,
    GradeEntry,
    GradeStatus,
    HintEntry,
    completion_entry,
    failed_entry,
    is_failed,
    to_completion,
)
from arena.tasks.verify import has_verifier, judge_reference, verifiable_answer
from lessons.credentials import redact_credentials
from lessons.library.records import CriterionVerdict, RolloutGrading
from lessons.library.rubrics import eligible_for_reflection
from lessons.library.store import EpisodeRecord, HintRecord, RolloutRecord
from lessons.ops import Reflection
from lessons.outcomes import passes
from lessons.text import redact_token

LIBRARY_FULL_FRACTION = 0.8  # the teacher is asked to merge/retire once the library holds this share of its budget


# --------------------------------------------------------------------------- shared steps


def _guided_seed(seed: int | None) -> int | None:
    """The seed of the guided group: one past the episode's (None stays None)."""
    return None if seed is None else seed + 1


def _sample_group(ctx: EpisodeContext, messages: list[dict[str, str]], seed: int | None) -> list[CompletionEntry]:
    """``settings.rollouts`` solver completions of one chat, each with its share of the call's latency.

    A group call the endpoint could not answer (:class:`agents.policy.EndpointFault`, after the
    backend's bounded retries) is sampled again one rollout at a time (seed + i); a rollout that
    still fails becomes a failed entry (:func:`arena.episode.state.failed_entry`) with the fault's
    kind and message, so one bad reply costs one rollout, not the episode or the session.
    """
    s = ctx.settings
    t0 = time.perf_counter()
    try:
        outs = ctx.roles.solver.sample(messages, n=s.rollouts, temperature=s.temperature, max_tokens=s.max_tokens,
                                       seed=seed)
    except EndpointFault:
        return [_sample_one(ctx, messages, None if seed is None else seed + i) for i in range(s.rollouts)]
    latency = (time.perf_counter() - t0) / max(1, len(outs))
    return [completion_entry(c, latency) for c in outs]


def _fault_text(prefix: str, fault: Exception) -> str:
    """``prefix`` and the fault's message, the password of any URL in it masked (CASE-005).

    A fault's message names its endpoint; whatever backend raised it, what the episode stores
    (a rollout's critique, the episode's error) never holds an endpoint's ``user:password@``.
    """
    return redact_credentials(f"{prefix}{fault}")


def _sample_one(ctx: EpisodeContext, messages: list[dict[str, str]], seed: int | None) -> CompletionEntry:
    """One rollout on its own request; an endpoint fault makes it a failed entry."""
    s = ctx.settings
    t0 = time.perf_counter()
    try:
        c = ctx.roles.solver.sample(messages, n=1, temperature=s.temperature, max_tokens=s.max_tokens, seed=seed)[0]
    except EndpointFault as e:
        return failed_entry(e.kind, _fault_text("", e), time.perf_counter() - t0)
    return completion_entry(c, time.perf_counter() - t0)


def _fault_grade(kind: str, reason: str) -> GradeEntry:
    """The grade of a rollout an endpoint fault left ungraded (no completion, or a judge that never answered).

    Its critique is ``ungraded: <reason>``, URL passwords masked before the cut to 300 characters.
    """
    return {"reward": None, "extracted_answer": None, "critique": redact_credentials(f"ungraded: {reason}")[:300],
            "graded": False,
            "fault": kind}


def _grade_group(ctx: EpisodeContext, state: EpisodeState, completions: list[CompletionEntry],
                 seed: int | None) -> list[GradeEntry]:
    """The reward strategy's grades of a group, in order; failed rollouts are ungraded (reward None).

    A grader whose model (critic, rubric judge) hits an endpoint fault grades the rollouts one
    at a time; one it cannot grade is ungraded with the fault.
    """
    task = ctx.task(state["task_key"])
    delivered = [i for i, c in enumerate(completions) if not is_failed(c)]
    comps = [to_completion(completions[i]) for i in delivered]
    try:
        graded = ctx.reward.grade(task, comps, state["session_id"], seed) if comps else []
    except EndpointFault:
        graded = []
        for c in comps:
            try:
                graded += ctx.reward.grade(task, [c], state["session_id"], seed)
            except EndpointFault as e:
                graded.append(_fault_grade(e.kind, _fault_text("the grader's endpoint failed: ", e)))
    grades: list[GradeEntry] = [
        _fault_grade(c.get("fault") or "connection", c.get("fault_reason") or "no completion") for c in completions
    ]
    for i, g in zip(delivered, graded):
        grades[i] = g
    return grades


def _no_reflection(error: str | None = None) -> dict:
    """The ``reflect`` node's keys when nothing is reflected."""
    return {"reflection": None, "reflection_raw": [], "rejected_ops": [], "reflection_error": error}


def _usable(ctx: EpisodeContext, g: GradeEntry) -> bool:
    """Ungraded rollouts and (by default) reward-hack-flagged ones are not reflected on."""
    return eligible_for_reflection(GradeStatus.of(g), include_flagged=ctx.settings.include_flagged)


# --------------------------------------------------------------------------- nodes


def retrieve_lessons(state: EpisodeState, runtime: Runtime[EpisodeContext]) -> dict:
    """Put the task's lessons section into the solver's chat: writes ``lessons_shown`` and ``messages``."""
    ctx = runtime.context
    task = ctx.task(state["task_key"])
    section, shown = retrieve_for_task(
        ctx.store, task, ctx.settings.lesson_tokens, ctx.roles.solver.count_tokens, ctx.settings.exclude_lessons
    )
    return {"lessons_shown": shown, "messages": solver_messages(task.question, section)}


def solve(state: EpisodeState, runtime: Runtime[EpisodeContext]) -> dict:
    """Sample the group of k rollouts at the episode's seed: writes ``completions``."""
    return {"completions": _sample_group(runtime.context, state["messages"], state.get("seed"))}


def grade(state: EpisodeState, runtime: Runtime[EpisodeContext]) -> dict:
    """Grade the group with the session's reward strategy: writes ``grades``."""
    return {"grades": _grade_group(runtime.context, state, state["completions"], state.get("seed"))}


def route_after_grade(state: EpisodeState, runtime: Runtime[EpisodeContext]) -> str:
    """``hint`` for an all-fail group of a train task when hints are on, else ``reflect``.

    Held-out tasks never get hints (they are not run through this graph at all, and the
    router refuses them anyway). A rubric task needs a reference answer for hints.
    """
    ctx = runtime.context
    task = ctx.task(state["task_key"])
    best = max((g["reward"] for g in state["grades"] if g["reward"] is not None), default=0.0)
    hintable = has_verifier(task) or bool(task.answer)
    delivered = any(not is_failed(c) for c in state["completions"])  # a hint needs attempts to learn from
    if ctx.settings.hint_modes and hintable and delivered and task.split == "train" and not passes(best, ctx.settings.success_threshold):
        return "hint"
    return "reflect"


def hint(state: EpisodeState, runtime: Runtime[EpisodeContext]) -> dict:
    """Reuse this task's stored hint or have the teacher write one: writes ``hint`` and ``guided_messages``.

    A hint the teacher could not write leaves ``hint`` None (the router then skips to ``reflect``).
    """
    ctx = runtime.context
    task = ctx.task(state["task_key"])
    modes = ctx.settings.hint_modes
    stored = ctx.store.find_hint(state["session_id"], task.task_key, "+".join(modes))
    h: HintEntry
    if stored is not None:
        h = {"mode": stored.mode, "text": stored.text, "hint_id": stored.id, "rejected": []}
    else:
        delivered = [(c, g) for c, g in zip(state["completions"], state["grades"]) if not is_failed(c)]
        failed = [FailedAttempt(c["text"], g["extracted_answer"], g["critique"], _solver_feedback(g))
                  for c, g in delivered]
        try:
            written = write_hint(
                ctx.roles.teacher, modes, task.question, failed, verifiable_answer(task),
                max_tokens=ctx.settings.hint_max_tokens, seed=state.get("seed"),
                judge_reference=judge_reference(task), judge_only=_criterion_titles(g for _, g in delivered),
                family=task.family,
            )
        except EndpointFault as e:  # costs the hint, not the episode
            return {"hint": None, "guided_messages": [], "guided_completions": [], "guided_grades": [],
                    "hint_error": _fault_text("hint not written: ", e)}
        except HintRefused as e:  # every part leaked: the group goes unguided, the reasons into the episode's record
            return {"hint": None, "guided_messages": [], "guided_completions": [], "guided_grades": [],
                    "hint_rejected": e.rejected}
        h = {"mode": written.mode, "text": written.text, "hint_id": None, "rejected": written.rejected}
    return {"hint": h, "guided_messages": guided_messages(state["messages"], h["text"])}


def _solver_feedback(g: GradeEntry) -> str | None:
    """What a ``feedback`` hint may show the solver of a grade: None (the critique itself) for a verifier's
    grade; a rubric grade's ``feedback`` (its reward and verifier note), never the judge's critique, which
    names rubric criteria (docs/architecture.md, "Who sees what")."""
    if g.get("reward_kind", "verifier") == "verifier":
        return None
    return g.get("feedback") or ""


def _criterion_titles(grades: Iterable[GradeEntry]) -> list[str]:
    """The rubric criterion titles named in the grades' critiques (their failed criteria), each once."""
    titles = (t.removeprefix("pitfall: ") for g in grades for t in g.get("failed_criteria") or [])
    return list(dict.fromkeys(titles))


def route_after_hint(state: EpisodeState, runtime: Runtime[EpisodeContext]) -> str:
    """``solve_guided`` when a hint was found or written, else ``reflect``."""
    return "solve_guided" if state.get("hint") else "reflect"


def solve_guided(state: EpisodeState, runtime: Runtime[EpisodeContext]) -> dict:
    """Sample the guided group (the hint in context) at the episode's seed + 1: writes ``guided_completions``."""
    seed = _guided_seed(state.get("seed"))
    return {"guided_completions": _sample_group(runtime.context, state["guided_messages"], seed)}


def grade_guided(state: EpisodeState, runtime: Runtime[EpisodeContext]) -> dict:
    """Grade the guided group: writes ``guided_grades``."""
    seed = _guided_seed(state.get("seed"))
    return {"guided_grades": _grade_group(runtime.context, state, state["guided_completions"], seed)}


def _rollout_views(ctx: EpisodeContext, state: EpisodeState) -> list[RolloutView]:
    """What the teacher sees of the usable rollouts: the group's, then the guided group's."""
    views = [
        RolloutView(c["text"], g["reward"], g["critique"], failed_criteria=g.get("failed_criteria"))
        for c, g in zip(state["completions"], state["grades"]) if _usable(ctx, g)
    ]
    views += [
        RolloutView(c["text"], g["reward"], g["critique"], guided=True, failed_criteria=g.get("failed_criteria"))
        for c, g in zip(state.get("guided_completions") or [], state.get("guided_grades") or []) if _usable(ctx, g)
    ]
    return views


def _mixed(ctx: EpisodeContext, state: EpisodeState) -> bool:
    """Whether the episode's usable rollouts hold both a success and a failure (a guided success of an
    all-fail group counts: it contrasts with the unguided failures, which is what its hint taught)."""
    grades = list(state["grades"]) + list(state.get("guided_grades") or [])
    wins = [passes(g["reward"], ctx.settings.success_threshold) for g in grades if _usable(ctx, g)]
    return any(wins) and not all(wins)


def reflect(state: EpisodeState, runtime: Runtime[EpisodeContext]) -> dict:
    """The teacher reflects on the group and proposes lesson ops.

    Writes ``reflection`` (a :class:`lessons.ops.Reflection` dump or None), ``reflection_raw``,
    ``reflection_error`` and ``rejected_ops``. Nothing is reflected with ``settings.reflect``
    off (weight-only learning), when no graded, unflagged rollout is left, with
    ``settings.reflect_on == "mixed"`` when every usable rollout, guided ones included, succeeded or
    every one failed (no contrast to learn from: Training-Free GRPO reflects on groups with reward
    variance only), or
    when the round's :class:`arena.episode.context.ReflectionBudget` is spent (phase 2 runs in
    task order, so which episodes get the budget does not depend on ``--concurrency``).
    """
    ctx = runtime.context
    if not ctx.settings.reflect:
        return _no_reflection()
    views = _rollout_views(ctx, state)
    if not views:
        return _no_reflection("no graded, unflagged rollout to reflect on")
    if ctx.settings.reflect_on == "mixed" and not _mixed(ctx, state):
        return _no_reflection()  # nothing to contrast: not reflected (not a failure)
    if ctx.reflection_budget is not None and not ctx.reflection_budget.take():
        return _no_reflection()  # the round's teacher budget is spent
    used, budget = ctx.store.library_tokens_used(), ctx.store.curation_policy.library_tokens
    note = LIBRARY_FULL_NOTE.format(used=used, budget=budget) if used >= LIBRARY_FULL_FRACTION * budget else None
    try:
        result = _teacher_reflect(ctx, state, views, note)
    except EndpointFault as e:  # costs the reflection, not the episode
        return _no_reflection(_fault_text("reflection not written: ", e))
    return {
        "reflection": result.reflection.model_dump() if result.reflection else None,
        "reflection_raw": result.raw,
        "reflection_error": result.error,
        "rejected_ops": result.rejected,
    }


def _teacher_reflect(ctx: EpisodeContext, state: EpisodeState, views: list[RolloutView],
                     note: str | None) -> ReflectResult:
    """:func:`agents.roles.teacher.reflect` on the episode's usable rollouts."""
    task = ctx.task(state["task_key"])
    h = state.get("hint")
    return teacher_reflect(
        ctx.roles.teacher,
        task.family,
        task.question,
        views,
        [(i, t) for i, t in state["lessons_shown"]],
        reference_answer=task.answer,
        temperature=ctx.settings.teacher_temperature,
        max_tokens=ctx.settings.teacher_max_tokens,
        seed=state.get("seed"),
        # the reflecting teacher never reads the reference answer: an `answer` hint part is shown with it withheld
        hint=redact_token(h["text"], task.answer) if h else None,
        library_note=note,
    )


def _completion_tokens(c: CompletionEntry, max_tokens: int) -> int:
    """Completion tokens of a rollout: its ids, else its words (0 for a failed one, at most ``max_tokens`` for a cut one)."""
    if is_failed(c):
        return 0
    n = len(c["token_ids"]) or max(1, len(c["text"].split()))
    return min(n, max_tokens) if c.get("fault") == "oversized" else n


def _rubric_grading(g: GradeEntry) -> RolloutGrading | None:
    """The grading record of a rubric grade (stored with its rollout); None for a verifier's grade."""
    kind = g.get("reward_kind")
    if not kind or kind == "verifier":
        return None
    return RolloutGrading(
        graded=bool(g.get("graded", True)), reward_kind=kind, rubric_id=g.get("rubric_id"),
        judge_rating=g.get("judge_rating"), verifier_reward=g.get("verifier_reward"),
        hack_flags=list(g.get("hack_flags") or []),
        verdicts=[CriterionVerdict(int(v["criterion_id"]), bool(v["met"]), str(v.get("reason") or ""))
                  for v in g.get("verdicts") or [] if v.get("criterion_id") is not None],
    )


def _rollout_records(state: EpisodeState, completions: list[CompletionEntry], grades: list[GradeEntry],
                     messages: list[dict[str, str]], guided: bool, start: int, max_tokens: int) -> list[RolloutRecord]:
    """The store records of one group's rollouts, numbered from ``start``; ``fault`` from the completion or its
    grade; a rubric grade's grading record (status, hack flags, verdicts) goes with its rollout."""
    return [
        RolloutRecord(
            idx=start + i,
            messages=messages,
            completion=c["text"],
            extracted_answer=g["extracted_answer"],
            reward=g["reward"],
            critique=g["critique"],
            prompt_tokens=c["prompt_tokens"],
            completion_tokens=_completion_tokens(c, max_tokens),
            finish_reason=c["finish_reason"],
            latency_s=c["latency_s"],
            guided=guided,
            token_ids=c["token_ids"] or None,
            logprobs=c["logprobs"],
            unguided_messages=state["messages"] if guided else None,
            # an ungraded rollout records why (a verifier crash over an "oversized" cut it also had)
            fault=(g.get("fault") if g["reward"] is None else None) or c.get("fault") or g.get("fault"),
            grading=_rubric_grading(g),
        )
        for i, (c, g) in enumerate(zip(completions, grades))
    ]


def _episode_error(state: EpisodeState) -> str | None:
    """The episode's recorded error: the reflection's, the rejected ops and the hint's endpoint fault, joined,
    URL passwords masked (CASE-005). The hint's refused parts are recorded apart (:func:`_hint_rejected`)."""
    error = state.get("reflection_error")
    if state.get("rejected_ops"):
        error = "; ".join(filter(None, [error, *state["rejected_ops"]]))
    if state.get("hint_error"):
        error = "; ".join(filter(None, [error, state["hint_error"]]))
    return redact_credentials(error) if error is not None else None


def _hint_rejected(state: EpisodeState) -> list[str]:
    """What was refused while the episode's hint was written (plan attempts, parts), whether or not a hint came of it."""
    h = state.get("hint")
    return list(h.get("rejected") or []) if h else list(state.get("hint_rejected") or [])


def curate(state: EpisodeState, runtime: Runtime[EpisodeContext]) -> dict:
    """Record the episode (rollouts, reflection, hint) and apply its lesson ops in one idempotent transaction.

    With a rubric reward the rollouts' rubric grading (status, hack flags, verdicts) is part of
    that transaction, so a kill leaves either all of it or nothing. Writes ``episode_id`` and
    ``lessons_added``; an episode already recorded (resumed after the write, before the
    checkpoint) writes nothing and returns ``episode_id`` None.
    """
    ctx = runtime.context
    task = ctx.task(state["task_key"])
    h = state.get("hint")
    max_tokens = ctx.settings.max_tokens
    rollouts = _rollout_records(state, state["completions"], state["grades"], state["messages"], False, 0, max_tokens)
    if h:
        rollouts += _rollout_records(
            state, state["guided_completions"], state["guided_grades"], state["guided_messages"], True, len(rollouts),
            max_tokens,
        )
    result = ctx.store.record_episode(
        EpisodeRecord(
            session_id=state["session_id"],
            episode_key=state["episode_key"],
            round=state["round"],
            task_key=task.task_key,
            system_prompt=state["messages"][0]["content"],
            lessons_in_context=[i for i, _ in state["lessons_shown"]],
            rollouts=rollouts,
            reflection=Reflection.model_validate(state["reflection"]) if state.get("reflection") else None,
            reflection_raw="\n---\n".join(state.get("reflection_raw", [])),
            reflection_error=_episode_error(state),
            hint=HintRecord(h["mode"], h["text"], h["hint_id"]) if h else None,
            hint_rejected=_hint_rejected(state),
            started_at=datetime.fromisoformat(state["started_at"]) if state.get("started_at") else None,
            finished_at=datetime.now(timezone.utc),
            adapter_id=ctx.settings.adapter_id,
        )
    )
    if result is None:
        return {"episode_id": None, "lessons_added": []}
    return {"episode_id": result.episode_id, "lessons_added": list(result.lessons_added)}
