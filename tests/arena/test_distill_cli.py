"""`arena distill` / `arena eval` end to end on a tiny random Llama, and their bad-input errors.

The library holds a hand-made session (real chain_sum tasks, rollouts whose token ids come
from the SmolLM2 tokenizer), so the whole pipeline runs — data, held-out evaluation of the
four conditions, training, atomic save, reload from disk, registration — in seconds.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from session_scripts import make_session, session_rollouts
from tiny_llama import make_tiny

from agents.roles.solver import guided_messages, solver_messages
from arena.config import SessionConfig
from arena.distill.config import DistillConfig, TrainConfig, default_dropout
from arena.objectives import objective_names
from arena.distill.pipeline import collect_data
from arena.tasks.sources import load_tasks
from lessons.library.store import EpisodeRecord, LessonStore, RolloutRecord


def arena(*args, cwd=None):
    """`arena ARGS` in a fresh process (what a user runs)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "arena.cli", *args], capture_output=True, text=True, env=env, cwd=cwd,
                          timeout=300)


def assert_one_line_error(proc, *fragments):
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("arena: error: ") and "Traceback" not in proc.stderr
    for f in fragments:
        assert f in lines[0], lines[0]
    assert proc.stdout == ""


@pytest.fixture
def db(tmp_path, tiny):
    path = tmp_path / "arena.db"
    make_session(path, tiny)
    return path


