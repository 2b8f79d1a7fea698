"""Held-out greedy pass@1: the one evaluator, its result type and its Wilson summary.

Every held-out figure of the project comes from :func:`evaluate_heldout`: the session runner's
``heldout_*`` evaluations, the wake–sleep cycles' (:class:`arena.session.cycles.HeldoutEvals`
caches and records them), ``arena distill`` / ``arena eval`` (:mod:`arena.distill.pipeline`) and
``arena bench learning``. A task passes by :func:`lessons.outcomes.passes`; intervals are the 95%
Wilson score interval (:func:`arena.stats.wilson_interval`), built by :func:`wilson_summary`.

Place in the pipeline: after ``arena.episode`` (it prompts like the graph's solve node and
retrieves like it), before ``arena.distill`` and ``arena.session``, which both use it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

from agents.policy import Completion, EndpointFault, Policy, batch_sampler, sample_many
from agents.roles.solver import solver_messages
from arena.episode.prompt import retrieve_for_task
from arena.episode.rewards import RewardStrategy, RubricReward
from arena.stats import paired_comparison, wilson_interval
from arena.tasks.extract import extract_answer
from arena.tasks.model import Task, VerifierError
from arena.tasks.verify import score
from lessons.credentials import redact_credentials
from lessons.library.store import LessonStore
from lessons.outcomes import count_passes, passes


def wilson_summary(n_passes: int, n: int, with_passes: bool = True) -> dict[str, Any]:
    """The summary of ``n_passes`` passes out of ``n``: pass@1 with its 95% Wilson interval.

    The one builder of every ``{"pass_at_1", "n", "ci95"}`` object the user sees (``--json``,
    adapter sidecars, ``learning.json``), rounded to 4 places.

    Args:
        n_passes: tasks passed (0 ≤ n_passes ≤ n).
        n: tasks evaluated; 0 gives pass@1 None (nothing was measured: not a score of 0) and the
            interval ``[0.0, 1.0]``.
        with_passes: include ``"passes"`` (the count) between ``"n"`` and ``"ci95"``, as
            ``arena distill`` / ``arena eval`` report it; the session summary, the cycles and
            ``arena bench learning`` leave it out (each keeps its output as it was).

    Returns:
        ``{"pass_at_1", "n", ["passes",] "ci95": [lo, hi]}``.

    Raises:
        ValueError: ``n_passes`` outside ``[0, n]`` (from :func:`arena.stats.wilson_interval`).
    """
    lo, hi = wilson_interval(n_passes, n)
    out: dict[str, Any] = {"pass_at_1": round(n_passes / n, 4) if n else None, "n": n}
    if with_passes:
        out["passes"] = n_passes
    out["ci95"] = [round(lo, 4), round(hi, 4)]
    return out


@dataclass
class EvalResult:
    """One held-out greedy evaluation: per-task rewards, the lessons each prompt showed, per-task records.

    ``rewards[i]``, ``lessons[i]`` and ``rows[i]`` belong to the i-th task (input order); a
    reward is None when a rubric judge could not grade the completion (never a pass).
    """

    rewards: list[float | None]  # per task, input order; None: ungraded (rubric reward only)
    lessons: list[list[str]]  # lesson ids shown in each task's prompt
    rows: list[dict[str, Any]] = field(default_factory=list)  # {"task_key", "extracted_answer", "reward", "lessons"[, "fault", "error"]}
    judged: bool = False  # rewards came from a rubric judge (adds ungraded / mean_reward to details())

    @property
    def n(self) -> int:
        """Tasks evaluated (ungraded ones included)."""
        return len(self.rewards)

    @property
    def passes(self) -> list[bool]:
        """Per-task pass (:func:`lessons.outcomes.passes` at threshold 1.0), input order."""
        return [passes(r) for r in self.rewards]

    @property
    def pass_count(self) -> int:
        """The number of tasks passed."""
        return count_passes(self.rewards)

    @property
    def graded(self) -> list[float]:
        """The rewards of the graded tasks (input order, ungraded ones left out)."""
        return [r for r in self.rewards if r is not None]

    def summary(self, with_passes: bool = True) -> dict[str, Any]:
        """:func:`wilson_summary` over every task: ``{"pass_at_1", "n", ["passes",] "ci95"}``."""
        return wilson_summary(self.pass_count, self.n, with_passes)

    def graded_summary(self) -> dict[str, Any]:
        """:func:`wilson_summary` over the graded tasks only (what the session runner records), without ``passes``."""
        graded = self.graded
        return wilson_summary(count_passes(graded), len(graded), with_passes=False)

    @property
    def faults(self) -> dict[str, int]:
        """Endpoint faults that left tasks without a completion (or a grade), by kind."""
        return dict(Counter(r["fault"] for r in self.rows if r.get("fault")))

    def details(self) -> dict[str, Any]:
        """The evaluations-table details: ``{"tasks": rows}``, plus ``ungraded`` and ``mean_reward`` when judged,
        ``faults`` (kind → tasks) when an endpoint fault cost a task."""
        out: dict[str, Any] = {"tasks": self.rows}
        if self.faults:
            out["faults"] = self.faults
        if self.judged:
            graded = self.graded
            out.update(ungraded=len(self.rows) - len(graded),
                       mean_reward=sum(graded) / len(graded) if graded else None)
        return out


def shows_lessons(store: LessonStore, policy: Policy, tasks: Sequence[Task], lesson_tokens: int,
                  exclude: Collection[str] = ()) -> bool:
    """Whether any task's prompt would show a lesson (else a with-lessons evaluation equals the no-lessons one).

    Args:
        store: the lesson library.
        policy: the solver (its tokenizer cuts the lessons budget).
        tasks: the held-out tasks.
        lesson_tokens: the lessons budget, tokens.
        exclude: lesson ids kept out of the prompt.
    """
    return any([retrieve_for_task(store, t, lesson_tokens, policy.count_tokens, exclude)[1] for t in tasks])


def evaluate_heldout(
    store: LessonStore,
    solver: Policy,
    tasks: Sequence[Task],
    with_lessons: bool,
    lesson_tokens: int,
    max_tokens: int,
    reward: RewardStrategy | None = None,
    session_id: int = 0,
    exclude: Collection[str] = (),
) -> EvalResult:
    """Greedy pass@1 on held-out tasks, with or without each task's retrieved lessons.

    Each task's prompt is the solver's (:func:`agents.roles.solver.solver_messages`) with the
    lessons :func:`arena.episode.graph.retrieve_for_task` picks; completions are greedy
    (temperature 0) and batched (:func:`agents.policy.sample_many`). With a rubric ``reward``
    each completion is judged against the task's current rubric (RaR, Gunjal et al. 2025);
    otherwise the extracted answer is scored by the task's verifier.

    Args:
        store: the lesson library.
        solver: the policy evaluated.
        tasks: the held-out tasks.
        with_lessons: put the retrieved lessons in the prompt.
        lesson_tokens: the lessons budget, tokens.
        max_tokens: completion cap, tokens.
        reward: the session's reward strategy; only a :class:`~arena.episode.rewards.RubricReward`
            changes anything (judged rewards, possibly ungraded).
        session_id: the session the rubric verdicts are recorded under.
        exclude: lesson ids kept out of the prompt (those distilled into the solver's adapter).

    Returns:
        The :class:`EvalResult`: one reward (None: the judge could not grade it) and one record
        (task key, extracted answer, reward, lesson ids in context) per task, input order.
    """
    chats, shown = [], []
    for t in tasks:
        section, ids = retrieve_for_task(store, t, lesson_tokens, solver.count_tokens, exclude) if with_lessons else ("", [])
        chats.append(solver_messages(t.question, section))
        shown.append([i for i, _ in ids])
    outs = _sample_each(solver, chats, max_tokens)
    judged = isinstance(reward, RubricReward)
    rewards, rows = [], []
    for t, c, ids in zip(tasks, outs, shown):
        fault: EndpointFault | None = c if isinstance(c, EndpointFault) else None
        ans, r, crash = None, None, None
        if fault is None and judged:
            try:
                g = reward.grade(t, [c], session_id)[0]
                ans, r = g["extracted_answer"], g["reward"]
            except EndpointFault as e:  # the judge's endpoint: this task is ungraded
                fault = e
        elif fault is None:
            ans = extract_answer(c.text)
            try:
                r = score(t, ans)
            except VerifierError as e:  # ungraded with the reason, not a fail
                crash = str(e)
        rewards.append(r)
        row: dict[str, Any] = {"task_key": t.task_key, "extracted_answer": ans, "reward": r, "lessons": ids}
        if fault is not None:
            row.update(fault=fault.kind, error=redact_credentials(str(fault)))  # stored: no endpoint password
        elif crash is not None:
            row.update(fault="verifier", error=crash)
        elif c.fault:
            row["fault"] = c.fault  # "oversized": cut to the bound, still graded
        rows.append(row)
    return EvalResult(rewards, [list(ids) for ids in shown], rows, judged)


def _sample_each(solver: Policy, chats: list[list[dict[str, str]]], max_tokens: int) -> list[Completion | EndpointFault]:
    """One greedy completion per chat (batched where the solver can); a chat whose reply stayed faulty gets its fault.

    A batch that fails is sampled again one chat at a time (a solver that does not declare
    :attr:`agents.capabilities.Capability.SAMPLE_BATCH` is sampled one chat at a time from the start), so an endpoint fault costs one held-out task
    (ungraded, reward None), not the evaluation.
    """
    if batch_sampler(solver) is not None:
        try:
            return list(sample_many(solver, chats, temperature=0.0, max_tokens=max_tokens))
        except EndpointFault:
            pass
    outs: list[Completion | EndpointFault] = []
    for chat in chats:
        try:
            outs.append(solver.sample(chat, n=1, temperature=0.0, max_tokens=max_tokens)[0])
        except EndpointFault as e:
            outs.append(e)
    return outs


def paired(a: EvalResult | None, b: EvalResult | None) -> dict[str, Any] | None:
    """:func:`arena.stats.paired_comparison` of two evaluations on the same tasks (None when either is missing).

    Returns:
        The paired difference of pass@1 (Newcombe CI, McNemar p), or None when either is None,
        their lengths differ, they are empty, or their records name different tasks.
    """
    if a is None or b is None or len(a.rewards) != len(b.rewards) or not a.rewards:
        return None
    if a.rows and b.rows and [r.get("task_key") for r in a.rows] != [r.get("task_key") for r in b.rows]:
        return None  # not the same tasks in the same order: no pairing
    return paired_comparison(a.passes, b.passes)
