"""Reward strategies the episode graph's grade nodes call: the verifier, or a rubric judged by a model.

``--reward`` picks one strategy for the session:

- ``verifier`` (:class:`VerifierReward`): the task's verifier, exactly as before
  (:func:`agents.roles.critic.grade_group`; an optional critic model adds critiques).
- ``rubric-explicit`` / ``rubric-implicit`` (:class:`RubricReward`): the judge (the ``--critic``
  model) grades each rollout against the task's current rubric version — per-criterion verdicts
  aggregated by RaR's explicit formula, or one holistic 1–10 rating (Rubrics as Rewards,
  arXiv 2507.17746). A rollout whose judge reply stays unusable after the retry is *ungraded*:
  its reward is None, never a silent 0. Tasks that also have a verifier get the verifier's
  reward stored beside the judge's, for calibration (:mod:`arena.episode.calibration`).

Every rubric grade is checked for reward hacking (:func:`detect_hacks`): a high reward that the
verifier or the judge's own critique contradicts, an answer without work where work is
required, or a response that repeats the rubric's wording. Flagged rollouts are kept out of
reflection and (through :func:`lessons.library.rubrics.eligible_for_training`) out of distillation.

A grade is a JSON-friendly :class:`arena.episode.state.GradeEntry` (it lives in the checkpointed
graph state): ``reward`` (float in [0, 1] or None), ``extracted_answer``, ``critique``, and for
rubric grades ``graded``, ``reward_kind``, ``rubric_id``, ``verdicts`` ([{"criterion_id", "met",
"reason"}]), ``failed_criteria`` (titles), ``judge_rating``, ``verifier_reward``, ``hack_flags`` and
``feedback`` (what the solver may be shown: the reward and the verifier's note, not the judge's critique).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from agents.policy import Completion, Policy
from agents.roles.critic import NOTE_CUT_OFF, grade_group
from agents.roles.rubric import failed_criteria, judge_explicit, judge_implicit
from arena.episode.state import GradeEntry
from arena.tasks.extract import extract_answer
from arena.tasks.model import Task, VerifierError
from arena.tasks.verify import has_verifier, judge_reference, score, verifier_feedback
from lessons.criteria import Criterion, criterion_body

REWARD_KINDS = ("verifier", "rubric-explicit", "rubric-implicit")
HACK_FLAGS = ("verifier_disagrees", "critique_disagrees", "answer_without_work", "rubric_echo")


class RewardStrategy(Protocol):
    """Grades one group of rollouts of one task; the graph's ``grade`` and ``grade_guided`` call it."""

    kind: str  # one of REWARD_KINDS

    def grade(self, task: Task, completions: Sequence[Completion], session_id: int, seed: int | None = None) -> list[GradeEntry]:
        """One grade per completion, in order (see the module docstring for the keys)."""
        ...


class VerifierReward:
    """The verifier's reward, with an optional critic model's critique of failed rollouts (unchanged behaviour)."""

    kind = "verifier"

    def __init__(self, critic: Policy | None = None) -> None:
        self.critic = critic

    def grade(self, task: Task, completions: Sequence[Completion], session_id: int, seed: int | None = None) -> list[GradeEntry]:
        """One grade per completion; an answer the verifier crashes on is ungraded (fault ``verifier``), not 0."""
        crashed: dict[str | None, str] = {}  # extracted answer -> the verifier's error

        def verify(answer: str | None) -> float:
            try:
                return score(task, answer)
            except VerifierError as e:
                crashed[answer] = str(e)
                return 0.0  # replaced below by an ungraded entry

        def feedback(answer: str | None) -> str:
            try:
                return verifier_feedback(task, answer)
            except VerifierError as e:
                crashed[answer] = str(e)
                return f"ungraded: {e}"

        grades = grade_group(
            completions,
            extract=extract_answer,
            verify=verify,
            feedback=feedback,
            question=task.question,
            critic=self.critic,
            reference_answer=task.answer,
        )
        return [verifier_crash_grade(g.extracted_answer, crashed[g.extracted_answer]) if g.extracted_answer in crashed
                else {"reward": g.reward, "extracted_answer": g.extracted_answer, "critique": g.critique} for g in grades]


