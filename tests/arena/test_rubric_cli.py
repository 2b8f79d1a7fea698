"""`arena run --reward ...` input errors and the `arena critic` commands (subprocesses; no model is loaded)."""

from __future__ import annotations

import json

import pytest
from cli_helpers import arena, assert_one_line_error
from langgraph.checkpoint.memory import InMemorySaver
from rubric_scripts import RUBRIC, roles, write_tasks

from arena.config import SessionConfig
from arena.session.runner import run_session
from arena.tasks.sources import load_tasks
from lessons.library.store import LessonStore


def test_rubric_reward_on_tasks_without_rubric(tmp_path):
    proc = arena("run", "--db", str(tmp_path / "a.db"), "--reward", "rubric-explicit", "--family", "chain_sum")
    assert_one_line_error(proc, "has no rubric; --reward rubric-explicit needs rubric tasks")
    assert not (tmp_path / "a.db").exists()


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["--reward", "bogus"], "--reward: must be one of verifier, rubric-explicit, rubric-implicit"),
        (["--online-rubrics", "2"], "--online-rubrics needs rubric rewards"),
        (["--reward", "rubric-implicit", "--critic", "verifier"], "needs a judge model; pass --critic local"),
        (["--reward", "rubric-explicit", "--online-rubrics", "-1"], "--online-rubrics must be >= 0"),
    ],
)
def test_bad_rubric_flags(tmp_path, args, fragment):
    proc = arena("run", "--db", str(tmp_path / "a.db"), *args)
    assert_one_line_error(proc, fragment)


def test_bad_rubric_file_names_the_line(tmp_path):
    bad = [dict(c) for c in RUBRIC]
    bad[0]["description"] = "Says sunlight is scattered."  # no category
    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps({"question": "A?", "rubric": RUBRIC}) + "\n" + json.dumps({"question": "B?", "rubric": bad}) + "\n")
    proc = arena("run", "--db", str(tmp_path / "a.db"), "--reward", "rubric-explicit", "--tasks-file", str(path))
    assert_one_line_error(proc, f"{path}:2: field 'rubric.0.description'", "must start with its category")


def test_verifier_reward_on_rubric_only_tasks(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text("\n".join(json.dumps({"question": f"Q{i}?", "rubric": RUBRIC}) for i in range(3)) + "\n")
    proc = arena("run", "--db", str(tmp_path / "a.db"), "--tasks-file", str(path))
    assert_one_line_error(proc, "has a rubric but no verifiable \"answer\"")


def test_critic_commands(tmp_path):
    db = tmp_path / "arena.db"
    assert_one_line_error(arena("critic", "calibrate", "--db", str(db)), "no database at")
    path = write_tasks(tmp_path / "sky.jsonl")
    store = LessonStore(str(db))
    cfg = SessionConfig(db=str(db), families=[], tasks_file=path, train_tasks=2, heldout_tasks=2, rounds=1, rollouts=4,
                        reward="rubric-explicit", critic="local", success_threshold=0.8)
    run_session(cfg, store, roles(), load_tasks([], path, 2, 2, 1), "s1", checkpointer=InMemorySaver())
    store.close()

    proc = arena("critic", "calibrate", "--db", str(db), "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["sky"]["n"] == 6 and report["sky"]["accuracy"] == round(2 / 3, 4) and report["sky"]["ece"] == round(1 / 3, 4)
    assert set(report) == {"sky", "all"}
    table = arena("critic", "calibrate", "--db", str(db), "--session", "s1")
    assert table.returncode == 0 and "sky" in table.stdout and "0.667" in table.stdout
    assert_one_line_error(arena("critic", "calibrate", "--db", str(db), "--session", "nope"), "no session named 'nope'")
    assert_one_line_error(arena("critic", "calibrate", "--db", str(db), "--threshold", "2"), "--threshold must be in [0, 1]")

    proc = arena("critic", "verdicts", "--db", str(db), "--session", "s1", "--json")
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)
    assert len(rows) == 8
    assert [r["grading_status"] for r in rows[:4]] == ["graded", "graded", "ungraded", "graded"]
    assert rows[1]["hack_flags"] == ["verifier_disagrees", "answer_without_work"]
    assert [v["met"] for v in rows[0]["verdicts"]] == [True, True, False]
    assert rows[0]["verdicts"][0]["criterion"] == "Mentions scattering"
    table = arena("critic", "verdicts", "--db", str(db), "--session", "s1", env={"COLUMNS": "250"})
    assert table.returncode == 0 and "ungraded" in table.stdout and "answer_without_work" in table.stdout


def test_eval_and_distill_refuse_a_rubric_session_and_eval_critic_reports(tmp_path):
    db = tmp_path / "arena.db"
    with LessonStore(str(db)) as store:
        store.create_session("rub", {"reward": "rubric-explicit"}, 0)
    for cmd in ("eval", "distill"):
        proc = arena(cmd, "--db", str(db), "--session", "rub")
        assert_one_line_error(proc, "uses --reward rubric-explicit")
    proc = arena("eval", "--critic", "--db", str(db), "--json")
    assert proc.returncode == 0 and json.loads(proc.stdout) == {}
