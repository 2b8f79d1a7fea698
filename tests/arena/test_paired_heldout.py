"""`bench/paired_heldout.py`: paired McNemar between bench conditions, refusing tasks that differ, pooling seeds."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import report_fixture

from lessons.library.store import LessonStore

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "paired_heldout.py"
EVAL = "heldout_cycle2_no_lessons"


def library(path: Path, questions: list[str], rewards: list[float]) -> str:
    """A bench library: one session whose held-out tasks are ``questions``, evaluated with ``rewards``."""
    return report_fixture.heldout_library(path, questions, {EVAL: rewards})


def paired(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), EVAL, *args], capture_output=True, text=True, check=False)


def test_pairs_by_task_and_counts_discordant_tasks(tmp_path):
    qs = ["1 + 2", "3 + 4", "5 + 6", "7 + 8"]
    a = library(tmp_path / "a.db", qs, [1.0, 1.0, 0.0, 1.0])
    b = library(tmp_path / "b.db", qs, [0.0, 1.0, 0.0, 0.0])
    out = paired(f"a={a}", f"b={b}")
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    # a alone passes tasks 0 and 3, b alone none: exact McNemar p = 2 * 0.5^2 = 0.5
    assert (got["n"], got["a_only"], got["b_only"], got["diff"], got["runs"]) == (4, 2, 0, 0.5, 1)
    assert abs(got["p_value"] - 0.5) < 1e-9


def test_same_keys_but_other_questions_are_refused_not_paired(tmp_path):
    # another --seed draws other tasks under the same keys: pairing them would be a wrong test
    a = library(tmp_path / "a.db", ["1 + 2", "3 + 4"], [1.0, 0.0])
    b = library(tmp_path / "b.db", ["9 + 9", "3 + 4"], [1.0, 0.0])
    out = paired(f"a={a}", f"b={b}")
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.strip() == "paired_heldout: a and b were evaluated on different tasks (another --seed or task set?)"


def test_seeds_pool_in_the_order_given(tmp_path):
    s0, s1 = ["1 + 2", "3 + 4"], ["9 + 9", "8 + 8"]
    a0, a1 = library(tmp_path / "a0.db", s0, [1.0, 1.0]), library(tmp_path / "a1.db", s1, [1.0, 0.0])
    b0, b1 = library(tmp_path / "b0.db", s0, [0.0, 1.0]), library(tmp_path / "b1.db", s1, [0.0, 0.0])
    got = json.loads(paired(f"a={a0},{a1}", f"b={b0},{b1}").stdout)
    assert (got["n"], got["runs"], got["a_only"], got["b_only"], got["a_pass_at_1"]) == (4, 2, 2, 0, 0.75)
    swapped = paired(f"a={a0},{a1}", f"b={b1},{b0}")  # seeds listed in another order: refused
    assert swapped.returncode == 2 and "different tasks" in swapped.stderr


def test_a_missing_library_or_evaluation_is_one_line(tmp_path):
    a = library(tmp_path / "a.db", ["1 + 2"], [1.0])
    for args, fragment in (([f"a={a}", f"b={tmp_path / 'nope.db'}"], "cannot read"),
                           ([f"a={a}", "b"], "usage:")):
        out = paired(*args)
        assert out.returncode == 2 and fragment in out.stderr and len(out.stderr.strip().splitlines()) == 1
    b = library(tmp_path / "b.db", ["1 + 2"], [0.0])
    out = subprocess.run([sys.executable, str(SCRIPT), "heldout_cycle9", f"a={a}", f"b={b}"],
                         capture_output=True, text=True, check=False)
    assert out.returncode == 2 and "no evaluation 'heldout_cycle9'" in out.stderr


def test_names_given_twice_or_a_library_pooled_twice_are_refused(tmp_path):
    a = library(tmp_path / "a.db", ["1 + 2"], [1.0])
    b = library(tmp_path / "b.db", ["1 + 2"], [0.0])
    for args, fragment in (([f"a={a}", f"a={b}"], "condition 'a' is given twice"),
                           ([f"={a}", f"b={b}"], "is not NAME=DB"),
                           ([f"a={a},", f"b={b},"], "is not NAME=DB"),
                           ([f"a={a},{a}", f"b={b},{b}"], "lists a library twice")):  # would double n and shrink p
        out = paired(*args)
        assert out.returncode == 2 and out.stdout == "" and fragment in out.stderr, (args, out.stderr)


def test_a_path_with_uri_characters_is_read_literally_and_never_written(tmp_path):
    odd = tmp_path / "we#ird?x%41.db"
    library(odd, ["1 + 2"], [1.0])
    b = library(tmp_path / "b.db", ["1 + 2"], [0.0])
    before = {p.name: p.stat().st_size for p in tmp_path.iterdir()}
    got = json.loads(paired(f"a={odd}", f"b={b}").stdout)
    assert (got["a_pass_at_1"], got["b_pass_at_1"]) == (1.0, 0.0)
    missing = paired(f"a={tmp_path / 'new#'}", f"b={b}")  # a raw "file:" URI would create "new" here
    assert missing.returncode == 2 and "cannot read" in missing.stderr
    assert {p.name for p in tmp_path.iterdir()} <= set(before) | {f"{odd.name}-wal", f"{odd.name}-shm", "b.db-wal", "b.db-shm"}
    assert odd.stat().st_size == before[odd.name]


def test_help_exits_zero():
    out = subprocess.run([sys.executable, str(SCRIPT), "--help"], capture_output=True, text=True, check=False)
    assert out.returncode == 0 and "Runs over several seeds pool" in out.stdout and out.stderr == ""


def test_within_one_library_pairs_its_evaluations(tmp_path):
    """--within: a session's held-out evaluations against those `arena eval` adds to the same library."""
    qs = ["1 + 2", "3 + 4", "5 + 6"]
    db = library(tmp_path / "a.db", qs, [1.0, 0.0, 0.0])  # records EVAL
    with LessonStore(db) as store:
        report_fixture.evaluate(store, store.get_session("a").id, "eval:adapter-0002", [1.0, 1.0, 1.0])
    out = subprocess.run([sys.executable, str(SCRIPT), "--within", db, EVAL, "eval:adapter-0002"],
                         capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert (got["a"], got["b"], got["a_only"], got["b_only"], got["n"]) == (EVAL, "eval:adapter-0002", 0, 2, 3)
    for args, fragment in ((["--within", db, EVAL], "usage:"), (["--within", db, EVAL, EVAL], "given twice"),
                           (["--within", db, EVAL, "eval:nope"], "no evaluation 'eval:nope'")):
        bad = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, check=False)
        assert bad.returncode == 2 and bad.stdout == "" and fragment in bad.stderr, (args, bad.stderr)