def test_distill_then_eval_end_to_end(db, tiny, tmp_path, arena_inproc):
    # the tiny random model finds every hand-made guided completion implausible without its hint; keep them
    # here (the screen has its own tests) so both kinds of example go through the pipeline
    proc = arena("distill", "--db", str(db), "--base-model", str(tiny), "--steps", "3", "--eval-max-tokens", "4",
                 "--min-guided-log-ratio=-inf", "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["adapter_id"] == "adapter-0001" and out["session"] == "demo" and out["objective"] == "distill"
    path = Path(out["adapter_path"])
    assert path == (tmp_path / "adapters" / "adapter-0001")
    assert {"adapter_config.json", "adapter_model.safetensors", "arena_adapter.json"} <= {p.name for p in path.iterdir()}
    assert out["train"]["steps"] == 3 and out["train"]["tokens"] > 0 and out["train"]["tokens_per_s"] > 0
    assert isinstance(out["train"]["final_loss"], float)
    # 2 unguided successes (context distillation) and 2 guided successes (importance-weighted)
    assert out["data"]["by_kind"] == {"context": 2, "guided": 2, "sft": 0} and out["data"]["weighted_examples"] == 2
    assert set(out["eval"]) == {"base", "base_lessons", "adapter", "adapter_lessons"}
    for e in out["eval"].values():
        assert set(e) >= {"pass_at_1", "n", "ci95"} and e["n"] == 4 and 0 <= e["ci95"][0] <= e["pass_at_1"] <= e["ci95"][1]
    assert out["in_context"] == ["chain_sum-00001"]  # the second episode had the lesson in its prompt
    sidecar = json.loads((path / "arena_adapter.json").read_text())
    assert sidecar["adapter_id"] == "adapter-0001" and sidecar["eval"]["adapter"] == out["eval"]["adapter"]
    assert sidecar["data"]["rollout_ids"] and sidecar["metrics"]["steps"] == 3

    # the four held-out evaluations are stored per task under the names arena eval uses, so paired_heldout pairs them
    assert out["evaluations"] == ["eval:base", "eval:base+lessons", "eval:adapter-0001", "eval:adapter-0001+lessons"]
    with sqlite3.connect(db) as c:
        stored = {n: (p1, json.loads(d)) for n, p1, d in c.execute("select name, pass_at_1, details from evaluations")}
    for name, cond in zip(out["evaluations"], ("base", "base_lessons", "adapter", "adapter_lessons"), strict=True):
        p1, details = stored[name]
        assert p1 == out["eval"][cond]["pass_at_1"] and len(details["tasks"]) == 4
        assert sum(r["reward"] >= 1.0 for r in details["tasks"]) == out["eval"][cond]["passes"]
        assert details["max_tokens"] == 4 and details["lesson_tokens"] == 512
    assert stored["eval:base"][1]["adapter"] is None and stored["eval:adapter-0001"][1]["adapter"] == str(path)
    with sqlite3.connect(db) as c:
        row = c.execute("select adapter_id, objective, path from adapters").fetchall()
        assert row == [("adapter-0001", "distill", str(path))]
        edges = c.execute("select relation from adapter_lessons order by id").fetchall()
    # The rule itself is tested on hand-worked figures (tests/arena/test_evaluation.py); here: the CLI's
    # outcome, the stored edges and the lesson's status agree with the figures it printed (the lesson is
    # shown on every held-out task here).
    b, bl, ad = out["eval"]["base"], out["eval"]["base_lessons"], out["eval"]["adapter"]
    expect_distilled = bl["pass_at_1"] > b["pass_at_1"] and ad["pass_at_1"] >= bl["ci95"][0]
    assert (out["distilled"] == ["chain_sum-00001"]) == expect_distilled
    assert [e[0] for e in edges] == ["in_context"] + (["distilled"] if expect_distilled else [])

    proc = arena_inproc("eval", "--db", str(db), "--adapter", "adapter-0001", "--base-model", str(tiny),
                        "--max-tokens", "4", "--json")
    assert proc.returncode == 0, proc.stderr
    ev = json.loads(proc.stdout)
    assert ev["adapter_id"] == "adapter-0001" and set(ev["eval"]) == {"adapter", "adapter_lessons"}
    assert ev["excluded_lessons"] == out["distilled"]
    assert ev["eval"]["adapter"] == {k: out["eval"]["adapter"][k] for k in ev["eval"]["adapter"]}  # greedy: same figures
    with sqlite3.connect(db) as c:  # per-task rows, as a session's held-out evaluations keep them (paired tests read them)
        details = json.loads(c.execute("select details from evaluations where name = 'eval:adapter-0001'").fetchone()[0])
    assert len(details["tasks"]) == ev["eval"]["adapter"]["n"]
    assert sum(r["reward"] == 1.0 for r in details["tasks"]) == ev["eval"]["adapter"]["passes"]
    assert {"task_key", "extracted_answer", "reward", "lessons"} <= set(details["tasks"][0])
    assert (details["max_tokens"], details["lesson_tokens"]) == (4, 512) == (ev["max_tokens"], ev["lesson_tokens"])
    assert ev["evaluations"] == ["eval:adapter-0001", "eval:adapter-0001+lessons"]
    # without --max-tokens: the session's cap, so the figures pair with the session's own held-out evaluations
    with sqlite3.connect(db) as c:
        cfg = json.loads(c.execute("select config from sessions where name = 'demo'").fetchone()[0])
        c.execute("update sessions set config = ? where name = 'demo'", (json.dumps({**cfg, "max_tokens": 3}),))
    proc = arena_inproc("eval", "--db", str(db), "--adapter", "adapter-0001", "--base-model", str(tiny), "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["max_tokens"] == 3
    # an unregistered directory: named by its directory name, cut so the name fits evaluations.name (100 characters)
    import shutil

    loose = tmp_path / ("x" * 120)
    shutil.copytree(out["adapter_path"], loose)
    (loose / "arena_adapter.json").unlink()  # no sidecar: a peft adapter from elsewhere
    proc = arena_inproc("eval", "--db", str(db), "--adapter", str(loose), "--base-model", str(tiny), "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["evaluations"] == ["eval:" + "x" * 80, "eval:" + "x" * 80 + "+lessons"]

    # a table without --json
    proc = arena_inproc("eval", "--db", str(db), "--base-model", str(tiny), "--max-tokens", "4")
    assert proc.returncode == 0, proc.stderr
    assert "base + lessons" in proc.stdout and "95% CI" in proc.stdout


def test_sft_objective_uses_unguided_successes_only(db, tiny):
    from arena.distill.config import DistillConfig, TrainConfig
    from arena.distill.pipeline import run_distill

    with LessonStore(str(db)) as store:
        out = run_distill(store, str(db), "demo", DistillConfig(objective="sft", eval_max_tokens=2,
                                                                train=TrainConfig(max_steps=1)), base_model=tiny)
    assert out["data"]["by_kind"] == {"context": 0, "guided": 0, "sft": 2}
    assert out["data"]["skipped"] == {"failed": 2, "guided_not_used": 2}


def test_bf16_sampling_evaluates_base_and_adapter_in_bf16_and_trains_in_fp32(db, tiny, monkeypatch):
    """With bf16 sampling on the CPU, base and adapter are evaluated in the same dtype (a paired comparison of
    models, not of dtypes) and the adapter is trained on an fp32 base."""
    import torch

    from arena.distill import pipeline
    from arena.distill.config import DistillConfig, TrainConfig

    monkeypatch.setenv("ARENA_CPU_DTYPE", "bf16")
    evaluated, trained = [], []
    real_evaluate, real_train = pipeline.evaluate, pipeline.train_and_save
    monkeypatch.setattr(pipeline, "evaluate", lambda store, policy, *a, **k: (
        evaluated.append(next(policy.model.parameters()).dtype), real_evaluate(store, policy, *a, **k))[1])
    monkeypatch.setattr(pipeline, "train_and_save", lambda policy, *a, **k: (
        trained.append(next(policy.model.parameters()).dtype), real_train(policy, *a, **k))[1])
    with LessonStore(str(db)) as store:
        pipeline.run_distill(store, str(db), "demo", DistillConfig(objective="sft", eval_max_tokens=2,
                                                                   train=TrainConfig(max_steps=1)), base_model=tiny)
    assert evaluated == [torch.bfloat16] * 4  # base, base + lessons, adapter, adapter + lessons
    assert trained == [torch.float32]


def test_no_eligible_data_is_one_line_and_writes_nothing(tmp_path, tiny, arena_inproc):
    db = tmp_path / "arena.db"
    make_session(db, tiny, successes=False)
    proc = arena_inproc("distill", "--db", str(db), "--base-model", str(tiny), "--session", "demo")
    assert_one_line_error(proc, "no eligible training data", "6 rollouts", "6 failed", "--success-threshold")
    assert not (tmp_path / "adapters").exists()
    with sqlite3.connect(db) as c:
        assert c.execute("select count(*) from adapters").fetchone()[0] == 0


def test_failed_registration_leaves_no_adapter_behind(db, tiny, tmp_path, monkeypatch):
    from arena.distill.config import DistillConfig, TrainConfig
    from arena.distill.pipeline import run_distill
    from lessons.library.adapters import AdapterStore

    def boom(self, rec):
        raise KeyboardInterrupt

    monkeypatch.setattr(AdapterStore, "register_adapter", boom)
    with LessonStore(str(db)) as store, pytest.raises(KeyboardInterrupt):
        run_distill(store, str(db), "demo", DistillConfig(eval_max_tokens=2, train=TrainConfig(max_steps=1)),
                    out_dir=tmp_path / "ad", base_model=tiny)
    assert not (tmp_path / "ad").exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".ad")]
    with sqlite3.connect(db) as c:
        assert c.execute("select count(*) from adapters").fetchone()[0] == 0
        assert c.execute("select count(*) from lessons where status = 'distilled'").fetchone()[0] == 0


def test_bad_adapters_and_inputs_are_one_line(db, tiny, tmp_path, arena_inproc):
    arena = arena_inproc
    proc = arena("eval", "--db", str(db), "--adapter", "adapter-0042", "--base-model", str(tiny))
    assert_one_line_error(proc, "no adapter 'adapter-0042'")
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "adapter_config.json").write_text('{"peft_type": "LORA"}')
    (broken / "adapter_model.safetensors").write_bytes(b"not a safetensors file")
    proc = arena("eval", "--db", str(db), "--adapter", str(broken), "--base-model", str(tiny))
    assert_one_line_error(proc, "corrupt adapter directory", "adapter_model.safetensors")
    proc = arena("run", "--db", str(db), "--adapter", str(broken))
    assert_one_line_error(proc, "corrupt adapter directory")
    proc = arena("distill", "--db", str(tmp_path / "nope.db"))
    assert_one_line_error(proc, "no database at")
    assert not (tmp_path / "nope.db").exists()
    proc = arena("distill", "--db", str(db), "--objective", "rl")
    assert_one_line_error(proc, "--objective: unknown objective 'rl'; choose one of distill, sft, guided-unweighted, grpo, "
                                "guide-grpo, opcd")
    proc = arena("distill", "--db", str(db), "--session", "ghost", "--base-model", str(tiny))
    assert_one_line_error(proc, "no session named 'ghost'")
    proc = arena("distill", "--db", str(db), "--rank", "0")
    assert_one_line_error(proc, "rank")


