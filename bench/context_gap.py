"""How far an adapter without lessons is from the base model with them: the per-token reverse KL on held-out prompts.

Context distillation (Snell et al. 2022; on-policy: arXiv 2602.12275) aims at an adapter that,
without the lessons in its prompt, acts as the base model acts with them. Held-out pass@1 sees that
only through a coarse pass / fail over a few hundred tasks; this script measures the distance itself.

For every held-out task of a session whose prompt would show lessons (the library's ``active``
lessons, as :func:`arena.episode.prompt.retrieve_for_task` gives a held-out prompt, within
``--lesson-tokens``), the teacher — the base model with those lessons — writes its greedy
completion; each model then scores that completion without the lessons, and the gap is

    KL_t = KL( π_model(· | x, y_<t) ‖ π_base(· | lessons, x, y_<t) )   (nats, full vocabulary)

averaged over the completion's tokens t (:func:`arena.distill.losses.reverse_kl`, the loss
``opcd`` minimises, here on the teacher's own path rather than the student's samples). The base
model without lessons is the first row: the gap there is what the lessons change. An adapter
that absorbed them has a smaller gap than the base; one that drifted, a larger one.

Each row gives the token mean, the task mean with a 95% t-interval over tasks (cut at 0; null for
one task), and for adapters
the paired difference to the base row per task with the Wilcoxon signed-rank p (scipy). Rows are
JSON lines on stdout. Models load in fp32 on the CPU.

Usage::

    python bench/context_gap.py --db /tmp/bl13/opcd.db --session opcd --adapter adapter-0002 --adapter adapter-0003
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

USAGE = "context_gap.py --db DB --session NAME [--adapter ID_OR_DIR ...] [--tasks N] [--lesson-tokens N] [--max-tokens N]"


def task_gaps(model: Any, pairs: list[tuple[list[int], list[int], list[int]]], pad_id: int, adapter: bool,
              batch: int = 8) -> list[float]:
    """Per task, the mean per-token reverse KL of ``model`` without context against the base model with it.

    Args:
        model: a transformers causal LM, or a peft model (``adapter``: the teacher runs with its adapter disabled).
        pairs: per task ``(student prompt ids, teacher prompt ids, completion ids)``; completions non-empty.
        pad_id: padding id.
        adapter: ``model`` is a peft model whose adapter is the student.
        batch: tasks per forward pass.

    Returns:
        One float per task (nats per token), input order.
    """
    import contextlib

    import torch

    from arena.distill.losses import reverse_kl
    from arena.distill.objectives.base import collate
    from arena.distill.objectives.opcd import as_example
    from arena.distill.trainer import completion_logits

    out: list[float] = []
    for i in range(0, len(pairs), batch):
        chunk = pairs[i:i + batch]
        s = collate([as_example(p, c) for p, _, c in chunk], pad_id)
        t = collate([as_example(q, c) for _, q, c in chunk], pad_id)
        with torch.no_grad():
            s_logits = completion_logits(model, s)
            with model.disable_adapter() if adapter else contextlib.nullcontext():
                t_logits = completion_logits(model, t)
            kl = reverse_kl(s_logits, t_logits)
        start = 0
        for _, _, c in chunk:  # completion_logits is row-major over the target mask: each task's tokens in turn
            out.append(float(kl[start:start + len(c)].mean()))
            start += len(c)
    return out


def summarise(name: str, gaps: list[float], tokens: list[int], base: list[float] | None) -> dict[str, Any]:
    """One output row: token mean, task mean with its 95% t-interval, and the paired difference to ``base``."""
    from scipy import stats

    n = len(gaps)
    mean = sum(gaps) / n
    half = float(stats.t.ppf(0.975, n - 1) * stats.sem(gaps)) if n > 1 else math.nan
    row: dict[str, Any] = {
        "model": name, "tasks": n, "tokens": sum(tokens),
        "kl_token_mean": round(sum(g * k for g, k in zip(gaps, tokens, strict=True)) / sum(tokens), 5),
        "kl_task_mean": round(mean, 5),
        # a KL is never negative: the interval is cut at 0; one task has none (null, valid JSON)
        "ci95": [round(max(0.0, mean - half), 5), round(mean + half, 5)] if math.isfinite(half) else None,
    }
    if base is not None:
        diffs = [g - b for g, b in zip(gaps, base, strict=True)]
        row["diff_vs_base"] = round(sum(diffs) / n, 5)
        row["wilcoxon_p"] = float(stats.wilcoxon(diffs).pvalue) if any(diffs) else 1.0
        row["tasks_closer_than_base"] = sum(d < 0 for d in diffs)
    return row


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="context_gap.py", description=__doc__.split("\n\n")[0], usage=USAGE)
    ap.add_argument("--db", required=True, help="the library (SQLite path)")
    ap.add_argument("--session", required=True, help="the session whose held-out tasks are used")
    ap.add_argument("--adapter", action="append", default=[], help="a registered adapter id or a directory; repeatable")
    ap.add_argument("--tasks", type=int, default=0, help="the first N held-out tasks that show lessons (0: all)")
    ap.add_argument("--lesson-tokens", type=int, default=512, help="lessons budget of the prompt, tokens")
    ap.add_argument("--max-tokens", type=int, default=96, help="the teacher's greedy completion cap, tokens")
    ap.add_argument("--base-model", type=Path, default=None, help="a transformers checkpoint (default: the embedded SmolLM2)")
    args = ap.parse_args(argv)
    if args.tasks < 0 or args.lesson_tokens < 1 or args.max_tokens < 1:
        print("context_gap: --tasks must be >= 0, --lesson-tokens and --max-tokens >= 1", file=sys.stderr)
        return 2
    if not Path(args.db).is_file():
        print(f"context_gap: no library at {args.db}", file=sys.stderr)
        return 2

    import torch

    from agents.backends.local import LocalPolicy, ensure_converted
    from agents.policy import PolicyError, sample_many
    from agents.roles.solver import solver_messages
    from arena.cli.support import quiet_libraries
    from arena.distill.pipeline import (
        DistillError,
        base_token_count,
        check_adapter_for_base,
        resolve_adapter,
        session_heldout,
    )
    from arena.distill.objectives.base import prompt_ids
    from arena.distill.weights import AdapterError
    from arena.episode.prompt import retrieve_for_task
    from lessons.library.store import LessonStore, StoreError

    quiet_libraries()
    try:
        with LessonStore(args.db) as store:
            _, tasks = session_heldout(store, args.db, args.session)
            adapters = [resolve_adapter(store, a)[0] for a in args.adapter]
            base_dir = args.base_model or ensure_converted()
            if not base_dir.is_dir():
                raise PolicyError(f"no base model directory at {base_dir}")
            for path in adapters:  # before any model loads or any row is written
                check_adapter_for_base(path, base_dir)
            count = base_token_count(args.base_model)  # the tokenizer alone: no model loads before there is work
            shown = []
            for t in tasks:
                section, ids = retrieve_for_task(store, t, args.lesson_tokens, count)
                if ids:
                    shown.append((t, section))
            if args.tasks:
                shown = shown[:args.tasks]
            if not shown:
                print(f"context_gap: no held-out prompt of session {args.session!r} shows an active lesson", file=sys.stderr)
                return 2
            base = LocalPolicy(model_dir=args.base_model, dtype=torch.float32)
            base.load()
            teacher_chats = [solver_messages(t.question, section) for t, section in shown]
            comps = sample_many(base, teacher_chats, temperature=0.0, max_tokens=args.max_tokens)
            tok = base.tokenizer
            pairs = [(prompt_ids(tok, solver_messages(t.question)), prompt_ids(tok, chat), list(c.token_ids))
                     for (t, _), chat, c in zip(shown, teacher_chats, comps, strict=True) if c.token_ids]
            tokens = [len(c) for _, _, c in pairs]
            pad = tok.pad_token_id
            base_gaps = task_gaps(base.model, pairs, pad, adapter=False)
            print(json.dumps({**summarise("base", base_gaps, tokens, None), "lessons_shown": len(shown)}), flush=True)
            base.close()
            for spec, path in zip(args.adapter, adapters, strict=True):
                pol = LocalPolicy(model_dir=args.base_model, dtype=torch.float32, adapter=path)
                pol.load()
                print(json.dumps(summarise(spec, task_gaps(pol.model, pairs, pad, adapter=True), tokens, base_gaps)),
                      flush=True)
                pol.close()
    except (DistillError, StoreError, PolicyError, AdapterError) as e:
        print(f"context_gap: {' '.join(str(e).split())}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