def test_within_a_library_of_several_sessions_names_the_session(tmp_path):
    """Evaluation names are unique per session: a name two sessions recorded is refused, not one of them picked."""
    db = library(tmp_path / "a.db", ["1 + 2", "3 + 4"], [1.0, 0.0])  # session "a"
    with LessonStore(db) as store:
        report_fixture.evaluate(store, store.get_session("a").id, "eval:adapter-0001", [1.0, 1.0])
        sid = store.create_session("b", {"families": ["chain_sum"]}, seed=1)
        store.upsert_tasks(sid, [report_fixture.Task(f"chain_sum/heldout/{i:05d}", q, "0", split="heldout")
                                 for i, q in enumerate(["1 + 2", "3 + 4"])])
        report_fixture.evaluate(store, sid, EVAL, [0.0, 0.0])
        report_fixture.evaluate(store, sid, "eval:adapter-0001", [0.0, 1.0])

    def within(*args):
        return subprocess.run([sys.executable, str(SCRIPT), "--within", db, *args], capture_output=True, text=True,
                              check=False)

    out = within(EVAL, "eval:adapter-0001")
    assert out.returncode == 2 and out.stdout == "" and len(out.stderr.strip().splitlines()) == 1
    assert "is recorded in 2 sessions (a, b): name one with --session" in out.stderr
    for session, a_pass in (("a", 0.5), ("b", 0.0)):
        got = within("--session", session, EVAL, "eval:adapter-0001")
        assert got.returncode == 0, got.stderr
        assert json.loads(got.stdout)["a_pass_at_1"] == a_pass
    # across libraries (here one library under two names): the same rule, and --session before the evaluation
    second = report_fixture.heldout_library(tmp_path / "c.db", ["1 + 2", "3 + 4"], {EVAL: [1.0, 1.0]})  # session "c"
    refused = subprocess.run([sys.executable, str(SCRIPT), EVAL, f"x={db}", f"y={second}"], capture_output=True,
                             text=True, check=False)
    assert refused.returncode == 2 and "name one with --session" in refused.stderr
    with LessonStore(second) as store:  # a session "b" in the second library too
        sid = store.create_session("b", {"families": ["chain_sum"]}, seed=1)
        store.upsert_tasks(sid, [report_fixture.Task(f"chain_sum/heldout/{i:05d}", q, "0", split="heldout")
                                 for i, q in enumerate(["1 + 2", "3 + 4"])])
        report_fixture.evaluate(store, sid, EVAL, [1.0, 1.0])
    picked = subprocess.run([sys.executable, str(SCRIPT), "--session", "b", EVAL, f"x={db}", f"y={second}"],
                            capture_output=True, text=True, check=False)
    assert picked.returncode == 0, picked.stderr
    assert (json.loads(picked.stdout)["a_pass_at_1"], json.loads(picked.stdout)["b_pass_at_1"]) == (0.0, 1.0)
    missing = within("--session", "c", EVAL, "eval:adapter-0001")
    assert missing.returncode == 2 and "no evaluation 'heldout_cycle2_no_lessons' in session 'c'" in missing.stderr
    assert within("--session").returncode == 2


