"""Paired held-out comparisons between `arena bench learning` conditions, from their libraries.

Each condition's library (``<out>/<condition>.db``) stores per-task held-out results under the
evaluation's name; two conditions ran on the same held-out tasks, so every pair gets the exact
McNemar test and the paired difference with its 95% CI (:func:`arena.stats.paired_comparison`,
the test the bench reports against ``base``). Tasks are matched by key *and* question: runs with
another ``--seed`` draw other tasks under the same keys, and are refused rather than paired.

Runs over several seeds pool: ``NAME=DB1,DB2`` stacks the libraries in order, so each condition
must list its seeds in the same order, and the test runs on all their tasks together.

``--within DB [--session NAME] EVALUATION EVALUATION [...]`` pairs evaluations recorded in one
library instead: a session's own held-out evaluations (``heldout_cycle1_wake`` ...) and those
``arena eval`` adds (``eval:adapter-0002`` ...), all on the session's held-out tasks. Names are
unique per session: in a library of several sessions, ``--session`` says which (a name several
sessions recorded is refused without it). Evaluations must share their completion cap to be
compared: ``arena eval --max-tokens`` defaults to the session's. Across libraries, a leading
``--session NAME`` reads the session of that name in each.

Usage::

    python bench/paired_heldout.py heldout_cycle1_no_lessons sft=/tmp/bl15/sft.db grpo=/tmp/bl15/grpo.db
    python bench/paired_heldout.py heldout_cycle2_no_lessons distill=s0/distill.db,s1/distill.db grpo=s0/grpo.db,s1/grpo.db
    python bench/paired_heldout.py --within /tmp/bl13/opcd.db heldout_cycle1_wake eval:adapter-0002
"""

from __future__ import annotations

import itertools
import json
import sqlite3
import sys
from pathlib import Path

from arena.stats import paired_comparison
from lessons.outcomes import passes


def per_task(db: str, name: str, session: str | None = None) -> dict[str, tuple[str, bool]] | None:
    """task key → (question, passed) of evaluation ``name`` in the library ``db`` (read-only); None when not recorded.

    Evaluation names are unique per session: ``session`` picks one; without it a name that
    several sessions of the library recorded is refused rather than one of them picked.

    Raises:
        sqlite3.Error: ``db`` is not a readable library, the evaluation has no per-task results, or
            it is recorded in several sessions and ``session`` is None.
    """
    path = Path(db)
    if not path.is_file():
        raise sqlite3.OperationalError("no such file" if not path.exists() else "not a file")
    # as_uri() percent-encodes '#', '?' and '%', which a raw "file:" URI would read as its own syntax
    with sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True) as conn:
        rows = conn.execute("SELECT e.session_id, e.details, s.name FROM evaluations e JOIN sessions s "
                            "ON s.id = e.session_id WHERE e.name = ? AND (? IS NULL OR s.name = ?) ORDER BY s.name",
                            (name, session, session)).fetchall()
        if not rows:
            return None
        if len(rows) > 1:
            raise sqlite3.DatabaseError(f"evaluation {name!r} is recorded in {len(rows)} sessions "
                                        f"({', '.join(r[2] for r in rows)}): name one with --session")
        row = rows[0]
        questions = dict(conn.execute("SELECT task_key, question FROM tasks WHERE session_id = ?", (row[0],)))
    try:
        rows = json.loads(row[1])["tasks"]
        return {r["task_key"]: (questions.get(r["task_key"], ""), r["reward"] is not None and passes(r["reward"]))
                for r in rows}
    except (ValueError, KeyError, TypeError) as e:
        raise sqlite3.DatabaseError(f"evaluation {name!r} has no per-task results ({type(e).__name__}: {e})") from None


USAGE = ("usage: paired_heldout.py [--session NAME] EVALUATION NAME=DB[,DB...] NAME=DB[,DB...] [...]"
         " | paired_heldout.py --within DB [--session NAME] EVALUATION EVALUATION [...]")


def parse_conditions(args: list[str], item: str = "DB") -> dict[str, list[str]]:
    """``["a=x.db,y.db", "b=z.db,w.db"]`` → ``{"a": ["x.db", "y.db"], ...}``.

    ``item``: what the values are, ``DB`` (libraries, compared by resolved path) or ``EVAL``
    (evaluation names); it words the messages.

    Raises:
        ValueError: a missing ``=``, an empty name or value, a name given twice, or a value listed
            twice in one condition (pooling it twice would double its tasks); one line.
    """
    conds: dict[str, list[str]] = {}
    for a in args:
        key, sep, value = a.partition("=")
        values = value.split(",")
        if not sep or not key or not all(values):
            raise ValueError(f"{a!r} is not NAME={item}[,{item}...]")
        if key in conds:
            raise ValueError(f"condition {key!r} is given twice")
        same = {str(Path(v).resolve()) for v in values} if item == "DB" else set(values)
        if len(same) < len(values):
            raise ValueError(f"{key!r} lists {'a library' if item == 'DB' else 'an evaluation'} twice; each once")
        conds[key] = values
    return conds


def main(argv: list[str]) -> int:
    if argv[:1] in (["-h"], ["--help"]):
        print(__doc__.strip())
        return 0
    session = None
    if argv[:1] == ["--session"]:  # across libraries: the session of that name in each
        if len(argv) < 2:
            print(USAGE, file=sys.stderr)
            return 2
        session, argv = argv[1], argv[2:]
    within = argv[:1] == ["--within"]
    if within and session is None and argv[2:3] == ["--session"]:
        if len(argv) < 4:
            print(USAGE, file=sys.stderr)
            return 2
        session, argv = argv[3], argv[:2] + argv[4:]
    if len(argv) < (4 if within else 3):
        print(USAGE, file=sys.stderr)
        return 2
    if within:  # one library, several evaluations: each evaluation is a condition
        if len(set(argv[2:])) < len(argv) - 2:
            print(f"paired_heldout: an evaluation is given twice; {USAGE}", file=sys.stderr)
            return 2
        runs = [(e, argv[1], e) for e in argv[2:]]
        conds = {e: [argv[1]] for e in argv[2:]}
    else:
        try:
            conds = parse_conditions(argv[1:])
        except ValueError as e:
            print(f"paired_heldout: {e}; {USAGE}", file=sys.stderr)
            return 2
        runs = [(k, db, argv[0]) for k, dbs in conds.items() for db in dbs]
    got: dict[str, dict[tuple[int, str], tuple[str, bool]]] = {k: {} for k in conds}
    for k, db, name in runs:
        try:
            one = per_task(db, name, session)
        except sqlite3.Error as e:
            print(f"paired_heldout: cannot read {db}: {e}", file=sys.stderr)
            return 2
        if one is None:
            where = f"session {session!r} of {db}" if session else db
            print(f"paired_heldout: no evaluation {name!r} in {where}", file=sys.stderr)
            return 2
        i = conds[k].index(db)
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
