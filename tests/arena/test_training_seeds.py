"""Objectives over several trainings each: :func:`arena.stats.replicated_comparison` and `bench/training_seeds.py`."""

from __future__ import annotations

import json
import math
import random
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import report_fixture

from arena.stats import replicated_comparison, sign_flip_test
from lessons.library.store import LessonStore

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "training_seeds.py"
EVAL = "eval:adapter-0002"
QS = ["1 + 2", "3 + 4", "5 + 6", "7 + 8"]

# three trainings of A pass 2, 1 and 3 of the 4 tasks; two of B pass 0 and 1
A = [[1, 1, 0, 0], [1, 0, 0, 0], [1, 1, 1, 0]]
B = [[0, 0, 0, 0], [1, 0, 0, 0]]


def test_per_training_figures_and_welch_by_hand():
    got = replicated_comparison(A, B)
    assert got["tasks"] == 4
    assert got["a"] == {"trainings": 3, "pass_at_1": [0.5, 0.25, 0.75], "mean": 0.5, "sd_between_trainings": 0.25}
    # B: 0 and 0.25, mean 0.125, sd = sqrt(0.125^2 * 2 / 1) = 0.1768
    assert got["b"] == {"trainings": 2, "pass_at_1": [0.0, 0.25], "mean": 0.125, "sd_between_trainings": 0.1768}
    assert got["diff"] == 0.375
    # Welch: variances 0.0625 / 3 and 0.03125 / 2, se² = 7/192; t = 0.375 / sqrt(7/192) = 1.9640;
    # Welch–Satterthwaite df = (7/192)² / ((1/48)²/2 + (1/64)²/1) = 2.8824; p = 2 P(T_df > t) = 0.1480;
    # half-width t_{0.975, 2.8824} = 3.2572 times 0.190941 = 0.6219
    w = got["welch"]
    assert (w["t"], w["df"]) == (1.964, 2.8824)
    assert w["p_value"] == pytest.approx(0.148028, abs=1e-5)
    assert w["ci95"] == [pytest.approx(0.375 - 0.6219, abs=2e-4), pytest.approx(0.375 + 0.6219, abs=2e-4)]


def test_tasks_test_by_hand():
    # per task, A's mean pass rate − B's: (3/3 − 1/2, 2/3 − 0, 1/3 − 0, 0 − 0) = (1/2, 2/3, 1/3, 0);
    # times S_a S_b = 6: (3, 4, 2, 0), sum 9. Under the null the 8 sign patterns of (3, 4, 2) give sums
    # ±9, ±5, ±3, ±1, ... each with probability 1/8: |sum| ≥ 9 only for (+,+,+) and (−,−,−): p = 2/8
    got = replicated_comparison(A, B)["tasks_test"]
    assert got == {"p_value": 0.25, "tasks_differing": 3}
    # one training each: the exact McNemar test (4 tasks only A passes, none only B: 2 · 0.5^4 = 0.125)
    one = replicated_comparison([[1, 1, 1, 1, 0, 1]], [[0, 0, 0, 0, 0, 1]])
    assert one["tasks_test"] == {"p_value": 0.125, "tasks_differing": 4} and one["welch"] is None


@pytest.mark.parametrize(("d", "p"), [([1] * 10 + [-1] * 3, 0.09228515625), ([], 1.0), ([0, 0], 1.0), ([2, -2], 1.0),
                                      ([5], 1.0), ([1, 1, 1], 0.25)])
def test_sign_flip_test_against_the_binomial(d, p):
    # ten +1 and three −1: the two-sided binomial(13, 1/2) tail P(X ≤ 3) · 2 = 2 · 378 / 8192 = 0.0923
    assert sign_flip_test(d) == pytest.approx(p, abs=1e-12)


def test_bootstrap_at_the_extremes():
    same = replicated_comparison(A, A, boot=2000)
    lo, hi = same["bootstrap"]["ci95"]
    assert same["diff"] == 0.0 and lo < 0 < hi and same["bootstrap"]["replicates"] == 2000
    assert same["welch"]["t"] == 0.0 and same["welch"]["p_value"] == 1.0 and same["tasks_test"]["p_value"] == 1.0
    # every training of A passes everything, every one of B nothing: the difference is 1 in every replicate
    full = replicated_comparison([[1] * 4] * 3, [[0] * 4] * 3, boot=2000)
    assert full["bootstrap"]["ci95"] == [1.0, 1.0] and full["tasks_test"]["p_value"] == 2 / 16
    assert full["welch"] is None  # no spread between trainings in either: t is undefined


