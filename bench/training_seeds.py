"""Objectives compared over several trainings each (training seeds), on the same data and held-out tasks.

Two trainings of one objective on one wake's rollouts differ (data order, LoRA initialisation, and
bf16 sampling that is not bit-reproducible): in the learning bench two replicates of ``grpo`` differed
by 0.078 with a paired McNemar p of 0.02 (bench/RESULTS.md). A single paired test holds each adapter
fixed, so a claim between objectives needs several trainings of each. This script reads each
training's per-task held-out evaluation and compares every pair of conditions with
:func:`arena.stats.replicated_comparison`: an exact sign-flip test over tasks (the tasks'
sampling; with one training each, the exact McNemar test), Welch's t-test over the trainings'
pass@1 (the spread between trainings), and a hierarchical-bootstrap interval of the difference.
A difference is supported when both tests reject.

Either replicate libraries, one training each, evaluated under one name (so every library's
training must have received the same adapter id, as copies of one wake library do)::

    python bench/training_seeds.py eval:adapter-0002 grpo=g1.db,g2.db,g3.db guide-grpo=h1.db,h2.db,h3.db

or several adapters of one library (``arena distill --seed N`` run several times on one session;
each training's ``eval:<adapter id>`` evaluation, as ``arena distill`` and ``arena eval`` record them)::

    python bench/training_seeds.py --within arena.db grpo=eval:adapter-0001,eval:adapter-0002 \\
        guide-grpo=eval:adapter-0003,eval:adapter-0004

Options, before the evaluation and the conditions: ``--boot N`` bootstrap replicates (1000 to
1000000, default 10000); ``--session NAME`` the session of that name in each library (needed where
an evaluation name is recorded by several sessions). Every training must be evaluated on the same
tasks (key and question) at the same completion cap, and a condition's trainings all with or all
without lessons; an ungraded task counts as a fail. One JSON line per pair of conditions on
stdout; bad input: one line on stderr, exit 2, nothing written.
"""

from __future__ import annotations

import itertools
import json
import sys

from paired_heldout import (
    Evaluation,
    LibraryError,
    UsageError,
    cap_mismatch,
    leading_options,
    parse_conditions,
    read_all,
    same_tasks,
)

from arena.stats import BOOT_MAX, replicated_comparison

USAGE = ("usage: training_seeds.py [--boot N] [--session NAME] EVALUATION NAME=DB,DB[,...] NAME=DB,DB[,...] [...]"
         " | training_seeds.py [--boot N] [--session NAME] --within DB NAME=EVAL,EVAL[,...] NAME=EVAL,EVAL[,...] [...]")


def parse(argv: list[str]) -> tuple[int, str | None, dict[str, list[tuple[str, str]]]]:
    """``(boot, session, {condition: [(library, evaluation name), ...]})`` from the arguments.

    Raises:
        UsageError: a malformed, misplaced or repeated argument (one line).
    """
    opts, rest = leading_options(argv, ("--boot", "--within", "--session"))
    boot = 10_000
    if "--boot" in opts:
        try:
            boot = int(opts["--boot"])
        except ValueError:
            raise UsageError(f"--boot {opts['--boot']!r} is not an integer") from None
        if not 1000 <= boot <= BOOT_MAX:
            raise UsageError(f"--boot must be from 1000 to {BOOT_MAX}, got {boot}")
    within = opts.get("--within")
    if within is None:
        if len(rest) < 3:
            raise UsageError("need an evaluation name and at least two conditions")
        conds = {k: [(db, rest[0]) for db in dbs] for k, dbs in parse_conditions(rest[1:]).items()}
    else:
        if len(rest) < 2:
            raise UsageError("need at least two conditions")
        conds = {k: [(within, e) for e in evs] for k, evs in parse_conditions(rest, "EVAL").items()}
    return boot, opts.get("--session"), conds


def check(conds: dict[str, list[tuple[str, str]]], evals: dict[str, list[Evaluation]]) -> str | None:
    """A one-line reason the trainings cannot be compared, else None: other tasks than the first
    training's, different completion caps, or one condition mixing evaluations with and without lessons."""
    (c0, (first, *_)), ref = next(iter(conds.items())), next(iter(evals.values()))[0]
    for cond, runs in evals.items():
        for (db, name), one in zip(conds[cond], runs, strict=True):
            if not same_tasks(one, ref):
                return (f"{cond}'s {name} in {db} was evaluated on other tasks than {c0}'s {first[1]} in {first[0]} "
                        "(another --seed or task set?)")
        if len({e.with_lessons for e in runs}) > 1:
            return f"{cond} mixes evaluations with and without lessons in context"
    return cap_mismatch({f"{k}[{i}]": e for k, v in evals.items() for i, e in enumerate(v)})


def main(argv: list[str]) -> int:
    if argv[:1] in (["-h"], ["--help"]):
        print(__doc__.strip())
        return 0
    try:
        boot, session, conds = parse(argv)
    except UsageError as e:
        print(f"training_seeds: {e}; {USAGE}", file=sys.stderr)
        return 2
    try:
        evals = read_all(conds, session)
    except LibraryError as e:
        print(f"training_seeds: {e}", file=sys.stderr)
        return 2
    reason = check(conds, evals)
    if reason:
        print(f"training_seeds: {reason}", file=sys.stderr)
        return 2
    keys = sorted(next(iter(evals.values()))[0].tasks)
    for a, b in itertools.combinations(conds, 2):
        out = replicated_comparison([[e.tasks[k][1] for k in keys] for e in evals[a]],
                                    [[e.tasks[k][1] for k in keys] for e in evals[b]], boot=boot)
        out["a"] = {"name": a, **out["a"]}
        out["b"] = {"name": b, **out["b"]}
        print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
