"""The LoRA trainer of `arena distill`: one readable loop, per-token weights, loss on completion tokens only.

TRL's ``SFTTrainer`` has no per-token weights, which Guide's importance-weighted guided
examples need, so the loop is our own (after nanochat's ``scripts/base_train.py``: data →
model → optimizer → loop, schedules as small named functions). peft ``LoraConfig`` on the
llama projections, AdamW, linear warm-up then cosine decay, global-norm gradient clipping,
gradient accumulation with the loss normalised by the completion tokens of the whole
optimizer step, a fixed seed; fp32 on CPU, bf16 on CUDA (the base model's dtype; peft keeps
the LoRA weights in fp32).

The loss of an optimizer step over micro-batches m and completion tokens t is

    L = Σ_m Σ_t w_t · (−log π_θ(y_t | x, y_<t)) / N_step

with ``w_t`` = 1 except on the tokens of importance-weighted (guided) examples, where it is
Guide's shaped ratio (:func:`arena.distill.data.importance_weights`) of π_θ over π_old, both at
the rollouts' sampling temperature ``cfg.temperature`` (the distribution that sampled), and ``N_step`` the number
of completion tokens in the step. The vocabulary projection is applied to completion
positions only (prompt positions carry no loss), which saves the largest matmul of a small
model on every prompt token.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

from agents.backends.local import next_token_logits
from arena.distill.config import TrainConfig
from arena.distill.data import DistillExample, RLExample, importance_weights
from arena.distill.errors import TrainingError  # noqa: F401 - raised here; its home is torch-free for the CLI
from arena.distill.losses import guided_shaped_loss, kl_to_reference, ppo_clip_loss


@dataclass
class EncodedExample:
    """An example as token ids: ``input_ids = prompt + completion (+ end-of-turn)``.

    ``old_logprobs`` has one entry per target token (completion, then end-of-turn as NaN);
    NaN means "not importance-weighted".
    """

    input_ids: list[int]
    n_prompt: int  # tokens of the rendered chat (the first target is input_ids[n_prompt])
    old_logprobs: list[float]  # (n_target,) π_old per target token, NaN where unweighted
    weighted: bool


@dataclass
class TrainResult:
    """What a training run did (stored in the adapter's sidecar and row as ``metrics``)."""

    steps: int  # optimizer steps
    tokens: int  # non-pad tokens processed (prompt + completion, all epochs): the tokens/s numerator
    completion_tokens: int  # tokens that carried loss
    final_loss: float  # weighted loss of the last optimizer step (per completion token, nats)
    first_loss: float  # of the first step
    tokens_per_s: float  # tokens / wall seconds of the loop
    wall_s: float  # seconds in the loop (data, forward, backward, optimizer)
    examples: int  # examples trained on
    dropped_too_long: int  # examples longer than max_seq_len, left out
    losses: list[float] = field(default_factory=list)  # per optimizer step
    gammas: list[float] = field(default_factory=list)  # Guide's γ per micro-batch with hinted tokens
    clipped: int = 0  # grpo / guide-grpo: unguided tokens whose ratio was outside [1 − ε, 1 + ε]
    kl: list[float] = field(default_factory=list)  # grpo / guide-grpo with kl_coef > 0: mean k3 KL per step, nats/token
    policy_gradient: bool = False  # trained by train_rl (adds clip_fraction and kl_mean to the metrics)

    def metrics(self) -> dict[str, Any]:
        """JSON-safe summary (losses rounded; the curve is kept)."""
        return {
            "steps": self.steps,
            "tokens": self.tokens,
            "completion_tokens": self.completion_tokens,
            "final_loss": round(self.final_loss, 5),
            "first_loss": round(self.first_loss, 5),
            "tokens_per_s": round(self.tokens_per_s, 1),
            "wall_s": round(self.wall_s, 2),
            "examples": self.examples,
            "dropped_too_long": self.dropped_too_long,
            "loss_curve": [round(x, 5) for x in self.losses],
            "gamma_mean": round(sum(self.gammas) / len(self.gammas), 5) if self.gammas else None,
            **({"clip_fraction": round(self.clipped / self.completion_tokens, 5) if self.completion_tokens else 0.0,
                "kl_mean": round(sum(self.kl) / len(self.kl), 6) if self.kl else None} if self.policy_gradient else {}),
        }


# --------------------------------------------------------------------------- data


def prompt_ids(tokenizer: Any, messages: Sequence[dict[str, str]]) -> list[int]:
    """The chat rendered with the model's chat template and a generation prompt, as ids.

    The same rendering as :meth:`agents.backends.local.LocalPolicy.prompt_text` (template text, then
    tokenised without special tokens), so training contexts match sampling contexts.
    """
    text = tokenizer.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=True)
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def encode_examples(
    tokenizer: Any, examples: Sequence[DistillExample], max_seq_len: int, eos_id: int
) -> tuple[list[EncodedExample], int]:
    """Tokenise examples; drop those longer than ``max_seq_len``.

    Returns:
        ``(encoded, dropped)``: encoded examples in input order and how many were dropped.
    """
    out, dropped = [], 0
    for ex in examples:
        p = prompt_ids(tokenizer, ex.messages)
        comp = list(ex.completion_ids) + ([eos_id] if ex.add_eos else [])
        if len(p) + len(comp) > max_seq_len:
            dropped += 1
            continue
        old = list(ex.old_logprobs) if ex.old_logprobs is not None else [math.nan] * len(ex.completion_ids)
        # end-of-turn: weight 1, unless π_old was rescored at the sampling temperature (then it covers every target)
        old += [math.nan] * (len(comp) - len(old))
        out.append(EncodedExample(p + comp, len(p), old, ex.weighted))
    return out, dropped


