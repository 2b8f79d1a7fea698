"""A session remembers the dtype its solver sampled in, and a resume in another dtype is refused.

Left alone in session 10 (issue 17's closing note): ``ARENA_CPU_DTYPE=auto`` samples in bf16 on
CPUs with bf16 matmuls, and a session resumed under another ``ARENA_CPU_DTYPE`` mixed bf16 and
fp32 rollouts and held-out evaluations without a word.
"""

from __future__ import annotations

import pytest
import torch
from langgraph.checkpoint.memory import InMemorySaver
from session_scripts import teacher_responder

from agents.backends.fake import FakePolicy
from agents.backends.local import dtype_name
from arena.config import SessionConfig
from arena.episode.context import Roles
from arena.session.runner import run_session
from arena.tasks.sources import load_tasks
from lessons.library.store import LessonStore, StoreError

FAMILY = "chain_sum:min_terms=2,max_terms=2,min_digits=1,max_digits=1"


def roles(dtype: torch.dtype | None) -> Roles:
    solver = FakePolicy(lambda messages, i: "<answer>0</answer>", "solver")
    if dtype is not None:
        solver.dtype = dtype  # as agents.backends.local.LocalPolicy carries it
    return Roles(solver, FakePolicy(teacher_responder, "teacher"))


@pytest.fixture
def interrupted(tmp_path):
    """A session started by a bf16 solver and stopped by Ctrl-C after its first episode."""
    cfg = SessionConfig(db=str(tmp_path / "a.db"), families=[FAMILY], train_tasks=2, heldout_tasks=2, rounds=1,
                        rollouts=2, utility_every=0, hint_modes=[], max_tokens=16, concurrency=1)
    splits = load_tasks(cfg.families, None, cfg.train_tasks, cfg.heldout_tasks, cfg.seed)

    def stop(state):
        raise KeyboardInterrupt

    with LessonStore(cfg.db) as store, pytest.raises(KeyboardInterrupt):
        run_session(cfg, store, roles(torch.bfloat16), splits, "s", checkpointer=InMemorySaver(), on_episode=stop)
    return cfg, splits


def test_dtype_names_are_the_ones_arena_cpu_dtype_takes():
    assert (dtype_name(torch.float32), dtype_name(torch.bfloat16), dtype_name(torch.float16)) == ("fp32", "bf16", "float16")


def test_a_session_stores_the_dtype_its_solver_sampled_in(interrupted):
    cfg, _ = interrupted
    with LessonStore(cfg.db) as store:
        stored = store.get_session("s").config
    assert stored["sampling_dtype"] == "bf16"
    assert SessionConfig.model_validate(stored).sampling_dtype == "bf16"  # what `arena run --resume` rebuilds


def test_a_resume_in_another_dtype_is_refused_and_writes_nothing(interrupted):
    cfg, splits = interrupted
    with LessonStore(cfg.db) as store:
        resumed = SessionConfig.model_validate(store.get_session("s").config)
        episodes = len(store.finished_episode_keys(store.get_session("s").id))
        with pytest.raises(StoreError, match=r"^session 's' sampled in bf16, this process samples in fp32; "
                                              r"resume it with ARENA_CPU_DTYPE=bf16$"):
            run_session(resumed, store, roles(torch.float32), splits, "s", resume=True, checkpointer=InMemorySaver())
        assert store.get_session("s").status == "interrupted"  # not reopened
        assert len(store.finished_episode_keys(store.get_session("s").id)) == episodes == 1
        summary = run_session(resumed, store, roles(torch.bfloat16), splits, "s", resume=True,
                              checkpointer=InMemorySaver())
    assert summary.episodes == 2 and summary.session == "s"


def test_api_solvers_and_older_sessions_have_no_dtype_to_check(interrupted):
    cfg, splits = interrupted
    with LessonStore(cfg.db) as store:
        older = SessionConfig.model_validate({**store.get_session("s").config, "sampling_dtype": None})
        summary = run_session(older, store, roles(torch.float32), splits, "s", resume=True,
                              checkpointer=InMemorySaver())
    assert summary.episodes == 2
    with LessonStore(cfg.db) as store:  # an API solver (no dtype) starts a session that records none
        new = cfg.model_copy(update={"db": cfg.db})
        run_session(new, store, roles(None), splits, "api", checkpointer=InMemorySaver())
        assert store.get_session("api").config["sampling_dtype"] is None