def test_adapter_for_another_base_model_is_refused(db, tiny, tmp_path, arena_inproc):
    arena = arena_inproc
    proc = arena("distill", "--db", str(db), "--base-model", str(tiny), "--steps", "1", "--eval-max-tokens", "2")
    assert proc.returncode == 0, proc.stderr
    for text in ("adapter-0001", "base + lessons", "adapter + remaining lessons", "95% CI", "distilled lessons:",
                 "recorded per task as: eval:base, eval:base+lessons, eval:adapter-0001, eval:adapter-0001+lessons"):
        assert text in " ".join(proc.stdout.split())  # rich wraps long lines at the terminal's width
    other = make_tiny(tmp_path / "other", seed=7)
    proc = arena("eval", "--db", str(db), "--adapter", "adapter-0001", "--base-model", str(other))
    assert_one_line_error(proc, "adapter-0001 was trained on base model", "use an adapter trained on this model")
    proc = arena("run", "--db", str(db), "--adapter", "adapter-0001")  # the embedded model is another base too
    assert_one_line_error(proc, "adapter-0001 was trained on base model")


def test_adapter_goes_to_the_local_solver_only_and_its_distilled_lessons_leave_the_prompt(db, tmp_path):
    from arena.session.runner import adapter_distilled_lessons, make_roles
    from lessons.library.adapters import AdapterRecord, AdapterStore

    cfg = SessionConfig(db=str(db), adapter=str(tmp_path / "ad"), teacher="local")
    roles = make_roles(cfg)  # LocalPolicy loads lazily: nothing is loaded here
    assert roles.solver.adapter == tmp_path / "ad" and roles.teacher.adapter is None
    assert roles.solver is not roles.teacher
    plain = make_roles(SessionConfig(db=str(db), teacher="local"))
    assert plain.solver is plain.teacher and plain.solver.adapter is None  # one shared base model
    with pytest.raises(ValueError, match="--adapter needs the local solver"):
        SessionConfig(db=str(db), adapter="x", solver="openai:m")

    with LessonStore(str(db)) as store:
        assert adapter_distilled_lessons(store, None) == ()
        assert adapter_distilled_lessons(store, str(tmp_path / "ad")) == ()  # unregistered: nothing distilled
        AdapterStore(store).register_adapter(AdapterRecord(
            "adapter-0001", str(tmp_path / "ad"), "fp", "distill", None, {}, {}, {}, {}, ["chain_sum-00001"],
            {"chain_sum-00001": "kept"}))
        assert adapter_distilled_lessons(store, str(tmp_path / "ad")) == ("chain_sum-00001",)


