"""Wake–sleep cycles of `arena run --cycles`: bookkeeping, adapter chain, resume at every phase.

The wake's solver is a scripted fake (its token ids are valid in the tiny model's vocabulary), the
sleeps train and load adapters on a tiny random Llama, so every cycle runs in seconds. After the
first sleep the solver is that tiny model with the adapter: its completions are noise, which is
fine — the bookkeeping is what is tested here; learning is measured by `arena bench learning`.
"""

from __future__ import annotations

import json
import re

import pytest
import torch
from langgraph.checkpoint.memory import InMemorySaver
from session_scripts import solver_responder, teacher_responder, write_tasks

from agents.backends.fake import FakePolicy
from agents.backends.local import LocalPolicy
from arena.config import SessionConfig
from arena.episode.context import Roles
from arena.session.cycles import cycle_adapters
from arena.session.runner import run_session
from arena.tasks.sources import load_tasks
from lessons.library.adapters import AdapterStore
from lessons.library.store import LessonStore
from lessons.outcomes import eval_name


@pytest.fixture
def setup(tmp_path):
    tasks = write_tasks(tmp_path / "adding.jsonl")
    cfg = SessionConfig(db=str(tmp_path / "arena.db"), families=[], tasks_file=tasks, train_tasks=2, heldout_tasks=2,
                        rounds=1, rollouts=4, cycles=2, sleep_objective="sft", sleep_steps=1, sleep_min_examples=2,
                        utility_every=0, hint_modes=[], max_tokens=8, concurrency=1)
    splits = load_tasks([], tasks, n_train=2, n_heldout=2, seed=0)
    store = LessonStore(cfg.db)
    yield store, splits, cfg, tmp_path
    store.close()


def roles():
    return Roles(FakePolicy(solver_responder, "solver"), FakePolicy(teacher_responder, "teacher"))


def rollout_adapters(store, session):
    """Round → set of adapter ids recorded on its rollouts."""
    out: dict[int, set] = {}
    for r in AdapterStore(store).training_rollouts(session):
        out.setdefault(r.episode_round, set()).add(r.adapter_id)
    return out


def test_two_cycles_chain_adapters_and_record_who_sampled(setup, tiny):
    store, splits, cfg, tmp = setup
    summary = run_session(cfg, store, roles(), splits, "s", checkpointer=InMemorySaver(), base_model=tiny)

    adapters = cycle_adapters(store, "s")
    assert sorted(adapters) == [1, 2]
    a1, a2 = adapters[1], adapters[2]
    assert (a1.adapter_id, a1.parent_adapter, a1.cycle) == ("adapter-0001", None, 1)
    assert (a2.adapter_id, a2.parent_adapter, a2.cycle) == ("adapter-0002", "adapter-0001", 2)
    # round 1 was sampled by the base (fake) solver, round 2 by adapter-0001 loaded into the local solver
    assert rollout_adapters(store, "s") == {1: {None}, 2: {"adapter-0001"}}
    # STaR's choice: each sleep trains from the base on every cycle so far; cycle 1 had 2 of 4 correct in 2 groups
    assert a1.data["report"]["examples"] == 4 and a1.data["report"]["by_kind"]["sft"] == 4
    assert a2.data["report"]["examples"] >= 4 and set(a1.data["rollout_ids"]) <= set(a2.data["rollout_ids"])
    assert a1.data["report"]["distinct_tasks"] == 2 and a1.data["report"]["task_coverage"] == 1.0
    assert [c.cycle for c in summary.cycles] == [1, 2]
    assert [c.adapter_id for c in summary.cycles] == ["adapter-0001", "adapter-0002"]
    assert summary.cycles[0].train_pass_at_1 == pytest.approx(0.5)  # 2 of 4 rollouts correct
    assert summary.cycles[0].train_pass_at_k == 1.0
    for c in summary.cycles:
        assert c.heldout.n == 2 and c.heldout_no_lessons.n == 2
        assert c.vs_before is not None and c.vs_before.n == 2  # paired with heldout_before on the same tasks
    evals = store.evaluations(store.get_session("s").id)
    for c in (1, 2):
        assert {eval_name(c, True), eval_name(c, False), eval_name(c, True, wake=True), eval_name(c, False, wake=True)} <= set(evals)
    # the final figures are the last cycle's, not measured again
    assert evals["heldout_after"].details["rewards"] == evals["heldout_cycle2"].details["rewards"]
    assert summary.heldout_after_vs_before.n == 2 and summary.lessons_vs_no_lessons.n == 2
    assert (tmp / "adapters" / "arena" / "adapter-0002" / "adapter_model.safetensors").exists()  # a folder per library
    # the chain is visible in the provenance graph and in the TUI's adapters read model
    from lessons.library.provenance import build_graph, write_graph
    from lessons.library.read_models import ArenaData

    g = build_graph(store)
    assert g.edges["adapter:adapter-0001", "adapter:adapter-0002"] == {"relation": "sampled_for", "cycle": 2}
    write_graph(g, tmp / "g.graphml", "graphml")
    views = {a.adapter_id: a for a in ArenaData(store).adapters()}
    assert (views["adapter-0002"].parent_adapter, views["adapter-0002"].cycle) == ("adapter-0001", 2)
    assert (views["adapter-0001"].parent_adapter, views["adapter-0001"].cycle) == (None, 1)


