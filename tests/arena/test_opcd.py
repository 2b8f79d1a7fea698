"""The `opcd` objective (on-policy context distillation): reverse KL on a 4-token vocabulary by hand, the
contexts it pairs, a tiny model absorbing a lesson, `arena distill --objective opcd` end to end, and the
session settings that may sleep with it."""

from __future__ import annotations

import json
import math
import sqlite3

import pytest
import torch
from cli_helpers import assert_one_line_error
from session_scripts import make_session

from agents.roles.solver import (
    LessonView,
    guided_messages,
    render_lessons,
    solver_messages,
    strip_lessons_section,
    with_lessons_section,
)
from arena.distill.data import NoTrainingData
from arena.distill.losses import reverse_kl
from arena.distill.objectives.opcd import OPCDExample, build_opcd_dataset, require_opcd_examples
from lessons.library.adapters import AdapterStore, TrainingRollout

# --------------------------------------------------------------------------- the loss, by hand


def test_reverse_kl_on_a_four_token_vocabulary_by_hand():
    p_s = torch.tensor([0.5, 0.25, 0.125, 0.125])
    p_t = torch.tensor([0.25, 0.25, 0.25, 0.25])
    s_logits = p_s.log().unsqueeze(0).requires_grad_()
    kl = reverse_kl(s_logits, p_t.log().unsqueeze(0))
    # Σ p_s log(p_s / p_t) = 0.5 log 2 + 0.25 log 1 + 2 · 0.125 log 0.5 = 0.25 log 2
    assert kl.tolist() == pytest.approx([0.25 * math.log(2)], abs=1e-6)
    kl.sum().backward()
    # d KL / d z_v = p_s(v) (log p_s(v) − log p_t(v) − KL)
    want = [p * (math.log(p / 0.25) - 0.25 * math.log(2)) for p in p_s.tolist()]
    assert s_logits.grad[0].tolist() == pytest.approx(want, abs=1e-6)
    # reverse, not forward: KL(p_t ‖ p_s) = 0.25 log 0.5 + 0 + 2 · 0.25 log 2 = 0.25 log 2 here too, so check another pair
    q = torch.tensor([[0.7, 0.1, 0.1, 0.1]]).log()
    r = torch.tensor([[0.4, 0.4, 0.1, 0.1]]).log()
    assert reverse_kl(q, r).item() == pytest.approx(0.7 * math.log(0.7 / 0.4) + 0.1 * math.log(0.1 / 0.4), abs=1e-6)
    assert reverse_kl(r, r).item() == pytest.approx(0.0, abs=1e-7)
    # logits, not probabilities: shifting them changes nothing; the teacher gets no gradient
    t_logits = (r + 3.0).requires_grad_()
    out = reverse_kl(q, t_logits)
    assert out.item() == pytest.approx(0.7 * math.log(0.7 / 0.4) + 0.1 * math.log(0.1 / 0.4), abs=1e-6)
    assert not out.requires_grad
    with pytest.raises(ValueError, match="differ"):
        reverse_kl(torch.zeros(2, 4), torch.zeros(2, 5))


# --------------------------------------------------------------------------- the contexts


LESSON_SECTION = render_lessons([LessonView("L1", "Add the ones first.")], 512, lambda s: len(s.split()))[0]
PLAN = "Add the ones first, then the tens."
FEEDBACK = "Feedback on earlier attempts (all wrong):\n- An earlier attempt answered '4': answer '4' is incorrect"
ANSWER = "The correct final answer is 3. Work out the steps that lead to it, then give it on the last line as <answer>3</answer>."


def roll(rid, episode, guided=False, lessons=True, reward=0.0, hint=("plan", PLAN)):
    msgs = solver_messages(f"What is {episode} + 1?", LESSON_SECTION if lessons else "")
    mode, text = hint
    hinted = guided_messages(msgs, text)
    return TrainingRollout(rid, "s", f"t{episode}", "f", guided, hinted if guided else msgs, msgs if guided else None,
                           "c", None, None, reward, "stop", 9 if guided else None, ["L1"] if lessons else [],
                           text if guided else None, None, 1, episode, mode if guided else None)