# --------------------------------------------------------------------------- rollouts no objective may train on

HINT_PLAN = "Add the tens first, then the ones."
# The rollouts of exclusion_session: (episode, idx) -> (guided, answers right). The two at EXCLUDED are
# recorded left out (one unguided success, the first guided success), each followed by a twin recorded plainly.
EXCLUDED = {(0, 0), (1, 3)}
# Which of the EXCLUDED positions each objective trains on when nothing leaves them out: successes (distill,
# guided-unweighted), unguided successes only (sft), every rollout of a group with unequal rewards (grpo: unguided
# only), the first guided rollout of an episode (opcd: its chat, with the hint's plan, is the teacher's context)
WOULD_TRAIN = {"distill": EXCLUDED, "sft": {(0, 0)}, "guided-unweighted": EXCLUDED, "grpo": {(0, 0)},
               "guide-grpo": EXCLUDED, "opcd": {(1, 3)}}


def exclusion_session(db: Path, tiny: Path, reason: str | None) -> dict[int, tuple[int, int]]:
    """A finished session written through the episode node's write path (``LessonStore.record_episode``).

    Two train episodes: task 0's unguided group (right, right, wrong, wrong); task 1's all-fail group (wrong × 3),
    re-attempted with a plan hint (right, right, wrong). With ``reason`` the rollouts at :data:`EXCLUDED` are
    recorded as the episode node records a rollout of that kind (:func:`arena.episode.nodes.curate`):
    ``reward_hack_flagged`` — a rubric grading with a hack flag (``RolloutGrading.hack_flags``, stored as
    ``rollouts.hack_flags``); ``ungraded`` — a judge that never answered (reward None, fault ``timeout``, so
    ``grading_status`` "ungraded"); ``oversized`` — a reply cut to ``--max-tokens`` (fault ``oversized``). None: the
    same session with nothing left out.

    Returns:
        rollouts.id -> (episode, idx).
    """
    from transformers import AutoTokenizer

    from lessons.library.records import HintRecord, RolloutGrading

    tok = AutoTokenizer.from_pretrained(tiny)
    cfg = SessionConfig(db=str(db), train_tasks=2, heldout_tasks=4, session="demo")
    splits = load_tasks(cfg.families, None, cfg.train_tasks, cfg.heldout_tasks, cfg.seed)
    store = LessonStore(str(db))
    sid = store.create_session("demo", cfg.model_dump(mode="json"), 0)
    store.upsert_tasks(sid, [*splits.train, *splits.heldout])
    plan = {0: [(False, True), (False, True), (False, False), (False, False)],
            1: [(False, False)] * 3 + [(True, True), (True, True), (True, False)]}
    for e, task in enumerate(splits.train):
        msgs = solver_messages(task.question)
        guided_msgs = guided_messages(msgs, HINT_PLAN)
        rollouts = []
        for idx, (guided, right) in enumerate(plan[e]):
            text = f"<answer>{task.answer if right else 0}</answer>"
            ids = tok(text, add_special_tokens=False)["input_ids"]
            r = RolloutRecord(idx, guided_msgs if guided else msgs, text, task.answer if right else "0",
                              1.0 if right else 0.0, "c", 50, len(ids), "stop", 0.1, guided=guided, token_ids=ids,
                              logprobs=[-0.5] * len(ids), unguided_messages=msgs if guided else None)
            if reason is not None and (e, idx) in EXCLUDED:
                if reason == "reward_hack_flagged":
                    r.grading = RolloutGrading(graded=True, reward_kind="rubric-explicit",
                                               hack_flags=["verifier_disagrees"])
                elif reason == "ungraded":
                    r.reward, r.extracted_answer, r.critique, r.fault = None, None, "ungraded: judge timed out", "timeout"
                elif reason == "oversized":
                    r.fault, r.finish_reason = "oversized", "length"
                else:
                    raise ValueError(reason)
            rollouts.append(r)
        hint = HintRecord("plan", HINT_PLAN) if e == 1 else None
        store.record_episode(EpisodeRecord(sid, f"r001-{task.task_key}", 1, task.task_key, msgs[0]["content"], [],
                                           rollouts, None, hint=hint))
    store.set_session_status(sid, "finished")
    episodes = {row.episode_id for row in session_rollouts(store, "demo")}
    where = {row.id: (sorted(episodes).index(row.episode_id), row.idx) for row in session_rollouts(store, "demo")}
    store.close()
    return where


