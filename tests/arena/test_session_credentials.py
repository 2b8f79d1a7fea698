"""CASE-005: a session stores and names its library without the password, whatever characters the password holds."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from agents.policy import BasePolicy
from arena.config import SessionConfig
from arena.session.runner import open_session
from arena.tasks.sources import load_tasks
from lessons.library.store import LessonStore, StoreError

FAMILY = "chain_sum:min_terms=2,max_terms=2,min_digits=1,max_digits=1"


@pytest.mark.parametrize(
    "db, stored_db",
    [
        ("postgresql://arena:ab/cd@127.0.0.1:5432/x", "postgresql://arena:***@127.0.0.1:5432/x"),
        ("postgresql+psycopg://arena:p@ss:w#rd?@db/x?password=q/r", "postgresql+psycopg://arena:***@db/x?password=***"),
    ],
)
def test_case_005_the_stored_session_config_holds_no_password(store: LessonStore, db: str, stored_db: str) -> None:
    """CASE-005: ``sessions.config`` of a session whose ``--db`` password holds "/", "@", ":", "#", "?"."""
    cfg = SessionConfig(db=db, families=[FAMILY])
    open_session(store, cfg, load_tasks([FAMILY], None, 1, 1, 0), "s", resume=False)
    info = store.get_session("s")
    assert info is not None and info.config["db"] == stored_db
    for secret in ("ab/cd", "p@ss", "q/r"):
        assert secret not in json.dumps(info.config)


def test_case_005_a_resume_of_a_missing_session_names_the_library_without_its_password() -> None:
    """The error names ``store.location`` (password masked), never ``store.url`` (the one the driver connects with)."""
    store = SimpleNamespace(get_session=lambda name: None, url="postgresql+psycopg://arena:ab/cd@db/x",
                            location="postgresql+psycopg://arena:***@db/x")
    cfg = SessionConfig(db="postgresql://arena:ab/cd@db/x", families=[FAMILY])
    with pytest.raises(StoreError) as err:
        open_session(store, cfg, load_tasks([FAMILY], None, 1, 1, 0), "gone", resume=True)  # type: ignore[arg-type]
    assert "postgresql+psycopg://arena:***@db/x" in str(err.value) and "ab/cd" not in str(err.value)


# --------------------------------------------------------------------------- endpoint faults (issue 32 §5)

PASSWORDS = ["p/a@ss+w=rd#?", "p:w", "p@w", "p#w", "p?w", "p+w=", "p%2Fw", "p w", "pa/ss"]


def _stored_text(db_path) -> str:
    """Every row of every table of the library, as one text (what anyone reading the database sees)."""
    import sqlite3

    conn = sqlite3.connect(str(db_path))
    try:
        return "\n".join(conn.iterdump())
    finally:
        conn.close()


class _FaultingSolver(BasePolicy):
    """A solver backend whose faults quote its endpoint's URL in full (as a backend of anyone's might)."""

    def __init__(self, url: str) -> None:
        self.url, self.name = url, "faulting"

    def sample(self, messages, n=1, temperature=0.7, max_tokens=256, stop=None, seed=None):
        from agents.policy import EndpointFault

        raise EndpointFault(f"endpoint {self.url} returned a reply with no choices for model 'M'", "empty_choices")

    def count_tokens(self, text: str) -> int:
        return len(text.split())


@pytest.mark.parametrize("password", PASSWORDS)
def test_a_fault_critique_and_reflection_error_never_store_the_endpoint_password(tmp_path, fault_server, password):
    """Rollout critiques, episode errors and evaluation rows read back from the database hold no password."""
    from fault_scripts import content, is_solver, write_tasks
    from langgraph.checkpoint.memory import InMemorySaver

    from agents.backends.fake import FakePolicy
    from agents.backends.openai_backend import OpenAIPolicy
    from arena.episode.context import Roles
    from arena.session.runner import run_session

    server = fault_server(lambda i, body: "normal" if is_solver(body) else "http_500", content=content)
    url = server.base_url.replace("http://", f"http://user:{password}@")
    tasks = write_tasks(tmp_path / "adding.jsonl")
    splits = load_tasks([], tasks, n_train=2, n_heldout=2, seed=1)
    cfg = SessionConfig(db=str(tmp_path / "arena.db"), families=[], tasks_file=tasks, train_tasks=2, heldout_tasks=2,
                        rounds=1, rollouts=2, utility_every=0, max_tokens=64, reflect_on="all")
    teacher = OpenAIPolicy("M", base_url=server.base_url.replace("http://", "http://user:p%2Fw@"), timeout_s=5,
                           max_retries=0, fault_retries=0)  # its faults cost the reflections
    store = LessonStore(str(tmp_path / "arena.db"))
    try:
        run_session(cfg, store, Roles(_FaultingSolver(url), teacher), splits, "faulty", checkpointer=InMemorySaver())
        solver = FakePolicy(lambda m, i: "<answer>3</answer>", "solver")
        run_session(cfg, store, Roles(solver, teacher), splits, "reflect", checkpointer=InMemorySaver())
    finally:
        store.close()
    stored = _stored_text(tmp_path / "arena.db")
    assert "user:***@" in stored and "ungraded: endpoint" in stored  # the faults were stored, masked
    assert "reflection not written: " in stored
    assert password not in stored and "p%2Fw" not in stored