def test_contexts_pair_the_bare_chat_with_what_the_solver_had():
    assert LESSON_SECTION and strip_lessons_section(solver_messages("q", LESSON_SECTION)) == solver_messages("q")
    rs = [roll(1, 1), roll(2, 1, reward=1.0),  # lessons in context: the teacher sees them
          roll(3, 2), roll(4, 2), roll(5, 2, guided=True), roll(6, 2, guided=True),  # all fail, then the hint
          roll(7, 3, lessons=False), roll(8, 3, lessons=False)]  # nothing in context: nothing to distil
    data = build_opcd_dataset(rs, strip_lessons_section)
    assert [(e.kind, e.rollout_id, e.task_key) for e in data.examples] == [("lessons", 1, "t1"), ("hint", 5, "t2")]
    lessons, hint = data.examples
    assert lessons.messages == solver_messages("What is 1 + 1?") and LESSON_SECTION in lessons.teacher_messages[0]["content"]
    # the student never sees the hint or the lessons; the teacher has the guided chat as it was sampled
    assert hint.messages == solver_messages("What is 2 + 1?")
    assert hint.teacher_messages == rs[4].messages and hint.hint_id == 9 and hint.lessons == ("L1",)
    assert dict(data.skipped) == {"no_context": 1} and data.rollouts_seen == 8
    assert data.lessons_in_context == ["L1"]  # the lessons whose effect it trains in: candidates for `distilled`
    assert data.provenance()["by_kind"] == {"lessons": 1, "hint": 1} and data.provenance()["hint_ids"] == [9]
    with pytest.raises(NoTrainingData, match="no train task has an active lesson.*1 no context.*--hint-mode plan"):
        require_opcd_examples(build_opcd_dataset(rs[6:], strip_lessons_section), "s")
    with pytest.raises(NoTrainingData, match="no rollouts"):
        require_opcd_examples(build_opcd_dataset([], strip_lessons_section), "s")


def test_only_the_plan_part_of_a_hint_reaches_the_teacher():
    """The case of session 12's full-size opcd run: all 18 examples of its one-cycle wake were `feedback,answer`
    hints, so the teacher was an oracle for each task and the adapter fell to 0.109 (base 0.266). Feedback parts
    name one task's wrong answers: 0.188 on the same wake; lessons alone 0.313."""
    full = roll(1, 1, guided=True, lessons=False, hint=("plan+feedback+answer", f"{PLAN}\n\n{FEEDBACK}\n\n{ANSWER}"))
    answer = roll(2, 2, guided=True, lessons=False, hint=("feedback+answer", f"{FEEDBACK}\n\n{ANSWER}"))
    with_lessons = roll(3, 3, guided=True, hint=("answer", ANSWER))
    unsplittable = roll(4, 4, guided=True, lessons=False, hint=("plan+answer", f"{PLAN} {ANSWER}"))
    data = build_opcd_dataset([full, answer, with_lessons, unsplittable], strip_lessons_section)
    assert [(e.kind, e.rollout_id) for e in data.examples] == [("hint", 1), ("lessons", 3)]
    plan, les = data.examples
    assert plan.teacher_messages == guided_messages(solver_messages("What is 1 + 1?"), PLAN) and plan.hint_id == 9
    assert les.teacher_messages == solver_messages("What is 3 + 1?", LESSON_SECTION) and les.hint_id is None
    for e in data.examples:
        assert all("correct final answer" not in m["content"] and "An earlier attempt" not in m["content"]
                   for m in e.teacher_messages)
    assert dict(data.skipped) == {"hint_not_distilled": 2}  # no plan part, or parts that cannot be told apart
    assert data.provenance()["hint_ids"] == [9] and data.provenance()["by_kind"] == {"lessons": 1, "hint": 1}