def test_replicates_beyond_one_block_agree_with_fewer():
    many, few = replicated_comparison(A, B, boot=25_000, seed=3), replicated_comparison(A, B, boot=5_000, seed=3)
    assert many["bootstrap"]["replicates"] == 25_000
    assert many["bootstrap"]["ci95"] == pytest.approx(few["bootstrap"]["ci95"], abs=0.13)


def test_spread_between_trainings_widens_the_interval():
    """The same tasks and overall mean; in one case the three trainings agree, in the other they spread."""
    rng = random.Random(0)
    t = 200
    mid = [int(rng.random() < 0.5) for _ in range(t)]
    ones = [i for i, v in enumerate(mid) if v]
    zeros = [i for i, v in enumerate(mid) if not v]
    k = 40
    low = [0 if i in ones[:k] else v for i, v in enumerate(mid)]  # 40 passes fewer
    high = [1 if i in zeros[:k] else v for i, v in enumerate(mid)]  # 40 passes more
    steady, spread, b = [mid] * 3, [low, mid, high], [[0] * t]
    assert sum(map(sum, spread)) == sum(map(sum, steady))
    s, p = replicated_comparison(steady, b, seed=1), replicated_comparison(spread, b, seed=1)
    assert s["diff"] == p["diff"] and p["a"]["sd_between_trainings"] == 0.2 and s["a"]["sd_between_trainings"] == 0.0
    width = lambda r: r["bootstrap"]["ci95"][1] - r["bootstrap"]["ci95"][0]
    assert width(p) > 1.5 * width(s)
    # one training each against an all-fail B: the bootstrap is over tasks only, the binomial interval's width
    p1 = sum(mid) / t
    assert width(s) == pytest.approx(2 * 1.96 * math.sqrt(p1 * (1 - p1) / t), rel=0.1)
    one = replicated_comparison([mid], b, seed=2)
    assert one["welch"] is None and one["a"]["sd_between_trainings"] is None


@pytest.mark.parametrize(("a", "b", "boot"), [([], B, 1000), (A, [[0, 1]], 1000), ([[]], [[]], 1000), (A, B, 999),
                                              (A, B, 1_000_001)])
def test_bad_shapes_and_too_few_replicates_are_refused(a, b, boot):
    with pytest.raises(ValueError):
        replicated_comparison(a, b, boot=boot)


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, check=False)


def test_replicate_libraries_end_to_end(tmp_path):
    a = [report_fixture.heldout_library(tmp_path / f"a{i}.db", QS, {EVAL: [float(v) for v in r]}) for i, r in enumerate(A)]
    b = [report_fixture.heldout_library(tmp_path / f"b{i}.db", QS, {EVAL: [float(v) for v in r]}) for i, r in enumerate(B)]
    out = run("--boot", "2000", EVAL, "grpo=" + ",".join(a), "guide-grpo=" + ",".join(b))
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert got == {**replicated_comparison(A, B, boot=2000), "a": {"name": "grpo", **got["a"]},
                   "b": {"name": "guide-grpo", **got["b"]}}
    assert got["a"]["pass_at_1"] == [0.5, 0.25, 0.75] and got["b"]["name"] == "guide-grpo"


def test_within_one_library_each_adapter_is_a_training(tmp_path):
    names = [f"eval:adapter-{i:04d}" for i in range(1, 6)]
    db = report_fixture.heldout_library(tmp_path / "arena.db", QS, dict(zip(names, [list(map(float, r)) for r in A + B],
                                                                        strict=True)))
    out = run("--within", db, "grpo=" + ",".join(names[:3]), "sft=" + ",".join(names[3:]))
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert (got["a"]["name"], got["a"]["mean"], got["b"]["mean"], got["diff"]) == ("grpo", 0.5, 0.125, 0.375)
    three = run("--within", db, "a=" + names[0], "b=" + names[1], "c=" + names[2])
    assert [(r["a"]["name"], r["b"]["name"]) for r in map(json.loads, three.stdout.splitlines())] == [
        ("a", "b"), ("a", "c"), ("b", "c")]


