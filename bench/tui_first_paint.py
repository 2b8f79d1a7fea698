"""Time to first paint of `arena tui`'s lessons screen at 100k lessons, against loading every row.

    python bench/tui_first_paint.py [--lessons 100000] [--repeats 3] [--json]

A fresh SQLite library is filled with synthetic lessons by :func:`bench.retrieval.fill`
(bulk SQL inserts: 10 families + global, 30% candidates, 60% active, 10% retired, Zipf
vocabulary). Then, headless (Textual's ``App.run_test``), for each repeat:

- ours: :class:`tui.app.ArenaApp` opened on the lessons screen — open the store, query one
  page (``lessons.library.read_models.PAGE_SIZE`` rows), fill the DataTable, paint; then one page flip (``]``);
- baseline: the same DataTable filled with every lesson (``LessonStore.list_lessons()``),
  what a table without paging does.

"First paint" is the wall time from entering ``run_test`` until the table holds its rows and
a screen refresh has run (``pilot.pause()``). Prints median seconds of each and the ratio
baseline / ours (higher is better). The target of issue 6 is under 1 s at 100k lessons.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import random
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from retrieval import fill, vocabulary  # noqa: E402
from textual.app import App, ComposeResult  # noqa: E402
from textual.css.query import NoMatches  # noqa: E402
from textual.widgets import DataTable  # noqa: E402

from lessons.library.store import LessonStore  # noqa: E402
from tui.app import ArenaApp  # noqa: E402
from tui.screens.lessons import LessonsScreen  # noqa: E402

SIZE = (140, 40)


async def _until(pilot, cond, timeout_s: float = 600.0) -> None:
    t_end = time.perf_counter() + timeout_s
    while not cond():
        if time.perf_counter() > t_end:
            raise TimeoutError("the table never filled")
        await pilot.pause(0.005)
    await pilot.pause()  # one refresh: the rows are painted


async def ours(path: Path) -> tuple[float, float]:
    """(first paint s, page flip s) of the TUI's lessons screen."""
    app = ArenaApp(path, poll_interval=0, start_screen="lessons")
    t0 = time.perf_counter()
    async with app.run_test(size=SIZE) as pilot:

        def table() -> DataTable | None:
            if not isinstance(app.screen, LessonsScreen):
                return None
            try:
                return app.screen.query_one("#lessons", DataTable)
            except NoMatches:  # pushed but not composed yet
                return None

        await _until(pilot, lambda: table() is not None and table().row_count > 0)
        first = time.perf_counter() - t0
        screen = app.screen
        t1 = time.perf_counter()
        await pilot.press("right_square_bracket")
        await _until(pilot, lambda: screen.page == 1 and str(table().get_row_at(0)[0]) != "global-00001" and table().row_count > 0
                     and screen._shown is not None and screen._shown[0].page == 1)
        flip = time.perf_counter() - t1
    return first, flip


class AllRowsApp(App):
    """Baseline: one DataTable with every lesson of the library."""

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = path

    def compose(self) -> ComposeResult:
        yield DataTable(id="lessons", cursor_type="row")

    def on_mount(self) -> None:
        t = self.query_one(DataTable)
        t.add_columns("id", "status", "family", "help", "harm", "utility", "text")
        with LessonStore(self.path) as store:
            rows = store.list_lessons()
        for les in rows:
            util = "-" if les.utility is None else f"{les.utility:+.3f}"
            t.add_row(les.lesson_id, les.status, les.scope, str(les.helpful), str(les.harmful), util, les.text[:56])


async def baseline(path: Path) -> float:
    app = AllRowsApp(path)
    t0 = time.perf_counter()
    async with app.run_test(size=SIZE) as pilot:
        await _until(pilot, lambda: app.query_one(DataTable).row_count > 0)
        return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lessons", type=int, default=100_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--baseline-repeats", type=int, default=1)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    rng = random.Random(0)
    vocab = vocabulary(rng)
    weights = [1.0 / (i + 1) for i in range(len(vocab))]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.db"
        t = time.perf_counter()
        fill(path, args.lessons, rng, vocab, weights)
        fill_s = time.perf_counter() - t
        runs = [asyncio.run(ours(path)) for _ in range(args.repeats)]
        base = [asyncio.run(baseline(path)) for _ in range(args.baseline_repeats)]
    first = statistics.median(r[0] for r in runs)
    flip = statistics.median(r[1] for r in runs)
    b = statistics.median(base)
    out = {
        "lessons": args.lessons,
        "first_paint_s": round(first, 3),
        "page_flip_s": round(flip, 3),
        "all_rows_first_paint_s": round(b, 3),
        "ratio": round(b / first, 1),
        "fill_s": round(fill_s, 1),
        "machine": platform.platform(),
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
    }
    if args.json:
        print(json.dumps(out))
    else:
        print(
            f"{args.lessons} lessons: first paint {first:.3f} s (median of {args.repeats}), page flip {flip:.3f} s; "
            f"all rows in one table {b:.3f} s; ratio {out['ratio']}x"
        )


if __name__ == "__main__":
    main()
