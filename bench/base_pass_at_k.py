"""Base-model pass@1 (greedy and sampled) and pass@k on a task family, without lessons.

Baseline for `arena run`: how often the embedded solver solves the family on its own. The
default family was chosen so pass@8 is well above 0 (reflection needs groups that mix
successes and failures) while pass@1 is well below 1 (room to learn).

    python bench/base_pass_at_k.py [--family SPEC] [--tasks 32] [--k 8] [--temperature 0.8] [--json]
"""

from __future__ import annotations

import argparse
import json
import platform
import time

from agents.backends.local import LocalPolicy
from agents.policy import sample_many
from agents.roles.solver import solver_messages
from arena.config import DEFAULT_FAMILY
from arena.stats import mean_pass_at_k, wilson_interval
from arena.tasks.extract import extract_answer
from arena.tasks.model import Task, VerifierError
from arena.tasks.sources import load_tasks
from arena.tasks.verify import score
from lessons.outcomes import passes


def reward(task: Task, text: str) -> float:
    """The verifier's reward of a completion; 0.0 for one that crashes the verifier (a failed sample here)."""
    try:
        return score(task, extract_answer(text))
    except VerifierError:
        return 0.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--family", default=DEFAULT_FAMILY)
    ap.add_argument("--tasks", type=int, default=32, help="held-out tasks (same draw as arena run --seed)")
    ap.add_argument("--k", type=int, default=8)
    ap.add_argument("--temperature", type=float, default=0.8)
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    policy = LocalPolicy()
    policy.load()
    tasks = load_tasks([args.family], None, 1, args.tasks, args.seed).heldout
    chats = [solver_messages(t.question) for t in tasks]

    t0 = time.perf_counter()
    greedy = sample_many(policy, chats, temperature=0.0, max_tokens=args.max_tokens)
    greedy_pass = [passes(reward(t, c.text)) for t, c in zip(tasks, greedy)]
    groups, tokens = [], 0
    for i, (t, chat) in enumerate(zip(tasks, chats)):
        outs = policy.sample(chat, n=args.k, temperature=args.temperature, max_tokens=args.max_tokens, seed=args.seed + i)
        tokens += sum(len(o.token_ids) for o in outs)
        groups.append([reward(t, o.text) for o in outs])
    wall = time.perf_counter() - t0

    lo, hi = wilson_interval(sum(greedy_pass), len(tasks))
    result = {
        "family": args.family,
        "tasks": len(tasks),
        "k": args.k,
        "temperature": args.temperature,
        "greedy_pass_at_1": round(sum(greedy_pass) / len(tasks), 4),
        "greedy_ci95": [round(lo, 4), round(hi, 4)],
        "sampled_pass_at_1": round(mean_pass_at_k(groups, 1), 4),
        f"pass_at_{args.k}": round(mean_pass_at_k(groups, args.k), 4),
        "sampled_tok_s": round(tokens / wall, 1),
        "wall_s": round(wall, 1),
        "machine": f"{platform.machine()} {platform.processor() or ''} torch threads={__import__('torch').get_num_threads()}".strip(),
    }
    print(json.dumps(result) if args.json else "\n".join(f"{k}: {v}" for k, v in result.items()))


if __name__ == "__main__":
    main()