def test_bad_input_is_one_line_and_exit_2(tmp_path):
    a = report_fixture.heldout_library(tmp_path / "a.db", QS, {EVAL: [1.0, 0.0, 0.0, 0.0]})
    b = report_fixture.heldout_library(tmp_path / "b.db", QS, {EVAL: [1.0, 1.0, 0.0, 0.0]})
    other = report_fixture.heldout_library(tmp_path / "o.db", ["9 + 9", *QS[1:]], {EVAL: [1.0, 0.0, 0.0, 0.0]})
    with LessonStore(b) as store:  # evaluations this script must not compare
        sid = store.get_session("b").id
        report_fixture.evaluate(store, sid, "eval:adapter-0003+lessons", [1.0, 0.0, 0.0, 0.0])  # with lessons
        store.record_evaluation(sid, "eval:short", "heldout", False, [1.0, 0.0, 0.0, 0.0], (0.0, 1.0),
                                {"tasks": [{"task_key": f"chain_sum/heldout/{i:05d}", "reward": 1.0 if i == 0 else 0.0}
                                           for i in range(4)], "max_tokens": 8})  # another completion cap
        store.record_evaluation(sid, "eval:empty", "heldout", False, [], (0.0, 1.0), {"tasks": []})
        store.record_evaluation(sid, "eval:twice", "heldout", False, [1.0, 0.0], (0.0, 1.0),
                                {"tasks": [{"task_key": "chain_sum/heldout/00000", "reward": r} for r in (1.0, 0.0)]})
    for args, fragment in (
        ([EVAL, f"x={a}"], "need an evaluation name and at least two conditions"),
        ([EVAL, f"x={a}", f"x={b}"], "given twice"),
        ([EVAL, f"x={a},{a}", f"y={b}"], "lists a library twice"),
        ([EVAL, f"x={a}", f"y={a}"], "'y' and 'x' are the same libraries"),
        ([EVAL, f"x={a}", "y"], "is not NAME=DB"),
        ([EVAL, f"x={a}", f"y={tmp_path / 'nope.db'}"], "cannot read"),
        ([EVAL, f"x={a}", f"y={tmp_path}"], "not a file"),
        (["eval:nope", f"x={a}", f"y={b}"], "no evaluation 'eval:nope' in " + a),
        (["--session", "s", EVAL, f"x={a}", f"y={b}"], f"no evaluation 'eval:adapter-0002' in session 's' of {a}"),
        ([EVAL, f"x={a}", f"y={other}"], (f"y's eval:adapter-0002 in {other} was evaluated on other tasks than x's "
                                          f"eval:adapter-0002 in {a}")),
        (["--boot", "10", EVAL, f"x={a}", f"y={b}"], "--boot must be from 1000 to 1000000"),
        (["--boot", "10000000000", EVAL, f"x={a}", f"y={b}"], "--boot must be from 1000 to 1000000"),
        (["--boot", "x", EVAL, f"x={a}", f"y={b}"], "is not an integer"),
        (["--boot", "2000", "--boot", "3000", EVAL, f"x={a}", f"y={b}"], "--boot is given twice"),
        ([EVAL, f"x={a}", f"y={b}", "--boot", "2000"], "--boot must come before the evaluation and the conditions"),
        (["--session", "", EVAL, f"x={a}", f"y={b}"], "--session needs a value"),
        (["--within", "", "x=eval:a", "y=eval:b"], "--within needs a value"),
        (["--within"], "--within needs a value"),
        (["--within", b, f"x={EVAL}", "y=eval:adapter-0003+lessons,eval:short"], "y mixes evaluations with and without"),
        (["--within", b, f"x={EVAL}", "y=eval:short"], "evaluated at different completion caps (x[0]: 96, y[0]: 8 tokens)"),
        (["--within", b, f"x={EVAL}", "y=eval:empty"], "evaluation 'eval:empty' has no per-task results (0 tasks)"),
        (["--within", b, f"x={EVAL}", "y=eval:twice"], "evaluation 'eval:twice' lists a task more than once"),
    ):
        out = run(*args)
        assert out.returncode == 2 and out.stdout == "", (args, out.stdout)
        assert len(out.stderr.strip().splitlines()) == 1 and fragment in out.stderr, (args, out.stderr)
    not_a_library = tmp_path / "plain.db"
    sqlite3.connect(not_a_library).close()
    out = run(EVAL, f"x={a}", f"y={not_a_library}")
    assert out.returncode == 2 and "not a Lesson Arena library (no such table: evaluations)" in out.stderr
    with LessonStore(a) as store:  # nothing was written to the libraries it read
        assert set(store.evaluations(store.get_session("a").id)) == {EVAL}


def test_help_exits_zero():
    out = run("--help")
    assert out.returncode == 0 and "training seeds" in out.stdout and out.stderr == ""
