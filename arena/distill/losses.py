"""The losses of the objectives and Guide's importance weights: small pure functions of tensors.

Each takes per-token tensors of one micro-batch (flattened to the N completion tokens) and
returns per-token losses; the trainer sums them and divides by the completion tokens of the
optimizer step (token-mean over the batch, as Guide's and DAPO's code do).

- :func:`importance_weights`: Guide's shaped per-token weights of guided tokens (objective
  ``distill``; Nath et al. 2025, arXiv 2506.13923, public code).
- :func:`group_advantages`: GRPO's group-relative advantage (Shao et al. 2024, arXiv 2402.03300).
- :func:`ppo_clip_loss`: PPO's clipped surrogate (Schulman et al. 2017, arXiv 1707.06347) on
  unguided tokens.
- :func:`guided_shaped_loss`: Guide's loss on guided tokens (Nath et al. 2025, arXiv 2506.13923):
  the ratio of the policy under the context *without* the hint over the sampling policy under
  the hint, shaped ρ/(ρ+γ), not clipped; γ from :func:`importance_weights`.
- :func:`kl_to_reference`: the k3 estimator of KL(π_θ ‖ π_ref) per token (Schulman's
  "Approximating KL divergence"; the estimator of GRPO's paper).
- :func:`reverse_kl`: the exact per-token reverse KL(π_student ‖ π_teacher) over the whole
  vocabulary, on the student's own samples (``opcd``: on-policy context distillation, arXiv
  2602.12275; Agarwal et al. 2024's GKD with its on-policy, reverse-KL setting).
- :func:`tempered_logprobs`: log-softmax of logits / T gathered at the targets: the distribution
  that sampled at temperature T.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

ADV_EPS = 1e-6  # added to the group's standard deviation (Guide, GRPO)
LOG_RATIO_CAP = 30.0  # log-ratios are clamped here before exp, so a ratio stays finite


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
        rho = torch.exp(log_ratio.clamp(max=LOG_RATIO_CAP))  # (N_hinted,); the cap keeps exp finite
        gamma = torch.quantile(rho, quantile).clamp(min=floor)
        weights[hinted] = rho / (rho + gamma)
    return weights, float(gamma)


def group_advantages(rewards: Sequence[float] | torch.Tensor, eps: float = ADV_EPS) -> torch.Tensor:
    """GRPO's group-relative advantages ``Â_i = (r_i − mean(r)) / (std(r) + eps)`` of one group.

    ``std`` is the sample standard deviation (Bessel's n − 1, ``torch.std``'s default, as in TRL's
    and verl's GRPO). A group whose rewards are all equal has no signal: every Â_i is 0 (the
    caller drops such groups).

    Args:
        rewards: (G,) the rewards of the G ≥ 2 rollouts of one group.
        eps: added to the standard deviation.

    Returns:
        (G,) float32 advantages.

    Raises:
        ValueError: fewer than 2 rewards, or a reward that is not finite.
    """
    r = torch.as_tensor(rewards, dtype=torch.float32).flatten()
    if r.numel() < 2:
        raise ValueError(f"a group needs at least 2 rollouts for a group-relative advantage, got {r.numel()}")
    if not bool(torch.isfinite(r).all()):
        raise ValueError(f"rewards must be finite, got {r.tolist()}")
    return (r - r.mean()) / (r.std() + eps)


def tempered_logprobs(logits: torch.Tensor, targets: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """``log softmax(logits / T)[target]``: the log-prob of each target under the policy sampled at temperature T.

    Args:
        logits: (N, V) float, the model's next-token logits at the N positions.
        targets: (N,) long, the tokens taken.
        temperature: T > 0 (the rollouts' sampling temperature; 1: the plain model).

    Returns:
        (N,) float32, natural log.
    """
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    scaled = logits.float() / temperature if temperature != 1.0 else logits.float()
    return -torch.nn.functional.cross_entropy(scaled, targets, reduction="none")


def ppo_clip_loss(logp_new: torch.Tensor, logp_old: torch.Tensor, advantages: torch.Tensor,
                  clip_eps: float = 0.2) -> torch.Tensor:
    """PPO's clipped surrogate per token: ``−min(ρ Â, clip(ρ, 1 − ε, 1 + ε) Â)``, ``ρ = exp(log π_θ − log π_old)``.

    Args:
        logp_new: (N,) log π_θ(y_t | x, y_<t), with gradient.
        logp_old: (N,) log π_old(y_t | x, y_<t), the sampling log-probs (no gradient).
        advantages: (N,) the advantage of each token's rollout.
        clip_eps: ε (0.2 in PPO, GRPO and Guide).

    Returns:
        (N,) float32 per-token losses (to be token-averaged by the caller).
    """
    log_ratio = (logp_new.float() - logp_old.detach().float()).clamp(max=LOG_RATIO_CAP)
    ratio = torch.exp(log_ratio)
    adv = advantages.detach().float()
    return -torch.minimum(ratio * adv, ratio.clamp(1.0 - clip_eps, 1.0 + clip_eps) * adv)


def guided_shaped_loss(logp_new: torch.Tensor, logp_old_hinted: torch.Tensor, advantages: torch.Tensor,
                       quantile: float = 0.9, floor: float = 1e-4) -> tuple[torch.Tensor, float | None]:
    """Guide's loss on guided tokens: ``−Â · ρ/(ρ + γ)``, not clipped.

    ``ρ_t = π_θ(y_t | x, y_<t) / π_old(y_t | x, h, y_<t)``: the policy being trained scored under
    the context WITHOUT the hint over the policy that sampled the rollout WITH the hint ``h``.
    ``γ`` is the ``quantile`` of the micro-batch's guided ratios floored at ``floor``, detached
    (computed by :func:`importance_weights`); the gradient flows through ρ only:
    ``∇ = −Â · γ ρ / (ρ + γ)² · ∇log π_θ``, which vanishes both for ρ ≪ γ (tokens the unguided
    policy would not produce) and ρ ≫ γ.

    Args:
        logp_new: (N,) log π_θ under the unguided context, with gradient.
        logp_old_hinted: (N,) stored sampling log-probs under the hinted context.
        advantages: (N,) advantages from the guided group's own normalisation.
        quantile, floor: of γ (0.9 and 1e-4 in Guide).

    Returns:
        ``(loss, gamma)``: (N,) float32 per-token losses and γ (None when N is 0).
    """
    if logp_new.numel() == 0:
        return logp_new.float() * 0.0, None
    hinted = torch.ones(logp_new.shape, dtype=torch.bool, device=logp_new.device)
    _, gamma = importance_weights(logp_new, logp_old_hinted, hinted, quantile, floor)  # γ, detached
    assert gamma is not None
    rho = torch.exp((logp_new.float() - logp_old_hinted.detach().float()).clamp(max=LOG_RATIO_CAP))
    return -advantages.detach().float() * rho / (rho + gamma), gamma


def kl_to_reference(logp_new: torch.Tensor, logp_ref: torch.Tensor) -> torch.Tensor:
    """Per-token k3 estimate of KL(π_θ ‖ π_ref): ``exp(d) − d − 1``, ``d = log π_ref − log π_θ`` (≥ 0, unbiased).

    Args:
        logp_new: (N,) log π_θ of the sampled tokens, with gradient.
        logp_ref: (N,) log π_ref of the same tokens (the base model: adapter disabled), no gradient.
    """
    d = (logp_ref.detach().float() - logp_new.float()).clamp(-LOG_RATIO_CAP, LOG_RATIO_CAP)
    return torch.exp(d) - d - 1.0


def reverse_kl(student_logits: torch.Tensor, teacher_logits: torch.Tensor) -> torch.Tensor:
    """Per-token reverse KL(π_s ‖ π_t) = Σ_v π_s(v) (log π_s(v) − log π_t(v)) over the full vocabulary (nats).

    The full vocabulary, not top-k with a remainder bucket: the sum is exact and, at this
    project's scale (49k tokens, a few hundred completion positions per micro-batch), its
    (N, V) float32 tensors cost tens of MB; a top-k truncation would bias the KL exactly where
    the student puts mass the teacher does not, which is what reverse KL is there to punish.
    Gradient flows through the student only (the teacher is detached).

    Args:
        student_logits: (N, V) logits of the student at the N completion positions, with gradient.
        teacher_logits: (N, V) logits of the teacher at the same positions (same tokens so far).

    Returns:
        (N,) float32, each ≥ 0.

    Raises:
        ValueError: the shapes differ.
    """
    if student_logits.shape != teacher_logits.shape:
        raise ValueError(f"student logits {tuple(student_logits.shape)} and teacher logits "
                         f"{tuple(teacher_logits.shape)} differ: score the same completion positions")
    log_s = torch.log_softmax(student_logits.float(), dim=-1)
    log_t = torch.log_softmax(teacher_logits.detach().float(), dim=-1)
    return (log_s.exp() * (log_s - log_t)).sum(dim=-1)
