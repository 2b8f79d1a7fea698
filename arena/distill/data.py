"""Distillation data: stored rollouts → training examples, and Guide's importance weights.

Two sources, one LoRA adapter ("sleep": the skill that lessons and hints give in context
moves into the weights):

1. **Context distillation** (Snell et al. 2022, "Learning by Distilling Context", arXiv
   2209.15189): unguided rollouts of train tasks that the verifier accepted, sampled with
   the chosen lessons in the system prompt, trained under the same chat *without* the
   lessons. (An episode that had no lessons in context contributes a plain rejection-sampled
   success.)
2. **Guided successes** (Guide, Nath et al. 2025, arXiv 2506.13923): rollouts sampled with a
   hint in context that succeeded, trained under the unguided chat (hint and lessons
   removed), each completion token weighted by the shaped importance ratio
   ``ρ_t / (ρ_t + γ)``, ``ρ_t = exp(log π_θ(y_t | x, y_<t) − log π_old(y_t | x, h, y_<t))``,
   ``γ`` the 0.9-quantile of the batch's ρ over hinted tokens floored at 1e-4, all detached
   (:func:`arena.distill.losses.importance_weights`, as in Guide's public code).

``--objective`` picks the rows of the comparison from the same rollouts:
``distill`` (both, the default), ``sft`` (plain rejection-sampling SFT on unguided successes
under the context they were sampled in: the STaR-like baseline, Zelikman et al. 2022) and
``guided-unweighted`` (both sources, guided tokens with weight 1: the ablation of the
importance weights).

The policy-gradient objectives ``grpo`` and ``guide-grpo`` use every rollout of a group, failures
included: :func:`build_rl_dataset` (groups and advantages), :func:`rescore_old_logprobs` (π_old at
the sampling temperature); their losses are in :mod:`arena.distill.losses`.

The loss is on completion tokens only; every example keeps its provenance (rollout id, task,
lessons in context, hint id), recorded in the adapter's sidecar and database row.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from dataclasses import replace as _replace
from typing import Any, Literal

import torch

from arena.distill.config import MIN_GUIDED_LOG_RATIO
from arena.distill.losses import group_advantages
from arena.objectives import get_objective, objective_names
from lessons.library.adapters import TrainingRollout
from lessons.outcomes import passes

Message = dict[str, str]


class NoTrainingData(ValueError):
    """No rollout qualifies as training data; the message says why and what to do (one line)."""


class BadTrainingData(NoTrainingData):
    """The rollouts cannot give the objective what it needs (log-probs, groups of 2+, finite rewards); one line."""


@dataclass(frozen=True)
class DistillExample:
    """One training example: a context and a completion, loss on the completion only.

    Attributes:
        kind: ``"context"`` (context distillation), ``"guided"`` (guided success) or ``"sft"``.
        rollout_id: the stored rollout (rollouts.id) it comes from.
        task_key: its task.
        messages: the training context (lessons / hint removed as the objective says).
        completion_ids: the sampled completion token ids (T,), without end-of-turn.
        old_logprobs: (T,) π_old(y_t | sampling context) for importance-weighted examples
            (objective ``distill``, guided rollouts); None: every token has weight 1.
        add_eos: the rollout ended its turn (finish reason ``stop``): train the end-of-turn
            token too, with weight 1.
        lessons: readable ids of the lessons that were in the sampling context.
        hint_id: the hint of a guided rollout (hints.id), else None.
        sampling_messages: importance-weighted examples: the chat that sampled the completion
            (with the hint), where π_old is rescored at the sampling temperature; else None.
        adapter_id: the adapter that sampled it (None: the base model).
    """

    kind: str
    rollout_id: int
    task_key: str
    messages: list[Message]
    completion_ids: list[int]
    old_logprobs: list[float] | None
    add_eos: bool
    lessons: tuple[str, ...] = ()
    hint_id: int | None = None
    sampling_messages: list[Message] | None = None
    adapter_id: str | None = None

    @property
    def weighted(self) -> bool:
        return self.old_logprobs is not None


@dataclass
class DistillDataset:
    """Examples plus what was left out and why (the provenance recorded with the adapter)."""

    objective: str
    examples: list[Any]  # DistillExample; RLExample (policy-gradient objectives); OPCDExample (opcd)
    skipped: Counter = field(default_factory=Counter)  # reason -> rollouts left out
    rollouts_seen: int = 0
    groups: int = 0  # RL objectives: groups with a non-zero advantage (unguided and guided)

    @property
    def kinds(self) -> tuple[str, ...]:
        return get_objective(self.objective).kinds

    def provenance(self) -> dict[str, Any]:
        """JSON-safe summary: counts by kind, rollout / lesson / hint ids, skipped rollouts by reason."""
        kinds = Counter(e.kind for e in self.examples)
        extra = {"groups": self.groups} if get_objective(self.objective).policy_gradient else {}
        return {
            "objective": self.objective,
            "rollouts_seen": self.rollouts_seen,
            "examples": len(self.examples),
            **extra,
            "by_kind": {k: kinds.get(k, 0) for k in self.kinds},
            "weighted_examples": sum(e.weighted for e in self.examples),
            "completion_tokens": sum(len(e.completion_ids) for e in self.examples),
            "rollout_ids": [e.rollout_id for e in self.examples],
            "tasks": sorted({e.task_key for e in self.examples}),
            "lessons": sorted({lid for e in self.examples for lid in e.lessons}),
            "hint_ids": sorted({e.hint_id for e in self.examples if e.hint_id is not None}),
            "skipped": dict(sorted(self.skipped.items())),
        }

    def skip_reasons(self) -> str:
        """What was left out, for a one-line message: ``"2 failed, 1 no token ids"``."""
        return ", ".join(f"{n} {why.replace('_', ' ')}" for why, n in sorted(self.skipped.items()))

    def require_rollouts(self, session: str) -> None:
        """Raise :class:`NoTrainingData` when the session had no train rollout at all (every objective's first check)."""
        if self.rollouts_seen == 0:
            raise NoTrainingData(f"session {session!r} has no rollouts of train tasks to distill; run `arena run` first")

    @property
    def lessons_in_context(self) -> list[str]:
        """Lessons whose effect was trained in: those in the sampling context of any example.

        None for the policy-gradient objectives: their examples keep the lessons in the training
        context (π_θ and π_old must see the same chat for PPO's ratio), so no lesson's effect moves
        into the weights and none can become ``distilled``.
        """
        if get_objective(self.objective).policy_gradient:
            return []
        return sorted({lid for e in self.examples for lid in e.lessons})


def build_dataset(
    rollouts: Sequence[TrainingRollout],
    objective: str,
    success_threshold: float,
    strip_lessons: Callable[[list[Message]], list[Message]],
    *,
    sampling_context: bool = False,
    guided: Literal["weighted", "unweighted", "none"] = "weighted",
) -> DistillDataset:
    """Select and shape the training examples of a supervised objective from stored rollouts.

    Args:
        rollouts: a session's train rollouts (:meth:`lessons.library.adapters.AdapterStore.training_rollouts`).
        objective: the registered supervised objective the data is for (its provenance and report).
        success_threshold: a rollout is a success when its reward is at least this.
        strip_lessons: returns the chat without its lessons section (the solver owns the
            prompt format: :func:`agents.roles.solver.strip_lessons_section`).
        sampling_context: unguided successes keep the chat they were sampled in, lessons included
            (kind ``sft``: STaR's rejection sampling); False: the chat without its lessons (kind
            ``context``: context distillation).
        guided: guided successes under their unguided chat, importance-weighted (``weighted``:
            ``distill``) or with weight 1 (``unweighted``: the ablation); ``none``: not used (``sft``).

    Returns:
        The examples in rollout order with skip counts by reason: ``failed`` (reward below
        the threshold), ``no_token_ids`` (the backend gave no ids, e.g. a chat API),
        ``guided_without_context`` / ``guided_without_logprobs`` (a guided rollout lacking
        its unguided chat or log-probs of every token), ``mentions_hint`` (a guided completion
        that talks about its hint or quotes it: :func:`mentions_hint`), ``guided_not_used``
        (``guided="none"``), ``empty`` (no completion tokens). Guided successes that are
        implausible without their hint are screened afterwards, with a model:
        :func:`screen_implausible`.

    Raises:
        ValueError: ``objective`` is not a registered supervised objective, or ``guided`` is unknown.
    """
    if get_objective(objective).family != "supervised":
        raise ValueError(f"objective must be one of {', '.join(objective_names('supervised'))}, not {objective!r}")
    if guided not in ("weighted", "unweighted", "none"):
        raise ValueError(f"guided must be weighted, unweighted or none, not {guided!r}")
    out = DistillDataset(objective=objective, examples=[], rollouts_seen=len(rollouts))
    for r in rollouts:
        if not passes(r.reward, success_threshold):
            out.skipped["failed"] += 1
            continue
        if not r.token_ids:
            out.skipped["no_token_ids" if r.token_ids is None else "empty"] += 1
            continue
        lessons = tuple(r.lessons_in_context)
        if not r.guided:
            if sampling_context:
                msgs, kind = [dict(m) for m in r.messages], "sft"
            else:
                msgs, kind = strip_lessons([dict(m) for m in r.messages]), "context"
            out.examples.append(
                DistillExample(kind, r.rollout_id, r.task_key, msgs, list(r.token_ids), None,
                               r.finish_reason == "stop", lessons, None)
            )
            continue
        if guided == "none":
            out.skipped["guided_not_used"] += 1
            continue
        if not r.unguided_messages:
            out.skipped["guided_without_context"] += 1
            continue
        question = next((m["content"] for m in reversed(r.unguided_messages) if m.get("role") == "user"), "")
        if mentions_hint(r.completion, r.hint_text, question=question):
            out.skipped["mentions_hint"] += 1
            continue
        old: list[float] | None = None
        if guided == "weighted":
            if r.logprobs is None or len(r.logprobs) != len(r.token_ids):
                out.skipped["guided_without_logprobs"] += 1
                continue
            old = list(r.logprobs)
        out.examples.append(
            DistillExample("guided", r.rollout_id, r.task_key, strip_lessons([dict(m) for m in r.unguided_messages]),
                           list(r.token_ids), old, r.finish_reason == "stop", lessons, r.hint_id,
                           [dict(m) for m in r.messages] if old is not None else None, r.adapter_id)
        )
    return out


def require_examples(data: DistillDataset, session: str, threshold: float) -> None:
    """Raise :class:`NoTrainingData` with the reason when ``data`` has no example."""
    if data.examples:
        return
    data.require_rollouts(session)
    reasons = data.skip_reasons()
    raise NoTrainingData(
        f"no eligible training data in session {session!r} for objective {data.objective}: "
        f"{data.rollouts_seen} rollouts, none usable ({reasons}); lower --success-threshold "
        f"(now {threshold}) or run more rounds"
    )


# --------------------------------------------------------------------------- clean self-generated data

# Phrases by which a guided completion refers to its hint instead of solving the task: trained
# under the unguided context they would teach the model to talk about guidance it never sees.
_HINT_TALK = re.compile(
    r"\b(hints?|hinted|the plan|feedback|(?:earlier|previous) attempts?|correct final answer is|the given answer|"
    r"answer (?:is |was )?(?:given|provided)|expected answer|you (?:said|told|gave)|(?:i|we) was told|we were told|"
    r"reference answer)\b",
    re.IGNORECASE,
)
QUOTE_WORDS = 6  # a run of this many consecutive words shared with the hint counts as quoting it


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower())