def test_sleep_from_previous_continues_the_adapter_on_this_cycles_rollouts(setup, tiny, monkeypatch):
    store, splits, cfg, _ = setup
    import arena.distill.pipeline as distill

    real, trainees = distill.train_and_save, []

    def spy(policy, *args, **kw):
        trainees.append((policy.adapter, hasattr(policy.model, "peft_config"), next(policy.model.parameters()).dtype))
        return real(policy, *args, **kw)

    monkeypatch.setattr(distill, "train_and_save", spy)
    monkeypatch.setenv("ARENA_CPU_DTYPE", "bf16")  # the solvers sample in bf16; sleeps still train on an fp32 base
    one = cfg.model_copy(update={"cycles": 1})
    run_session(one, store, roles(), splits, "first", checkpointer=InMemorySaver(), base_model=tiny)
    parent = cycle_adapters(store, "first")[1]
    # a second session whose solver runs that adapter (the fake stands in for it) and continues it
    cont = one.model_copy(update={"adapter": parent.path, "sleep_from": "previous", "sleep_steps": 1})
    run_session(cont, store, roles(), splits, "second", checkpointer=InMemorySaver(), base_model=tiny)
    child = cycle_adapters(store, "second")[1]
    assert child.parent_adapter == parent.adapter_id and child.data["sleep_from"] == "previous"
    assert rollout_adapters(store, "second") == {1: {parent.adapter_id}}
    ids = {r.rollout_id for r in AdapterStore(store).training_rollouts("second")}
    assert set(child.data["rollout_ids"]) <= ids  # this session's rollouts only
    # the first sleep trained a fresh LoRA on the base; the second started from the parent's weights
    from pathlib import Path

    assert trainees == [(None, False, torch.float32), (Path(parent.path), True, torch.float32)]


def test_kill_during_sleep_redoes_it_and_registers_no_half_adapter(setup, tiny, monkeypatch):
    store, splits, cfg, tmp = setup
    import arena.distill.pipeline as distill

    real = distill.train_and_save
    calls = {"n": 0}

    def killed_in_second_sleep(policy, data, dcfg, out_dir, sidecar, console=None):
        calls["n"] += 1
        if calls["n"] == 2:
            real(policy, data, dcfg, out_dir, sidecar, console)  # written, not yet registered
            raise KeyboardInterrupt
        return real(policy, data, dcfg, out_dir, sidecar, console)

    monkeypatch.setattr(distill, "train_and_save", killed_in_second_sleep)
    saver = InMemorySaver()
    with pytest.raises(KeyboardInterrupt):
        run_session(cfg, store, roles(), splits, "k", checkpointer=saver, base_model=tiny)
    assert store.get_session("k").status == "interrupted"
    assert sorted(cycle_adapters(store, "k")) == [1]  # the half-done sleep registered nothing
    assert AdapterStore(store).get_adapter("adapter-0002") is None
    episodes = len(store.finished_episode_keys(store.get_session("k").id))

    summary = run_session(cfg, store, roles(), splits, "k", resume=True, checkpointer=saver, base_model=tiny)
    assert sorted(cycle_adapters(store, "k")) == [1, 2] and calls["n"] == 3  # the second sleep ran again
    assert summary.episodes == episodes == 4  # nothing sampled twice
    assert rollout_adapters(store, "k") == {1: {None}, 2: {"adapter-0001"}}


def test_kill_during_second_wake_resumes_with_the_first_adapter(setup, tiny):
    store, splits, cfg, _ = setup
    seen = []

    def stop_in_round_2(state):
        seen.append(state["episode_key"])
        if state["round"] == 2:
            raise KeyboardInterrupt

    saver = InMemorySaver()
    with pytest.raises(KeyboardInterrupt):
        run_session(cfg, store, roles(), splits, "w", checkpointer=saver, base_model=tiny, on_episode=stop_in_round_2)
    assert sorted(cycle_adapters(store, "w")) == [1]
    summary = run_session(cfg, store, roles(), splits, "w", resume=True, checkpointer=saver, base_model=tiny)
    assert summary.episodes == 4 and sorted(cycle_adapters(store, "w")) == [1, 2]
    # every round-2 rollout, before and after the kill, was sampled by adapter-0001 (reloaded on resume)
    assert rollout_adapters(store, "w") == {1: {None}, 2: {"adapter-0001"}}


