"""A session's status after a Ctrl-C at its very end: never left ``running``, never a finished session marked interrupted.

Issue "Faults, bad input and speed" (the interrupt left alone in session 8): a Ctrl-C after the
last held-out evaluation, while the summary was being built, printed "interrupted" but left the
session ``running`` until ``--resume``.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from fault_scripts import content, write_tasks
from langgraph.checkpoint.memory import InMemorySaver
from session_scripts import teacher_responder

from agents.backends.fake import FakePolicy
from arena.config import SessionConfig
from arena.episode.context import Roles
from arena.session import runner
from arena.session.runner import run_session
from arena.tasks.sources import load_tasks
from lessons.library.sessions import SessionRepository
from lessons.library.store import LessonStore

FAMILY = "chain_sum:min_terms=2,max_terms=2,min_digits=1,max_digits=1"


@pytest.fixture
def session(tmp_path):
    cfg = SessionConfig(db=str(tmp_path / "a.db"), families=[FAMILY], train_tasks=2, heldout_tasks=2, rounds=1,
                        rollouts=2, utility_every=0, hint_modes=[], max_tokens=16, concurrency=1)
    splits = load_tasks(cfg.families, None, cfg.train_tasks, cfg.heldout_tasks, cfg.seed)
    roles = Roles(FakePolicy(lambda messages, i: "<answer>0</answer>", "solver"), FakePolicy(teacher_responder, "teacher"))
    return cfg, splits, roles


def test_a_ctrl_c_while_the_summary_is_built_marks_the_session_interrupted_and_resume_finishes_it(session, monkeypatch):
    cfg, splits, roles = session
    real = runner.build_summary

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(runner, "build_summary", interrupted)
    with LessonStore(cfg.db) as store:
        with pytest.raises(KeyboardInterrupt):
            run_session(cfg, store, roles, splits, "s", checkpointer=InMemorySaver())
        assert store.get_session("s").status == "interrupted"  # was "running"
        monkeypatch.setattr(runner, "build_summary", real)
        summary = run_session(cfg, store, roles, splits, "s", resume=True, checkpointer=InMemorySaver())
        assert store.get_session("s").status == "finished"
        assert summary.episodes == 2  # the resume re-ran nothing: the two episodes of the first run


def test_a_ctrl_c_after_finished_was_committed_leaves_the_session_finished(session, monkeypatch):
    cfg, splits, roles = session
    real = SessionRepository.set_session_status

    def commit_then_interrupt(self, session_id, status, summary=None):
        real(self, session_id, status, summary)
        if status == "finished":
            raise KeyboardInterrupt  # the signal lands just after the commit

    monkeypatch.setattr(SessionRepository, "set_session_status", commit_then_interrupt)
    with LessonStore(cfg.db) as store:
        with pytest.raises(KeyboardInterrupt):
            run_session(cfg, store, roles, splits, "s", checkpointer=InMemorySaver())
        assert store.get_session("s").status == "finished"


CHILD = """
import sys
from lessons.library.sessions import SessionRepository
real = SessionRepository.set_session_status
def commit_then_interrupt(self, session_id, status, summary=None):
    real(self, session_id, status, summary)
    if status == "finished":
        raise KeyboardInterrupt  # the signal lands just after the commit
SessionRepository.set_session_status = commit_then_interrupt
from arena.cli import main
sys.argv = ["arena", *sys.argv[1:]]
main()
"""


def test_arena_run_interrupted_after_its_session_finished_says_so_not_resume(fault_server, tmp_path):
    """The CLI's line for a Ctrl-C that lands after ``finished`` was committed points at the report, not at --resume."""
    server = fault_server(["normal"], content=content)
    env = {**os.environ, "OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "x", "OMP_NUM_THREADS": "1"}
    db = tmp_path / "arena.db"
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, "run", "--db", str(db), "--tasks-file", str(write_tasks(tmp_path / "adding.jsonl")),
         "--solver", "openai:M", "--teacher", "openai:M", "--train-tasks", "2", "--heldout-tasks", "2", "--rounds", "1",
         "--rollouts", "2", "--max-tokens", "96", "--session", "s1", "--json"],
        capture_output=True, text=True, env=env, timeout=300, check=False)
    assert proc.returncode == 130, proc.stderr[-2000:]
    assert f"interrupted after session 's1' finished; its summary: arena report --db {db} --session s1" in proc.stderr
    assert "--resume" not in proc.stderr and proc.stdout == ""
    with LessonStore(str(db)) as store:
        assert store.get_session("s1").status == "finished"