def _grams(words: list[str], n: int) -> set[tuple[str, ...]]:
    return {tuple(words[i : i + n]) for i in range(len(words) - n + 1)}


def mentions_hint(completion: str, hint: str | None, quote_words: int = QUOTE_WORDS, question: str = "") -> bool:
    """Whether a guided completion talks about its hint or quotes it.

    True when the completion uses a phrase that refers to guidance (``hint``, ``feedback``,
    ``the plan``, ``earlier attempt``, ``the correct final answer is`` …) or shares a run of
    ``quote_words`` consecutive words with ``hint`` that is not also in the task's ``question``
    (a plan may restate the task, and so may an honest solution). Such a completion is not
    plausible as a reply to the unguided context it would be trained under (Guide, arXiv
    2506.13923, trains guided successes as if the hint were absent).

    Args:
        completion: the guided rollout's text.
        hint: the hint that was in its context (None: only the phrase check applies).
        quote_words: n of the shared word n-gram that counts as a quote (≥ 1).
        question: the task's question (its n-grams never count as quotes of the hint).

    Raises:
        ValueError: ``quote_words`` < 1.
    """
    if quote_words < 1:
        raise ValueError(f"quote_words must be >= 1, got {quote_words}")
    if _HINT_TALK.search(completion):
        return True
    if not hint:
        return False
    grams = _grams(_words(hint), quote_words) - _grams(_words(question), quote_words)
    return bool(grams & _grams(_words(completion), quote_words))