def distill_config(objective: str) -> DistillConfig:
    """The smallest config `arena distill --objective OBJECTIVE` would build (its default LoRA dropout)."""
    return DistillConfig(objective=objective, eval_max_tokens=2,
                         train=TrainConfig(max_steps=1, dropout=default_dropout(objective)))


@pytest.mark.parametrize("reason", ["reward_hack_flagged", "ungraded", "oversized"])
@pytest.mark.parametrize("objective", objective_names())
def test_ungraded_and_flagged_rollouts_never_become_training_data(objective, reason, tmp_path, tiny):
    """Every objective's data path keeps to `eligible_for_training` (issue "Faults, bad input and speed", claims).

    The same session twice, once with the rollouts at EXCLUDED recorded as ``reason`` makes them: the objective's
    examples (what `arena distill` and a sleep of `arena run --cycles` train on, :func:`collect_data`) are those of
    the plain session without them, and each is counted under ``reason``.
    """
    plain_at = exclusion_session(tmp_path / "plain.db", tiny, None)
    left_out_at = exclusion_session(tmp_path / "left-out.db", tiny, reason)
    data, used = {}, {}
    for name, at in (("plain", plain_at), ("left-out", left_out_at)):
        with LessonStore(str(tmp_path / f"{name}.db")) as store:
            data[name] = collect_data(store, "demo", distill_config(objective), count_tokens=lambda s: len(s.split()))[1]
        assert data[name].objective == objective
        used[name] = [at[e.rollout_id] for e in data[name].examples]  # (episode, idx) of each example, in order
    plain, left_out = data["plain"], data["left-out"]
    assert EXCLUDED & set(used["plain"]) == WOULD_TRAIN[objective]  # the objective would train on them...
    assert not EXCLUDED & set(used["left-out"])  # ...and never does once they are flagged, ungraded or cut
    if objective == "opcd":  # one example per episode: the next guided rollout gives the teacher's context
        assert used["plain"] == [(1, 3)] and used["left-out"] == [(1, 4)]
    else:
        assert used["left-out"] == [k for k in used["plain"] if k not in EXCLUDED]
    assert left_out.skipped[reason] == len(EXCLUDED) and reason not in plain.skipped
    assert left_out.rollouts_seen == plain.rollouts_seen - len(EXCLUDED)