def collate(batch: Sequence[EncodedExample], pad_id: int, device: torch.device | str = "cpu") -> dict[str, torch.Tensor]:
    """Right-pad a micro-batch.

    Returns:
        ``input_ids`` (B, L) long; ``attention_mask`` (B, L) long; ``target_mask`` (B, L-1)
        bool, True where position i predicts a completion token input_ids[:, i+1];
        ``old_logprobs`` (B, L-1) float32, π_old of that token (NaN where unweighted);
        ``hinted`` (B, L-1) bool, target tokens of importance-weighted examples.
    """
    L = max(len(e.input_ids) for e in batch)
    B = len(batch)
    ids = torch.full((B, L), pad_id, dtype=torch.long)
    attn = torch.zeros((B, L), dtype=torch.long)
    tmask = torch.zeros((B, L - 1), dtype=torch.bool)
    old = torch.full((B, L - 1), math.nan, dtype=torch.float32)
    hinted = torch.zeros((B, L - 1), dtype=torch.bool)
    for b, e in enumerate(batch):
        n = len(e.input_ids)
        ids[b, :n] = torch.tensor(e.input_ids)
        attn[b, :n] = 1
        lo, hi = e.n_prompt - 1, n - 1  # positions predicting tokens n_prompt .. n-1
        tmask[b, lo:hi] = True
        old[b, lo:hi] = torch.tensor(e.old_logprobs, dtype=torch.float32)
        if e.weighted:
            hinted[b, lo:hi] = ~torch.isnan(old[b, lo:hi])
    return {k: v.to(device) for k, v in
            dict(input_ids=ids, attention_mask=attn, target_mask=tmask, old_logprobs=old, hinted=hinted).items()}


# --------------------------------------------------------------------------- model


def lora_config(cfg: TrainConfig) -> Any:
    """The peft ``LoraConfig`` of ``cfg`` (causal LM; rank, alpha, dropout, target modules)."""
    from peft import LoraConfig

    return LoraConfig(
        r=cfg.rank, lora_alpha=cfg.alpha, lora_dropout=cfg.dropout, target_modules=list(cfg.target_modules),
        bias="none", task_type="CAUSAL_LM",
    )