def guided_log_ratio(logp_unguided: torch.Tensor, logp_old: Sequence[float]) -> float:
    """Mean per-token log-ratio ``mean_t [log π_θ(y_t | x, y_<t) − log π_old(y_t | x, h, y_<t)]`` (nats).

    The log of Guide's importance ratio averaged over the completion: how much less likely
    the completion is once the hint ``h`` is taken away. Near 0: the hint did not matter;
    very negative: the completion depends on the hint (e.g. copies an answer it could not
    have derived).

    Args:
        logp_unguided: (T,) float, log π_θ of the completion under the unguided context.
        logp_old: T floats, the stored sampling log-probs under the guided context.

    Raises:
        ValueError: lengths differ or T is 0.
    """
    old = torch.as_tensor(list(logp_old), dtype=torch.float32)
    if logp_unguided.shape != old.shape or old.numel() == 0:
        raise ValueError(f"need two equal, non-empty log-prob vectors, got {tuple(logp_unguided.shape)} and {tuple(old.shape)}")
    return float((logp_unguided.float() - old).mean())


def screen_implausible(
    data: DistillDataset,
    rollouts: Sequence[TrainingRollout],
    score: Callable[[list[Message], list[int]], torch.Tensor],
    min_log_ratio: float = MIN_GUIDED_LOG_RATIO,
) -> list[float]:
    """Drop guided examples whose completion is implausible without the hint (in place).

    For every guided example, ``score(unguided_messages, completion_ids)`` gives
    log π_θ(y_t | x, y_<t) under the context it would be trained in (the policy training
    starts from); with the stored π_old(y_t | x, h, y_<t) this is :func:`guided_log_ratio`.
    Examples below ``min_log_ratio`` are removed and counted as ``implausible_without_hint``:
    Guide's importance weight would shrink their tokens anyway, and a success that the
    unguided policy finds e^{|ratio|} times less likely per token than the guided one teaches
    the answer rather than the skill.

    Args:
        data: the dataset from :func:`build_dataset` (modified: examples and ``skipped``).
        rollouts: the rollouts it was built from (for the stored log-probs of every guided one).
        score: teacher-forcing scorer, e.g. :meth:`agents.backends.local.LocalPolicy.token_logprobs`.
        min_log_ratio: threshold in nats per token (``-inf`` keeps all).

    Returns:
        The mean log-ratio of every guided example scored (kept or not), in example order,
        for the data report. Guided rollouts without stored log-probs are kept unscored.
    """
    by_id = {r.rollout_id: r for r in rollouts}
    kept: list[DistillExample] = []
    ratios: list[float] = []
    for ex in data.examples:
        r = by_id.get(ex.rollout_id)
        if ex.kind != "guided" or r is None or r.logprobs is None or len(r.logprobs) != len(ex.completion_ids):
            kept.append(ex)
            continue
        ratio = guided_log_ratio(score(ex.messages, list(ex.completion_ids)), r.logprobs)
        if not math.isfinite(ratio):  # a broken score: neither trusted nor reported
            data.skipped["implausible_without_hint"] += 1
            continue
        ratios.append(ratio)
        if ratio < min_log_ratio:
            data.skipped["implausible_without_hint"] += 1
            continue
        kept.append(ex)
    data.examples = kept
    return ratios