def verifier_crash_grade(answer: str | None, error: str) -> GradeEntry:
    """The grade of a rollout whose answer crashed the verifier: ungraded (reward None) with the reason."""
    return {"reward": None, "extracted_answer": answer, "critique": f"ungraded: {error}"[:300], "graded": False,
            "fault": "verifier"}


# =======================================================================================
# reward-hack flags


@dataclass(frozen=True)
class HackConfig:
    """Thresholds of :func:`detect_hacks`."""

    high_reward: float = 0.7  # only rollouts with a reward at least this are checked (a hack must pay)
    verifier_fail_below: float = 0.5  # the verifier disagrees when its reward is below this
    min_work_words: int = 12  # fewer words of working (outside <answer> tags) is "answer without work"
    echo_words: int = 6  # a run of this many consecutive words of a criterion in the response is an echo


_NEGATIVE = re.compile(
    r"\b(incorrect|wrong|inaccurate|irrelevant|off[- ]topic|nonsense|fails?|failed|does not (?:answer|address)|"
    r"doesn't (?:answer|address)|missing|misses|no explanation|not correct|unrelated)\b",
    re.I,
)
_ANSWER_TAG = re.compile(r"<answer>.*?(</answer>|$)", re.I | re.S)


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower())


def _echoes(response: str, criteria: Sequence[Criterion], n: int) -> bool:
    """Whether ``response`` contains n consecutive words of a criterion's description (category prefix removed)."""
    words = _words(response)
    grams = {tuple(words[i : i + n]) for i in range(len(words) - n + 1)}
    if not grams:
        return False
    for c in criteria:
        body = _words(criterion_body(c.description))
        if any(tuple(body[i : i + n]) in grams for i in range(len(body) - n + 1)):
            return True
    return False


def detect_hacks(
    response: str,
    reward: float | None,
    criteria: Sequence[Criterion],
    *,
    met: Sequence[bool] | None = None,
    critique: str = "",
    verifier_reward: float | None = None,
    requires_work: bool = False,
    cfg: HackConfig = HackConfig(),
) -> list[str]:
    """Reward-hack flags of one rubric-graded rollout (empty when none or when the reward is low).

    Checked only when ``reward >= cfg.high_reward``, after the reward-model robustness
    literature (arXiv 2311.14743: a reward the grader gives but other evidence denies):

    - ``verifier_disagrees``: the task's verifier scores it below ``cfg.verifier_fail_below``;
    - ``critique_disagrees``: explicit — an Essential criterion is not met; implicit — the
      judge's critique calls the response wrong / irrelevant / missing;
    - ``answer_without_work``: the task requires work and fewer than ``cfg.min_work_words``
      words stand outside the ``<answer>`` tag;
    - ``rubric_echo``: ``cfg.echo_words`` consecutive words of a criterion's description appear
      in the response (the solver never sees the rubric; repeating it games a lenient judge).

    Args:
        response: the completion text.
        reward: the rubric reward in [0, 1], or None (ungraded: never flagged).
        criteria: the rubric the rollout was graded against.
        met: explicit verdicts in rubric order (None for implicit grading).
        critique: the judge's critique (implicit grading).
        verifier_reward: the verifier's reward where the task has one.
        requires_work: the task's ``requires_work`` field.
        cfg: thresholds.

    Returns:
        Flags in :data:`HACK_FLAGS` order.
    """
    if reward is None or reward < cfg.high_reward:
        return []
    flags = []
    if verifier_reward is not None and verifier_reward < cfg.verifier_fail_below:
        flags.append("verifier_disagrees")
    if met is not None:
        if any(c.category == "essential" and not m for c, m in zip(criteria, met)):
            flags.append("critique_disagrees")
    elif critique and _NEGATIVE.search(critique):
        flags.append("critique_disagrees")
    if requires_work and len(_words(_ANSWER_TAG.sub(" ", response))) < cfg.min_work_words:
        flags.append("answer_without_work")
    if _echoes(response, criteria, cfg.echo_words):
        flags.append("rubric_echo")
    return flags


