"""`arena bench distill`: train tokens/s of our LoRA trainer against TRL's ``SFTTrainer``.

Same base model (two fresh copies), same peft ``LoraConfig``, same pre-tokenised data (TRL
gets ``input_ids`` + ``labels`` with -100 on prompt tokens, so both compute the loss on the
completion only), same batch size, one epoch each, no gradient accumulation, same optimizer
settings (AdamW, warm-up + cosine). TRL's defaults that change the computation are set to
match ours: gradient checkpointing off, fp32 on CPU / bf16 on CUDA. Everything else in TRL
(its collator, its per-step metrics such as token accuracy and entropy) is left as it is:
that is the baseline a user would otherwise run. Tokens/s counts non-pad tokens (prompt +
completion) over the training loop's wall time; the ratio is ours / TRL's, measured in the
same process one after the other.

On CUDA the model FLOP utilisation of our trainer is also reported: ``4 · N · tokens/s /
peak`` (forward 2N plus the backward pass through frozen weights 2N FLOPs per token, N the
base model's parameter count; LoRA's own FLOPs are negligible) against the device's dense
bf16 peak (``ARENA_PEAK_TFLOPS`` overrides the built-in table).
"""

from __future__ import annotations

import gc
import os
import re
import time
from pathlib import Path
from typing import Any

import torch

# Dense bf16 peak TFLOP/s by device-name fragment (vendor datasheets, no sparsity).
PEAK_BF16_TFLOPS = {"H200": 989.0, "H100": 989.0, "A100": 312.0, "L40S": 362.0, "L4": 121.0, "A10": 125.0, "4090": 165.0}


class BenchError(ValueError):
    """The benchmark cannot run as asked; one line for stderr."""


def _examples(n: int) -> list[Any]:
    """``n`` chain_sum questions with worked reference-answer completions (the DESIGN's ceiling data)."""
    from agents.roles.solver import solver_messages
    from arena.config import DEFAULT_FAMILY
    from arena.tasks.sources import load_tasks

    tasks = load_tasks([DEFAULT_FAMILY], None, n, 1, seed=1234).train
    out = []
    for t in tasks:
        expr = " ".join(re.findall(r"\d+|[-+]", t.question.split("?")[0])) or "the terms"
        text = f"We add the terms in order: {expr} = {t.answer}. So the result is {t.answer}.\n<answer>{t.answer}</answer>"
        out.append((solver_messages(t.question), text, t.task_key))
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
) -> dict[str, Any]:
    """Run both trainers for ``steps`` optimizer steps of ``batch_size`` sequences and compare tokens/s.

    Args:
        steps: optimizer steps per trainer (one epoch of ``steps * batch_size`` examples).
        batch_size: sequences per step.
        rank: LoRA rank (alpha = 2 * rank, all llama projections).
        base_model: a transformers checkpoint directory; default the embedded model.
        device: ``"cpu"`` / ``"cuda"``; default CUDA when available.

    Returns:
        ``{"device", "dtype", "model_params", "examples", "batch_size", "steps", "ours", "trl",
        "ratio", "trl_error", "mfu"}``; ``ours`` / ``trl`` are ``{"tokens_per_s", "s_per_step",
        "tokens", "final_loss"}`` (``trl`` None with ``trl_error`` set when TRL is missing).

    Raises:
        BenchError: CUDA asked for but absent.
        agents.policy.PolicyError: the base model cannot be loaded.
    """
    from agents.backends.local import LocalPolicy, default_device
    from arena.distill.config import TrainConfig
    from arena.distill.data import DistillExample
    from arena.distill.trainer import encode_examples, lora_config, train

    device = device or default_device()
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise BenchError("--device cuda: no CUDA device is visible")
    n = steps * batch_size
    raw = _examples(n)

    cfg = TrainConfig(rank=rank, alpha=2 * rank, dropout=0.05, batch_size=batch_size, grad_accum=1, max_steps=steps,
                      warmup_steps=1, lr=2e-4, max_seq_len=1024, seed=0)

    # ---- ours
    policy = LocalPolicy(model_dir=base_model, device=device)
    policy.load()
    tok = policy.tokenizer
    examples = [
        DistillExample("sft", i, key, msgs, tok(text, add_special_tokens=False)["input_ids"], None, True)
        for i, (msgs, text, key) in enumerate(raw)
    ]
    n_params = sum(p.numel() for p in policy.model.parameters())
    dtype = str(next(policy.model.parameters()).dtype).replace("torch.", "")
    _, res = train(policy.model, tok, examples, cfg, eos_id=policy.eos_token_id)
    ours = {"tokens_per_s": round(res.tokens_per_s, 1), "s_per_step": round(res.wall_s / res.steps, 4),
            "tokens": res.tokens, "final_loss": round(res.final_loss, 4)}
    enc, _ = encode_examples(tok, examples, cfg.max_seq_len, policy.eos_token_id)
    del policy, _
    gc.collect()

    # ---- TRL
    trl_result, trl_error = None, None
    try:
        import datasets  # noqa: F401
        from trl import SFTConfig, SFTTrainer
    except ImportError as e:
        trl_error = f"TRL is not installed ({e.name}); pip install -e '.[bench]'"
    if trl_error is None:
        trl_result = _run_trl(base_model, device, enc, cfg, lora_config(cfg), SFTConfig, SFTTrainer)

    peak = peak_tflops(device)
    return {
        "device": device if not device.startswith("cuda") else torch.cuda.get_device_name(torch.device(device)),
        "dtype": dtype,
        "model_params": n_params,
        "examples": n,
        "batch_size": batch_size,
        "steps": steps,
        "lora_rank": rank,
        "ours": ours,
        "trl": trl_result,
        "ratio": round(ours["tokens_per_s"] / trl_result["tokens_per_s"], 3) if trl_result else None,
        "trl_error": trl_error,
        "mfu": round(4 * n_params * ours["tokens_per_s"] / (peak * 1e12), 4) if peak else None,
    }


