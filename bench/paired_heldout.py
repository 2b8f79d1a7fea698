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
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

from arena.stats import paired_comparison
from lessons.outcomes import passes


@dataclass(frozen=True)
class Evaluation:
    """One held-out evaluation as recorded: per task, and how it was run."""

    tasks: dict[str, tuple[str, bool]]  # task key -> (question, passed); an ungraded task counts as a fail
    with_lessons: bool
    max_tokens: int | None  # completion cap: as recorded, else the session's --max-tokens; None if neither says


def read_evaluation(db: str, name: str, session: str | None = None) -> Evaluation | None:
    """Evaluation ``name`` of the library ``db`` (opened read-only); None when it is not recorded.

    Evaluation names are unique per session: ``session`` picks one; without it a name that
    several sessions of the library recorded is refused rather than one of them picked.

    Raises:
        sqlite3.Error: ``db`` is not a readable Lesson Arena library, the evaluation has no per-task
            results (or lists a task twice), or it is recorded in several sessions and ``session``
            is None; the message is one line.
    """
    path = Path(db)
    if not path.is_file():
        raise sqlite3.OperationalError("no such file" if not path.exists() else "not a file")
    # as_uri() percent-encodes '#', '?' and '%', which a raw "file:" URI would read as its own syntax
    with sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True) as conn:
        try:
            rows = conn.execute("SELECT e.session_id, e.details, s.name, e.with_lessons, s.config FROM evaluations e "
                                "JOIN sessions s ON s.id = e.session_id WHERE e.name = ? AND (? IS NULL OR s.name = ?) "
                                "ORDER BY s.name", (name, session, session)).fetchall()
        except sqlite3.OperationalError as e:
            if "no such table" in str(e) or "no such column" in str(e):
                raise sqlite3.DatabaseError(f"not a Lesson Arena library ({e})") from None
            raise
        if not rows:
            return None
        if len(rows) > 1:
            raise sqlite3.DatabaseError(f"evaluation {name!r} is recorded in {len(rows)} sessions "
                                        f"({', '.join(r[2] for r in rows)}): name one with --session")
        sid, details, _, with_lessons, config = rows[0]
        questions = dict(conn.execute("SELECT task_key, question FROM tasks WHERE session_id = ?", (sid,)))
    try:
        details = json.loads(details)
        got = {r["task_key"]: (questions.get(r["task_key"], ""), r["reward"] is not None and passes(r["reward"]))
               for r in details["tasks"]}
        n = len(details["tasks"])
        cap = details.get("max_tokens")
        if cap is None:
            cap = (json.loads(config or "{}") or {}).get("max_tokens")
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise sqlite3.DatabaseError(f"evaluation {name!r} has no per-task results ({type(e).__name__}: {e})") from None
    if not got:
        raise sqlite3.DatabaseError(f"evaluation {name!r} has no per-task results (0 tasks)")
    if len(got) < n:
        raise sqlite3.DatabaseError(f"evaluation {name!r} lists a task more than once ({n} rows, {len(got)} tasks)")
    return Evaluation(got, bool(with_lessons), cap if isinstance(cap, int) else None)


def same_tasks(a: Evaluation, b: Evaluation) -> bool:
    """Whether two evaluations ran on the same tasks: the same keys, each with the same question."""
    return a.tasks.keys() == b.tasks.keys() and all(a.tasks[k][0] == b.tasks[k][0] for k in a.tasks)


def cap_mismatch(evaluations: dict[str, Evaluation]) -> str | None:
    """A one-line reason when the labelled evaluations ran at different completion caps, else None.

    Pass@1 at a 96-token cap and at an 8-token cap measure different things: such figures are not compared.
    """
    caps = {label: e.max_tokens for label, e in evaluations.items() if e.max_tokens is not None}
    if len(set(caps.values())) > 1:
        return "evaluated at different completion caps (" + ", ".join(f"{k}: {v}" for k, v in caps.items()) + " tokens)"
    return None


def missing_message(name: str, db: str, session: str | None) -> str:
    """The one line for an evaluation that is not recorded."""
    return f"no evaluation {name!r} in " + (f"session {session!r} of {db}" if session else db)


USAGE = ("usage: paired_heldout.py [--session NAME] EVALUATION NAME=DB[,DB...] NAME=DB[,DB...] [...]"
         " | paired_heldout.py --within DB [--session NAME] EVALUATION EVALUATION [...]")


class UsageError(ValueError):
    """Bad arguments; the message is one line."""


class LibraryError(ValueError):
    """A library that cannot be read, or an evaluation it does not hold; the message is one line."""


