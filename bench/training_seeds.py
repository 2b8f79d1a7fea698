"""Objectives compared over several trainings each (training seeds), on the same data and held-out tasks.

Two trainings of one objective on one wake's rollouts differ (data order, LoRA initialisation, and
bf16 sampling that is not bit-reproducible): in the learning bench two replicates of ``grpo`` differed
by 0.078 with a paired McNemar p of 0.02 (bench/RESULTS.md). A single paired test holds each adapter
fixed, so a claim between objectives needs several trainings of each. This script reads each
training's per-task held-out evaluation and compares every pair of conditions with
:func:`arena.stats.replicated_comparison`: a hierarchical bootstrap over tasks and trainings, and
Welch's t-test over the trainings' pass@1.

Either replicate libraries, one training each, evaluated under one name::

    python bench/training_seeds.py eval:adapter-0002 grpo=g1.db,g2.db,g3.db guide-grpo=h1.db,h2.db,h3.db

or several adapters of one library (``arena distill --seed N`` run several times on one session;
each training's ``eval:<adapter id>`` evaluation, as ``arena distill`` and ``arena eval`` record them)::

    python bench/training_seeds.py --within arena.db [--session NAME] grpo=eval:adapter-0001,eval:adapter-0002 \\
        guide-grpo=eval:adapter-0003,eval:adapter-0004

Options: ``--boot N`` bootstrap replicates (default 10000); ``--session NAME`` the session of that
name in each library (needed where an evaluation name is recorded by several sessions). Every training must be evaluated on the
same tasks (key and question); one JSON line per pair of conditions on stdout; bad input: one line
on stderr, exit 2.
"""

from __future__ import annotations

import itertools
import json
import sqlite3
import sys

from paired_heldout import parse_conditions, per_task

from arena.stats import replicated_comparison

USAGE = ("usage: training_seeds.py [--boot N] [--session NAME] EVALUATION NAME=DB,DB[,...] NAME=DB,DB[,...] [...]"
         " | training_seeds.py [--boot N] --within DB [--session NAME] NAME=EVAL,EVAL[,...] NAME=EVAL,EVAL[,...] [...]")


class UsageError(ValueError):
    """Bad arguments; the message is one line."""


def parse(argv: list[str]) -> tuple[int, str | None, str | None, str | None, dict[str, list[str]]]:
    """``(boot, within db, session, evaluation, {condition: [library or evaluation, ...]})`` from the arguments.

    Raises:
        UsageError: a malformed or repeated argument (one line).
    """
    boot, within, session, rest = 10_000, None, None, list(argv)
    while rest[:1] in (["--boot"], ["--within"], ["--session"]):
        flag = rest.pop(0)
        if not rest:
            raise UsageError(f"{flag} needs a value")
        value = rest.pop(0)
        if flag == "--boot":
            try:
                boot = int(value)
            except ValueError:
                raise UsageError(f"--boot {value!r} is not an integer") from None
            if boot < 1000:
                raise UsageError(f"--boot must be at least 1000, got {boot}")
        elif flag == "--within":
            within = value
        else:
            session = value
    evaluation = None
    if within is None:
        if not rest:
            raise UsageError("no evaluation name")
        evaluation, rest = rest[0], rest[1:]
    if len(rest) < 2:
        raise UsageError("need at least two conditions")
    try:
        conds = parse_conditions(rest, "EVAL" if within else "DB")
    except ValueError as e:
        raise UsageError(str(e)) from None
    return boot, within, session, evaluation, conds


def main(argv: list[str]) -> int:
    if argv[:1] in (["-h"], ["--help"]):
        print(__doc__.strip())
        return 0
    try:
        boot, within, session, evaluation, conds = parse(argv)
    except UsageError as e:
        print(f"training_seeds: {e}; {USAGE}", file=sys.stderr)
        return 2
    trainings: dict[str, list[dict[str, tuple[str, bool]]]] = {}
    for cond, items in conds.items():
        trainings[cond] = []
        for item in items:
            db, name = (within, item) if within else (item, evaluation)
            try:
                one = per_task(db, name, session)
            except sqlite3.Error as e:
                print(f"training_seeds: cannot read {db}: {e}", file=sys.stderr)
                return 2
            if one is None:
                print(f"training_seeds: no evaluation {name!r} in {db}", file=sys.stderr)
                return 2
            trainings[cond].append(one)
    first = trainings[next(iter(conds))][0]
    keys = sorted(first)
    for cond, runs in trainings.items():
        for item, one in zip(conds[cond], runs, strict=True):
            if sorted(one) != keys or any(one[k][0] != first[k][0] for k in keys):
                print(f"training_seeds: {cond}'s {item} was evaluated on other tasks than the first training",
                      file=sys.stderr)
                return 2
    for a, b in itertools.combinations(conds, 2):
        out = replicated_comparison([[one[k][1] for k in keys] for one in trainings[a]],
                                    [[one[k][1] for k in keys] for one in trainings[b]], boot=boot)
        out["a"] = {"name": a, **out["a"]}
        out["b"] = {"name": b, **out["b"]}
        print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