def completion_logits(model: Any, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """Logits at the positions that predict completion tokens of a collated batch, with gradient.

    Returns:
        (N, V) float32, N = ``batch["target_mask"].sum()``, in row-major order of the mask. For
        llama-family models the vocabulary projection runs on the N completion positions only;
        other models go through the full forward. Under ``peft_model.disable_adapter()`` it gives
        the base model's logits.
    """
    return next_token_logits(model, batch["input_ids"], batch["attention_mask"], batch["target_mask"])  # (N, V)


def target_logprobs(model: Any, batch: dict[str, torch.Tensor], temperature: float = 1.0) -> torch.Tensor:
    """log π_θ of the completion tokens of a collated batch, with gradient (:func:`completion_logits`).

    Args:
        temperature: score under softmax(logits / T) (the policy that samples at T); 1: the model.

    Returns:
        (N,) float32, N = ``batch["target_mask"].sum()``, in row-major order of the mask.
    """
    targets = batch["input_ids"][:, 1:][batch["target_mask"]]  # (N,)
    logits = completion_logits(model, batch)
    if temperature != 1.0:
        logits = logits / temperature
    return -F.cross_entropy(logits, targets, reduction="none")  # (N,)


@torch.no_grad()
def mean_nll(model: Any, tokenizer: Any, examples: Sequence[DistillExample], eos_id: int,
             max_seq_len: int = 1024, batch_size: int = 8) -> float:
    """Mean unweighted negative log-likelihood per completion token (nats) of ``examples`` under ``model``."""
    enc, _ = encode_examples(tokenizer, examples, max_seq_len, eos_id)
    if not enc:
        raise TrainingError("no example fits max_seq_len")
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    total, n = 0.0, 0
    for i in range(0, len(enc), batch_size):
        lp = target_logprobs(model, collate(enc[i : i + batch_size], tokenizer.pad_token_id, device))
        total += float(-lp.sum())
        n += lp.numel()
    model.train(was_training)
    return total / n


# --------------------------------------------------------------------------- schedule


def warmup_cosine(step: int, warmup: int, total: int, min_ratio: float) -> float:
    """LR multiplier at optimizer step ``step`` (0-based): linear warm-up, then cosine to ``min_ratio``."""
    if warmup > 0 and step < warmup:
        return (step + 1) / warmup
    span = max(1, total - warmup)
    progress = min(1.0, (step - warmup) / span)
    return min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))


def total_steps(n_examples: int, cfg: TrainConfig) -> int:
    """Optimizer steps: ``cfg.max_steps`` or ``ceil(n_examples * epochs / (batch_size * grad_accum))``."""
    if cfg.max_steps:
        return cfg.max_steps
    return max(1, math.ceil(n_examples * cfg.epochs / (cfg.batch_size * cfg.grad_accum)))


def micro_batches(n: int, cfg: TrainConfig, steps: int, gen: torch.Generator) -> list[list[list[int]]]:
    """Example indices per micro-batch per step: epochs of seeded permutations, cycled."""
    need = steps * cfg.grad_accum * cfg.batch_size
    order: list[int] = []
    while len(order) < need:
        order += torch.randperm(n, generator=gen).tolist()
    mbs = [order[i : i + cfg.batch_size] for i in range(0, need, cfg.batch_size)]
    return [mbs[s * cfg.grad_accum : (s + 1) * cfg.grad_accum] for s in range(steps)]


def step_plan(n_examples: int, dropped: int, cfg: TrainConfig, with_what: str = "") -> tuple[int, list[list[list[int]]]]:
    """Optimizer steps and each step's micro-batches of example indices (:func:`micro_batches`, seeded by ``cfg.seed``).

    Raises:
        TrainingError: no example is left (``dropped`` were longer than ``cfg.max_seq_len``
            ``with_what``, e.g. " with 96 sampled tokens").
    """
    if not n_examples:
        raise TrainingError(f"no training example fits --max-seq-len {cfg.max_seq_len}{with_what} ({dropped} too long); "
                            "raise it")
    steps = total_steps(n_examples, cfg)
    return steps, micro_batches(n_examples, cfg, steps, torch.Generator().manual_seed(cfg.seed))


# --------------------------------------------------------------------------- train


def lora_and_optimizer(model: Any, cfg: TrainConfig, peft_config: Any | None, steps: int) -> tuple[Any, list, Any, Any]:
    """The peft model (LoRA injected, or a loaded adapter made trainable), its trainable parameters, AdamW and the schedule."""
    from peft import get_peft_model

    torch.manual_seed(cfg.seed)
    if hasattr(model, "peft_config"):  # an adapter to continue: make its LoRA weights trainable
        peft_model = model
        for name, p in peft_model.named_parameters():
            p.requires_grad_("lora_" in name)
    else:
        peft_model = get_peft_model(model, peft_config or lora_config(cfg))
    peft_model.train()
    params = [p for p in peft_model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.lr, betas=cfg.betas, weight_decay=cfg.weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: warmup_cosine(s, cfg.warmup_steps, steps, cfg.min_lr_ratio))
    return peft_model, params, opt, sched