def data_report(data: DistillDataset, train_task_keys: Sequence[str], log_ratios: Sequence[float] = ()) -> dict[str, Any]:
    """What a sleep trains on: examples by kind, completion tokens, distinct tasks, share of the train set covered.

    Args:
        data: the final dataset.
        train_task_keys: the session's train tasks (the coverage denominator).
        log_ratios: guided log-ratios from :func:`screen_implausible` (quantiles reported).
    """
    kinds = Counter(e.kind for e in data.examples)
    tasks = {e.task_key for e in data.examples}
    n_train = len(set(train_task_keys))
    out: dict[str, Any] = {
        "examples": len(data.examples),
        "by_kind": {k: kinds.get(k, 0) for k in data.kinds},
        "completion_tokens": sum(len(e.completion_ids) for e in data.examples),
        "distinct_tasks": len(tasks),
        "train_tasks": n_train,
        "task_coverage": round(len(tasks) / n_train, 4) if n_train else 0.0,
        "skipped": dict(sorted(data.skipped.items())),
    }
    if log_ratios:
        q = torch.quantile(torch.tensor(list(log_ratios)), torch.tensor([0.1, 0.5, 0.9])).tolist()
        out["guided_log_ratio"] = {"n": len(log_ratios), "p10": round(q[0], 3), "p50": round(q[1], 3), "p90": round(q[2], 3)}
    return out