def test_the_teacher_sees_the_library_as_it_is_at_sleep_time():
    """With lessons_now the teacher's lessons come from the library at sleep time, not the episode's prompt: a first
    round's episodes had none in context (reflection writes lessons at the end of a round)."""
    seen = []

    def lessons_now(family, question):
        seen.append((family, question))
        return (LESSON_SECTION, ["L1"]) if "1 + 1" in question else ("", [])

    rs = [roll(1, 1, lessons=False), roll(2, 2), roll(3, 3, guided=True, lessons=False)]
    data = build_opcd_dataset(rs, strip_lessons_section, lessons_now)
    assert seen == [("f", "What is 1 + 1?"), ("f", "What is 2 + 1?"), ("f", "What is 3 + 1?")]  # the bare question
    assert [(e.kind, e.rollout_id, e.lessons) for e in data.examples] == [("lessons", 1, ("L1",)), ("hint", 3, ())]
    assert data.examples[0].teacher_messages == solver_messages("What is 1 + 1?", LESSON_SECTION)
    assert data.examples[1].teacher_messages == guided_messages(solver_messages("What is 3 + 1?"), PLAN)
    assert dict(data.skipped) == {"no_context": 1}  # episode 2's lesson is no longer in the library's answer


def test_library_lessons_are_the_active_ones_a_heldout_prompt_gets(tmp_path):
    from arena.distill.objectives.opcd import library_lessons
    from lessons.library.curation import Provenance
    from lessons.library.store import LessonStore

    with LessonStore(str(tmp_path / "lib.db")) as store:
        prov = Provenance(origin={"by": "test"})
        with store.curate() as c:
            active = c.add("Add the ones first, then the tens.", "chain_sum", "", prov, status="active")
            other = c.add("Keep the sign of each term.", "global", "", prov, status="active")
            c.add("Untested: always answer zero.", "chain_sum", "", prov)  # a candidate: never distilled
        count = lambda s: len(s.split())
        section, ids = library_lessons(store, 512, count)("chain_sum", "What is 12 + 30?")
        assert sorted(ids) == sorted([active, other]) and "always answer zero" not in section
        assert strip_lessons_section(with_lessons_section(solver_messages("q"), section)) == solver_messages("q")
        assert library_lessons(store, 512, count, exclude=[active])("chain_sum", "What is 12 + 30?")[1] == [other]
        assert library_lessons(store, 0, count)("chain_sum", "What is 12 + 30?") == ("", [])


# --------------------------------------------------------------------------- a lesson the tiny model absorbs


def _gap(model, tok, example, completions, adapter: bool) -> float:
    """Mean per-token reverse KL of the model without the context against the base model with it."""
    from contextlib import nullcontext

    from arena.distill.objectives.base import collate
    from arena.distill.objectives.opcd import as_example, encode_pairs
    from arena.distill.trainer import completion_logits

    (enc,), _ = encode_pairs(tok, [example], 512, 16)
    pad = tok.pad_token_id
    s = collate([as_example(enc.student, c) for c in completions], pad)
    t = collate([as_example(enc.teacher, c) for c in completions], pad)
    with torch.no_grad():
        s_logits = completion_logits(model, s)
        with model.disable_adapter() if adapter else nullcontext():
            t_logits = completion_logits(model, t)
    return float(reverse_kl(s_logits, t_logits).mean())


