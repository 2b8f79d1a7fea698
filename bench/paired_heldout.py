"""Paired held-out comparisons between `arena bench learning` conditions, from their libraries.

Each condition's library (``<out>/<condition>.db``) stores per-task held-out results under the
evaluation's name; two conditions ran on the same held-out tasks, so every pair gets the exact
McNemar test and the paired difference with its 95% CI (:func:`arena.stats.paired_comparison`,
the test the bench reports against ``base``).

Usage::

    python bench/paired_heldout.py heldout_cycle1_no_lessons sft=/tmp/bl15/sft.db grpo=/tmp/bl15/grpo.db
"""

from __future__ import annotations

import itertools
import json
import sqlite3
import sys

from arena.stats import paired_comparison
from lessons.outcomes import passes


def per_task(db: str, name: str) -> dict[str, bool] | None:
    """task key → passed, of evaluation ``name`` in the library ``db`` (read-only); None when not recorded."""
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        row = conn.execute("SELECT details FROM evaluations WHERE name = ?", (name,)).fetchone()
    if row is None:
        return None
    return {r["task_key"]: r["reward"] is not None and passes(r["reward"]) for r in json.loads(row[0])["tasks"]}


def main(argv: list[str]) -> int:
    if len(argv) < 3 or any("=" not in a for a in argv[1:]):
        print("usage: paired_heldout.py EVALUATION NAME=DB NAME=DB [...]", file=sys.stderr)
        return 2
    name, conds = argv[0], dict(a.split("=", 1) for a in argv[1:])
    got = {k: per_task(db, name) for k, db in conds.items()}
    missing = [k for k, v in got.items() if v is None]
    if missing:
        print(f"paired_heldout: no evaluation {name!r} in {', '.join(conds[k] for k in missing)}", file=sys.stderr)
        return 2
    for a, b in itertools.combinations(conds, 2):
        keys = sorted(got[a])
        if keys != sorted(got[b]):
            print(f"paired_heldout: {a} and {b} were evaluated on different tasks", file=sys.stderr)
            return 2
        print(json.dumps({"a": a, "b": b, **paired_comparison([got[a][k] for k in keys], [got[b][k] for k in keys])}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
