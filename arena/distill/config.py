"""Settings of `arena distill`: the LoRA trainer (:class:`TrainConfig`) and the data / evaluation (:class:`DistillConfig`).

Paired with :mod:`arena.distill.trainer` (the loop) and :mod:`arena.distill.data` (data set
building and Guide's importance weights), after trl's ``*_config.py`` / ``*_trainer.py`` pairs.
Every field has a default and a comment with its meaning and unit; cross-field rules are
checked in validators whose messages say how to fix the value.
"""

from __future__ import annotations

import math

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from arena.objectives import LORA_DROPOUT, get_objective, objective_names

# Every list of objective names comes from the registry (arena.objectives.objective_names), which needs no torch.

# Default threshold of the guided-data screen (arena.distill.data.screen_implausible), nats per token:
# a guided success whose completion is on average more than e^1 ≈ 2.7 times less likely per token
# without its hint than with it is not trained as if the hint were absent. Measured distribution and
# the choice: bench/RESULTS.md ("Guided log-ratios").
MIN_GUIDED_LOG_RATIO = -1.0

# The projections of a llama-architecture block (SmolLM2 is one): attention and MLP.
LLAMA_TARGET_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def default_dropout(objective: str) -> float:
    """The LoRA dropout an objective trains with unless told otherwise (its registry spec's ``dropout``).

    Raises:
        ValueError: an unknown objective.
    """
    return get_objective(objective).dropout


class TrainConfig(BaseModel):
    """LoRA, optimizer and loop settings of :func:`arena.distill.trainer.train`."""

    model_config = ConfigDict(extra="forbid")

    # LoRA (peft LoraConfig; Hu et al. 2021)
    rank: int = 16  # LoRA rank r
    alpha: int = 32  # LoRA alpha; the update is scaled by alpha / r
    dropout: float = LORA_DROPOUT  # dropout on the LoRA input; must be 0 for grpo / guide-grpo (see DistillConfig)
    target_modules: list[str] = Field(default_factory=lambda: list(LLAMA_TARGET_MODULES))  # module names to adapt
    # optimizer (AdamW) and schedule
    lr: float = 2e-4  # peak learning rate
    weight_decay: float = 0.0  # AdamW decoupled weight decay
    betas: tuple[float, float] = (0.9, 0.999)  # AdamW betas
    warmup_steps: int = 5  # optimizer steps of linear warm-up from 0 to lr
    min_lr_ratio: float = 0.1  # cosine decay ends at lr * min_lr_ratio
    max_grad_norm: float = 1.0  # gradient clipping (global L2 norm); 0 disables
    # loop
    batch_size: int = 4  # sequences per micro-batch
    grad_accum: int = 2  # micro-batches per optimizer step (effective batch = batch_size * grad_accum)
    epochs: float = 3.0  # passes over the data when max_steps is 0
    max_steps: int = 0  # optimizer steps; 0: derived from epochs
    max_seq_len: int = 512  # prompt + completion tokens; longer examples are dropped (and counted)
    seed: int = 0  # data order, LoRA init, dropout
    # Guide's importance weighting of guided (hinted) tokens (arXiv 2506.13923)
    is_quantile: float = 0.9  # gamma = this quantile of the batch's ratios over hinted tokens
    is_floor: float = 1e-4  # gamma's floor
    # policy-gradient objectives (grpo, guide-grpo)
    clip_eps: float = 0.2  # PPO clip range ε of the unguided ratio: clip(ρ, 1 − ε, 1 + ε)
    kl_coef: float = 0.0  # β of the per-token KL to the base model (adapter disabled), k3 estimator; 0: none (Guide)
    temperature: float = 1.0  # grpo / guide-grpo and distill's guided weights: the rollouts' sampling temperature (ratios of softmax(logits / T)); opcd: the student's
    # on-policy context distillation (opcd)
    sample_tokens: int = 96  # cap of each completion the student samples while it trains, tokens

    @model_validator(mode="after")
    def _check(self) -> TrainConfig:
        if self.rank < 1:
            raise ValueError(f"LoRA rank must be >= 1, got {self.rank}; pass --rank 16")
        if self.alpha <= 0:
            raise ValueError(f"LoRA alpha must be > 0, got {self.alpha}; pass --alpha 32")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"LoRA dropout must be in [0, 1), got {self.dropout}")
        if not self.target_modules:
            raise ValueError("target_modules is empty; LoRA needs at least one module, e.g. q_proj")
        if not 0.0 < self.lr <= 1.0:
            raise ValueError(f"learning rate must be in (0, 1], got {self.lr}; pass --lr 2e-4")
        if self.batch_size < 1 or self.grad_accum < 1:
            raise ValueError("--batch-size and --grad-accum must be >= 1")
        if self.max_steps < 0 or self.warmup_steps < 0:
            raise ValueError("--steps and warm-up steps must be >= 0")
        if not math.isfinite(self.epochs) or self.epochs > 1000:
            raise ValueError(f"--epochs must be a finite number of passes in (0, 1000], got {self.epochs}")
        if self.max_steps == 0 and self.epochs <= 0:
            raise ValueError(f"epochs must be > 0 when --steps is 0, got {self.epochs}; pass --epochs 3")
        if not 0.0 <= self.min_lr_ratio <= 1.0:
            raise ValueError(f"min_lr_ratio must be in [0, 1], got {self.min_lr_ratio}")
        if self.max_grad_norm < 0:
            raise ValueError(f"max_grad_norm must be >= 0 (0 disables clipping), got {self.max_grad_norm}")
        if self.max_seq_len < 8:
            raise ValueError(f"--max-seq-len must be >= 8, got {self.max_seq_len}")
        if not 0.0 < self.is_quantile <= 1.0 or self.is_floor <= 0:
            raise ValueError("is_quantile must be in (0, 1] and is_floor > 0")
        if not 0.0 < self.clip_eps < 1.0:
            raise ValueError(f"clip_eps must be in (0, 1), got {self.clip_eps}; PPO's is 0.2")
        if not (math.isfinite(self.kl_coef) and self.kl_coef >= 0.0):
            raise ValueError(f"--kl-coef must be a finite number >= 0, got {self.kl_coef}; pass --kl-coef 0")
        if not (math.isfinite(self.temperature) and 0.0 < self.temperature <= 5.0):
            raise ValueError(f"temperature must be in (0, 5] (the rollouts' sampling temperature), got {self.temperature}")
        if not 1 <= self.sample_tokens <= 4096:
            raise ValueError(f"sample_tokens must be in [1, 4096], got {self.sample_tokens}")
        if not 0 <= self.seed < 2**32:
            raise ValueError(f"seed must be in [0, 2^32), got {self.seed}")
        return self