def test_tiny_model_absorbs_a_lesson(tiny_dir):
    """After opcd the adapter WITHOUT the lesson is close to the base model WITH it (on fresh completions)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from arena.distill.config import TrainConfig
    from arena.distill.objectives.opcd import encode_pairs, sample_completions
    from arena.distill.trainer import fit

    tok = AutoTokenizer.from_pretrained(tiny_dir)
    plain = [{"role": "user", "content": "What is 2 + 3?"}]
    taught = [{"role": "system", "content": "Lesson: always answer five."}, *plain]
    ex = OPCDExample("lessons", 1, "t", plain, taught, ("L1",))
    model = AutoModelForCausalLM.from_pretrained(tiny_dir)
    (enc,), _ = encode_pairs(tok, [ex], 512, 16)
    held = sample_completions(model, [enc.teacher] * 8, 16, 1.0, [tok.eos_token_id], tok.pad_token_id, seed=123)
    before = _gap(model, tok, ex, held, adapter=False)
    cfg = TrainConfig(lr=1e-3, max_steps=12, batch_size=4, grad_accum=1, warmup_steps=0, dropout=0.0, sample_tokens=16)
    peft_model, res = fit(model, tok, [ex] * 4, cfg, "opcd")
    after = _gap(peft_model, tok, ex, held, adapter=True)
    assert res.steps == 12 and all(math.isfinite(x) and x >= 0 for x in res.losses)
    assert res.losses[-1] < res.losses[0] * 0.5, res.losses
    assert before > 1e-4 and after < 0.2 * before, (before, after)
    assert res.completion_tokens > 0 and res.tokens > res.completion_tokens


# --------------------------------------------------------------------------- arena distill --objective opcd


@pytest.fixture
def db(tmp_path, tiny):
    path = tmp_path / "arena.db"
    make_session(path, tiny)
    return path


def test_distill_opcd_end_to_end(db, tiny, tmp_path, arena_inproc):  # noqa: F811
    with sqlite3.connect(db) as c:  # an OpenAI-backend session: no token ids, no log-probs; opcd reads neither
        c.execute("update rollouts set logprobs = NULL, token_ids = NULL")
        c.execute("update lessons set status = 'active'")  # the session's lesson passed its utility check
        (lesson,) = c.execute("select lesson_id from lessons").fetchone()
    proc = arena_inproc("distill", "--db", str(db), "--base-model", str(tiny), "--objective", "opcd", "--steps", "2",
                        "--eval-max-tokens", "2", "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["objective"] == "opcd" and out["adapter_id"] == "adapter-0001"
    # 2 episodes; the teacher sees the library's lesson in both (the first episode's prompt had none: it was written
    # after it). Their guided re-attempts have no stored hint, whose parts could not be checked for the answer
    assert out["data"]["by_kind"] == {"lessons": 2, "hint": 0} and out["data"]["skipped"] == {}
    assert out["data"]["lessons"] == [lesson] and out["in_context"] == [lesson]
    assert out["train"]["steps"] == 2 and out["train"]["completion_tokens"] > 0
    with sqlite3.connect(db) as c:
        assert c.execute("select adapter_id, objective from adapters").fetchall() == [("adapter-0001", "opcd")]
        cfg = json.loads(c.execute("select config from adapters").fetchone()[0])
        session_max_tokens = json.loads(c.execute("select config from sessions").fetchone()[0])["max_tokens"]
    assert cfg["train"]["sample_tokens"] == session_max_tokens  # the student samples as long as the session's solver


def test_opcd_without_any_context_is_one_line(db, tiny, tmp_path, arena_inproc):  # noqa: F811
    with sqlite3.connect(db) as c:  # no hint re-attempts and no lessons section: nothing to distil
        c.execute("delete from rollouts where guided = 1")
        c.execute("update episodes set lessons_in_context = '[]'")
        rows = c.execute("select id, messages from rollouts").fetchall()
        for rid, msgs in rows:
            c.execute("update rollouts set messages = ? where id = ?",
                      (json.dumps(strip_lessons_section(json.loads(msgs))), rid))
    proc = arena_inproc("distill", "--db", str(db), "--base-model", str(tiny), "--objective", "opcd")
    assert_one_line_error(proc, "objective opcd", "no train task has an active lesson")
    assert not (tmp_path / "adapters").exists()


def test_which_sessions_may_sleep_with_opcd():
    from arena.config import SessionConfig
    from arena.session.cycles import sleep_config

    cfg = SessionConfig(db="x.db", cycles=2, sleep_objective="opcd", max_tokens=64, temperature=0.7)
    d = sleep_config(cfg, 1)
    assert d.objective == "opcd" and d.train.sample_tokens == 64 and d.train.temperature == 1.0
    # it reads no reward: a rubric session may sleep with it, and only with it
    assert SessionConfig(db="x.db", cycles=2, sleep_objective="opcd", reward="rubric-explicit",
                         critic="local").sleep == "opcd"
    with pytest.raises(ValueError, match="only with --sleep-objective opcd"):
        SessionConfig(db="x.db", cycles=2, sleep_objective="grpo", reward="rubric-explicit", critic="local")
    with pytest.raises(ValueError, match="--sleep-kl-coef applies to the sleep objectives grpo and guide-grpo"):
        SessionConfig(db="x.db", cycles=2, sleep_objective="opcd", sleep_kl_coef=0.1)
    assert sleep_config(SessionConfig(db="x.db", cycles=2, sleep_objective="grpo", sleep_kl_coef=0.1), 1).train.kl_coef == 0.1


def test_a_rubric_session_sleeps_with_opcd_and_judges_every_evaluation(tmp_path, tiny):
    """opcd reads no reward, so a rubric session may sleep with it; the sleep's held-out evaluations are judged
    with the session's rubric reward, like the rest of the session (not silently by the verifier)."""
    from langgraph.checkpoint.memory import InMemorySaver
    from rubric_scripts import roles, write_tasks

    from arena.config import SessionConfig
    from arena.session.cycles import cycle_adapters
    from arena.session.runner import run_session
    from arena.tasks.sources import load_tasks
    from lessons.library.store import LessonStore

    path = write_tasks(tmp_path / "sky.jsonl")
    cfg = SessionConfig(db=str(tmp_path / "arena.db"), families=[], tasks_file=path, train_tasks=2, heldout_tasks=2,
                        rounds=2, rollouts=4, reward="rubric-explicit", critic="local", success_threshold=0.8,
                        sleep_objective="opcd", sleep_steps=1, sleep_min_examples=1, max_tokens=8, utility_every=0,
                        reflect_on="all")  # every group is reflected on: the lessons opcd distils come from them
    splits = load_tasks([], path, n_train=2, n_heldout=2, seed=1)
    with LessonStore(cfg.db) as store:
        summary = run_session(cfg, store, roles(), splits, "rubric-opcd", checkpointer=InMemorySaver(), base_model=tiny)
        assert summary.cycles[0].sleep_refused is None, summary.cycles
        (adapter,) = cycle_adapters(store, "rubric-opcd").values()
        evals = store.evaluations(store.get_session("rubric-opcd").id)
    assert adapter.objective == "opcd" and adapter.data["examples"] >= 1
    assert {"heldout_before", "heldout_cycle1_wake_no_lessons", "heldout_cycle1_no_lessons"} <= set(evals)
    for name, e in evals.items():  # judged: the rubric reward's details (mean reward, ungraded count) on every one
        assert "mean_reward" in e.details and "ungraded" in e.details, name
    assert adapter.eval["wake"]["n"] == evals["heldout_cycle1_wake_no_lessons"].n  # the sidecar's n = the stored row's