def test_every_check_runs_before_any_line_is_printed(tmp_path):
    """A problem with the last pair used to come after the first pair's line was printed; now nothing is printed,
    and conditions listing different numbers of libraries are refused for that reason, not as 'different tasks'."""
    qs = ["1 + 2", "3 + 4"]
    a0, a1 = library(tmp_path / "a0.db", qs, [1.0, 0.0]), library(tmp_path / "a1.db", qs, [1.0, 1.0])
    b0, b1 = library(tmp_path / "b0.db", qs, [0.0, 0.0]), library(tmp_path / "b1.db", qs, [0.0, 1.0])
    c0 = library(tmp_path / "c0.db", qs, [1.0, 1.0])
    out = paired(f"a={a0},{a1}", f"b={b0},{b1}", f"c={c0}")
    assert out.returncode == 2 and out.stdout == ""
    assert "conditions list different numbers of libraries (a: 2, b: 2, c: 1)" in out.stderr
    other = library(tmp_path / "o.db", ["9 + 9", "3 + 4"], [1.0, 1.0])
    out = paired(f"a={a0}", f"b={b0}", f"c={other}")
    assert out.returncode == 2 and out.stdout == "" and "a and c were evaluated on different tasks" in out.stderr
    with LessonStore(b0) as store:  # the same name evaluated at another completion cap
        store.record_evaluation(store.get_session("b0").id, "eval:short", "heldout", False, [0.0, 0.0], (0.0, 1.0),
                                {"tasks": [{"task_key": f"chain_sum/heldout/{i:05d}", "reward": 0.0} for i in range(2)],
                                 "max_tokens": 8})
    out = subprocess.run([sys.executable, str(SCRIPT), "--within", b0, EVAL, "eval:short"], capture_output=True,
                         text=True, check=False)
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.strip() == ("paired_heldout: evaluated at different completion caps "
                                  f"({EVAL}: 96, eval:short: 8 tokens)")
    for args, fragment in (([f"a={a0}", f"b={a0}"], "'b' and 'a' are the same libraries"),
                           ([f"a={a0}", f"b={b0}", "--session", "x"], "--session must come before"),
                           ([f"a={a0}", f"b={b0}"], None)):
        got = paired(*args)
        if fragment is None:
            assert got.returncode == 0 and json.loads(got.stdout)["a_only"] == 1
        else:
            assert got.returncode == 2 and got.stdout == "" and fragment in got.stderr, (args, got.stderr)
