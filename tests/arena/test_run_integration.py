"""`arena run` end to end on the real embedded model with a tiny configuration."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
from sqlalchemy import create_engine, select
from sqlalchemy.orm import Session

from agents.roles.solver import SOLVER_SYSTEM
from arena.session.summary import EvalFigure, RunSummary
from arena.stats import wilson_interval
from arena.tasks.extract import extract_answer
from arena.tasks.sources import load_tasks
from arena.tasks.verify import score
from lessons.db.engine import parse_url
from lessons.db.schema import EpisodeRow, EvaluationRow, LessonEventRow, LessonRow, RolloutRow, SessionRow, TaskRow
from lessons.text import contains_token

pytestmark = pytest.mark.slow

FAMILY = "chain_sum:min_terms=2,max_terms=2,min_digits=1,max_digits=1"


def test_arena_run_stores_rollouts_whose_rewards_match_the_verifier(tmp_path, library_url):
    """On a SQLite file and on a PostgreSQL database (``--db postgresql://…``, with a password the test
    server's trust authentication ignores: it must never be printed or stored)."""
    db = library_url.replace("postgres@", "postgres:s3cret-pw@", 1) if library_url.startswith("postgresql") else library_url
    args = ["run", "--db", db, "--family", FAMILY, "--train-tasks", "2", "--heldout-tasks", "4",
            "--rounds", "1", "--rollouts", "3", "--max-tokens", "32", "--seed", "3", "--session", "tiny", "--json"]
    proc = subprocess.run([sys.executable, "-m", "arena.cli", *args], capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "s3cret-pw" not in proc.stdout + proc.stderr
    summary = RunSummary.model_validate_json(proc.stdout)  # every key the model's: an unknown one fails here
    # 2 groups of 3, plus 3 guided re-attempts for each all-fail group (how many depends on the sampled rollouts)
    assert summary.session == "tiny" and summary.episodes == 2
    assert summary.rollouts == 6 + 3 * summary.hints.guided_groups

    tasks = {t.task_key: t for t in load_tasks([FAMILY], None, 2, 4, 3).train}
    engine = create_engine(parse_url(db))
    with Session(engine) as s:
        rows = s.execute(
            select(RolloutRow, TaskRow.task_key).join(EpisodeRow, RolloutRow.episode_id == EpisodeRow.id)
            .join(TaskRow, EpisodeRow.task_id == TaskRow.id)
        ).all()
        stored = s.execute(select(SessionRow.config)).scalars().all()
        episodes = s.execute(select(EpisodeRow)).scalars().all()
        lessons = s.execute(select(LessonRow)).scalars().all()
        events = s.execute(select(LessonEventRow)).scalars().all()
        evaluations = {e.name: e.details["tasks"] for e in s.execute(select(EvaluationRow)).scalars()}
    engine.dispose()
    # each held-out figure is its 4 stored per-task rewards: pass@1 = passes / 4, the Wilson interval of passes of 4
    for key in ("heldout_before", "heldout_after", "heldout_after_no_lessons"):
        passes = sum(t["reward"] >= 1.0 for t in evaluations[key])
        assert len(evaluations[key]) == 4 and getattr(summary, key) == EvalFigure(
            pass_at_1=round(passes / 4, 4), n=4, ci95=tuple(round(x, 4) for x in wilson_interval(passes, 4))), key
    # the lesson counts of the summary are the library's rows, counted here one by one (a fresh library: every
    # lesson in it was written by this session's teacher, who reflected on real groups, so the counts vary by run)
    assert len(episodes) == summary.episodes
    in_session = {e.id for e in episodes}
    adds = [ev for ev in events if ev.op == "ADD" and ev.episode_id in in_session]
    assert summary.lessons_added == len(adds) == len({ev.lesson_id for ev in adds})  # one ADD per lesson born
    # every lesson in the library was born in this session: added, or the result of a merge (its MERGE event has no
    # target; a merged source's has)
    born = {ev.lesson_id for ev in events if ev.op == "ADD" or (ev.op == "MERGE" and ev.target_lesson_id is None)}
    assert born == {les.id for les in lessons}
    statuses = [les.status for les in lessons]
    assert set(statuses) <= {"active", "candidate", "retired"}  # nothing distilled without a sleep
    for status in ("active", "candidate", "retired"):
        assert getattr(summary, f"lessons_{status}") == statuses.count(status), status
    history = {les.id: {ev.op for ev in events if ev.lesson_id == les.id} for les in lessons}
    assert all("PROMOTE" in history[les.id] for les in lessons if les.status == "active")  # only the A/B promotes
    assert all({"RETIRE", "MERGE"} & history[les.id] for les in lessons if les.status == "retired")
    assert summary.reflections_failed == sum(e.reflection_error is not None for e in episodes)
    assert summary.curation_rejected == sum(len(e.curation_rejected or []) for e in episodes)
    assert len(stored) == 1 and "s3cret-pw" not in json.dumps(stored)  # a shared library holds no password
    assert len(rows) == summary.rollouts
    rewards = []
    for rollout, task_key in rows:
        task = tasks[task_key]
        assert rollout.extracted_answer == extract_answer(rollout.completion)
        assert rollout.reward == score(task, extract_answer(rollout.completion))
        # the reference answer reaches the solver only in a guided re-attempt's hint: not in the instructions,
        # not in a lesson shown, not appended to an unguided question
        system = rollout.messages[0]["content"]
        assert system.startswith(SOLVER_SYSTEM) and [m["role"] for m in rollout.messages] == ["system", "user"]
        shown = system.split("<lessons>")[1].split("</lessons>")[0].splitlines() if "<lessons>" in system else []
        assert not any(contains_token(re.sub(r"^\d+\. ", "", line), task.answer) for line in shown)
        assert not contains_token(system[len(SOLVER_SYSTEM):], task.answer)
        user = rollout.messages[1]["content"]
        if rollout.guided:
            assert user.startswith(task.question) and "Hint" in user[len(task.question):]
            assert rollout.unguided_messages[1]["content"] == task.question  # trained under the chat without it
        else:
            assert user == task.question
            rewards.append(rollout.reward)
    assert len(rewards) == 6  # mean_reward is over the unguided rollouts
    assert summary.mean_reward == pytest.approx(sum(rewards) / len(rewards), abs=1e-4)


def _ignoring_interrupts() -> None:
    """The parent a child inherits SIGINT ignored and blocked from (a shell script's ``&``, a test runner)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})


@pytest.mark.parametrize("parent", ["default", "ignoring SIGINT"])
def test_an_interrupted_run_exits_with_its_code_not_an_abort(tmp_path, parent):
    """Ctrl-C during a session: one resume line, exit 130, no C++ abort from the decoder thread.

    Found by a new user: interpreter finalization under a decoder thread that was inside a torch
    kernel printed "terminate called without an active exception" and died of SIGABRT. Found in CI:
    a child started by a process that ignored SIGINT inherited ``SIG_IGN`` and ran on through every
    Ctrl-C (passing alone, failing after the suite); ``arena.cli.accept_interrupts`` restores it."""
    import signal
    import sqlite3
    import time

    db = tmp_path / "arena.db"
    proc = subprocess.Popen([sys.executable, "-m", "arena.cli", "run", "--db", str(db), "--family", FAMILY,
                             "--train-tasks", "4", "--heldout-tasks", "8", "--rounds", "2", "--session", "cut"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=_ignoring_interrupts if parent != "default" else None)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:  # until the session row exists
        if db.exists():
            try:
                with sqlite3.connect(db) as conn:
                    if conn.execute("SELECT 1 FROM sessions WHERE name = 'cut'").fetchone():
                        break
            except sqlite3.OperationalError:  # the schema is still being created
                pass
        time.sleep(0.5)
    assert proc.poll() is None, proc.communicate()
    time.sleep(2)  # into the held-out evaluation: the decoder thread is busy
    proc.send_signal(signal.SIGINT)  # one Ctrl-C must do
    try:
        out, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise AssertionError(f"arena run ({parent} parent) did not stop within 120 s of one SIGINT") from None
    assert proc.returncode == 130, err
    assert "terminate called" not in err
    assert err.strip().splitlines()[-1] == f"arena: error: interrupted; continue with: arena run --db {db} --resume cut"
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT status FROM sessions WHERE name = 'cut'").fetchone() == ("interrupted",)


def test_arena_run_with_the_embedded_teacher_end_to_end(tmp_path):
    """The default teacher, assembled from its part wheels and run in llama.cpp, reflects on real groups of the 135M
    solver: its replies parse (grammar-constrained), lessons pass the screen or are rejected with a reason, and
    its speed is in the summary."""
    from agents.backends.teacher_files import EMBEDDED_TEACHER, TeacherFilesError, part_paths

    try:
        part_paths()
    except TeacherFilesError as e:
        pytest.skip(f"embedded teacher not installed: {e}")
    db = str(tmp_path / "arena.db")
    args = ["run", "--db", db, "--family", FAMILY, "--train-tasks", "2", "--heldout-tasks", "4", "--rounds", "1",
            "--rollouts", "4", "--max-tokens", "32", "--seed", "5", "--reflect-on", "all", "--session", "t", "--json"]
    proc = subprocess.run([sys.executable, "-m", "arena.cli", *args], capture_output=True, text=True, timeout=900, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = RunSummary.model_validate_json(proc.stdout)
    assert summary.cycles[0].adapter_id is None  # 2 episodes: too few for the automatic sleep
    teacher = summary.role_speed["teacher"]
    assert teacher.model == EMBEDDED_TEACHER and teacher.calls >= 2 and teacher.tokens_per_s > 0
    assert summary.role_speed["solver"].model.startswith("local:")
    engine = create_engine(parse_url(db))
    with Session(engine) as s:
        reflections = [r for r in s.execute(select(EpisodeRow.reflection)).scalars() if r is not None]
    engine.dispose()
    assert len(reflections) == 2
    for r in reflections:  # the grammar makes every reply an object of the schema's shape
        first = json.loads(r["raw"].split("\n---\n")[0], strict=False)
        assert set(first) <= {"analysis", "add", "tags", "edit", "merge", "retire"} and "analysis" in first
