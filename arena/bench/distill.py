"""`arena bench distill`: train tokens/s of each objective's trainer against TRL's on the same data.

Pairs (ours → TRL's baseline):

- ``sft`` (:func:`arena.distill.trainer.fit` with objective ``sft``) → ``SFTTrainer``: worked reference answers to
  chain_sum questions, loss on the completion only (TRL gets ``input_ids`` + ``labels`` with
  -100 on prompt tokens).
- ``grpo`` / ``guide-grpo`` (:func:`arena.distill.trainer.fit` with that objective) → ``GRPOTrainer``: groups of
  ``group_size`` completions per question (right and wrong worked answers, rewards 1 / 0, so
  every group carries signal), π_old scored by the base model at the sampling temperature. TRL
  gets the very same token ids, log-probs and rewards through its ``rollout_func`` (no
  generation is timed: both sides train on stored rollouts) and a reward function that returns
  the stored rewards. For ``guide-grpo`` every other group is a guided one (sampled under a
  hint, trained under the chat without it); TRL has no guided path and trains those groups as
  plain GRPO — the same tokens and the same forward/backward work.

Both sides: same base model (a fresh copy each), same peft ``LoraConfig``, same batch size,
one pass over the data, no gradient accumulation, AdamW with warm-up + cosine, gradient
clipping, gradient checkpointing off, fp32 on CPU / bf16 on CUDA. GRPOTrainer is set to the
computation of ours: token-mean loss (``loss_type="dapo"``), ε = 0.2, β = 0 (no reference
model), the sampling temperature, one optimisation pass per generation batch. Everything else in
TRL (collators, per-step metrics) is left as it is: that is the baseline a user would otherwise
run. Tokens/s counts non-pad tokens (prompt + completion) over the training loop's wall time;
the ratio is ours / TRL's, both measured in one process one after the other.

On CUDA the model FLOP utilisation of our trainer is also reported: ``4 · N · tokens/s /
peak`` (forward 2N plus the backward pass through frozen weights 2N FLOPs per token, N the
base model's parameter count; LoRA's own FLOPs are negligible) against the device's dense
bf16 peak (``ARENA_PEAK_TFLOPS`` overrides the built-in table).
"""

from __future__ import annotations

import gc
import os
import re
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from arena.objectives import get_objective, specs

# Dense bf16 peak TFLOP/s by device-name fragment (vendor datasheets, no sparsity).
PEAK_BF16_TFLOPS = {"H200": 989.0, "H100": 989.0, "A100": 312.0, "L40S": 362.0, "L4": 121.0, "A10": 125.0, "4090": 165.0}

# The objectives with a TRL trainer to compare with (their registry spec's trl_baseline)
TRL_BASELINE: dict[str, str] = {s.name: s.trl_baseline for s in specs() if s.trl_baseline is not None}
BENCH_OBJECTIVES: tuple[str, ...] = tuple(TRL_BASELINE)
SAMPLING_TEMPERATURE = 0.8  # `arena run`'s default: π_old and π_θ are both scored at it
GUIDE_HINT = "Add the terms one at a time, from left to right, and keep the sign of each."


class BenchError(ValueError):
    """The benchmark cannot run as asked; one line for stderr."""


@dataclass
class _RLData:
    examples: list[Any]  # RLExamples, groups of group_size in order
    rewards: list[float]  # (len(examples),) the reward of each rollout


@dataclass
class _Task:
    messages: list[dict[str, str]]  # the solver's chat (no lessons, no hint)
    key: str
    expr: str  # the question's terms, "12 + 7 - 3"
    answer: str


def _tasks(n: int) -> list[_Task]:
    """``n`` chain_sum train questions of the default family (seed 1234)."""
    from agents.roles.solver import solver_messages
    from arena.config import DEFAULT_FAMILY
    from arena.tasks.sources import load_tasks

    out = []
    for t in load_tasks([DEFAULT_FAMILY], None, n, 1, seed=1234).train:
        expr = " ".join(re.findall(r"\d+|[-+]", t.question.split("?")[0])) or "the terms"
        out.append(_Task(solver_messages(t.question), t.task_key, expr, str(t.answer)))
    return out


def _worked(task: _Task, answer: str) -> str:
    return f"We add the terms in order: {task.expr} = {answer}. So the result is {answer}.\n<answer>{answer}</answer>"


