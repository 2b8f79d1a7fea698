"""An evaluation with nothing graded (n = 0) reports pass@1 as null everywhere a user reads it — never 0.0."""

from __future__ import annotations

from arena.cli.support import fmt_rate
from arena.evaluation import EvalResult, wilson_summary
from arena.session.summary import EvalFigure, stored_eval_summary
from lessons.library.read_models import ArenaData, open_store
from lessons.library.store import LessonStore


def test_wilson_summary_of_nothing_is_null():
    assert wilson_summary(0, 0) == {"pass_at_1": None, "n": 0, "passes": 0, "ci95": [0.0, 1.0]}
    assert wilson_summary(0, 4, with_passes=False)["pass_at_1"] == 0.0  # four failures are a score of 0
    assert wilson_summary(3, 4)["pass_at_1"] == 0.75
    empty = EvalResult([], [], [])
    assert empty.summary()["pass_at_1"] is None and empty.graded_summary()["pass_at_1"] is None
    # every task ungraded (a judge that failed on all of them): nothing measured either
    assert EvalResult([None, None], [[], []], [{}, {}]).graded_summary() == {"pass_at_1": None, "n": 0, "ci95": [0.0, 1.0]}
    assert fmt_rate(None) == "n/a" and fmt_rate(0.0) == "0.000" and fmt_rate(0.3125) == "0.312"


def test_a_stored_empty_evaluation_reads_back_null(tmp_path):
    db = tmp_path / "a.db"
    with LessonStore(str(db)) as store:
        sid = store.create_session("s", {}, 0)
        store.record_evaluation(sid, "heldout_before", "heldout", False, [1.0, 0.0], (0.09, 0.91), {})
        store.record_evaluation(sid, "heldout_after", "heldout", True, [], (0.0, 1.0), {})
        evs = store.evaluations(sid)
        assert stored_eval_summary(evs["heldout_before"]).pass_at_1 == 0.5
        assert stored_eval_summary(evs["heldout_after"]) == EvalFigure(pass_at_1=None, n=0, ci95=(0.0, 1.0))
    data = ArenaData(open_store(db))  # the TUI: the session row shows no "after", the curve has no point for it
    try:
        (row,) = data.sessions()
        assert (row.pass_before, row.pass_after) == (0.5, None)
        assert data.learning_curve(sid).heldout == [(0, 0.5)]
    finally:
        data.store.close()



def test_the_distilled_rule_on_figures_worked_by_hand():
    """`distilled_lessons` on hand-made held-out results (the values the e2e distill test cannot know in advance)."""
    from arena.distill.pipeline import distilled_lessons

    def result(passes, shown):
        return EvalResult([1.0 if p else 0.0 for p in passes], shown, [{} for _ in passes])

    shown = [["L1"]] * 6 + [["L2"]] * 4 + [[]] * 2  # L1 on tasks 0-5, L2 on 6-9, nothing on 10-11
    base = result([0, 0, 0, 0, 1, 1, 0, 0, 0, 1, 0, 0], [[] for _ in shown])
    with_lessons = result([1, 1, 1, 0, 1, 1, 0, 0, 0, 1, 1, 1], shown)
    # L1: base 2/6, with lessons 5/6 (Wilson 95% CI [0.436, 0.970]); the adapter keeps 3/6 = 0.5 >= 0.436
    # L2: with lessons 1/4 = base 1/4: it did not help, nothing to distil whatever the adapter does
    adapter = result([1, 0, 1, 0, 1, 0, 1, 1, 1, 1, 0, 0], [[] for _ in shown])
    got = distilled_lessons(["L1", "L2", "L3"], base, with_lessons, adapter)
    assert list(got) == ["L1"] and "3/6 = 0.500" in got["L1"] and "5/6" in got["L1"]
    # the adapter at 2/6 = 0.333 is below the interval's lower end: not distilled
    worse = result([1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0], [[] for _ in shown])
    assert distilled_lessons(["L1"], base, with_lessons, worse) == {}