# --------------------------------------------------------------------------- policy-gradient objectives (grpo, guide-grpo)


@dataclass(frozen=True)
class RLExample:
    """One stored rollout as a policy-gradient example (objectives ``grpo`` and ``guide-grpo``).

    Attributes:
        kind: ``"grpo"`` (an unguided rollout: PPO's clipped ratio) or ``"guided-grpo"`` (a guided
            rollout: Guide's shaped ratio under the unhinted context).
        rollout_id, task_key: the stored rollout and its task.
        messages: the context π_θ is scored under: the sampling chat for an unguided rollout, the
            same chat WITHOUT the hint for a guided one.
        sampling_messages: the chat it was sampled from (with the hint for a guided one): where
            π_old is scored.
        completion_ids: (T,) the sampled token ids, without end-of-turn.
        old_logprobs: π_old per target token — (T,) the stored sampling log-probs at first,
            (T [+1 for end-of-turn],) at the sampling temperature after :func:`rescore_old_logprobs`.
        add_eos: the completion ended its turn (the end-of-turn token is a target too).
        advantage: Â of the rollout within its group.
        adapter_id: the adapter that sampled it (π_old); None: the base model.
        lessons, hint_id: provenance.
    """

    kind: str
    rollout_id: int
    task_key: str
    messages: list[Message]
    sampling_messages: list[Message]
    completion_ids: list[int]
    old_logprobs: list[float]
    add_eos: bool
    advantage: float
    adapter_id: str | None = None
    lessons: tuple[str, ...] = ()
    hint_id: int | None = None

    @property
    def guided(self) -> bool:
        return self.kind == "guided-grpo"

    @property
    def weighted(self) -> bool:  # importance-weighted (Guide's shaped ratio): the guided ones
        return self.guided