def _group(task: _Task, size: int) -> list[tuple[str, float]]:
    """``size`` completions of one task with their rewards: right (even i) and wrong (odd i, the answer off by 1, 2, ...)."""
    try:
        right = int(task.answer)
    except ValueError:
        right = None
    out = []
    for i in range(size):
        if i % 2 == 0:
            out.append((_worked(task, task.answer), 1.0))
        else:
            wrong = str(right + (i // 2 + 1)) if right is not None else f"{task.answer}0"
            out.append((_worked(task, wrong), 0.0))
    return out


def peak_tflops(device: str) -> float | None:
    """Dense bf16 peak of the CUDA device (``ARENA_PEAK_TFLOPS`` wins); None when unknown or on CPU."""
    if os.environ.get("ARENA_PEAK_TFLOPS"):
        return float(os.environ["ARENA_PEAK_TFLOPS"])
    if not device.startswith("cuda"):
        return None
    name = torch.cuda.get_device_name(torch.device(device))
    return next((v for k, v in PEAK_BF16_TFLOPS.items() if k in name), None)


def bench_distill_speed(
    steps: int = 8,
    batch_size: int = 4,
    rank: int = 16,
    base_model: Path | None = None,
    device: str | None = None,
    objectives: Sequence[str] = BENCH_OBJECTIVES,
    group_size: int = 4,
) -> dict[str, Any]:
    """Train each objective with our trainer and with TRL's, ``steps`` optimizer steps of ``batch_size`` sequences, and compare tokens/s.

    Args:
        steps: optimizer steps per trainer (one pass over ``steps * batch_size`` sequences).
        batch_size: sequences (completions) per step; for grpo / guide-grpo a multiple of ``group_size``.
        rank: LoRA rank (alpha = 2 * rank, all llama projections).
        base_model: a transformers checkpoint directory; default the embedded model.
        device: ``"cpu"`` / ``"cuda"``; default CUDA when available.
        objectives: a subset of :data:`BENCH_OBJECTIVES`, run in this order.
        group_size: completions per question of the grpo / guide-grpo data (≥ 2).

    Returns:
        ``{"device", "dtype", "model_params", "batch_size", "steps", "lora_rank", "group_size",
        "trl_error", "objectives"}``; ``objectives[name]`` is ``{"baseline", "examples", "ours",
        "trl", "ratio", "mfu"}`` with ``ours`` / ``trl`` ``{"tokens_per_s", "s_per_step",
        "tokens", "final_loss"}`` (``trl`` and ``ratio`` None with ``trl_error`` set when TRL is missing).

    Raises:
        BenchError: an unknown objective, a batch that is not a whole number of groups, or CUDA
            asked for but absent.
        agents.policy.PolicyError: the base model cannot be loaded.
    """
    from agents.backends.local import LocalPolicy, default_device, training_dtype
    from arena.distill.config import TrainConfig

    unknown = [o for o in objectives if o not in BENCH_OBJECTIVES]
    if unknown:
        raise BenchError(f"--objective {unknown[0]!r} has no trainer to compare with; choose from {', '.join(BENCH_OBJECTIVES)}")
    if not objectives:
        raise BenchError(f"--objective: name at least one of {', '.join(BENCH_OBJECTIVES)}")
    rl = [o for o in objectives if get_objective(o).policy_gradient]
    if rl and group_size < 2:
        raise BenchError(f"--group-size must be >= 2 for a group-relative advantage, got {group_size}")
    if rl and batch_size % group_size:
        raise BenchError(f"--batch-size {batch_size} is not a whole number of groups of --group-size {group_size} "
                         f"(GRPOTrainer needs whole groups per step); pass --batch-size {group_size * max(1, batch_size // group_size)}")
    device = device or default_device()
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise BenchError("--device cuda: no CUDA device is visible")
    try:
        import datasets  # noqa: F401
        import trl  # noqa: F401

        trl_error = None
    except ImportError as e:
        trl_error = f"TRL is not installed ({e.name}); pip install -e '.[bench]'"

    cfg = TrainConfig(rank=rank, alpha=2 * rank, dropout=0.05, batch_size=batch_size, grad_accum=1, max_steps=steps,
                      warmup_steps=1, lr=2e-4, max_seq_len=1024, seed=0, temperature=SAMPLING_TEMPERATURE)

    def fresh() -> LocalPolicy:
        p = LocalPolicy(model_dir=base_model, device=device, dtype=training_dtype(device))
        p.load()
        return p

    probe = fresh()
    n_params = sum(p.numel() for p in probe.model.parameters())
    dtype = str(next(probe.model.parameters()).dtype).replace("torch.", "")
    data = {o: _sft_data(probe, steps * batch_size) if not get_objective(o).policy_gradient else
            _rl_data(probe, steps * batch_size // group_size, group_size, guided=get_objective(o).uses_hints) for o in objectives}
    del probe
    gc.collect()

    peak = peak_tflops(device)
    rows: dict[str, Any] = {}
    for objective in objectives:
        ours = _run_ours(fresh(), objective, data[objective], cfg)
        gc.collect()
        theirs = None if trl_error else _run_trl(fresh(), objective, data[objective], cfg, group_size)
        gc.collect()
        rows[objective] = {
            "baseline": f"TRL {TRL_BASELINE[objective]}",
            "examples": len(data[objective].examples if get_objective(objective).policy_gradient else data[objective]),
            "ours": ours,
            "trl": theirs,
            "ratio": round(ours["tokens_per_s"] / theirs["tokens_per_s"], 3) if theirs else None,
            "mfu": round(4 * n_params * ours["tokens_per_s"] / (peak * 1e12), 4) if peak else None,
        }
    return {
        "device": device if not device.startswith("cuda") else torch.cuda.get_device_name(torch.device(device)),
        "dtype": dtype,
        "model_params": n_params,
        "batch_size": batch_size,
        "steps": steps,
        "lora_rank": rank,
        "group_size": group_size if rl else None,
        "trl_error": trl_error,
        "objectives": rows,
    }


# --------------------------------------------------------------------------- data (one copy for both trainers)


def _sft_data(policy: Any, n: int) -> list[Any]:
    """``n`` DistillExamples: a chain_sum question and its worked reference answer."""
    from arena.distill.data import DistillExample

    tok = policy.tokenizer
    return [DistillExample("sft", i, t.key, t.messages, tok(_worked(t, t.answer), add_special_tokens=False)["input_ids"],
                           None, True) for i, t in enumerate(_tasks(n))]


def _rl_data(policy: Any, n_groups: int, size: int, guided: bool) -> _RLData:
    """``n_groups`` groups of ``size`` RLExamples with their rewards, group-relative advantages and π_old at the sampling temperature.

    With ``guided``, every other group was "sampled" under :data:`GUIDE_HINT` (π_old scored under
    the hinted chat) and is trained under the chat without it, as Guide's guided groups are.
    """
    from agents.roles.solver import guided_messages
    from arena.distill.data import RLExample
    from arena.distill.losses import group_advantages

    tok, eos = policy.tokenizer, policy.eos_token_id
    out: list[RLExample] = []
    rewards: list[float] = []
    for g, task in enumerate(_tasks(n_groups)):
        group = _group(task, size)
        adv = group_advantages([r for _, r in group]).tolist()
        hinted = guided and g % 2 == 1
        sampling = guided_messages(task.messages, GUIDE_HINT) if hinted else task.messages
        for (text, r), a in zip(group, adv):
            ids = tok(text, add_special_tokens=False)["input_ids"]
            old = policy.token_logprobs(sampling, [*ids, eos], temperature=SAMPLING_TEMPERATURE).tolist()
            out.append(RLExample("guided-grpo" if hinted else "grpo", len(out), task.key, task.messages, sampling,
                                 ids, old, True, float(a)))
            rewards.append(r)
    return _RLData(out, rewards)


# --------------------------------------------------------------------------- ours


def _run_ours(policy: Any, objective: str, data: Any, cfg: Any) -> dict[str, Any]:
    from arena.distill.trainer import fit

    examples = data.examples if get_objective(objective).policy_gradient else data
    _, res = fit(policy.model, policy.tokenizer, examples, cfg, objective, eos_id=policy.eos_token_id)
    return {"tokens_per_s": round(res.tokens_per_s, 1), "s_per_step": round(res.wall_s / res.steps, 4),
            "tokens": res.tokens, "final_loss": round(res.final_loss, 4)}


# --------------------------------------------------------------------------- TRL


def _clock() -> Any:
    """A transformers ``TrainerCallback`` that times the training loop and keeps the logged losses."""
    from transformers import TrainerCallback

    class Clock(TrainerCallback):
        def __init__(self) -> None:
            self.t0 = self.t1 = 0.0
            self.losses: list[float] = []

        def on_train_begin(self, args, state, control, **kw):
            self.t0 = time.perf_counter()

        def on_train_end(self, args, state, control, **kw):
            self.t1 = time.perf_counter()

        def on_log(self, args, state, control, logs=None, **kw):
            if logs and "loss" in logs:
                self.losses.append(float(logs["loss"]))

    return Clock()


def _common_args(cfg: Any, out: str, cuda: bool) -> dict[str, Any]:
    """The TrainingArguments both TRL trainers share, set to our loop's computation."""
    return {
        "output_dir": out, "per_device_train_batch_size": cfg.batch_size, "gradient_accumulation_steps": 1,
        "num_train_epochs": 1, "max_steps": cfg.max_steps, "learning_rate": cfg.lr, "lr_scheduler_type": "cosine",
        "warmup_steps": cfg.warmup_steps, "max_grad_norm": cfg.max_grad_norm, "weight_decay": cfg.weight_decay,
        "logging_steps": 1, "save_strategy": "no", "report_to": [], "seed": cfg.seed, "gradient_checkpointing": False,
        "bf16": cuda, "fp16": False, "use_cpu": not cuda, "dataloader_num_workers": 0, "disable_tqdm": True,
    }


def _run_trl(policy: Any, objective: str, data: Any, cfg: Any, group_size: int) -> dict[str, Any]:
    """One pass of TRL's trainer for ``objective`` over the same tokenised data; tokens/s over its training loop."""
    from arena.distill.objectives.policy_gradient import encode_rl
    from arena.distill.trainer import encode_examples, lora_config

    cuda = str(next(policy.model.parameters()).device).startswith("cuda")
    clock = _clock()
    with tempfile.TemporaryDirectory() as out:
        if not get_objective(objective).policy_gradient:
            from datasets import Dataset
            from trl import SFTConfig, SFTTrainer

            enc, _ = encode_examples(policy.tokenizer, data, cfg.max_seq_len, policy.eos_token_id)
            rows = [{"input_ids": e.input_ids, "labels": [-100] * e.n_prompt + e.input_ids[e.n_prompt:]} for e in enc]
            tokens = sum(len(e.input_ids) for e in enc)
            args = SFTConfig(**_common_args(cfg, out, cuda), max_length=None)
            trainer = SFTTrainer(model=policy.model, args=args, train_dataset=Dataset.from_list(rows),
                                 processing_class=policy.tokenizer, peft_config=lora_config(cfg), callbacks=[clock])
        else:
            enc, _ = encode_rl(policy.tokenizer, data.examples, cfg.max_seq_len, policy.eos_token_id)
            tokens = sum(len(e.input_ids) for e in enc)
            trainer = _grpo_trainer(policy, enc, data.rewards, cfg, group_size, out, cuda, clock)
        os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
        trainer.train()
        seen = getattr(trainer, "served", None)
        if seen is not None and sorted(seen) != list(range(len(enc))):  # every stored rollout once, none twice
            raise BenchError(f"TRL {TRL_BASELINE[objective]} trained on {len(seen)} rollouts ({len(set(seen))} distinct) "
                             f"of the {len(enc)} given: its sampler no longer makes one pass; the ratio would compare different data")
        if seen is not None and trainer.state.num_input_tokens_seen != tokens:
            raise BenchError(f"TRL {TRL_BASELINE[objective]} counted {trainer.state.num_input_tokens_seen} tokens, ours "
                             f"{tokens}: the two trainers did not see the same rollouts")
    wall = clock.t1 - clock.t0
    return {"tokens_per_s": round(tokens / wall, 1), "s_per_step": round(wall / cfg.max_steps, 4), "tokens": tokens,
            "final_loss": round(clock.losses[-1], 4) if clock.losses else float("nan")}


def _grpo_trainer(policy: Any, enc: list[Any], rewards: list[float], cfg: Any, group_size: int, out: str, cuda: bool,
                  clock: Any) -> Any:
    """TRL's GRPOTrainer fed the stored rollouts through ``rollout_func``: the same ids, π_old and rewards, nothing generated."""
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from arena.distill.trainer import lora_config

    groups = [list(range(i, i + group_size)) for i in range(0, len(enc), group_size)]
    prompts = [f"group {g}" for g in range(len(groups))]  # a key per group: rollout_func looks the rollouts up by it
    served = {p: 0 for p in prompts}
    order: list[int] = []  # rollouts handed to TRL, in order (checked after training: each exactly once)

    def rollout_func(batch_prompts: list[str], trainer: Any) -> dict[str, list]:
        """The next stored rollout of each prompt's group (the sampler repeats each prompt ``group_size`` times)."""
        picked = []
        for p in batch_prompts:
            members = groups[prompts.index(p)]
            picked.append(members[served[p] % group_size])
            served[p] += 1
        order.extend(picked)
        return {
            "prompt_ids": [enc[i].input_ids[: enc[i].n_prompt] for i in picked],
            "completion_ids": [enc[i].input_ids[enc[i].n_prompt:] for i in picked],
            "logprobs": [list(enc[i].old_logprobs) for i in picked],
            "stored_reward": [rewards[i] for i in picked],
        }

    def stored_reward(prompts: list, completions: list, stored_reward: list[float], **kw: Any) -> list[float]:
        return list(stored_reward)

    max_completion = max(len(e.input_ids) - e.n_prompt for e in enc)
    args = GRPOConfig(**_common_args(cfg, out, cuda), num_generations=group_size, steps_per_generation=1,
                      num_iterations=1, temperature=cfg.temperature, beta=0.0, epsilon=cfg.clip_eps, loss_type="dapo",
                      max_completion_length=max_completion, log_completions=False, shuffle_dataset=False)
    trainer = GRPOTrainer(model=policy.model, reward_funcs=[stored_reward], args=args,
                          train_dataset=Dataset.from_list([{"prompt": p} for p in prompts]),
                          processing_class=policy.tokenizer, peft_config=lora_config(cfg), callbacks=[clock],
                          rollout_func=rollout_func)
    trainer.served = order
    return trainer
