"""Does sampling in bf16 change what the embedded solver gets right?  fp32 vs bf16, paired on the same tasks.

On CPUs with AMX (Intel Sapphire Rapids and later) torch's bf16 matmuls run several times faster
than fp32 ones, which is the largest lever on decode speed there (issue "Faults, bad input and
speed": "bf16 matmuls on CPUs that have them; greedy held-out pass@1 must not change beyond
noise"). This script measures the "must not change" part, and the wall time of the same work:

- greedy held-out pass@1 on the held-out split of ``arena bench learning`` (default family,
  128 tasks, seed 0: base 0.297 in fp32 there), exact McNemar test and Newcombe's paired CI
  (:func:`arena.stats.paired_comparison`), and how many greedy completions are the same text;
- sampled pass@1 / pass@8 on its first 32 tasks (T = 0.8, per-task seeds), as the bench reports.

Usage::

    python bench/dtype_accuracy.py                      # both dtypes, defaults above
    python bench/dtype_accuracy.py --heldout 64 --json

Pass@1 does not depend on the machine's load (greedy decoding, seeded sampling); the wall times
do: run it alone for those.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import torch

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def run_dtype(name: str, heldout: list, k_tasks: list, max_tokens: int, k: int, temperature: float, seed: int) -> dict:
    """Greedy held-out pass@1 (per task) and sampled pass@1 / pass@k of the embedded model in ``name``."""
    from agents.backends.local import LocalPolicy
    from agents.roles.solver import solver_messages
    from arena.bench.learning import sampled_pass
    from arena.evaluation import evaluate_heldout
    from lessons.library.store import LessonStore

    policy = LocalPolicy(dtype=DTYPES[name])
    try:
        policy.load()
        with tempfile.TemporaryDirectory() as d, LessonStore(str(Path(d) / "empty.db")) as store:
            t0 = time.perf_counter()
            res = evaluate_heldout(store, policy, heldout, False, 0, max_tokens)
            greedy_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        sampled = sampled_pass(policy, [solver_messages(t.question) for t in k_tasks], k_tasks, k, temperature,
                               max_tokens, seed)
        sampled_s = time.perf_counter() - t0
    finally:
        policy.close()
    return {"passes": res.passes, "answers": [r.get("extracted_answer") for r in res.rows],
            "pass_at_1": round(sum(res.passes) / len(res.passes), 4), "greedy_s": round(greedy_s, 1),
            "sampled": sampled, "sampled_s": round(sampled_s, 1)}


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--heldout", type=int, default=128, help="held-out tasks of greedy pass@1")
    ap.add_argument("--pass-k-tasks", type=int, default=32, help="first held-out tasks of the sampled pass@1 / pass@k")
    ap.add_argument("--k", type=int, default=8, help="samples per task of the sampled pass@k")
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args(argv)
    if args.heldout < 1 or not 0 <= args.pass_k_tasks <= args.heldout or args.k < 1:
        print("dtype_accuracy.py: --heldout >= 1, 0 <= --pass-k-tasks <= --heldout, --k >= 1", file=sys.stderr)
        return 2

    from arena.config import DEFAULT_FAMILY
    from arena.stats import paired_comparison
    from arena.tasks.sources import load_tasks

    heldout = load_tasks([DEFAULT_FAMILY], None, 32, args.heldout, args.seed).heldout  # bench learning's split
    k_tasks = heldout[: args.pass_k_tasks]
    load_before = os.getloadavg()[0]
    runs = {name: run_dtype(name, heldout, k_tasks, args.max_tokens, args.k, 0.8, args.seed) for name in DTYPES}
    fp32, bf16 = runs["fp32"], runs["bf16"]
    out = {
        "heldout_tasks": len(heldout), "max_tokens": args.max_tokens, "seed": args.seed,
        "loadavg_before": round(load_before, 2), "loadavg_after": round(os.getloadavg()[0], 2),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(), "threads": torch.get_num_threads(),
        **{name: {k: v for k, v in r.items() if k not in ("passes", "answers")} for name, r in runs.items()},
        "paired_bf16_vs_fp32": paired_comparison(bf16["passes"], fp32["passes"]),
        "same_extracted_answer": sum(a == b for a, b in zip(fp32["answers"], bf16["answers"])),
        "greedy_speedup": round(fp32["greedy_s"] / bf16["greedy_s"], 3),
        "sampled_speedup": round(fp32["sampled_s"] / bf16["sampled_s"], 3) if bf16["sampled_s"] else None,
    }
    if args.json:
        print(json.dumps(out))
    else:
        p = out["paired_bf16_vs_fp32"]
        print(f"greedy pass@1 (n = {len(heldout)}): fp32 {fp32['pass_at_1']}, bf16 {bf16['pass_at_1']}; "
              f"bf16 - fp32 {p['diff']:+.4f} [{p['ci95'][0]:+.4f}, {p['ci95'][1]:+.4f}], McNemar p = {p['p_value']} "
              f"({p['a_only']} vs {p['b_only']} discordant); same answer on {out['same_extracted_answer']}")
        print(f"wall: greedy fp32 {fp32['greedy_s']} s, bf16 {bf16['greedy_s']} s ({out['greedy_speedup']}x); "
              f"sampled fp32 {fp32['sampled_s']} s, bf16 {bf16['sampled_s']} s ({out['sampled_speedup']}x); "
              f"load {out['loadavg_before']} -> {out['loadavg_after']}")
        print(f"sampled (first {len(k_tasks)} tasks, k = {args.k}): fp32 {fp32['sampled']}, bf16 {bf16['sampled']}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