def build_rl_dataset(rollouts: Sequence[TrainingRollout], objective: str,
                     pass_threshold: float | None = None, *, guided: bool = True) -> DistillDataset:
    """Group the stored rollouts and give every rollout its group-relative advantage (GRPO; Guide).

    A group is the rollouts of one episode (one task, one round) with one guidance: the k
    unguided rollouts, and — with ``guided`` (``guide-grpo``) — the guided re-attempt of an all-fail group with
    its hint, normalised on its own (Guide, arXiv 2506.13923). ``Â_i = (r_i − mean(r)) / (std(r) +
    1e-6)`` over every rollout of the group (:func:`arena.distill.losses.group_advantages`);
    groups whose rewards are all equal carry no signal and are dropped. Rollouts that cannot be
    trained (no token ids or log-probs, no completion, a guided one without its unhinted chat)
    still count in their group's mean and standard deviation.

    With ``pass_threshold`` the advantage is computed from pass/fail (1 where the reward passes
    the threshold, else 0), as Guide trains on its verifiers' binary outcomes: reasoning-gym's
    verifiers give partial credit to wrong answers that contain the right one ("-287" for -28
    scores 0.75), which the raw reward would reinforce in a group with no success. Without it the
    raw rewards are used (a rubric's graded scores, which are the signal by design).

    Args:
        rollouts: the session's train rollouts (any order).
        objective: the registered policy-gradient objective the data is for (``grpo``, ``guide-grpo``).
        pass_threshold: the success threshold of a verifier session; None: raw rewards.
        guided: the guided groups are used (``guide-grpo``); False: unguided rollouts only, guided
            ones counted ``guided_not_used`` (``grpo``: the ablation Guide compares against).

    Returns:
        The examples in rollout order; ``skipped`` counts rollouts by reason: ``guided_not_used``
        (grpo), ``group_of_one``, ``equal_rewards``, ``no_token_ids``, ``no_logprobs``, ``empty``,
        ``guided_without_context``.

    Raises:
        ValueError: unknown objective.
        BadTrainingData: a reward that is not finite (no advantage can be computed), or no
            rollout has sampling log-probs (an OpenAI-compatible solver's session: π_old is unknown).
    """
    if objective not in (pg := objective_names("policy-gradient")):
        raise ValueError(f"objective must be one of {', '.join(pg)}, not {objective!r}")
    out = DistillDataset(objective=objective, examples=[], rollouts_seen=len(rollouts))
    groups: dict[tuple[int, bool], list[TrainingRollout]] = {}
    for r in rollouts:
        if r.guided and not guided:
            out.skipped["guided_not_used"] += 1
            continue
        if not math.isfinite(r.reward):
            raise BadTrainingData(f"rollout {r.rollout_id} (task {r.task_key}) has reward {r.reward}: a group-relative "
                                  "advantage needs finite rewards; re-grade the session or leave it out")
        groups.setdefault((r.episode_id, r.guided), []).append(r)
    candidates = [r for g in groups.values() for r in g]
    if candidates and not any(r.logprobs for r in candidates):
        raise BadTrainingData(
            f"objective {objective} needs the sampling log-probs of the rollouts (π_old), and none of the "
            f"{len(candidates)} rollouts of session {candidates[0].session!r} has them (sampled through an "
            "OpenAI-compatible backend?); use a session run with --solver local, or --objective sft"
        )
    by_id: dict[int, RLExample] = {}
    for (_, guided), group in groups.items():
        if len(group) < 2:
            out.skipped["group_of_one"] += len(group)
            continue
        rewards = [r.reward if pass_threshold is None else float(passes(r.reward, pass_threshold)) for r in group]
        if max(rewards) == min(rewards):
            out.skipped["equal_rewards"] += len(group)
            continue
        adv = group_advantages(rewards).tolist()
        kept = 0
        for r, a in zip(group, adv, strict=True):
            if r.token_ids is None:
                out.skipped["no_token_ids"] += 1
            elif not r.token_ids:
                out.skipped["empty"] += 1
            elif r.logprobs is None or len(r.logprobs) != len(r.token_ids):
                out.skipped["no_logprobs"] += 1
            elif guided and not r.unguided_messages:
                out.skipped["guided_without_context"] += 1
            else:
                context = r.unguided_messages if guided else r.messages
                by_id[r.rollout_id] = RLExample(
                    "guided-grpo" if guided else "grpo", r.rollout_id, r.task_key, [dict(m) for m in context],
                    [dict(m) for m in r.messages], list(r.token_ids), list(r.logprobs), r.finish_reason == "stop",
                    float(a), r.adapter_id, tuple(r.lessons_in_context), r.hint_id if guided else None,
                )
                kept += 1
        out.groups += kept > 0
    out.examples = [by_id[i] for i in sorted(by_id)]
    return out


