"""``distill``, ``sft`` and ``guided-unweighted``: the NLL of stored successes, guided tokens weighted by Guide's ratio.

The loss of one micro-batch over its completion tokens t is ``Σ_t w_t · (−log π_θ(y_t | x, y_<t))``
with ``w_t`` = 1 except on the tokens of importance-weighted (guided) examples of ``distill``,
where it is Guide's shaped ratio of π_θ over π_old, both at the rollouts' sampling temperature
(:func:`arena.distill.losses.importance_weights`; Nath et al. 2025, arXiv 2506.13923). Which
rollouts become examples, and under which context, is :func:`arena.distill.data.build_dataset`:
context distillation of lessons-in-context successes (Snell et al. 2022, arXiv 2209.15189) and
guided successes under the unguided chat (``distill``, ``guided-unweighted``), or unguided
successes in their sampling context (``sft``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F

from agents.roles.solver import strip_lessons_section
from arena.distill.data import DistillDataset, build_dataset, require_examples
from arena.distill.losses import importance_weights
from arena.distill.objectives.base import DataContext, Encoded, LossParts, Objective, TrainRun
from arena.distill.trainer import completion_logits, encode_examples


class Supervised(Objective):
    """The supervised objectives: weighted NLL of the completion tokens of stored successes.

    Subclasses say how their examples are selected (:func:`arena.distill.data.build_dataset`):
    ``sampling_context`` (unguided successes keep their lessons) and ``weighted`` (Guide's weights on
    guided successes); whether guided successes are used at all is the spec's ``uses_hints``.
    """

    sampling_context = False
    weighted = True

    def build_dataset(self, rollouts: Sequence[Any], ctx: DataContext) -> DistillDataset:
        guided = ("weighted" if self.weighted else "unweighted") if self.spec.uses_hints else "none"
        return build_dataset(rollouts, self.name, ctx.success_threshold, strip_lessons_section,
                             sampling_context=self.sampling_context, guided=guided)

    def require(self, data: DistillDataset, ctx: DataContext) -> None:
        require_examples(data, ctx.session, ctx.success_threshold)

    def needs_pi_old(self, data: DistillDataset) -> bool:
        """Guide's ratio over the distribution that sampled: π_old at the sampling temperature, for the weighted examples."""
        return any(e.weighted for e in data.examples)

    def encode(self, tokenizer: Any, examples: Sequence[Any], cfg: Any, eos_id: int) -> Encoded:
        items, dropped = encode_examples(tokenizer, examples, cfg.max_seq_len, eos_id)
        return Encoded(items, dropped)

    def micro_batch_loss(self, run: TrainRun, batch: dict[str, torch.Tensor]) -> LossParts:
        cfg, tm = run.cfg, batch["target_mask"]
        targets = batch["input_ids"][:, 1:][tm]
        logits = completion_logits(run.model, batch)  # (N, V)
        logp = -F.cross_entropy(logits, targets, reduction="none")  # (N,) log π_θ: the loss's
        old, hinted = batch["old_logprobs"][tm], batch["hinted"][tm]
        # the ratio's π_θ as π_old was scored: at the sampling temperature (weights are detached)
        logp_t = logp if cfg.temperature == 1.0 or not bool(hinted.any()) else -F.cross_entropy(
            logits.detach() / cfg.temperature, targets, reduction="none")
        w, gamma = importance_weights(logp_t, old, hinted, cfg.is_quantile, cfg.is_floor)  # (N,) detached
        return LossParts((w * -logp).sum(), int(batch["attention_mask"].sum()), int(tm.sum()), gamma=gamma)


class ContextDistillation(Supervised):
    """``distill``: lessons-free context distillation of unguided successes, Guide-weighted guided successes."""


class SFT(Supervised):
    """``sft``: STaR's rejection-sampling SFT — unguided successes in the chat they were sampled in."""

    sampling_context = True


class GuidedUnweighted(Supervised):
    """``guided-unweighted``: ``distill`` with weight 1 on the guided successes (the ablation of Guide's weights)."""

    weighted = False
