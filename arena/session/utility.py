"""Measured lesson utility: an A/B of each lesson on tasks of its family, with vs without it.

Votes say what the teacher thinks of a lesson; this says what it does. Every
``--utility-every N`` episodes the session picks up to ``--utility-lessons`` live lessons
(never measured first, then the most used) and, for each, runs the solver on up to
``--utility-tasks`` tasks of its family under two contexts that differ only in that lesson:
the task's retrieved *active* lessons with the lesson first, and the same without it. With
``--utility-samples 1`` (the default) each arm is one greedy completion per task, the quantity
held-out pass@1 measures; with more, each arm samples that many times at ``--temperature`` on
the same seeds (common random numbers), so outcomes pair up. Both arms are decoded in one batch
each where the solver batches (:func:`agents.policy.sample_many`), which is what makes ~100
pairs per lesson affordable on a CPU; the lessons of one check share its tasks, and an arm whose
prompts were decoded earlier in the check (the next lesson's baseline) is not decoded again.

The tasks are the session's train tasks of the family, topped up with *validation* tasks
(:func:`validation_tasks`): more draws from the family's train generator, disjoint from the
held-out split by task identity and never trained on, so that an A/B can resolve effects of
about ±0.1 (a paired interval over 16 pairs is ±0.2 wide, wider than any lesson's effect on the
135M solver measured so far). The effect on pass@1 and its 95% interval are Newcombe's
paired-difference interval (:func:`arena.stats.paired_difference_interval`, n = tasks ×
samples; samples of one task are treated as independent pairs, so the interval is somewhat
optimistic when tasks differ a lot). The result is stored (``lesson_utility``), feeds the
retrieval prior, and moves the lesson along its life cycle (:mod:`lessons.library.curation`):
promoted when the interval is above 0, retired when it is below. Held-out tasks are never used:
the A/B selects lessons, and selecting on the held-out split would bias its before/after.

Outcomes are the verifier's pass / fail. Rubric-only tasks (a rubric and no verifiable answer)
are left out of the A/B: judging both arms would cost a judge call per completion — 2 × 96 per
lesson by default, each as long as an episode's grading — which is more than the rest of a
session on the embedded models; a lesson whose family has no verifiable task is not measured,
and :func:`utility_skip_reason` says so in the session summary (its votes still move it). Tasks
with both a rubric and an answer are measured with the verifier.

The cadence is derived from the database, not from a counter in memory: a check is due when the
number of stored episodes reaches a multiple of ``--utility-every``, and the first check of a
process also catches up on the latest such mark that has no stored result — the check that was
due when a killed run stopped (:func:`maybe_check_utility`).

The baseline arm holds the active lessons only, never other candidates: the A/B asks whether
adding this lesson to the set that held-out evaluation shows (active lessons only) helps — forward
selection, not leave-one-out among untrusted lessons. Measured against other candidates, lessons
that say the same thing cancel: with four format lessons in the library each one's marginal effect
is about 0 though any one of them alone helps (bench/RESULTS.md, issue 31), so none would ever be
promoted. Against the active set, the first of them is measured against no lesson and the rest
against it, which keeps a redundant one out.

This is the lesson-level ablation ExpeL and ACE leave to votes; Karpathy's "system prompt
learning" asks for exactly this check before a lesson is trusted.
"""

from __future__ import annotations

import json
import logging
import random
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

from agents.policy import EndpointFault, Policy, batch_sampler, sample_many
from agents.roles.solver import LessonView, render_lessons, solver_messages
from arena.stats import paired_difference_interval
from arena.tasks.extract import extract_answer
from arena.tasks.gym import make_slot_tasks, parse_family_spec
from arena.tasks.model import Task, TaskError, VerifierError
from arena.tasks.seeds import SEED_BLOCK, max_draws
from arena.tasks.verify import has_verifier, score
from lessons.library.curation import Provenance
from lessons.library.retrieval import rank_lessons
from lessons.library.store import LessonInfo, LessonStore
from lessons.ops import GLOBAL_SCOPE, normalise_scope
from lessons.outcomes import passes

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class UtilitySettings:
    """How each A/B is run (a slice of the session config)."""

    every: int = 0  # run after every N episodes of the session; 0 disables
    lessons: int = 4  # lessons measured per check
    tasks: int = 96  # tasks per lesson (train tasks of its family, topped up with validation tasks)
    samples: int = 1  # completions per task and arm: 1 greedy; more: sampled at ``temperature`` on common seeds
    lesson_tokens: int = 512  # the solver's lessons budget (as in episodes)
    temperature: float = 0.8
    max_tokens: int = 96