def progress_bar(console: Any | None, steps: int) -> tuple[Any | None, Any]:
    """A started rich progress bar with a status field (None without a console) and its task id."""
    if console is None:
        return None, None
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    progress = Progress(TextColumn("[bold]train"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                        TextColumn("{task.fields[status]}"), console=console)
    bar = progress.add_task("train", total=steps, status="")
    progress.start()
    return progress, bar



def backward(loss: torch.Tensor, step: int, cfg: TrainConfig) -> float:
    """Back-propagate one micro-batch's loss (a scalar) and return its value.

    Raises:
        TrainingError: the loss is NaN or infinite (nothing is back-propagated).
    """
    value = float(loss.detach())
    if not math.isfinite(value):
        raise TrainingError(f"loss became {value} at step {step + 1}; lower --lr (now {cfg.lr}) or check the data")
    loss.backward()
    return value


def optimizer_step(params: list, opt: Any, sched: Any, cfg: TrainConfig) -> None:
    """One optimizer step on the accumulated gradients: clip to ``cfg.max_grad_norm`` (0: off), step, schedule, zero."""
    if cfg.max_grad_norm > 0:
        torch.nn.utils.clip_grad_norm_(params, cfg.max_grad_norm)
    opt.step()
    sched.step()
    opt.zero_grad(set_to_none=True)


def record_step(result: TrainResult, step: int, step_loss: float, progress: Any | None, bar: Any, t0: float) -> None:
    """Append a finished step's loss to ``result`` and show it (with tokens/s so far) on the progress bar."""
    result.losses.append(step_loss)
    result.steps = step + 1
    if progress is not None:
        tok_s = result.tokens / max(1e-9, time.perf_counter() - t0)
        progress.update(bar, advance=1, status=f"loss {step_loss:.4f}  {tok_s:,.0f} tok/s")


def finish_run(peft_model: Any, result: TrainResult, t0: float) -> tuple[Any, TrainResult]:
    """The run's totals (wall time, tokens/s, first and final loss) and the model in eval mode."""
    result.wall_s = time.perf_counter() - t0
    result.tokens_per_s = result.tokens / max(1e-9, result.wall_s)
    result.first_loss, result.final_loss = result.losses[0], result.losses[-1]
    peft_model.eval()
    return peft_model, result


def train(
    model: Any,
    tokenizer: Any,
    examples: Sequence[DistillExample],
    cfg: TrainConfig,
    peft_config: Any | None = None,
    eos_id: int | None = None,
    console: Any | None = None,
) -> tuple[Any, TrainResult]:
    """Train a LoRA adapter on ``examples`` (loss on completion tokens, per-token weights).

    Args:
        model: a transformers causal LM (fp32 on CPU, bf16 on CUDA); wrapped with peft here,
            its base weights are not changed (but LoRA layers are injected into it). A peft
            model (an adapter loaded with ``PeftModel.from_pretrained``) is trained on as it
            is: its LoRA weights continue from where they are (``--sleep-from previous``) and
            ``peft_config`` is ignored.
        tokenizer: its tokenizer, with a pad token.
        examples: from :func:`arena.distill.data.build_dataset`.
        cfg: LoRA, optimizer and loop settings.
        peft_config: a peft ``LoraConfig``; default :func:`lora_config` of ``cfg``.
        eos_id: end-of-turn token id appended to completions that ended their turn;
            default ``tokenizer.eos_token_id``.
        console: a rich console for the progress bar (loss, tokens/s); None: silent.

    Returns:
        ``(peft_model, result)``: the ``PeftModel`` in eval mode and the run's figures.

    Raises:
        TrainingError: no example fits ``max_seq_len``, or the loss became NaN / infinite.
    """
    # ---- data
    eos_id = tokenizer.eos_token_id if eos_id is None else eos_id
    enc, dropped = encode_examples(tokenizer, examples, cfg.max_seq_len, eos_id)
    steps, plan = step_plan(len(enc), dropped, cfg)

    # ---- model and optimizer
    peft_model, params, opt, sched = lora_and_optimizer(model, cfg, peft_config, steps)
    device = next(peft_model.parameters()).device

    # ---- loop
    progress, bar = progress_bar(console, steps)
    result = TrainResult(0, 0, 0, math.nan, math.nan, 0.0, 0.0, len(enc), dropped)
    t0 = time.perf_counter()
    try:
        for step, micro in enumerate(plan):
            n_step = sum(len(enc[i].input_ids) - enc[i].n_prompt for mb in micro for i in mb)  # completion tokens
            step_loss = 0.0
            for mb in micro:
                batch = collate([enc[i] for i in mb], tokenizer.pad_token_id, device)
                targets = batch["input_ids"][:, 1:][batch["target_mask"]]
                logits = completion_logits(peft_model, batch)  # (N, V)
                logp = -F.cross_entropy(logits, targets, reduction="none")  # (N,) log π_θ: the loss's
                old, hinted = batch["old_logprobs"][batch["target_mask"]], batch["hinted"][batch["target_mask"]]
                # the ratio's π_θ as π_old was scored: at the sampling temperature (weights are detached)
                logp_t = logp if cfg.temperature == 1.0 or not bool(hinted.any()) else -F.cross_entropy(
                    logits.detach() / cfg.temperature, targets, reduction="none")
                w, gamma = importance_weights(logp_t, old, hinted, cfg.is_quantile, cfg.is_floor)  # (N,) detached
                if gamma is not None:
                    result.gammas.append(gamma)
                loss = (w * -logp).sum() / n_step
                step_loss += backward(loss, step, cfg)
                result.tokens += int(batch["attention_mask"].sum())
                result.completion_tokens += int(batch["target_mask"].sum())
            optimizer_step(params, opt, sched, cfg)
            record_step(result, step, step_loss, progress, bar, t0)
    finally:
        if progress is not None:
            progress.stop()
    return finish_run(peft_model, result, t0)


# --------------------------------------------------------------------------- policy-gradient objectives (grpo, guide-grpo)


@dataclass
class EncodedRL:
    """An RL example as token ids: ``input_ids = prompt (the training context) + completion (+ end-of-turn)``."""

    input_ids: list[int]
    n_prompt: int  # tokens of the rendered training context
    old_logprobs: list[float]  # (n_target,) π_old of every target token at the sampling temperature
    advantage: float  # Â of the rollout in its group
    guided: bool  # Guide's shaped ratio (context without the hint) instead of PPO's clipped one


def encode_rl(tokenizer: Any, examples: Sequence[RLExample], max_seq_len: int, eos_id: int) -> tuple[list[EncodedRL], int]:
    """Tokenise RL examples under their training context; drop those longer than ``max_seq_len``.

    Raises:
        TrainingError: an example's π_old does not cover its targets (call
            :func:`arena.distill.data.rescore_old_logprobs` first).
    """
    out, dropped = [], 0
    for ex in examples:
        p = prompt_ids(tokenizer, ex.messages)
        comp = list(ex.completion_ids) + ([eos_id] if ex.add_eos else [])
        if len(p) + len(comp) > max_seq_len:
            dropped += 1
            continue
        if len(ex.old_logprobs) != len(comp):
            raise TrainingError(f"rollout {ex.rollout_id}: {len(ex.old_logprobs)} π_old log-probs for {len(comp)} targets; "
                                "rescore them at the sampling temperature first")
        out.append(EncodedRL(p + comp, len(p), list(ex.old_logprobs), float(ex.advantage), ex.guided))
    return out, dropped


def collate_rl(batch: Sequence[EncodedRL], pad_id: int, device: torch.device | str = "cpu") -> dict[str, torch.Tensor]:
    """Right-pad a micro-batch of RL examples.

    Returns:
        ``input_ids`` / ``attention_mask`` (B, L) long; ``target_mask`` (B, L-1) bool (position i
        predicts a completion token); ``old_logprobs`` (B, L-1) float32 π_old (0 off target);
        ``advantages`` (B, L-1) float32, the rollout's Â on each of its targets; ``guided`` (B, L-1)
        bool, targets of guided rollouts.
    """
    L, B = max(len(e.input_ids) for e in batch), len(batch)
    ids = torch.full((B, L), pad_id, dtype=torch.long)
    attn = torch.zeros((B, L), dtype=torch.long)
    tmask = torch.zeros((B, L - 1), dtype=torch.bool)
    old = torch.zeros((B, L - 1), dtype=torch.float32)
    adv = torch.zeros((B, L - 1), dtype=torch.float32)
    guided = torch.zeros((B, L - 1), dtype=torch.bool)
    for b, e in enumerate(batch):
        n = len(e.input_ids)
        ids[b, :n] = torch.tensor(e.input_ids)
        attn[b, :n] = 1
        lo, hi = e.n_prompt - 1, n - 1
        tmask[b, lo:hi] = True
        old[b, lo:hi] = torch.tensor(e.old_logprobs, dtype=torch.float32)
        adv[b, lo:hi] = e.advantage
        guided[b, lo:hi] = e.guided
    return {k: v.to(device) for k, v in dict(input_ids=ids, attention_mask=attn, target_mask=tmask, old_logprobs=old,
                                             advantages=adv, guided=guided).items()}


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
        ratio = torch.exp((logp[ung].detach() - old[ung]).clamp(max=30.0))
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


def train_rl(
    model: Any,
    tokenizer: Any,
    examples: Sequence[RLExample],
    cfg: TrainConfig,
    peft_config: Any | None = None,
    eos_id: int | None = None,
    console: Any | None = None,
) -> tuple[Any, TrainResult]:
    """Train a LoRA adapter with GRPO / Guide-GRPO on stored rollouts (several epochs, π_old fixed).

    The loss of an optimizer step over its micro-batches m and completion tokens t is the
    token mean ``L = Σ_m Σ_t ℓ_t / N_step`` with ``ℓ_t`` PPO's clipped surrogate (unguided tokens)
    or Guide's shaped ratio (guided tokens), both with ratios of π_θ over π_old at the rollouts'
    sampling temperature ``cfg.temperature``, plus ``cfg.kl_coef`` × the k3 KL to the base model
    (the adapter disabled) when it is above 0 (Shao et al. 2024, arXiv 2402.03300; Nath et al.
    2025, arXiv 2506.13923). Same model set-up, schedule, clipping and seed as :func:`train`.

    Args:
        model, tokenizer, cfg, peft_config, eos_id, console: as :func:`train`.
        examples: from :func:`arena.distill.data.build_rl_dataset`, π_old rescored
            (:func:`arena.distill.data.rescore_old_logprobs`).

    Returns:
        ``(peft_model, result)``.

    Raises:
        TrainingError: no example fits ``max_seq_len``, or the loss became NaN / infinite.
    """
    # ---- data
    eos_id = tokenizer.eos_token_id if eos_id is None else eos_id
    enc, dropped = encode_rl(tokenizer, examples, cfg.max_seq_len, eos_id)
    steps, plan = step_plan(len(enc), dropped, cfg)

    # ---- model and optimizer
    peft_model, params, opt, sched = lora_and_optimizer(model, cfg, peft_config, steps)
    device = next(peft_model.parameters()).device

    # ---- loop
    progress, bar = progress_bar(console, steps)
    result = TrainResult(0, 0, 0, math.nan, math.nan, 0.0, 0.0, len(enc), dropped, policy_gradient=True)
    t0 = time.perf_counter()
    try:
        for step, micro in enumerate(plan):
            n_step = sum(len(enc[i].input_ids) - enc[i].n_prompt for mb in micro for i in mb)  # completion tokens
            step_loss, step_kl = 0.0, 0.0
            for mb in micro:
                batch = collate_rl([enc[i] for i in mb], tokenizer.pad_token_id, device)
                tm = batch["target_mask"]
                logp = target_logprobs(peft_model, batch, cfg.temperature)  # (N,) log π_θ at T
                logp_ref = None
                if cfg.kl_coef > 0:
                    with torch.no_grad(), peft_model.disable_adapter():
                        logp_ref = target_logprobs(peft_model, batch, cfg.temperature)  # (N,) base model
                loss_sum, stats = rl_token_losses(logp, batch["old_logprobs"][tm], batch["advantages"][tm],
                                                  batch["guided"][tm], cfg, logp_ref)
                loss = loss_sum / n_step
                step_loss += backward(loss, step, cfg)
                if stats["gamma"] is not None:
                    result.gammas.append(stats["gamma"])
                if stats["kl_sum"] is not None:
                    step_kl += stats["kl_sum"]
                result.clipped += stats["clipped"]
                result.tokens += int(batch["attention_mask"].sum())
                result.completion_tokens += int(tm.sum())
            optimizer_step(params, opt, sched, cfg)
            if cfg.kl_coef > 0:
                result.kl.append(step_kl / n_step)
            record_step(result, step, step_loss, progress, bar, t0)
    finally:
        if progress is not None:
            progress.stop()
    return finish_run(peft_model, result, t0)