def _run_trl(base_model: Path | None, device: str, enc: list[Any], cfg: Any, peft_config: Any,
             SFTConfig: Any, SFTTrainer: Any) -> dict[str, Any]:
    """One epoch of TRL's SFTTrainer over the same tokenised examples; tokens/s over its training loop."""
    import tempfile

    from datasets import Dataset
    from transformers import TrainerCallback

    from agents.backends.local import LocalPolicy

    policy = LocalPolicy(model_dir=base_model, device=device)
    policy.load()
    rows = [{"input_ids": e.input_ids, "labels": [-100] * e.n_prompt + e.input_ids[e.n_prompt:]} for e in enc]
    tokens = sum(len(e.input_ids) for e in enc)

    class Clock(TrainerCallback):
        t0 = t1 = 0.0
        losses: list[float] = []

        def on_train_begin(self, args, state, control, **kw):
            Clock.t0 = time.perf_counter()

        def on_train_end(self, args, state, control, **kw):
            Clock.t1 = time.perf_counter()

        def on_log(self, args, state, control, logs=None, **kw):
            if logs and "loss" in logs:
                Clock.losses.append(float(logs["loss"]))

    cuda = device.startswith("cuda")
    with tempfile.TemporaryDirectory() as out:
        args = SFTConfig(
            output_dir=out, per_device_train_batch_size=cfg.batch_size, gradient_accumulation_steps=1,
            num_train_epochs=1, max_steps=cfg.max_steps, learning_rate=cfg.lr, lr_scheduler_type="cosine",
            warmup_steps=cfg.warmup_steps, max_grad_norm=cfg.max_grad_norm, weight_decay=cfg.weight_decay,
            logging_steps=1, save_strategy="no", report_to=[], seed=cfg.seed, gradient_checkpointing=False,
            bf16=cuda, fp16=False, use_cpu=not cuda, dataloader_num_workers=0, max_length=None,
            disable_tqdm=True,
        )
        trainer = SFTTrainer(model=policy.model, args=args, train_dataset=Dataset.from_list(rows),
                             processing_class=policy.tokenizer, peft_config=peft_config, callbacks=[Clock()])
        trainer.train()
    wall = Clock.t1 - Clock.t0
    return {"tokens_per_s": round(tokens / wall, 1), "s_per_step": round(wall / cfg.max_steps, 4), "tokens": tokens,
            "final_loss": round(Clock.losses[-1], 4) if Clock.losses else float("nan")}