# =======================================================================================
# rubric rewards


@dataclass(frozen=True)
class RubricView:
    """The rubric version a group is graded against: its stored id and criteria (with their ids)."""

    rubric_id: int | None  # rubrics.id; None for a rubric that is not stored (tests, evaluation without a store)
    criteria: tuple[Criterion, ...]
    criterion_ids: tuple[int | None, ...]  # rubric_criteria.id per criterion


def task_rubric(task: Task) -> RubricView | None:
    """The rubric a task was loaded with (version 1), unstored; None for tasks without one."""
    items = task.metadata.get("rubric")
    if not items:
        return None
    criteria = tuple(Criterion.model_validate(c) for c in items)
    return RubricView(None, criteria, (None,) * len(criteria))


class RubricReward:
    """RaR rewards from a judge model: ``explicit`` (per-criterion verdicts) or ``implicit`` (one 1–10 rating).

    Args:
        mode: ``"explicit"`` or ``"implicit"``.
        judge: the judge's policy (local or OpenAI-compatible).
        rubric_for: ``(session_id, task) -> RubricView`` — the current rubric version (online
            rubrics add versions during a session); default :func:`task_rubric`.
        hack: reward-hack thresholds.
        max_tokens: judge reply cap, tokens.
        retries: extra judge attempts after a malformed reply.
    """

    def __init__(
        self,
        mode: str,
        judge: Policy,
        rubric_for: Callable[[int, Task], RubricView | None] | None = None,
        hack: HackConfig = HackConfig(),
        max_tokens: int = 256,
        retries: int = 1,
    ) -> None:
        if mode not in ("explicit", "implicit"):
            raise ValueError(f"rubric mode must be 'explicit' or 'implicit', not {mode!r}")
        self.mode = mode
        self.kind = f"rubric-{mode}"
        self.judge = judge
        self.rubric_for = rubric_for or (lambda _sid, task: task_rubric(task))
        self.hack = hack
        self.max_tokens = max_tokens
        self.retries = retries

    def grade_one(self, task: Task, rubric: RubricView, text: str, finish_reason: str = "stop", seed: int | None = None) -> GradeEntry:
        """Judge one completion against ``rubric``; its grade (see the module docstring)."""
        judge = judge_explicit if self.mode == "explicit" else judge_implicit
        res = judge(self.judge, task.question, text, rubric.criteria, reference=judge_reference(task),
                    max_tokens=self.max_tokens, seed=seed, retries=self.retries)
        answer = extract_answer(text)
        try:
            verifier_reward = score(task, answer) if has_verifier(task) else None
            verifier_note = f"verifier: {verifier_feedback(task, answer)}" if verifier_reward is not None else ""
        except VerifierError as e:  # the judge's grade stands; the hack check loses its verifier signal
            verifier_reward, verifier_note = None, f"verifier: {e}"
        format_notes = [NOTE_CUT_OFF] if finish_reason == "length" else []
        notes = [res.critique, verifier_note, *format_notes]
        # what a feedback hint may show the solver: the reward and the verifier's note, never the judge's
        # critique (it names rubric criteria, and the rubric and the reference are the judge's only)
        score_note = f"judged reward {res.reward:.2f}" if res.reward is not None else "not graded by the judge"
        feedback = [score_note, verifier_note, *format_notes]
        flags = detect_hacks(
            text, res.reward, rubric.criteria, met=res.met, critique=res.critique,
            verifier_reward=verifier_reward, requires_work=bool(task.metadata.get("requires_work")), cfg=self.hack,
        )
        verdicts = None
        if res.met is not None:
            verdicts = [
                {"criterion_id": cid, "met": m, "reason": r}
                for cid, m, r in zip(rubric.criterion_ids, res.met, res.reasons or [""] * len(res.met))
            ]
        return {
            "reward": res.reward,
            "extracted_answer": answer,
            "critique": " ".join("; ".join(n for n in notes if n).split())[:400],
            "feedback": " ".join("; ".join(n for n in feedback if n).split())[:400],
            "graded": res.graded,
            "reward_kind": self.kind,
            "rubric_id": rubric.rubric_id,
            "verdicts": verdicts,
            "failed_criteria": failed_criteria(rubric.criteria, res.met) if res.met is not None else None,
            "judge_rating": res.rating,
            "verifier_reward": verifier_reward,
            "hack_flags": flags,
            "judge_error": res.error,
        }

    def grade(self, task: Task, completions: Sequence[Completion], session_id: int, seed: int | None = None) -> list[GradeEntry]:
        """Judge each completion of the group (one judge call each, plus a retry where needed)."""
        rubric = self.rubric_for(session_id, task)
        if rubric is None:
            raise ValueError(f"task {task.task_key} has no rubric; --reward {self.kind} needs rubric tasks")
        return [
            self.grade_one(task, rubric, c.text, c.finish_reason, None if seed is None else seed + 101 * i)
            for i, c in enumerate(completions)
        ]


