"""Paired held-out comparisons between `arena bench learning` conditions, from their libraries.

Each condition's library (``<out>/<condition>.db``) stores per-task held-out results under the
evaluation's name; two conditions ran on the same held-out tasks, so every pair gets the exact
McNemar test and the paired difference with its 95% CI (:func:`arena.stats.paired_comparison`,
the test the bench reports against ``base``). Tasks are matched by key *and* question: runs with
another ``--seed`` draw other tasks under the same keys, and are refused rather than paired.

Runs over several seeds pool: ``NAME=DB1,DB2`` stacks the libraries in order, so each condition
must list its seeds in the same order, and the test runs on all their tasks together.

Usage::

    python bench/paired_heldout.py heldout_cycle1_no_lessons sft=/tmp/bl15/sft.db grpo=/tmp/bl15/grpo.db
    python bench/paired_heldout.py heldout_cycle2_no_lessons distill=s0/distill.db,s1/distill.db grpo=s0/grpo.db,s1/grpo.db
"""

from __future__ import annotations

import itertools
import json
import sqlite3
import sys

from arena.stats import paired_comparison
from lessons.outcomes import passes


def per_task(db: str, name: str) -> dict[str, tuple[str, bool]] | None:
    """task key → (question, passed) of evaluation ``name`` in the library ``db`` (read-only); None when not recorded.

    Raises:
        sqlite3.Error: ``db`` is not a readable library.
    """
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        row = conn.execute("SELECT session_id, details FROM evaluations WHERE name = ?", (name,)).fetchone()
        if row is None:
            return None
        questions = dict(conn.execute("SELECT task_key, question FROM tasks WHERE session_id = ?", (row[0],)))
    return {r["task_key"]: (questions.get(r["task_key"], ""), r["reward"] is not None and passes(r["reward"]))
            for r in json.loads(row[1])["tasks"]}


def main(argv: list[str]) -> int:
    if len(argv) < 3 or any("=" not in a for a in argv[1:]):
        print("usage: paired_heldout.py EVALUATION NAME=DB[,DB...] NAME=DB[,DB...] [...]", file=sys.stderr)
        return 2
    name, conds = argv[0], {k: v.split(",") for k, v in (a.split("=", 1) for a in argv[1:])}
    got: dict[str, dict[tuple[int, str], tuple[str, bool]]] = {}
    for k, dbs in conds.items():
        got[k] = {}
        for i, db in enumerate(dbs):
            try:
                one = per_task(db, name)
            except sqlite3.Error as e:
                print(f"paired_heldout: cannot read {db}: {e}", file=sys.stderr)
                return 2
            if one is None:
                print(f"paired_heldout: no evaluation {name!r} in {db}", file=sys.stderr)
                return 2
            got[k].update({(i, key): v for key, v in one.items()})
    for a, b in itertools.combinations(conds, 2):
        keys = sorted(got[a])
        if keys != sorted(got[b]) or any(got[a][t][0] != got[b][t][0] for t in keys):
            print(f"paired_heldout: {a} and {b} were evaluated on different tasks (another --seed or task set?)",
                  file=sys.stderr)
            return 2
        print(json.dumps({"a": a, "b": b, "runs": len(conds[a]),
                          **paired_comparison([got[a][t][1] for t in keys], [got[b][t][1] for t in keys])}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
