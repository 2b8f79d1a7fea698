"""A session survives its endpoint (issue 17; ../shared/cases/CASE-001..003): one bad reply costs one rollout.

Every test runs a short session (2 train tasks, 2 held-out, 1 round, 2 rollouts) with the
OpenAI backend for both roles against the fault-injecting server of tests/agents/fault_server.py
(no real model), and reads what was stored.
"""

from __future__ import annotations

import json
import re
import sqlite3

import pytest
from fault_scripts import CHAT, content, is_solver, last_user, write_tasks
from langgraph.checkpoint.sqlite import SqliteSaver
from session_scripts import session_rollouts as rollouts

from agents.backends.openai_backend import MAX_CHARS_PER_TOKEN, OpenAIPolicy
from agents.policy import EndpointFault
from arena.config import SessionConfig
from arena.episode.context import Roles
from arena.session.runner import checkpoint_path, run_session
from arena.session.summary import RunSummary
from arena.tasks.sources import load_tasks
from lessons.library.store import LessonStore

@pytest.fixture
def session(tmp_path):
    """(store, splits, cfg, run) where ``run(server, name, **policy_kw)`` runs the short session against ``server``."""
    store = LessonStore(str(tmp_path / "arena.db"))
    splits = load_tasks([], write_tasks(tmp_path / "adding.jsonl"), n_train=2, n_heldout=2, seed=1)
    cfg = SessionConfig(db=str(tmp_path / "arena.db"), families=[], tasks_file=tmp_path / "adding.jsonl",
                        train_tasks=2, heldout_tasks=2, rounds=1, rollouts=2, utility_every=0, max_tokens=96,
                        reflect_on="all")  # every group reaches the teacher: its requests are what is checked

    def run(server, name="s", checkpointer=None, **kw):
        kw = {"timeout_s": 5, "max_retries": 0, "rate_limit_retries": 1, **kw}
        policy = OpenAIPolicy("M", base_url=server.base_url, **kw)
        policy._sleep = lambda s: None  # the fault retries' backoff is not what is tested
        return run_session(cfg, store, Roles(policy, policy), splits, name, checkpointer=checkpointer)

    yield store, splits, cfg, run
    store.close()


