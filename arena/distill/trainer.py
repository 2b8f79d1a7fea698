"""The one LoRA training loop of `arena distill` and the sleeps: :func:`fit`, for every registered objective.

TRL's trainers have no per-token weights, which Guide's importance-weighted guided examples
need, nor one loop for supervised, policy-gradient and on-policy objectives, so the loop is our
own (after nanochat's ``scripts/base_train.py``: data → model → optimizer → loop, schedules as
small named functions). peft ``LoraConfig`` on the llama projections, AdamW, linear warm-up then
cosine decay, global-norm gradient clipping, gradient accumulation with the loss normalised by
the completion tokens of the whole optimizer step, a fixed seed; fp32 on CPU, bf16 on CUDA (the
base model's dtype; peft keeps the LoRA weights in fp32).

The loss of an optimizer step over micro-batches m and loss tokens t is

    L = Σ_m Σ_t ℓ_t / N_step

with ``ℓ_t`` the objective's per-token loss (:meth:`arena.distill.objectives.base.Objective.micro_batch_loss`:
Guide-weighted NLL for the supervised objectives, PPO's / Guide's ratios for the policy-gradient
ones, the reverse KL to the teacher for ``opcd``) and ``N_step`` the completion tokens of the
step. The vocabulary projection is applied to completion positions only (prompt positions carry
no loss), which saves the largest matmul of a small model on every prompt token.
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
from arena.distill.data import DistillExample
from arena.distill.errors import TrainingError  # noqa: F401 - raised here; its home is torch-free for the CLI
from arena.objectives import get_objective
from arena.distill.objectives.base import EncodedExample, Objective, TrainRun, collate, encode_each


@dataclass(kw_only=True)
class TrainResult:
    """What a training run did (stored in the adapter's sidecar and row as ``metrics``)."""

    steps: int = 0  # optimizer steps
    tokens: int = 0  # non-pad tokens processed (prompt + completion, all epochs): the tokens/s numerator
    completion_tokens: int = 0  # tokens that carried loss
    final_loss: float = math.nan  # weighted loss of the last optimizer step (per completion token, nats)
    first_loss: float = math.nan  # of the first step
    tokens_per_s: float = 0.0  # tokens / wall seconds of the loop
    wall_s: float = 0.0  # seconds in the loop (data, forward, backward, optimizer)
    examples: int = 0  # examples trained on
    dropped_too_long: int = 0  # examples longer than max_seq_len, left out
    losses: list[float] = field(default_factory=list)  # per optimizer step
    gammas: list[float] = field(default_factory=list)  # Guide's γ per micro-batch with hinted tokens
    clipped: int = 0  # grpo / guide-grpo: unguided tokens whose ratio was outside [1 − ε, 1 + ε]
    kl: list[float] = field(default_factory=list)  # grpo / guide-grpo with kl_coef > 0: mean k3 KL per step, nats/token
    policy_gradient: bool = False  # a policy-gradient objective (adds clip_fraction and kl_mean to the metrics)

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


def encode_examples(
    tokenizer: Any, examples: Sequence[DistillExample], max_seq_len: int, eos_id: int
) -> tuple[list[EncodedExample], int]:
    """Tokenise supervised examples; drop those longer than ``max_seq_len``.

    Returns:
        ``(encoded, dropped)``: encoded examples in input order and how many were dropped.
    """

    def build(ex: DistillExample, p: list[int], comp: list[int]) -> EncodedExample:
        old = list(ex.old_logprobs) if ex.old_logprobs is not None else [math.nan] * len(ex.completion_ids)
        # end-of-turn: weight 1, unless π_old was rescored at the sampling temperature (then it covers every target)
        old += [math.nan] * (len(comp) - len(old))
        return EncodedExample(p + comp, len(p), old, ex.weighted)

    return encode_each(tokenizer, examples, max_seq_len, eos_id, build)


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


def fit(
    model: Any,
    tokenizer: Any,
    examples: Sequence[Any],
    cfg: TrainConfig,
    objective: str | Objective,
    peft_config: Any | None = None,
    eos_id: int | None = None,
    console: Any | None = None,
    teacher: Any | None = None,
) -> tuple[Any, TrainResult]:
    """Train a LoRA adapter on ``examples`` with ``objective``'s loss (the one loop every objective uses).

    Args:
        model: a transformers causal LM (fp32 on CPU, bf16 on CUDA); wrapped with peft here,
            its base weights are not changed (but LoRA layers are injected into it). A peft
            model (an adapter loaded with ``PeftModel.from_pretrained``) is trained on as it
            is: its LoRA weights continue from where they are (``--sleep-from previous``) and
            ``peft_config`` is ignored.
        tokenizer: its tokenizer, with a pad token (or an end-of-turn token to pad with).
        examples: the objective's examples (``build_dataset`` of its implementation), π_old
            rescored where it :meth:`~arena.distill.objectives.base.Objective.needs_pi_old`.
        cfg: LoRA, optimizer and loop settings.
        objective: a registered name (:mod:`arena.objectives`) or a loaded implementation.
        peft_config: a peft ``LoraConfig``; default :func:`lora_config` of ``cfg``.
        eos_id: end-of-turn token id appended to completions that ended their turn (and where
            sampling stops); default ``tokenizer.eos_token_id``.
        console: a rich console for the progress bar (loss, tokens/s); None: silent.
        teacher: the frozen model a ``teacher_is_start`` objective compares with when training
            starts from an adapter; None: ``model`` with its adapter disabled (the base).

    Returns:
        ``(peft_model, result)``: the ``PeftModel`` in eval mode and the run's figures.

    Raises:
        TrainingError: no example fits ``max_seq_len``, or the loss became NaN / infinite.
        ValueError: an unknown objective name.
    """
    obj = get_objective(objective).load() if isinstance(objective, str) else objective
    # ---- data
    eos_id = tokenizer.eos_token_id if eos_id is None else eos_id
    eos_ids = sorted({eos_id} | ({tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set()))
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos_id
    enc = obj.encode(tokenizer, examples, cfg, eos_id)
    steps, plan = step_plan(len(enc.items), enc.dropped, cfg, enc.too_long_note)

    # ---- model and optimizer
    peft_model, params, opt, sched = lora_and_optimizer(model, cfg, peft_config, steps)
    run = TrainRun(peft_model, tokenizer, cfg, next(peft_model.parameters()).device, pad_id, eos_ids, teacher)

    # ---- loop
    progress, bar = progress_bar(console, steps)
    result = TrainResult(examples=len(enc.items), dropped_too_long=enc.dropped, policy_gradient=obj.spec.policy_gradient)
    t0 = time.perf_counter()
    try:
        for step, micro in enumerate(plan):
            n_step, batches = obj.step_batches(run, enc.items, micro, step)
            step_loss, step_kl = 0.0, None
            for batch in batches:
                part = obj.micro_batch_loss(run, batch)
                step_loss += backward(part.loss_sum / n_step, step, cfg)
                if part.gamma is not None:
                    result.gammas.append(part.gamma)
                if part.kl_sum is not None:
                    step_kl = (step_kl or 0.0) + part.kl_sum
                result.clipped += part.clipped
                result.tokens += part.tokens
                result.completion_tokens += part.completion_tokens
            optimizer_step(params, opt, sched, cfg)
            if step_kl is not None:
                result.kl.append(step_kl / n_step)
            record_step(result, step, step_loss, progress, bar, t0)
    finally:
        if progress is not None:
            progress.stop()
    return finish_run(peft_model, result, t0)