@dataclass(frozen=True)
class UtilityResult:
    """One lesson's A/B."""

    lesson_id: str
    n: int  # paired samples
    pass_with: float
    pass_without: float
    effect: float  # pass_with − pass_without
    ci: tuple[float, float]  # 95%, Newcombe paired
    task_keys: list[str]


def measure_lesson(
    store: LessonStore,
    solver: Policy,
    lesson: LessonInfo,
    tasks: Sequence[Task],
    settings: UtilitySettings,
    seed: int,
    arm_cache: dict[str, list[bool]] | None = None,
) -> UtilityResult:
    """Run the A/B of one lesson on ``tasks`` (see the module docstring).

    Args:
        store: the library (for each task's other retrieved active lessons: candidates are in neither arm).
        solver: the solver policy.
        lesson: the lesson under test.
        tasks: tasks of the lesson's family (any family for a global lesson), ≥ 1: train or validation
            tasks, never held-out ones.
        settings: samples per task (1: greedy), temperature, token budgets.
        seed: base seed; both arms use the same streams (batched: row j of each arm's batch uses
            ``row_seed(seed, j)``; otherwise task i uses ``seed + i``).
        arm_cache: outcomes of arms decoded before in this check, keyed by :func:`arm_key`; an arm
            found there is not decoded again (the baseline arm of the next lesson on the same tasks
            and seed while the active set is unchanged), and each arm decoded here is added. None: no cache.

    Returns:
        The :class:`UtilityResult`.

    Raises:
        ValueError: no tasks.
    """
    if not tasks:
        raise ValueError("a utility A/B needs at least one task")
    target = LessonView(lesson.lesson_id, lesson.text)
    arms: tuple[list[list[dict[str, str]]], list[list[dict[str, str]]]] = ([], [])
    for task in tasks:
        others = [
            LessonView(r.lesson.lesson_id, r.lesson.text)
            for r in rank_lessons(store, task.family, task.question, exclude={lesson.lesson_id}, active_only=True)
        ]
        section_with, _ = render_lessons([target, *others], settings.lesson_tokens, solver.count_tokens)
        section_without, _ = render_lessons(others, settings.lesson_tokens, solver.count_tokens)
        arms[0].append(solver_messages(task.question, section_with))
        arms[1].append(solver_messages(task.question, section_without))
    with_pass, without_pass = (_decode_arm(solver, tasks, chats, settings, seed, arm_cache) for chats in arms)
    effect, lo, hi = paired_difference_interval(with_pass, without_pass)
    n = len(with_pass)
    return UtilityResult(
        lesson_id=lesson.lesson_id,
        n=n,
        pass_with=sum(with_pass) / n,
        pass_without=sum(without_pass) / n,
        effect=effect,
        ci=(lo, hi),
        task_keys=[t.task_key for t in tasks],
    )


def arm_key(tasks: Sequence[Task], chats: Sequence[Sequence[dict[str, str]]], settings: UtilitySettings, seed: int) -> str:
    """What makes an arm's outcomes: its tasks and chats in order, the decoding settings and the seed (a JSON string)."""
    return json.dumps([[t.task_key for t in tasks], list(chats), settings.samples, settings.temperature,
                       settings.max_tokens, seed], sort_keys=True)