def eval_faults(store: LessonStore, name: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for e in store.evaluations(store.get_session(name).id).values():
        for k, n in (e.details.get("faults") or {}).items():
            out[k] = out.get(k, 0) + n
    return out


# --------------------------------------------------------------------------- the three cases


def test_case_001_empty_choices_costs_one_rollout(session, fault_server):
    store, splits, cfg, run = session
    target = splits.train[0].question
    seen: dict = {}

    def mode(i, body):  # every request for the second rollout of the first train task: no choices
        if not is_solver(body) or last_user(body) != target:
            return "normal"
        if (body.get("n") or 1) > 1:  # the group's one request (the backend then asks rollout by rollout)
            seen.setdefault("seed", body.get("seed"))
            return "empty_choices"
        return "empty_choices" if body.get("seed") == seen["seed"] + 1 else "normal"

    server = fault_server(mode, content=content)
    summary = run(server)
    assert store.get_session("s").status == "finished"
    assert summary.episodes == 2 and summary.rollouts == 4
    assert summary.faults == {"empty_choices": 1}
    rows = rollouts(store, "s")
    failed = [r for r in rows if r.fault]
    assert len(failed) == 1 and failed[0].idx == 1
    f = failed[0]
    assert f.reward is None and f.grading_status == "ungraded" and f.finish_reason == "fault" and f.completion == ""
    assert "no choices" in f.critique and server.base_url in f.critique and "'M'" in f.critique
    assert all(r.reward == 1.0 for r in rows if not r.fault)  # the other rollouts are untouched
    # the fault was retried within the bound: 3 attempts of the group request, 3 of the failed rollout
    assert server.served.count("empty_choices") == 6


def test_case_001_every_other_reply_empty_is_retried_and_costs_nothing(session, fault_server):
    store, splits, cfg, run = session
    server = fault_server(["normal", "empty_choices"], content=content)
    summary = run(server)
    assert store.get_session("s").status == "finished"
    assert summary.rollouts == 4 and summary.faults == {}
    assert "empty_choices" in server.served
    assert all(r.reward == 1.0 for r in rollouts(store, "s"))


def test_case_002_huge_reply_is_bounded(session, fault_server, tmp_path):
    store, splits, cfg, run = session
    server = fault_server(lambda i, body: "huge" if is_solver(body) else "normal", content=content)
    conn = sqlite3.connect(str(checkpoint_path(store)), check_same_thread=False)
    summary = run(server, checkpointer=SqliteSaver(conn))
    conn.close()
    bound = cfg.max_tokens * MAX_CHARS_PER_TOKEN
    rows = rollouts(store, "s")
    assert store.get_session("s").status == "finished"
    assert sum(not r.guided for r in rows) == 4  # every answer "9 9 9 …" fails: guided groups follow
    for r in rows:
        assert len(r.completion) <= bound and r.finish_reason == "length" and r.fault == "oversized"
        assert r.completion_tokens <= cfg.max_tokens
    n_eval = eval_faults(store, "s").get("oversized", 0)
    assert n_eval >= 2  # the held-out completions were cut too (and flagged)
    assert summary.faults == {"oversized": len(rows) + n_eval}
    # nothing the teacher was sent carries the reply in full
    teacher_requests = [b for b in server.requests if not is_solver(b)]
    assert teacher_requests and max(len(json.dumps(b)) for b in teacher_requests) < 4 * bound + 8_000
    # the database and the checkpoints stay small (CASE-002 saw 5.4 MB and 23 MB)
    assert (tmp_path / "arena.db").stat().st_size < 2_000_000
    assert checkpoint_path(store).stat().st_size < 2_000_000


def test_case_003_non_json_body_names_endpoint_and_model(session, fault_server):
    store, splits, cfg, run = session
    # a reply that stays `{not json`: one line naming the endpoint and the model, never a bare decoder message
    bad = fault_server(["not_json"])
    p = OpenAIPolicy("M", base_url=bad.base_url, max_retries=0, fault_retries=1)
    p._sleep = lambda s: None
    with pytest.raises(EndpointFault) as info:
        p.sample(CHAT, max_tokens=8)
    msg = str(info.value)
    assert info.value.kind == "not_json" and "\n" not in msg
    assert f"endpoint {bad.base_url} returned a reply that is not JSON for model 'M'" in msg and "{not json" in msg
    assert "Expecting property name" not in msg
    # CASE-003 as filed: the second request is not JSON; it is retried and the session finishes whole
    server = fault_server(lambda i, body: "not_json" if i == 1 else "normal", content=content)
    summary = run(server, name="case3")
    assert store.get_session("case3").status == "finished"
    assert summary.rollouts == 4 and summary.faults == {} and server.served[1] == "not_json"


def test_no_reply_within_the_timeout_is_not_cannot_reach(fault_server):
    server = fault_server(["slow"], slow_s=2.0)
    p = OpenAIPolicy("M", base_url=server.base_url, timeout_s=0.5, max_retries=0)
    with pytest.raises(EndpointFault) as info:
        p.sample(CHAT, max_tokens=8)
    msg = str(info.value)
    assert info.value.kind == "timeout" and "cannot reach" not in msg
    assert f"endpoint {server.base_url} sent no reply within 0.5 s for model 'M'" == msg


# --------------------------------------------------------------------------- a short session against every mode


FAILING = {  # mode -> the fault kind a rollout records when every solver request gets it
    "empty_choices": "empty_choices", "not_json": "not_json", "html": "not_json", "content_null": "content_null",
    "truncated_json": "truncated_json", "http_500": "http_5xx", "http_429": "http_429", "slow": "timeout",
    "reset": "connection",
}


@pytest.mark.parametrize("mode", sorted(FAILING))
def test_a_session_against_a_mode_that_always_fails_finishes(session, fault_server, mode):
    store, splits, cfg, run = session
    server = fault_server(lambda i, body: mode if is_solver(body) else "normal", content=content, slow_s=1.5)
    summary = run(server, timeout_s=0.5, fault_retries=1)
    kind = FAILING[mode]
    assert store.get_session("s").status == "finished"
    rows = rollouts(store, "s")
    assert len(rows) == 4 and summary.rollouts == 4
    for r in rows:  # every rollout recorded, failed, with its reason
        assert r.fault == kind and r.reward is None and r.grading_status == "ungraded" and r.finish_reason == "fault"
        assert server.base_url in r.critique and "'M'" in r.critique
    n_eval = eval_faults(store, "s").get(kind, 0)
    assert n_eval >= 2  # the held-out tasks failed one by one, not the evaluation
    assert summary.faults == {kind: 4 + n_eval}
    assert summary.heldout_before.n == 0  # no task was graded: nothing to count as a pass or a fail
    from lessons.library.adapters import AdapterStore

    assert AdapterStore(store).training_rollouts("s") == []  # a failed rollout is never training data


@pytest.mark.parametrize("mode", ["normal", "huge", *sorted(FAILING)])
def test_a_session_against_every_other_reply_faulty_finishes_whole(session, fault_server, mode):
    store, splits, cfg, run = session
    server = fault_server(["normal", mode], content=content, slow_s=1.5)
    summary = run(server, timeout_s=0.5)
    assert store.get_session("s").status == "finished"
    rows = rollouts(store, "s")
    assert sum(not r.guided for r in rows) == 4 and summary.rollouts == len(rows)  # guided groups may follow
    if mode in ("normal", "huge"):
        assert set(summary.faults) <= {"oversized"}
    for r in rows:  # a rollout either came through or failed with its reason
        assert (r.fault is None and r.reward is not None) or r.fault in set(FAILING.values()) | {"oversized"}


# --------------------------------------------------------------------------- checkpoint threads of stored episodes


def _threads(conn: sqlite3.Connection) -> set[str]:
    return {t for (t,) in conn.execute("SELECT DISTINCT thread_id FROM checkpoints")}


def test_a_stored_episodes_leftover_checkpoint_thread_is_removed_at_the_end_and_on_resume(session, fault_server, tmp_path):
    store, splits, cfg, run = session
    server = fault_server(["normal"], content=content)
    conn = sqlite3.connect(str(tmp_path / "ckpt.sqlite"), check_same_thread=False)

    class KilledBeforeDelete(SqliteSaver):
        """kill -9 between the first episode's write and its checkpoint's deletion: that deletion never happens."""

        skipped = 0

        def delete_thread(self, thread_id: str) -> None:
            if thread_id.endswith(f"/r001-{splits.train[0].task_key}") and not KilledBeforeDelete.skipped:
                KilledBeforeDelete.skipped = 1
                return
            super().delete_thread(thread_id)

    run(server, checkpointer=KilledBeforeDelete(conn))
    assert KilledBeforeDelete.skipped == 1
    assert _threads(conn) == set()  # removed at the end of the session

    # the same leftover, found by a resume: a thread of a stored episode, written back as the kill left it
    saver = SqliteSaver(conn)
    sid = store.get_session("s").id
    created = store.get_session("s").created_at.isoformat()
    key = sorted(store.finished_episode_keys(sid))[0]
    thread = {"configurable": {"thread_id": f"s#{sid}@{created}/{key}", "checkpoint_ns": ""}}
    from langgraph.checkpoint.base import empty_checkpoint

    saver.put(thread, empty_checkpoint(), {"source": "loop", "step": 5}, {})
    assert len(_threads(conn)) == 1
    policy = OpenAIPolicy("M", base_url=server.base_url, max_retries=0)
    run_session(cfg, store, Roles(policy, policy), splits, "s", resume=True, checkpointer=saver)
    assert _threads(conn) == set()
    assert store.get_session("s").status == "finished" and len(rollouts(store, "s")) == 4  # nothing run twice
    conn.close()


# --------------------------------------------------------------------------- `arena run` as the cases ran it


def test_case_001_arena_run_json_finishes_and_counts_faults(fault_server, tmp_path):
    from cli_helpers import arena

    tasks = write_tasks(tmp_path / "adding.jsonl")
    # requests 1-3 have no choices: the first faulty reply outlives its 3 attempts (one rollout's or
    # one held-out task's worth), the rest of the session is served normally
    server = fault_server(lambda i, body: "empty_choices" if 1 <= i <= 3 else "normal", content=content)
    env = {"OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "x"}
    proc = arena("run", "--db", str(tmp_path / "arena.db"), "--tasks-file", str(tasks), "--solver", "openai:M",
                 "--teacher", "openai:M", "--train-tasks", "2", "--heldout-tasks", "2", "--rounds", "1",
                 "--rollouts", "2", "--max-tokens", "96", "--session", "case1", "--json", env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = RunSummary.model_validate_json(proc.stdout)
    assert summary.faults == {"empty_choices": 1}
    assert summary.episodes == 2 and summary.rollouts >= 4


def test_a_fault_in_a_utility_check_costs_that_check_not_the_session(session, fault_server):
    store, splits, cfg, run = session
    cfg_u = cfg.model_copy(update={"utility_every": 1, "utility_samples": 3})
    # the utility A/B asks the solver for 3 samples at once: those requests have no choices
    server = fault_server(lambda i, body: "empty_choices" if is_solver(body) and body.get("n") == 3 else "normal",
                          content=content)
    policy = OpenAIPolicy("M", base_url=server.base_url, max_retries=0)
    policy._sleep = lambda s: None
    summary = run_session(cfg_u, store, Roles(policy, policy), splits, "u", checkpointer=None)
    assert store.get_session("u").status == "finished" and summary.rollouts >= 4
    assert "empty_choices" in server.served  # a utility check was attempted and its fault absorbed
    assert summary.utility_checks == 0


def test_a_dead_endpoint_stops_the_session_after_faults_in_a_row_and_resume_finishes(session, fault_server):
    """One fault costs one rollout; N in a row with no usable reply between mean the endpoint is down: the session
    stops with one line (nothing stored is lost) instead of spending every later rollout's retries on it."""
    from agents.policy import PolicyError

    store, splits, cfg, run = session
    dead = fault_server(lambda i, body: "reset" if is_solver(body) else "normal", content=content)
    with pytest.raises(PolicyError) as e:
        run(dead, max_consecutive_faults=3)
    msg = str(e.value)
    assert "\n" not in msg and dead.base_url in msg and "'M'" in msg
    # the 3rd fault in a row stops it; requests already in flight from the other episodes may fail too before the
    # stop reaches them (8 episodes in flight by default), and the message counts what really failed
    n = int(re.search(r"failed (\d+) requests in a row", msg).group(1))
    assert 3 <= n <= 3 + 2 * cfg.rollouts and "--resume" in msg
    assert store.get_session("s").status != "finished"
    alive = fault_server(["normal"], content=content)
    policy = OpenAIPolicy("M", base_url=alive.base_url, max_retries=0)
    summary = run_session(cfg, store, Roles(policy, policy), splits, "s", resume=True)
    assert store.get_session("s").status == "finished" and summary.episodes == 2
    assert all(r.reward == 1.0 for r in rollouts(store, "s"))  # the rollouts ran once the endpoint was back


def test_a_usable_reply_resets_the_count(fault_server):
    """Faults that alternate with good replies never stop a session, however many there are."""
    server = fault_server(["reset", "normal"], content=lambda body: "ok")
    policy = OpenAIPolicy("M", base_url=server.base_url, max_retries=0, fault_retries=0, max_consecutive_faults=2)
    outcomes = []
    for _ in range(6):
        try:
            outcomes.append(policy.sample(CHAT, n=1, max_tokens=4)[0].text)
        except EndpointFault as err:
            outcomes.append(err.kind)
    assert outcomes == ["connection", "ok"] * 3