def leading_options(argv: list[str], flags: Collection[str]) -> tuple[dict[str, str], list[str]]:
    """``({flag: value}, the remaining arguments)``: the ``--flag VALUE`` pairs before the first positional argument.

    Raises:
        UsageError: a flag without a value or with an empty one, a flag given twice, or one of
            ``flags`` after the positional arguments began.
    """
    opts: dict[str, str] = {}
    rest = list(argv)
    while rest and rest[0] in flags:
        flag = rest.pop(0)
        if not rest or not rest[0]:
            raise UsageError(f"{flag} needs a value")
        if flag in opts:
            raise UsageError(f"{flag} is given twice")
        opts[flag] = rest.pop(0)
    late = [a for a in rest if a.split("=", 1)[0] in flags]
    if late:
        raise UsageError(f"{late[0]} must come before the evaluation and the conditions")
    return opts, rest


def parse_conditions(args: list[str], item: str = "DB") -> dict[str, list[str]]:
    """``["a=x.db,y.db", "b=z.db,w.db"]`` → ``{"a": ["x.db", "y.db"], ...}``.

    ``item``: what the values are, ``DB`` (libraries, compared by resolved path) or ``EVAL``
    (evaluation names); it words the messages.

    Raises:
        UsageError: a missing ``=``, an empty name or value, a name given twice, a value listed
            twice in one condition (pooling it twice would double its tasks), or the same values
            given as two conditions; one line.
    """
    conds: dict[str, list[str]] = {}
    seen: dict[tuple[str, ...], str] = {}
    for a in args:
        key, sep, value = a.partition("=")
        values = value.split(",")
        if not sep or not key or not all(values):
            raise UsageError(f"{a!r} is not NAME={item}[,{item}...]")
        if key in conds:
            raise UsageError(f"condition {key!r} is given twice")
        same = [str(Path(v).resolve()) for v in values] if item == "DB" else values
        if len(set(same)) < len(values):
            raise UsageError(f"{key!r} lists {'a library' if item == 'DB' else 'an evaluation'} twice; each once")
        if tuple(same) in seen:
            raise UsageError(f"{key!r} and {seen[tuple(same)]!r} are the same {'libraries' if item == 'DB' else 'evaluations'}")
        seen[tuple(same)] = key
        conds[key] = values
    return conds


def read_all(conds: dict[str, list[tuple[str, str]]], session: str | None) -> dict[str, list[Evaluation]]:
    """Every condition's evaluations, ``{condition: [(db, evaluation name), ...]}`` → ``{condition: [Evaluation]}``.

    Raises:
        LibraryError: a library that cannot be read or an evaluation that is not recorded (one line).
    """
    out: dict[str, list[Evaluation]] = {}
    for k, pairs in conds.items():
        out[k] = []
        for db, name in pairs:
            try:
                one = read_evaluation(db, name, session)
            except sqlite3.Error as e:
                raise LibraryError(f"cannot read {db}: {e}") from None
            if one is None:
                raise LibraryError(missing_message(name, db, session))
            out[k].append(one)
    return out


def main(argv: list[str]) -> int:
    if argv[:1] in (["-h"], ["--help"]):
        print(__doc__.strip())
        return 0
    try:
        opts, rest = leading_options(argv, ("--within", "--session"))
        within, session = opts.get("--within"), opts.get("--session")
        if within is not None:  # one library, several evaluations: each evaluation is a condition
            if len(rest) < 2:
                raise UsageError("need at least two evaluations")
            if len(set(rest)) < len(rest):
                raise UsageError("an evaluation is given twice")
            conds = {e: [(within, e)] for e in rest}
        else:
            if len(rest) < 3:
                raise UsageError("need an evaluation name and at least two conditions")
            conds = {k: [(db, rest[0]) for db in dbs] for k, dbs in parse_conditions(rest[1:]).items()}
            sizes = {k: len(v) for k, v in conds.items()}
            if len(set(sizes.values())) > 1:
                raise UsageError("conditions list different numbers of libraries ("
                                 + ", ".join(f"{k}: {v}" for k, v in sizes.items())
                                 + "); each lists its seeds' libraries, in the same seed order")
    except UsageError as e:
        print(f"paired_heldout: {e}; {USAGE}", file=sys.stderr)
        return 2
    try:
        evals = read_all(conds, session)
    except LibraryError as e:
        print(f"paired_heldout: {e}", file=sys.stderr)
        return 2
    reason = cap_mismatch({f"{k}[{i}]" if len(v) > 1 else k: e for k, v in evals.items() for i, e in enumerate(v)})
    if reason:
        print(f"paired_heldout: {reason}", file=sys.stderr)
        return 2
    lines = []
    for a, b in itertools.combinations(conds, 2):  # every pair checked before any line is printed
        if not all(same_tasks(x, y) for x, y in zip(evals[a], evals[b], strict=True)):
            print(f"paired_heldout: {a} and {b} were evaluated on different tasks (another --seed or task set?)",
                  file=sys.stderr)
            return 2
        keys = [(i, t) for i, e in enumerate(evals[a]) for t in sorted(e.tasks)]
        lines.append({"a": a, "b": b, "runs": len(conds[a]),
                      **paired_comparison([evals[a][i].tasks[t][1] for i, t in keys],
                                          [evals[b][i].tasks[t][1] for i, t in keys])})
    for line in lines:
        print(json.dumps(line))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
