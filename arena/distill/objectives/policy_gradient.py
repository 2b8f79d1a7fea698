"""``grpo`` and ``guide-grpo``: group-relative policy gradient on stored rollouts, π_old their sampling policy.

The loss of one micro-batch over its completion tokens t is ``Σ_t ℓ_t`` with ``ℓ_t`` PPO's clipped
surrogate on unguided tokens (:func:`arena.distill.losses.ppo_clip_loss`) and Guide's shaped ratio
on guided ones (:func:`arena.distill.losses.guided_shaped_loss`), both with ratios of π_θ over
π_old at the rollouts' sampling temperature, plus ``kl_coef`` × the k3 KL to the base model
(the adapter disabled) when it is above 0 (Shao et al. 2024, arXiv 2402.03300; Nath et al. 2025,
arXiv 2506.13923). Several epochs over the same rollouts, π_old fixed. Groups and advantages:
:func:`arena.distill.data.build_rl_dataset`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from arena.distill.config import TrainConfig
from arena.distill.data import DistillDataset, RLExample, build_rl_dataset, require_rl_examples
from arena.distill.errors import TrainingError
from arena.distill.losses import LOG_RATIO_CAP, guided_shaped_loss, kl_to_reference, ppo_clip_loss
from arena.distill.objectives.base import DataContext, Encoded, EncodedExample, LossParts, Objective, TrainRun, encode_each
from arena.distill.trainer import target_logprobs


def encode_rl(tokenizer: Any, examples: Sequence[RLExample], max_seq_len: int, eos_id: int) -> tuple[list[EncodedExample], int]:
    """Tokenise RL examples under their training context; drop those longer than ``max_seq_len``.

    Returns:
        ``(encoded, dropped)``; each encoded example carries π_old on every target, its advantage,
        and ``weighted`` for a guided rollout (Guide's shaped ratio instead of PPO's clipped one).

    Raises:
        TrainingError: an example's π_old does not cover its targets (call
            :func:`arena.distill.data.rescore_old_logprobs` first).
    """

    def build(ex: RLExample, p: list[int], comp: list[int]) -> EncodedExample:
        if len(ex.old_logprobs) != len(comp):
            raise TrainingError(f"rollout {ex.rollout_id}: {len(ex.old_logprobs)} π_old log-probs for {len(comp)} targets; "
                                "rescore them at the sampling temperature first")
        return EncodedExample(p + comp, len(p), list(ex.old_logprobs), ex.guided, float(ex.advantage))

    return encode_each(tokenizer, examples, max_seq_len, eos_id, build)


def rl_token_losses(logp: torch.Tensor, old: torch.Tensor, adv: torch.Tensor, guided: torch.Tensor, cfg: TrainConfig,
                    logp_ref: torch.Tensor | None = None) -> tuple[torch.Tensor, dict[str, Any]]:
    """The summed per-token loss of one micro-batch of grpo / guide-grpo (divide by the step's tokens).

    PPO's clipped surrogate on unguided tokens (:func:`arena.distill.losses.ppo_clip_loss`), Guide's
    shaped ratio on guided ones (:func:`arena.distill.losses.guided_shaped_loss`, γ over this
    micro-batch's guided tokens), plus ``cfg.kl_coef`` × the k3 KL to ``logp_ref`` when given.

    Args:
        logp: (N,) log π_θ at the sampling temperature, with gradient; old: (N,) π_old; adv: (N,) Â;
        guided: (N,) bool; logp_ref: (N,) log π_ref of the base model, or None.

    Returns:
        ``(loss_sum, stats)``: a scalar and ``{"gamma", "clipped", "kl_sum"}``.
    """
    ung = ~guided
    eps = cfg.clip_eps
    loss = ppo_clip_loss(logp[ung], old[ung], adv[ung], eps).sum()
    with torch.no_grad():
        ratio = torch.exp((logp[ung].detach() - old[ung]).clamp(max=LOG_RATIO_CAP))
        clipped = int(((ratio < 1.0 - eps) | (ratio > 1.0 + eps)).sum())
    gamma = None
    if bool(guided.any()):
        g_loss, gamma = guided_shaped_loss(logp[guided], old[guided], adv[guided], cfg.is_quantile, cfg.is_floor)
        loss = loss + g_loss.sum()
    kl_sum = None
    if logp_ref is not None and cfg.kl_coef > 0:
        kl = kl_to_reference(logp, logp_ref)
        loss = loss + cfg.kl_coef * kl.sum()
        kl_sum = float(kl.detach().sum())
    return loss, {"gamma": gamma, "clipped": clipped, "kl_sum": kl_sum}


class PolicyGradient(Objective):
    """GRPO (unguided groups) and Guide-GRPO (plus the guided groups under their unhinted context)."""

    def build_dataset(self, rollouts: Sequence[Any], ctx: DataContext) -> DistillDataset:
        # advantages from the verifier's pass / fail (its partial credit would reinforce wrong answers); a rubric's
        # graded rewards as they are
        return build_rl_dataset(rollouts, self.name, ctx.success_threshold if ctx.verifier_session() else None,
                                guided=self.spec.uses_hints)

    def require(self, data: DistillDataset, ctx: DataContext) -> None:
        require_rl_examples(data, ctx.session)

    def needs_pi_old(self, data: DistillDataset) -> bool:
        """Every example: PPO's and Guide's ratios are over π_old at the sampling temperature."""
        return True

    def encode(self, tokenizer: Any, examples: Sequence[Any], cfg: Any, eos_id: int) -> Encoded:
        items, dropped = encode_rl(tokenizer, examples, cfg.max_seq_len, eos_id)
        return Encoded(items, dropped)

    def micro_batch_loss(self, run: TrainRun, batch: dict[str, torch.Tensor]) -> LossParts:
        cfg, tm = run.cfg, batch["target_mask"]
        logp = target_logprobs(run.model, batch, cfg.temperature)  # (N,) log π_θ at T
        logp_ref = None
        if cfg.kl_coef > 0:
            with torch.no_grad(), run.model.disable_adapter():
                logp_ref = target_logprobs(run.model, batch, cfg.temperature)  # (N,) base model
        loss_sum, stats = rl_token_losses(logp, batch["old_logprobs"][tm], batch["advantages"][tm], batch["hinted"][tm],
                                          cfg, logp_ref)
        return LossParts(loss_sum, int(batch["attention_mask"].sum()), int(tm.sum()), gamma=stats["gamma"],
                         clipped=stats["clipped"], kl_sum=stats["kl_sum"])