def test_an_opcd_cycle_needs_enough_episodes_not_rollouts():
    from arena.config import ConfigError, SessionConfig

    cfg = SessionConfig(db="x.db", cycles=2, sleep_objective="opcd", rollouts=8, rounds=2)  # 4 x 2 = 8 episodes
    with pytest.raises(ConfigError, match="one example per episode and a cycle has 8"):
        cfg.check_cycle_budget(4)
    cfg.check_cycle_budget(8)  # 16 episodes: enough
    SessionConfig(db="x.db", cycles=2, sleep_objective="sft", rollouts=8, rounds=2).check_cycle_budget(4)  # 64 rollouts


def test_the_teacher_is_the_policy_training_starts_from(tiny_dir, tmp_path):
    """Continuing an adapter, the frozen starting policy (passed as `teacher`) is π_t, not the bare base model."""
    from tiny_llama import make_tiny
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from arena.distill.config import TrainConfig
    from arena.distill.trainer import fit

    tok = AutoTokenizer.from_pretrained(tiny_dir)
    plain = [{"role": "user", "content": "What is 2 + 3?"}]
    ex = [OPCDExample("lessons", 1, "t", plain, [{"role": "system", "content": "Lesson: answer five."}, *plain])] * 2
    cfg = TrainConfig(lr=1e-9, max_steps=1, batch_size=2, grad_accum=1, warmup_steps=0, dropout=0.0, sample_tokens=8)
    other = AutoModelForCausalLM.from_pretrained(make_tiny(tmp_path / "other", seed=1)).eval()
    same = AutoModelForCausalLM.from_pretrained(tiny_dir).eval()
    losses = {}
    for name, teacher in (("base", None), ("same", same), ("other", other)):
        _, res = fit(AutoModelForCausalLM.from_pretrained(tiny_dir), tok, ex, cfg, "opcd", teacher=teacher)
        losses[name] = res.losses[0]
    assert losses["same"] == pytest.approx(losses["base"], rel=1e-5)  # the same weights: the same π_t
    assert losses["other"] > 10 * losses["base"]  # another policy as teacher: another target


