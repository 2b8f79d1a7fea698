"""Retrieval latency for one task at 1k, 10k and 100k lessons, against a full scan in Python.

    python bench/retrieval.py [--sizes 1000 10000 100000] [--queries 50] [--db URL] [--json]

For each library size a fresh SQLite library — and, with ``--db postgresql://user@host:port/postgres``
(a server whose user may CREATE DATABASE), a fresh PostgreSQL database beside it — is filled with synthetic lessons (10 task
families + global, 30% candidates, 60% active, 10% retired; texts drawn from a Zipf-weighted
vocabulary of 3000 words so common words are common) and the same task questions are
answered by:

- ours: :func:`lessons.library.retrieval.rank_lessons` (FTS5 BM25 on SQLite or IDF-weighted
  ``ts_rank_cd`` over the GIN-indexed ``tsvector`` on PostgreSQL, top-32, + indexed prior top-32,
  combined) followed by packing into a 512-token section — what ``arena run`` does per task;
- baseline: the same ranking by a full scan in Python (load every live lesson of the family
  and global, BM25 in Python with :func:`lessons.library.retrieval.bm25_scan`, combine, pack).

Prints median and p95 milliseconds of each and the ratio baseline / ours (higher is better).
Token counts use ~4 chars/token so the tokenizer does not dominate; the packing step is the
same in both.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sqlalchemy import insert  # noqa: E402
from sqlalchemy.engine import make_url  # noqa: E402

from agents.roles.solver import LessonView, render_lessons  # noqa: E402
from lessons.db.schema import LessonRow  # noqa: E402
from lessons.library.curation import approx_tokens  # noqa: E402
from lessons.library.retrieval import bm25_scan, combine, rank_lessons  # noqa: E402
from lessons.library.store import LessonStore  # noqa: E402

FAMILIES = [f"family_{i}" for i in range(10)]
VOCAB_SIZE = 3000
BUDGET = 512


def vocabulary(rng: random.Random) -> list[str]:
    letters = "abcdefghijklmnopqrstuvwxyz"
    words: set[str] = set()
    while len(words) < VOCAB_SIZE:
        words.add("".join(rng.choice(letters) for _ in range(rng.randint(3, 9))))
    return sorted(words)


def make_text(rng: random.Random, vocab: list[str], weights: list[float]) -> str:
    n = rng.randint(6, 18)
    return " ".join(rng.choices(vocab, weights, k=n)).capitalize() + "."


def fill(url: str, n: int, rng: random.Random, vocab: list[str], weights: list[float]) -> None:
    """Create the library at ``url`` (schema, search index and its upkeep) and insert ``n`` synthetic lessons."""
    now = datetime.now(UTC)
    rows = []
    counters = {f: 0 for f in [*FAMILIES, "global"]}
    for _ in range(n):
        scope = "global" if rng.random() < 0.1 else rng.choice(FAMILIES)
        counters[scope] += 1
        status = rng.choices(["candidate", "active", "retired"], [0.3, 0.6, 0.1])[0]
        helpful, harmful = rng.randint(0, 8), rng.randint(0, 4)
        text = make_text(rng, vocab, weights)
        rows.append({
            "lesson_id": f"{scope}-{counters[scope]:05d}", "text": text, "scope": scope, "status": status,
            "helpful": helpful, "harmful": harmful, "neutral": 0, "times_in_context": 0, "tokens": approx_tokens(text),
            "utility_n": 0, "rank_score": float(helpful - harmful), "created_at": now, "updated_at": now,
        })  # fmt: skip
    with LessonStore(url) as store, store.write() as s, s.begin():
        for i in range(0, len(rows), 5000):
            s.execute(insert(LessonRow), rows[i : i + 5000])
    with LessonStore(url) as store, store.write() as s, s.begin():
        s.connection().exec_driver_sql("ANALYZE")


@contextmanager
def library(backend: str, n: int, admin_url: str | None) -> Iterator[str]:
    """The URL of a new, empty library for one size: a SQLite file in a temporary directory, or a
    PostgreSQL database ``arena_bench_<n>`` on the ``--db`` server (dropped afterwards)."""
    if backend == "sqlite":
        with tempfile.TemporaryDirectory() as tmp:
            yield str(Path(tmp) / "bench.db")
        return
    try:
        import psycopg
    except ImportError:
        raise ImportError("--db needs the PostgreSQL driver: pip install 'lesson-arena[postgres]'") from None

    assert admin_url is not None
    name = f"arena_bench_{n}"
    libpq = make_url(admin_url).set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(libpq, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield make_url(admin_url).set(drivername="postgresql+psycopg", database=name).render_as_string(hide_password=False)
    finally:
        with psycopg.connect(libpq, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def ours(store: LessonStore, family: str, question: str) -> list[str]:
    ranked = rank_lessons(store, family, question)
    _, ids = render_lessons([LessonView(r.lesson.lesson_id, r.lesson.text) for r in ranked], BUDGET, approx_tokens)
    return ids


def baseline(store: LessonStore, family: str, question: str) -> list[str]:
    scored = bm25_scan(question, store.live_lessons(family))
    ranked = combine(scored)
    _, ids = render_lessons([LessonView(r.lesson.lesson_id, r.lesson.text) for r in ranked[:64]], BUDGET, approx_tokens)
    return ids


def timed(fn, *args) -> float:
    t = time.perf_counter()
    fn(*args)
    return (time.perf_counter() - t) * 1000


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000, 100000])
    ap.add_argument("--queries", type=int, default=50, help="queries per size for ours")
    ap.add_argument("--baseline-queries", type=int, default=10, help="queries per size for the full scan")
    ap.add_argument("--db", metavar="URL", help="also measure PostgreSQL: a server URL whose user may CREATE DATABASE")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    backends = ["sqlite"] + (["postgresql"] if args.db else [])

    results = []
    for backend in backends:
        rng = random.Random(0)  # the same lessons and queries on each backend
        vocab = vocabulary(rng)
        weights = [1.0 / (i + 1) for i in range(len(vocab))]  # Zipf
        for n in args.sizes:
            with library(backend, n, args.db) as url:
                t0 = time.perf_counter()
                fill(url, n, rng, vocab, weights)
                fill_s = time.perf_counter() - t0
                store = LessonStore(url)
                queries = [
                    (rng.choice(FAMILIES), make_text(rng, vocab, weights) + " " + make_text(rng, vocab, weights))
                    for _ in range(args.queries)
                ]
                ours(store, *queries[0])  # warm caches
                ours_ms = [timed(ours, store, f, q) for f, q in queries]
                base_ms = [timed(baseline, store, f, q) for f, q in queries[: args.baseline_queries]]
                store.close()
            row = {
                "backend": backend,
                "lessons": n,
                "ours_median_ms": round(statistics.median(ours_ms), 3),
                "ours_p95_ms": round(pct(ours_ms, 0.95), 3),
                "scan_median_ms": round(statistics.median(base_ms), 3),
                "scan_p95_ms": round(pct(base_ms, 0.95), 3),
                "ratio": round(statistics.median(base_ms) / statistics.median(ours_ms), 1),
                "fill_s": round(fill_s, 1),
            }
            results.append(row)
            if not args.json:
                print(
                    f"{backend:>10} {n:>7} lessons: ours median {row['ours_median_ms']:.2f} ms (p95 {row['ours_p95_ms']:.2f}); "
                    f"full scan median {row['scan_median_ms']:.1f} ms (p95 {row['scan_p95_ms']:.1f}); "
                    f"ratio {row['ratio']}x",
                    flush=True,
                )
    if args.json:
        print(json.dumps({"machine": platform.platform(), "python": platform.python_version(), "sqlite": sqlite3.sqlite_version, "results": results}))


if __name__ == "__main__":
    from lessons.db.engine import one_line, redact_credentials
    from lessons.library.store import StoreError

    problems: tuple[type[BaseException], ...] = (StoreError, ImportError, OSError)
    try:
        import psycopg

        problems += (psycopg.Error,)  # an unreachable server, a user who may not CREATE DATABASE
    except ImportError:
        pass
    try:
        main()
    except problems as e:
        sys.exit(f"retrieval.py: {redact_credentials(one_line(e))}")