class DistillConfig(BaseModel):
    """Data, evaluation and training settings of one ``arena distill`` run (stored with the adapter)."""

    model_config = ConfigDict(extra="forbid")

    objective: str = "distill"  # a registered objective (arena.objectives): distill, sft, guided-unweighted, grpo, guide-grpo, opcd, …
    success_threshold: float = 1.0  # a rollout is a success (training data) when its reward >= this
    lesson_tokens: int = 512  # lessons budget of the solver prompt in the with-lessons evaluations, tokens
    eval_max_tokens: int = 96  # completion cap of the held-out greedy evaluation, tokens
    min_guided_log_ratio: float = MIN_GUIDED_LOG_RATIO  # guided successes below this mean log π_θ(y|x) − log π_old(y|x,h) are skipped, nats/token
    min_examples: int = 1  # refuse to train on fewer examples (a sleep of `arena run --cycles` asks for more)
    train: TrainConfig = Field(default_factory=TrainConfig)

    @field_validator("objective")
    @classmethod
    def _known_objective(cls, v: str) -> str:
        get_objective(v)  # ValueError naming the registered objectives
        return v

    @model_validator(mode="after")
    def _check(self) -> DistillConfig:
        if not 0.0 < self.success_threshold <= 1.0:
            raise ValueError(f"success threshold must be in (0, 1] (rewards are in [0, 1]), got {self.success_threshold}")
        if self.lesson_tokens < 0:
            raise ValueError(f"--lesson-tokens must be >= 0, got {self.lesson_tokens}")
        if not 1 <= self.eval_max_tokens <= 4096:
            raise ValueError(f"eval max tokens must be in [1, 4096], got {self.eval_max_tokens}")
        if math.isnan(self.min_guided_log_ratio) or self.min_guided_log_ratio > 0:
            raise ValueError(f"--min-guided-log-ratio must be <= 0 nats per token (-inf keeps every guided success), "
                             f"got {self.min_guided_log_ratio}")
        if self.min_examples < 1:
            raise ValueError(f"min_examples must be >= 1, got {self.min_examples}")
        if self.train.dropout > 0 and get_objective(self.objective).policy_gradient:
            # PPO's and Guide's ratios compare π_θ with π_old as it was scored (no dropout): with LoRA dropout in
            # π_θ the ratio leaves 1 before any update, and the clip and Guide's γ act on that noise
            raise ValueError(f"{self.objective} trains with LoRA dropout 0 (its importance ratios must be 1 before any "
                             f"update), got {self.train.dropout}; set dropout 0")
        if self.train.kl_coef > 0 and not get_objective(self.objective).policy_gradient:
            raise ValueError(f"--kl-coef applies to the objectives {', '.join(objective_names('policy-gradient'))}, not {self.objective}; "
                             "drop it or pass --objective grpo")
        return self