@pytest.mark.parametrize("status", ["candidate", "active"])
def test_a_sleep_distils_the_active_lessons_of_the_library_not_the_candidates(tmp_path, tiny, status):
    """A session's opcd sleep (arena/session/cycles.py) builds its teachers from the library at sleep time: an active
    lesson is distilled; a candidate that never passed its utility A/B is not, though the wake's prompts showed it."""
    from langgraph.checkpoint.memory import InMemorySaver
    from session_scripts import solver_responder, teacher_responder, write_tasks

    from agents.backends.fake import FakePolicy
    from arena.config import SessionConfig
    from arena.episode.context import Roles
    from arena.session.cycles import cycle_adapters
    from arena.session.runner import run_session
    from arena.tasks.sources import load_tasks
    from lessons.library.curation import Provenance
    from lessons.library.store import LessonStore

    tasks = write_tasks(tmp_path / "adding.jsonl")
    cfg = SessionConfig(db=str(tmp_path / "arena.db"), families=[], tasks_file=tasks, train_tasks=2, heldout_tasks=2,
                        rounds=1, rollouts=4, sleep_objective="opcd", sleep_steps=1, sleep_min_examples=1,
                        utility_every=0, max_tokens=8, concurrency=1)
    splits = load_tasks([], tasks, n_train=2, n_heldout=2, seed=0)
    roles = Roles(FakePolicy(solver_responder, "solver"), FakePolicy(teacher_responder, "teacher"))
    with LessonStore(cfg.db) as store:
        with store.curate() as c:
            lesson = c.add("Add the two numbers digit by digit.", "global", "", Provenance(origin={"by": "test"}),
                           status=status)
        summary = run_session(cfg, store, roles, splits, "s", checkpointer=InMemorySaver(), base_model=tiny)
        adapters = cycle_adapters(store, "s")
        shown = {lid for r in AdapterStore(store).training_rollouts("s") for lid in r.lessons_in_context}
    assert shown == {lesson}  # the wake's train prompts showed it either way
    refused = summary.cycles[0].sleep_refused
    if status == "candidate":
        assert adapters == {} and "no train task has an active lesson" in refused
    else:
        assert refused is None
        (adapter,) = adapters.values()
        assert adapter.data["by_kind"] == {"lessons": 2, "hint": 0} and adapter.data["lessons"] == [lesson]
        assert adapter.in_context == [lesson]
