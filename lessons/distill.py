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
   (:func:`importance_weights`, as in Guide's public code).

``--objective`` picks the rows of the comparison from the same rollouts:
``distill`` (both, the default), ``sft`` (plain rejection-sampling SFT on unguided successes
under the context they were sampled in: the STaR-like baseline, Zelikman et al. 2022) and
``guided-unweighted`` (both sources, guided tokens with weight 1: the ablation of the
importance weights).

The loss is on completion tokens only; every example keeps its provenance (rollout id, task,
lessons in context, hint id), recorded in the adapter's sidecar and database row.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from lessons.adapter_store import TrainingRollout

Message = dict[str, str]
KINDS = ("context", "guided", "sft")


class NoTrainingData(ValueError):
    """No rollout qualifies as training data; the message says why and what to do (one line)."""


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

    @property
    def weighted(self) -> bool:
        return self.old_logprobs is not None


@dataclass
class DistillDataset:
    """Examples plus what was left out and why (the provenance recorded with the adapter)."""

    objective: str
    examples: list[DistillExample]
    skipped: Counter = field(default_factory=Counter)  # reason -> rollouts left out
    rollouts_seen: int = 0

    def provenance(self) -> dict[str, Any]:
        """JSON-safe summary: counts by kind, rollout / lesson / hint ids, skipped rollouts by reason."""
        kinds = Counter(e.kind for e in self.examples)
        return {
            "objective": self.objective,
            "rollouts_seen": self.rollouts_seen,
            "examples": len(self.examples),
            "by_kind": {k: kinds.get(k, 0) for k in KINDS},
            "weighted_examples": sum(e.weighted for e in self.examples),
            "completion_tokens": sum(len(e.completion_ids) for e in self.examples),
            "rollout_ids": [e.rollout_id for e in self.examples],
            "tasks": sorted({e.task_key for e in self.examples}),
            "lessons": sorted({lid for e in self.examples for lid in e.lessons}),
            "hint_ids": sorted({e.hint_id for e in self.examples if e.hint_id is not None}),
            "skipped": dict(sorted(self.skipped.items())),
        }

    @property
    def lessons_in_context(self) -> list[str]:
        """Lessons whose effect was trained in: those in the sampling context of any example."""
        return sorted({lid for e in self.examples for lid in e.lessons})


def build_dataset(
    rollouts: Sequence[TrainingRollout],
    objective: str,
    success_threshold: float,
    strip_lessons: Callable[[list[Message]], list[Message]],
) -> DistillDataset:
    """Select and shape the training examples of ``objective`` from stored rollouts.

    Args:
        rollouts: a session's train rollouts (:meth:`lessons.adapter_store.AdapterStore.training_rollouts`).
        objective: ``"distill"``, ``"sft"`` or ``"guided-unweighted"`` (see the module docstring).
        success_threshold: a rollout is a success when its reward is at least this.
        strip_lessons: returns the chat without its lessons section (the solver owns the
            prompt format: :func:`agents.solver.strip_lessons_section`).

    Returns:
        The examples in rollout order with skip counts by reason: ``failed`` (reward below
        the threshold), ``no_token_ids`` (the backend gave no ids, e.g. a chat API),
        ``guided_without_context`` / ``guided_without_logprobs`` (a guided rollout lacking
        its unguided chat or log-probs of every token), ``guided_not_used`` (objective sft),
        ``empty`` (no completion tokens).

    Raises:
        ValueError: unknown objective.
    """
    if objective not in ("distill", "sft", "guided-unweighted"):
        raise ValueError(f"objective must be distill, sft or guided-unweighted, not {objective!r}")
    out = DistillDataset(objective=objective, examples=[], rollouts_seen=len(rollouts))
    for r in rollouts:
        if r.reward < success_threshold - 1e-9:
            out.skipped["failed"] += 1
            continue
        if not r.token_ids:
            out.skipped["no_token_ids" if r.token_ids is None else "empty"] += 1
            continue
        lessons = tuple(r.lessons_in_context)
        if not r.guided:
            if objective == "sft":
                msgs, kind = [dict(m) for m in r.messages], "sft"
            else:
                msgs, kind = strip_lessons([dict(m) for m in r.messages]), "context"
            out.examples.append(
                DistillExample(kind, r.rollout_id, r.task_key, msgs, list(r.token_ids), None,
                               r.finish_reason == "stop", lessons, None)
            )
            continue
        if objective == "sft":
            out.skipped["guided_not_used"] += 1
            continue
        if not r.unguided_messages:
            out.skipped["guided_without_context"] += 1
            continue
        old: list[float] | None = None
        if objective == "distill":
            if r.logprobs is None or len(r.logprobs) != len(r.token_ids):
                out.skipped["guided_without_logprobs"] += 1
                continue
            old = list(r.logprobs)
        out.examples.append(
            DistillExample("guided", r.rollout_id, r.task_key, strip_lessons([dict(m) for m in r.unguided_messages]),
                           list(r.token_ids), old, r.finish_reason == "stop", lessons, r.hint_id)
        )
    return out


def require_examples(data: DistillDataset, session: str, threshold: float) -> None:
    """Raise :class:`NoTrainingData` with the reason when ``data`` has no example."""
    if data.examples:
        return
    if data.rollouts_seen == 0:
        raise NoTrainingData(f"session {session!r} has no rollouts of train tasks to distill; run `arena run` first")
    reasons = ", ".join(f"{n} {why.replace('_', ' ')}" for why, n in sorted(data.skipped.items()))
    raise NoTrainingData(
        f"no eligible training data in session {session!r} for objective {data.objective}: "
        f"{data.rollouts_seen} rollouts, none usable ({reasons}); lower --success-threshold "
        f"(now {threshold}) or run more rounds"
    )


def importance_weights(
    logp_new: torch.Tensor,
    logp_old: torch.Tensor,
    hinted: torch.Tensor,
    quantile: float = 0.9,
    floor: float = 1e-4,
) -> tuple[torch.Tensor, float | None]:
    """Guide's shaped per-token importance weights (Nath et al. 2025, arXiv 2506.13923, public code).

    ``ρ_t = exp(log π_θ(y_t | x, y_<t) − log π_old(y_t | x, h, y_<t))``; ``γ = max(floor,
    quantile_q(ρ over hinted tokens of the batch))``; weight ``ρ_t / (ρ_t + γ)`` on hinted
    tokens, 1 elsewhere. Everything is detached: the weights scale the token log-likelihood
    gradient, they carry none themselves.

    Args:
        logp_new: (N,) or (B, T) float, log π_θ of the completion tokens under the training
            (unguided) context.
        logp_old: same shape, the sampling log-probs under the guided context; ignored where
            ``hinted`` is False (may hold NaN there).
        hinted: same shape, bool: tokens of guided, importance-weighted examples.
        quantile: q of γ (0.9 in Guide).
        floor: lower bound of γ (1e-4 in Guide).

    Returns:
        ``(weights, gamma)``: float32 weights of the input shape in (0, 1] on hinted tokens
        and exactly 1 elsewhere; γ as a float, or None when no token is hinted.

    Raises:
        ValueError: shapes differ.
    """
    if logp_new.shape != logp_old.shape or logp_new.shape != hinted.shape:
        raise ValueError(f"shapes differ: {tuple(logp_new.shape)}, {tuple(logp_old.shape)}, {tuple(hinted.shape)}")
    weights = torch.ones(logp_new.shape, dtype=torch.float32, device=logp_new.device)
    if not bool(hinted.any()):
        return weights, None
    with torch.no_grad():
        log_ratio = (logp_new.detach().float() - logp_old.float())[hinted]
        rho = torch.exp(log_ratio.clamp(max=30.0))  # (N_hinted,); clamp keeps exp finite
        gamma = torch.quantile(rho, quantile).clamp(min=floor)
        weights[hinted] = rho / (rho + gamma)
    return weights, float(gamma)