def _decode_arm(
    solver: Policy, tasks: Sequence[Task], chats: Sequence[list[dict[str, str]]], settings: UtilitySettings, seed: int,
    cache: dict[str, list[bool]] | None,
) -> list[bool]:
    """One arm of an A/B: pass / fail of each completion, task by task (``settings.samples`` per task)."""
    key = arm_key(tasks, chats, settings, seed) if cache is not None else ""
    if cache is not None and key in cache:
        return list(cache[key])
    temperature = 0.0 if settings.samples == 1 else settings.temperature
    outcomes: list[bool] = []
    if batch_sampler(solver) is not None:
        # one batch per arm; row j uses the random stream row_seed(seed, j) in both arms (common random numbers)
        expanded = [chat for chat in chats for _ in range(settings.samples)]
        per_row = [task for task in tasks for _ in range(settings.samples)]
        outs = sample_many(solver, expanded, temperature=temperature, max_tokens=settings.max_tokens, seed=seed)
        outcomes += [_passes(task, o.text) for task, o in zip(per_row, outs)]
    else:  # one call per task, task i on seed + i in both arms
        for i, task in enumerate(tasks):
            outs = solver.sample(chats[i], n=settings.samples, temperature=temperature,
                                 max_tokens=settings.max_tokens, seed=seed + i)
            outcomes += [_passes(task, o.text) for o in outs]
    if cache is not None:
        cache[key] = list(outcomes)
    return outcomes


VALIDATION_TAG = "ab-"  # task keys of validation tasks: "chain_sum/train/ab-00000"


def validation_tasks(families: Sequence[str], n_per_family: int, seed: int, exclude: Collection[str]) -> list[Task]:
    """More tasks from each reasoning-gym family's train generator, for utility A/Bs only (never trained on).

    Each family spec draws ``n_per_family`` tasks from the last slot of its train seed block
    that holds them (:func:`arena.tasks.gym.make_slot_tasks`; the curriculum's rungs use the
    first slots), keyed ``{family}/train/ab-00000``. None has the task identity
    (:func:`arena.tasks.identity.task_identity`) of a task in ``exclude`` — the session's train
    and held-out tasks — so a validation task is never a held-out task in any spelling, and the
    draw is the same on every resume. A family whose generator cannot yield enough distinct
    questions contributes none (logged); JSONL task files have no generator and contribute none.

    Args:
        families: the session's family specs (``--family``), e.g. ``["chain_sum:min_terms=2"]``.
        n_per_family: tasks per spec; ≤ 0: none.
        seed: the session seed.
        exclude: task identities the draws must avoid.

    Returns:
        The validation tasks, family by family in the order given.
    """
    if n_per_family <= 0 or not families:
        return []
    seen = set(exclude)
    slot = SEED_BLOCK // max_draws(n_per_family) - 1
    occurrences: dict[str, int] = {}
    out: list[Task] = []
    for text in families:
        spec = parse_family_spec(text)
        occurrence = occurrences.get(spec.name, 0)
        occurrences[spec.name] = occurrence + 1
        try:
            out += make_slot_tasks(spec, "train", n_per_family, seed, occurrence=occurrence, slot=slot,
                                   tag=VALIDATION_TAG, exclude=seen)
        except TaskError as e:
            log.warning("no validation tasks for the utility A/B of %s: %s", text, e)
    return out


def choose_lessons(store: LessonStore, families: Sequence[str], limit: int) -> list[LessonInfo]:
    """Live lessons of these families (and global ones) to measure: never measured first, then most used."""
    pool = {les.lesson_id: les for fam in families for les in store.live_lessons(fam)}
    ranked = sorted(pool.values(), key=lambda les: (les.utility_n > 0, -les.times_in_context, les.lesson_id))
    return ranked[:limit]