def test_kill_after_registration_measures_the_missing_evaluations_without_sleeping_again(setup, tiny, monkeypatch):
    store, splits, cfg, _ = setup
    cfg = cfg.model_copy(update={"cycles": 1})
    import arena.session.cycles as cycles

    real = cycles.HeldoutEvals.record
    killed = []

    def killed_after_register(self, name, result, with_lessons, adapter_id):
        if name == "heldout_cycle1_no_lessons" and not killed:
            killed.append(name)
            raise KeyboardInterrupt
        return real(self, name, result, with_lessons, adapter_id)

    monkeypatch.setattr(cycles.HeldoutEvals, "record", killed_after_register)
    saver = InMemorySaver()
    with pytest.raises(KeyboardInterrupt):
        run_session(cfg, store, roles(), splits, "r", checkpointer=saver, base_model=tiny)
    assert sorted(cycle_adapters(store, "r")) == [1]
    sid = store.get_session("r").id
    assert "heldout_cycle1_no_lessons" not in store.evaluations(sid)
    import arena.distill.pipeline as distill

    monkeypatch.setattr(distill, "train_and_save", lambda *a, **k: pytest.fail("slept again"))
    summary = run_session(cfg, store, roles(), splits, "r", resume=True, checkpointer=saver, base_model=tiny)
    assert {"heldout_cycle1", "heldout_cycle1_no_lessons", "heldout_after"} <= set(store.evaluations(sid))
    assert summary.cycles[0].adapter_id == "adapter-0001"


def test_a_sleep_with_too_few_examples_is_refused_and_the_next_cycle_goes_on(setup, tiny):
    store, splits, cfg, _ = setup
    # cycle 1 yields 4 examples (< 6): refused, the base solver samples cycle 2; then 8 examples (STaR: all cycles)
    cfg = cfg.model_copy(update={"sleep_min_examples": 6})
    summary = run_session(cfg, store, roles(), splits, "few", checkpointer=InMemorySaver(), base_model=tiny)
    first, second = summary.cycles
    assert first.adapter_id is None
    assert re.search(r"has 4 training examples .* needs at least 6", first.sleep_refused)
    assert second.adapter_id == "adapter-0001" and second.sleep_refused is None
    assert cycle_adapters(store, "few")[2].data["report"]["examples"] == 8
    assert rollout_adapters(store, "few") == {1: {None}, 2: {None}}  # the refused sleep changed no weights
    assert store.get_session("few").status == "finished" and summary.episodes == 4


def test_the_adapter_of_a_cycle_serves_the_solver_as_arena_run_adapter_loads_it(setup, tiny):
    store, splits, cfg, _ = setup
    cfg = cfg.model_copy(update={"cycles": 1})
    run_session(cfg, store, roles(), splits, "a", checkpointer=InMemorySaver(), base_model=tiny)
    info = cycle_adapters(store, "a")[1]
    sidecar = json.loads((__import__("pathlib").Path(info.path) / "arena_adapter.json").read_text())
    assert sidecar["adapter_id"] == info.adapter_id and sidecar["data"]["cycle"] == 1
    p = LocalPolicy(model_dir=tiny, adapter=__import__("pathlib").Path(info.path))
    p.load()
    assert hasattr(p.model, "peft_config")


def test_close_ends_the_decoder_thread_and_a_later_call_reloads(tiny):
    p = LocalPolicy(model_dir=tiny)
    first = p.sample([{"role": "user", "content": "hi"}], n=2, temperature=0.0, max_tokens=3, seed=1)
    thread = p._scheduler.thread
    assert thread is not None and thread.is_alive()
    p.close()
    assert not thread.is_alive() and p._model is None
    again = p.sample([{"role": "user", "content": "hi"}], n=2, temperature=0.0, max_tokens=3, seed=1)
    assert [c.token_ids for c in again] == [c.token_ids for c in first]  # greedy: the same completions after reload


def test_server_libraries_name_their_local_files_by_host_port_and_database(postgres_url: str) -> None:
    from pathlib import Path

    from sqlalchemy.engine import make_url

    from arena.session.cycles import sleep_dir
    from arena.session.runner import checkpoint_path
    from lessons.library.store import LessonStore

    u = make_url(postgres_url)
    with LessonStore(postgres_url) as st:
        slug = f"{u.host}-{u.port}-{u.database}"
        assert st.server_slug == slug
        assert checkpoint_path(st) == Path(f"{slug}.checkpoints.sqlite")
        assert sleep_dir(st, "adapter-0001") == Path.cwd() / "adapters" / slug / "adapter-0001"
