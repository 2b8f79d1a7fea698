"""Retrieval latency for one task at 1k, 10k and 100k lessons, against a full scan in Python.

    python bench/retrieval.py [--sizes 1000 10000 100000] [--queries 50] [--json]

For each library size a fresh SQLite library is filled with synthetic lessons (10 task
families + global, 30% candidates, 60% active, 10% retired; texts drawn from a Zipf-weighted
vocabulary of 3000 words so common words are common) and the same task questions are
answered by:

- ours: :func:`lessons.library.retrieval.rank_lessons` (FTS5 BM25 top-32 + indexed prior top-32,
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
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agents.roles.solver import LessonView, render_lessons  # noqa: E402
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


def fill(path: Path, n: int, rng: random.Random, vocab: list[str], weights: list[float]) -> None:
    LessonStore(str(path)).close()  # schema, FTS table and triggers
    now = datetime.now(UTC).replace(tzinfo=None).isoformat(sep=" ")
    rows = []
    counters = {f: 0 for f in [*FAMILIES, "global"]}
    for _ in range(n):
        scope = "global" if rng.random() < 0.1 else rng.choice(FAMILIES)
        counters[scope] += 1
        status = rng.choices(["candidate", "active", "retired"], [0.3, 0.6, 0.1])[0]
        helpful, harmful = rng.randint(0, 8), rng.randint(0, 4)
        text = make_text(rng, vocab, weights)
        rows.append((f"{scope}-{counters[scope]:05d}", text, scope, status, helpful, harmful, approx_tokens(text), float(helpful - harmful), now, now))
    with sqlite3.connect(path) as conn:
        conn.executemany(
            "INSERT INTO lessons (lesson_id, text, scope, status, helpful, harmful, neutral, times_in_context, tokens, "
            "utility_n, rank_score, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, 0, 0, ?, 0, ?, ?, ?)",
            rows,
        )
        conn.execute("ANALYZE")


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
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    rng = random.Random(0)
    vocab = vocabulary(rng)
    weights = [1.0 / (i + 1) for i in range(len(vocab))]  # Zipf
    results = []
    for n in args.sizes:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "bench.db"
            t0 = time.perf_counter()
            fill(path, n, rng, vocab, weights)
            fill_s = time.perf_counter() - t0
            store = LessonStore(str(path))
            queries = [(rng.choice(FAMILIES), make_text(rng, vocab, weights) + " " + make_text(rng, vocab, weights)) for _ in range(args.queries)]
            ours(store, *queries[0])  # warm caches
            ours_ms = [timed(ours, store, f, q) for f, q in queries]
            base_ms = [timed(baseline, store, f, q) for f, q in queries[: args.baseline_queries]]
            store.close()
        row = {
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
                f"{n:>7} lessons: ours median {row['ours_median_ms']:.2f} ms (p95 {row['ours_p95_ms']:.2f}); "
                f"full scan median {row['scan_median_ms']:.1f} ms (p95 {row['scan_p95_ms']:.1f}); "
                f"ratio {row['ratio']}x",
                flush=True,
            )
    if args.json:
        print(json.dumps({"machine": platform.platform(), "python": platform.python_version(), "sqlite": sqlite3.sqlite_version, "results": results}))


if __name__ == "__main__":
    main()