def run_utility_check(
    store: LessonStore,
    solver: Policy,
    session_id: int,
    train_tasks: Sequence[Task],
    after_episodes: int,
    settings: UtilitySettings,
    seed: int,
) -> list[UtilityResult]:
    """One periodic check: measure up to ``settings.lessons`` lessons and store each result.

    Tasks for a lesson are drawn (seeded by ``seed`` and ``after_episodes``) from ``train_tasks``
    (the round's train tasks and the session's :func:`validation_tasks`) of its family, or from all
    of them for a global lesson, those with a verifier only (rubric-only tasks would need the
    judge: see the module docstring); a lesson with no such task is skipped. The lessons of one
    scope share the check's draw (tasks and seed), so while no lesson is promoted between them
    their baseline arms are the same prompts and are decoded once (``arm_cache`` of
    :func:`measure_lesson`): with two lessons per check that is a quarter of the check's decoding. Each result is stored with :meth:`lessons.library.curation.Curator.record_utility`
    in its own transaction, so an interruption loses at most the lesson in progress.

    Returns:
        The results, in the order measured.
    """
    rng = random.Random(f"{seed}:{after_episodes}")
    families = sorted({t.family for t in train_tasks})
    results = []
    draws: dict[str, tuple[list[Task], int]] = {}  # scope -> this check's tasks and seed for the lessons of that scope
    arm_cache: dict[str, list[bool]] = {}
    for les in choose_lessons(store, families, settings.lessons):
        if les.scope not in draws:
            pool = [t for t in train_tasks if les.scope in (GLOBAL_SCOPE, normalise_scope(t.family)) and has_verifier(t)]
            draws[les.scope] = (rng.sample(pool, min(settings.tasks, len(pool))), rng.randrange(2**31))
        tasks, arm_seed = draws[les.scope]
        if not tasks:
            continue
        try:
            res = measure_lesson(store, solver, les, tasks, settings, seed=arm_seed, arm_cache=arm_cache)
        except EndpointFault:  # the solver's endpoint failed: this lesson stays unmeasured, the session goes on
            continue
        with store.curate() as c:
            c.record_utility(
                les.lesson_id,
                n=res.n,
                pass_with=res.pass_with,
                pass_without=res.pass_without,
                ci=res.ci,
                task_keys=res.task_keys,
                session_id=session_id,
                after_episodes=after_episodes,
                prov=Provenance(origin={"by": "utility", "after_episodes": after_episodes}),
            )
        results.append(res)
    return results


def maybe_check_utility(
    store: LessonStore,
    solver: Policy,
    session_id: int,
    train_tasks: Sequence[Task],
    settings: UtilitySettings,
    seed: int,
    catch_up: bool = False,
) -> list[UtilityResult]:
    """Run :func:`run_utility_check` when one is due by the stored episode count.

    Called after each episode. Due: the session's stored episodes number a multiple of
    ``settings.every``; with ``catch_up`` (the first call of a process, so a resume) also the
    latest multiple below the count — a check that was due when a killed run stopped. A check
    already stored for its count is not run again; one that stored nothing (no lesson to
    measure) may run once more on a resume.

    Args:
        store, solver, session_id, train_tasks, settings, seed: as for :func:`run_utility_check`.
        catch_up: also run the latest missed check (see above).

    Returns:
        The results ([] when no check ran).
    """
    if settings.every <= 0:
        return []
    done = len(store.finished_episode_keys(session_id))
    due = done - done % settings.every if catch_up else done
    if due == 0 or due % settings.every or due in store.utility_checks(session_id):
        return []
    return run_utility_check(store, solver, session_id, train_tasks, due, settings, seed)


def utility_skip_reason(tasks: Sequence[Any], every: int) -> str | None:
    """Why utility A/Bs leave some of a session's families unmeasured, for the summary; None when none is.

    Args:
        tasks: the session's train tasks (:class:`Task` or the stored :class:`lessons.library.records.TaskInfo`:
            anything with ``family`` and ``metadata``).
        every: ``--utility-every`` (0: the A/B is off, nothing to explain).
    """
    rubric_only = sorted({t.family for t in tasks if not has_verifier(t)} - {t.family for t in tasks if has_verifier(t)})
    if every <= 0 or not rubric_only:
        return None
    return (f"no utility A/B for the lessons of {', '.join(rubric_only)}: its tasks have a rubric and no verifiable "
            "answer, and judging both arms would cost a judge call per completion (2 × --utility-tasks per lesson); "
            "their lessons move on votes only")


def _passes(task: Task, text: str) -> bool:
    """Whether a utility sample passes; a sample that crashes the verifier counts as not passing (logged)."""
    try:
        return passes(score(task, extract_answer(text)))
    except VerifierError as e:
        log.warning("utility sample of %s not passed: %s", task.task_key, e)
        return False