def test_arena_distill_trains_on_the_data_path_without_the_excluded_rollouts(tmp_path, tiny, arena_inproc):
    """`arena distill` end to end: the adapter's provenance is the data path's examples, the flagged rollouts out."""
    at = exclusion_session(tmp_path / "arena.db", tiny, "reward_hack_flagged")
    db = str(tmp_path / "arena.db")
    with LessonStore(db) as store:
        want = [e.rollout_id for e in collect_data(store, "demo", distill_config("distill"))[1].examples]
    proc = arena_inproc("distill", "--db", db, "--base-model", str(tiny), "--steps", "1", "--eval-max-tokens", "2",
                        "--min-guided-log-ratio=-inf", "--json")  # keep the guided successes the random model finds implausible
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["data"]["skipped"]["reward_hack_flagged"] == len(EXCLUDED)
    with sqlite3.connect(db) as c:
        prov = json.loads(c.execute("select data from adapters").fetchone()[0])
    assert prov["rollout_ids"] == want and not EXCLUDED & {at[i] for i in want}
    assert {at[i] for i in want} == {(0, 1), (1, 4)}  # the two twins: the only successes left


def test_distill_weights_use_pi_old_at_the_sampling_temperature(db, tiny, arena_inproc):
    """Guide's ratio of objective `distill` is over the distribution that sampled: π_old rescored at T under its adapter."""
    proc = arena_inproc("distill", "--db", str(db), "--base-model", str(tiny), "--steps", "1", "--eval-max-tokens", "2",
                        "--min-guided-log-ratio=-inf", "--json")  # keep the guided successes the random model finds implausible
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    pi_old = out["data"]["report"]["pi_old"]
    session_t = SessionConfig(db="x.db").temperature  # make_session's sessions keep the default
    assert pi_old["temperature"] == session_t and pi_old["sampled_by"] == ["base"]
    assert pi_old["examples"] == out["data"]["by_kind"]["guided"] == 2  # the weighted examples only
    assert pi_old["stored_vs_rescored_mean_abs"] > 0  # the stored -0.5s are not the tempered base's log-probs
    with sqlite3.connect(db) as c:
        assert json.loads(c.execute("select config from adapters").fetchone()[0])["train"]["temperature"] == session_t