def require_rl_examples(data: DistillDataset, session: str) -> None:
    """Raise :class:`BadTrainingData` / :class:`NoTrainingData` with the reason when ``data`` has no example.

    Groups of one rollout (a session run with k = 1) get their own message: they can never have
    an advantage.
    """
    if data.examples:
        return
    data.require_rollouts(session)
    sk = data.skipped
    if sk["group_of_one"] and sk["group_of_one"] == sk.total() - sk["guided_not_used"]:
        raise BadTrainingData(
            f"every group of session {session!r} has a single rollout (k = 1): objective {data.objective} needs at least "
            "2 rollouts per task for a group-relative advantage; run the session with --rollouts 4"
        )
    reasons = data.skip_reasons()
    raise NoTrainingData(
        f"no eligible training data in session {session!r} for objective {data.objective}: {data.rollouts_seen} "
        f"rollouts, no group with unequal rewards to learn from ({reasons}); run more rounds or more --rollouts"
    )


def rescore_old_logprobs(
    data: DistillDataset,
    score: Callable[[str | None, list[Message], list[int]], torch.Tensor],
    eos_id: int,
) -> dict[str, Any]:
    """Replace each example's π_old by the log-probs of the policy that sampled it, at the sampling temperature (in place).

    For RL examples (every one) and importance-weighted distillation examples (the guided ones of
    objective ``distill``; examples without π_old are left as they are).

    The stored log-probs are those of the plain model (temperature 1), while the rollouts were
    sampled from softmax(logits / T): the behaviour policy is the tempered one. ``score``
    teacher-forces the rollout under the chat that sampled it (with the hint for a guided
    one) with the adapter that sampled it, at temperature T, giving π_old(y_t | x[, h], y_<t)
    for every target, the end-of-turn token included.

    Args:
        data: RL examples (:func:`build_rl_dataset`).
        score: ``score(adapter_id, sampling_messages, target_ids) -> (T',)`` log-probs at the
            sampling temperature, e.g. :meth:`agents.backends.local.LocalPolicy.token_logprobs`
            with ``temperature=T`` of the policy with that adapter.
        eos_id: the end-of-turn token appended to completions that ended their turn.

    Returns:
        ``{"examples": n, "stored_vs_rescored_mean_abs": x}``: how far the stored temperature-1
        log-probs are from the rescored ones (0 at T = 1 up to batching numerics).

    Raises:
        BadTrainingData: a rescored log-prob is not finite.
    """
    diffs: list[float] = []
    for i, ex in enumerate(data.examples):
        if ex.old_logprobs is None or ex.sampling_messages is None:
            continue
        targets = list(ex.completion_ids) + ([eos_id] if ex.add_eos else [])
        new = score(ex.adapter_id, ex.sampling_messages, targets).float()
        if new.shape != (len(targets),) or not bool(torch.isfinite(new).all()):
            raise BadTrainingData(f"rollout {ex.rollout_id}: the sampling policy gives non-finite log-probs to its own "
                                  "tokens; check the base model and adapter")
        stored = torch.tensor(ex.old_logprobs, dtype=torch.float32)
        diffs.append(float((new[: len(stored)] - stored).abs().mean()))
        data.examples[i] = _replace(ex, old_logprobs=new.tolist())
    return {"examples": len(diffs), "stored_vs_rescored_mean_abs": round(sum(diffs) / len(diffs), 5) if diffs else None}