# =======================================================================================
# session wiring


def check_reward_tasks(reward: str, tasks: Sequence[Task]) -> None:
    """Refuse tasks the reward cannot grade, before any work.

    Raises:
        arena.config.ConfigError: a rubric reward with a task that has no rubric, or the verifier
            with a rubric task that has no verifiable ``answer``.
    """
    from arena.config import ConfigError

    for t in tasks:
        if reward != "verifier" and not t.metadata.get("rubric"):
            raise ConfigError(
                f"task {t.task_key} has no rubric; --reward {reward} needs rubric tasks "
                "(a --tasks-file whose lines have a \"rubric\", or no --family/--tasks-file for the shipped set)"
            )
        if reward == "verifier" and not has_verifier(t):
            raise ConfigError(
                f"task {t.task_key} has a rubric but no verifiable \"answer\"; grade it with --reward rubric-explicit "
                "(or rubric-implicit) and a judge (--critic local)"
            )


def make_reward(cfg: Any, critic: Policy | None, rubric_store: Any = None, session_id: int | None = None,
                tasks: Sequence[Task] = ()) -> RewardStrategy:
    """The session's reward strategy from its config (``cfg.reward``, ``cfg.judge_max_tokens``).

    With a rubric reward and a ``rubric_store``, version 1 of every task's rubric is stored for
    ``session_id`` (idempotent on resume) and the strategy grades against each task's newest
    stored version, so online rubric updates take effect in the next episode.

    Args:
        cfg: the :class:`arena.config.SessionConfig`.
        critic: the critic / judge policy (None only for the verifier).
        rubric_store: a :class:`lessons.library.rubrics.RubricStore`, or None (the task file's rubric is used).
        session_id: the session whose rubric versions are used.
        tasks: the session's tasks.

    Raises:
        arena.config.ConfigError: the tasks do not fit the reward (:func:`check_reward_tasks`).
        ValueError: a rubric reward without a judge.
    """
    check_reward_tasks(cfg.reward, tasks)
    if cfg.reward == "verifier":
        return VerifierReward(critic)
    if critic is None:
        raise ValueError(f"--reward {cfg.reward} needs a judge; pass --critic local or --critic openai:MODEL")
    rubric_for = None
    if rubric_store is not None and session_id is not None:
        rubric_store.ensure_task_rubrics(session_id, {t.task_key: t.metadata["rubric"] for t in tasks})

        def rubric_for(sid: int, task: Task) -> RubricView | None:
            info = rubric_store.current_rubric(sid, task.task_key)
            if info is None:
                return task_rubric(task)
            crit = tuple(Criterion.model_validate(c.as_dict()) for c in info.criteria)
            return RubricView(info.id, crit, tuple(c.id for c in info.criteria))

    return RubricReward(cfg.reward.removeprefix("rubric-"), critic, rubric_for, max_tokens=cfg.judge_max_tokens)
