"""Self-play curriculum: difficulty ladders, band control, proposals and their checks, held-out safety."""

from __future__ import annotations

import json
import re
import sqlite3
import subprocess
import sys

import pytest
from alembic import command
from langgraph.checkpoint.memory import InMemorySaver

from agents.backends.fake import FakePolicy
from agents.roles.proposer import (
    EXAMPLE_REPLY,
    PROPOSER_SYSTEM,
    ParentView,
    ProposedTask,
    chain_sum_reference,
    check_proposal,
    propose_task,
)
from arena.config import SessionConfig
from arena.episode.context import Roles
from arena.session.curriculum import band_action, known_tasks
from arena.session.runner import run_session
from arena.tasks.curriculum import DifficultyLadder, step_slot, step_tag
from arena.tasks.extract import extract_answer, normalise_text
from arena.tasks.gym import parse_family_spec
from arena.tasks.identity import task_identity
from arena.tasks.model import Task
from arena.tasks.sources import load_tasks
from arena.tasks.verify import answers_match, score
from lessons.db.schema import alembic_config
from lessons.library.curriculum import CurriculumRecords
from lessons.library.store import LessonStore

EASY = "chain_sum:min_terms=2,max_terms=2,min_digits=1,max_digits=2"
HARD = "chain_sum:min_terms=2,max_terms=2,min_digits=4,max_digits=4"
K = 8


# --------------------------------------------------------------------------- ladders and the band


def test_default_chain_sum_ladder_follows_reasoning_gym_levels():
    ladder = DifficultyLadder(parse_family_spec(EASY))
    cfg = lambda s: ladder.rung(s) and ladder.rung(s).overrides
    assert ladder.rung(0).levels == {"num_terms": 0, "num_digits": 1}  # 2 terms (level 0), up to 2 digits (level 1)
    assert cfg(0) == {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 2}
    assert cfg(1) == {"min_terms": 2, "max_terms": 3, "min_digits": 1, "max_digits": 2}  # terms first
    assert cfg(2) == {"min_terms": 2, "max_terms": 3, "min_digits": 1, "max_digits": 3}  # then digits
    assert cfg(3) == {"min_terms": 2, "max_terms": 4, "min_digits": 1, "max_digits": 3}
    assert cfg(-1) == {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1}  # terms are at the bottom
    assert ladder.rung(-2) is None
    # the top: 12 terms (10 levels up from 2) of 10 digits (8 levels up from 2) after 18 rungs
    assert cfg(18) == {"min_terms": 2, "max_terms": 12, "min_digits": 1, "max_digits": 10}
    assert ladder.rung(19) is None


def test_a_raised_lower_bound_stays_raised_and_bare_specs_start_at_their_defaults():
    ladder = DifficultyLadder(parse_family_spec("chain_sum:min_terms=3,max_terms=3,min_digits=2,max_digits=2"))
    assert ladder.rung(1).overrides == {"min_terms": 3, "max_terms": 4, "min_digits": 2, "max_digits": 2}
    assert ladder.rung(-1).overrides == {"min_terms": 2, "max_terms": 2, "min_digits": 2, "max_digits": 2}
    bare = DifficultyLadder(parse_family_spec("chain_sum"))  # ChainSumConfig defaults: 2-6 terms, 1-4 digits
    assert bare.rung(0).levels == {"num_terms": 4, "num_digits": 3}
    assert bare.rung(1).overrides == {"min_terms": 2, "max_terms": 7, "min_digits": 1, "max_digits": 4}
    negation = DifficultyLadder(parse_family_spec("chain_sum:allow_negation=true"))
    assert negation.rung(1).overrides["allow_negation"] is True  # options outside the curriculum are kept


def test_families_without_a_curriculum_have_no_knob():
    ladder = DifficultyLadder(parse_family_spec("gsm_symbolic"))
    assert not ladder.has_knob and ladder.rung(1) is None and ladder.rung(-1) is None
    base = ladder.rung(0)  # the family as given: no levels to move, nothing overridden
    assert (base.step, base.levels, base.overrides, base.moves) == (0, {}, {}, {})


def test_band_action_and_slots():
    band = (0.3, 0.7)
    assert band_action(0.71, band) == "up" and band_action(1.0, band) == "up"
    assert band_action(0.7, band) == "stay" and band_action(0.3, band) == "stay" and band_action(0.5, band) == "stay"
    assert band_action(0.29, band) == "down" and band_action(0.0, band) == "down"
    assert [step_slot(s) for s in (0, 1, -1, 2, -2)] == [0, 1, 2, 3, 4]
    assert step_tag(0) == "" and step_tag(1) == "s+01-" and step_tag(-2) == "s-02-"


# --------------------------------------------------------------------------- a solver with a known success curve


def digits_of(question: str) -> int:
    """The digit count of the widest term of a chain_sum question."""
    return max(len(n) for n in re.findall(r"\d+", question.split(":", 1)[1]))


def successes(question: str) -> int:
    """The fake solver's success curve: of K rollouts, 8 succeed up to 2 digits, 4 at 3 digits, 0 from 4."""
    return {1: 8, 2: 8, 3: 4}.get(digits_of(question), 0)


def curve_solver(messages, i):
    q = messages[-1]["content"]
    ref, _ = chain_sum_reference(q)
    assert ref is not None, q
    return f"<answer>{ref if i < successes(q) else int(ref) + 1}</answer>"


def make_teacher(propose=None, confirm=None):
    """A scripted teacher: reflections add nothing; proposals come from ``propose(parent_question)``."""

    def respond(messages, i):
        system = messages[0]["content"]
        if system == PROPOSER_SYSTEM:
            parent = re.search(r"^Task: (.*)$", messages[-1]["content"], re.MULTILINE).group(1)
            return json.dumps(propose(parent)) if propose else "no idea"
        if system.startswith("You are a careful problem solver"):  # an independent confirmation sample
            return confirm(messages[-1]["content"], i)
        return json.dumps({"analysis": "nothing general", "add": [], "tags": []})

    return FakePolicy(respond, "teacher")


def session(tmp_path, families=(EASY,), rounds=3, train=4, heldout=6, seed=0, **kw):
    db = tmp_path / "arena.db"
    cfg = SessionConfig(db=str(db), families=list(families), train_tasks=train, heldout_tasks=heldout, rounds=rounds,
                        rollouts=K, seed=seed, hint_modes=["none"], **kw)
    splits = load_tasks(cfg.families, cfg.tasks_file, cfg.train_tasks, cfg.heldout_tasks, cfg.seed)
    return cfg, splits, LessonStore(str(db))


def recorded_rate(store, session_id, rnd, family):
    tasks = {t.task_key: t for t in CurriculumRecords(store).session_tasks(session_id)}
    groups = [g for g in store.group_outcomes(session_id) if g.round == rnd and g.task_key.split("/")[0] == family]
    return groups, tasks


def test_band_control_raises_difficulty_while_the_solver_passes_everything(tmp_path):
    cfg, splits, store = session(tmp_path, curriculum="frontier", proposals=0, rounds=4)
    summary = run_session(cfg, store, Roles(FakePolicy(curve_solver), make_teacher()), splits, "up",
                          checkpointer=InMemorySaver())
    traj = summary.curriculum.difficulty["chain_sum"]
    # rungs 0 and 1 hold only 1-2 digit questions: all 8 rollouts pass → above the band → up, up
    assert [r.step for r in traj[:3]] == [0, 1, 2]
    assert traj[0].train_pass_rate == 1.0 and traj[0].action == "up"
    assert traj[1].train_pass_rate == 1.0 and traj[1].action == "up"
    assert traj[1].config == {"min_terms": 2, "max_terms": 3, "min_digits": 1, "max_digits": 2}
    sid = store.get_session("up").id
    for r in traj:  # every recorded rate is the curve over the round's tasks, and every action follows the band
        groups, tasks = recorded_rate(store, sid, r.round, "chain_sum")
        assert r.groups == len(groups) == 4
        expected = sum(successes(tasks[g.task_key].question) for g in groups) / (K * len(groups))
        assert r.train_pass_rate == pytest.approx(expected)
        assert r.action == band_action(expected, (0.3, 0.7))
        # the round's tasks were drawn at the rung's config
        for g in groups:
            assert digits_of(tasks[g.task_key].question) <= r.config["max_digits"]
    assert summary.curriculum.difficulty_final["chain_sum"].step == traj[-1].step >= 2
    assert summary.curriculum.proposed_tasks == 0 and summary.curriculum.accepted_tasks == 0
    store.close()


def test_band_control_lowers_difficulty_when_the_solver_fails_and_stays_inside_the_band(tmp_path):
    cfg, splits, store = session(tmp_path, families=(HARD,), curriculum="frontier", proposals=0, rounds=3)
    summary = run_session(cfg, store, Roles(FakePolicy(curve_solver), make_teacher()), splits, "down",
                          checkpointer=InMemorySaver())
    traj = summary.curriculum.difficulty["chain_sum"]
    # 4 digits: 0 of 8 pass → down to rung -1 = exactly 3 digits (the spec's floor of 4 is capped by the range's top)
    assert [(r.step, r.train_pass_rate, r.action) for r in traj] == [
        (0, 0.0, "down"), (-1, 0.5, "stay"), (-1, 0.5, "stay"),
    ]
    assert traj[1].config == {"min_terms": 2, "max_terms": 2, "min_digits": 3, "max_digits": 3}
    # held-out at the final difficulty is a second, 3-digit set; the starting one stays the 4-digit set
    assert summary.heldout_before.pass_at_1 == 0.0 and summary.heldout_after.pass_at_1 == 0.0
    assert summary.heldout_final_difficulty.n == 6
    assert summary.heldout_final_difficulty.pass_at_1 == 1.0  # greedy = rollout 0, which passes at 3 digits
    store.close()


def test_a_family_that_returns_to_a_rung_meets_the_same_tasks_again(tmp_path):
    def solver(messages, i):  # passes everything up to 3 digits, nothing at 4: oscillates between rungs -1 and 0
        q = messages[-1]["content"]
        ref, _ = chain_sum_reference(q)
        return f"<answer>{ref if digits_of(q) <= 3 else int(ref) + 1}</answer>"

    cfg, splits, store = session(tmp_path, families=(HARD,), curriculum="frontier", proposals=0, rounds=4)
    summary = run_session(cfg, store, Roles(FakePolicy(solver), make_teacher()), splits, "osc",
                          checkpointer=InMemorySaver())
    assert [(r.step, r.train_pass_rate, r.action) for r in summary.curriculum.difficulty["chain_sum"]] == [
        (0, 0.0, "down"), (-1, 1.0, "up"), (0, 0.0, "down"), (-1, 1.0, "up"),
    ]
    by_round: dict[int, list[str]] = {}
    for g in store.group_outcomes(store.get_session("osc").id):
        by_round.setdefault(g.round, []).append(g.task_key)
    assert by_round[1] == by_round[3] == [t.task_key for t in splits.train]
    assert by_round[2] == by_round[4] == [f"chain_sum/train/s-01-{i:05d}" for i in range(4)]
    store.close()


def test_fixed_curriculum_keeps_the_train_tasks_and_records_the_difficulty(tmp_path):
    cfg, splits, store = session(tmp_path, families=(HARD,), rounds=2)
    summary = run_session(cfg, store, Roles(FakePolicy(curve_solver), make_teacher()), splits, "fixed",
                          checkpointer=InMemorySaver())
    traj = summary.curriculum.difficulty["chain_sum"]
    assert [(r.step, r.action) for r in traj] == [(0, "fixed"), (0, "fixed")]
    assert traj[0].config == parse_family_spec(HARD).overrides
    keys = {g.task_key for g in store.group_outcomes(store.get_session("fixed").id)}
    assert keys == {t.task_key for t in splits.train}
    assert summary.heldout_final_difficulty == summary.heldout_after
    store.close()


# --------------------------------------------------------------------------- held-out safety


def test_held_out_tasks_are_unaffected_by_adaptation(tmp_path):
    def proposer(parent):  # proposes a held-out question verbatim, then valid variants
        proposer.calls += 1
        if proposer.calls == 1:
            q = heldout_question
        else:
            q = f"State the final answer to the following arithmetic problem: {1000 + proposer.calls} - 9999 ="
        ref, _ = chain_sum_reference(q)
        return {"question": q, "justification": f"so it is {ref}", "answer": ref}

    proposer.calls = 0
    cfg, splits, store = session(tmp_path, families=(HARD,), curriculum="frontier", proposals=2, rounds=3)
    heldout_question = splits.heldout[2].question
    fresh = load_tasks([HARD], None, 4, 6, 0)
    run_session(cfg, store, Roles(FakePolicy(curve_solver), make_teacher(proposer)), splits, "safe",
                checkpointer=InMemorySaver())
    sid = store.get_session("safe").id
    evals = store.evaluations(sid)
    start_keys = [t.task_key for t in splits.heldout]
    # the held-out set evaluated before and after is the one drawn before anything ran, and the same
    # as a fresh draw with the same seed: adaptation moved difficulty, not the evaluation set
    assert [t.question for t in splits.heldout] == [t.question for t in fresh.heldout]
    for name in ("heldout_before", "heldout_after", "heldout_after_no_lessons"):
        assert [d["task_key"] for d in evals[name].details["tasks"]] == start_keys
    # no episode ran on a held-out task, and the final-difficulty set shares no question with training
    records = CurriculumRecords(store)
    tasks = {t.task_key: t for t in records.session_tasks(sid)}
    groups = store.group_outcomes(sid)
    assert [g.task_key for g in groups if g.round == 1] == [t.task_key for t in splits.train]
    assert {g.round for g in groups} == {1, 2, 3}
    episode_keys = {g.task_key for g in groups}
    assert all(tasks[k].split == "train" for k in episode_keys)
    final_keys = [d["task_key"] for d in evals["heldout_final_difficulty"].details["tasks"]]
    assert final_keys and all(k.startswith("chain_sum/heldout/s-01-") for k in final_keys)
    train_questions = {normalise_text(t.question) for t in tasks.values() if t.split == "train"}
    assert not train_questions & {normalise_text(tasks[k].question) for k in final_keys + start_keys}
    # the proposal that copied a held-out question was refused, with the reason stored
    props = records.proposals(sid)
    assert props[0].status == "rejected" and props[0].reason_code == "heldout"
    assert props[0].reason == f"the question is held-out task {splits.heldout[2].task_key}"
    store.close()


def test_case_006_a_session_refuses_a_respelled_held_out_proposal_and_never_trains_on_it(tmp_path):
    """CASE-006 end to end: the proposer writes held-out questions without spaces and with full-width digits;
    the session refuses them as held-out, and no train task or episode is a held-out task in any spelling."""
    def proposer(parent):
        proposer.calls += 1
        task = splits.heldout[proposer.calls % len(splits.heldout)]
        prefix, terms = task.question.split(":", 1)
        full_width = {ord(d): 0xFF10 + int(d) for d in "0123456789"}
        terms = terms.replace(" ", "") if proposer.calls % 2 else terms.translate(full_width)
        q = f"{prefix}: {terms}"
        ref, _ = chain_sum_reference(q)
        assert ref == task.answer, q  # the chain_sum verifier reads the respelled question as the held-out task
        proposer.sent.append((q, task.task_key))
        return {"question": q, "justification": f"so it is {ref}", "answer": ref}

    proposer.calls, proposer.sent = 0, []
    cfg, splits, store = session(tmp_path, families=(HARD,), curriculum="frontier", proposals=2, rounds=2)
    run_session(cfg, store, Roles(FakePolicy(curve_solver), make_teacher(proposer)), splits, "case006",
                checkpointer=InMemorySaver())
    sid = store.get_session("case006").id
    records = CurriculumRecords(store)
    props = records.proposals(sid)
    # proposals follow every round but the last; both spellings (no spaces, full-width digits) were sent
    assert len(props) == proposer.calls == cfg.proposals * (cfg.rounds - 1) == 2
    assert [(p.question, p.status, p.reason_code, p.reason, p.task_key) for p in props] == [
        (q, "rejected", "heldout", f"the question is held-out task {key}", None) for q, key in proposer.sent]
    tasks = records.session_tasks(sid)
    heldout = {task_identity(t) for t in tasks if t.split == "heldout"}
    assert not {task_identity(t) for t in tasks if t.split == "train"} & heldout
    by_key = {t.task_key: t for t in tasks}
    assert not {task_identity(by_key[g.task_key]) for g in store.group_outcomes(sid)} & heldout
    store.close()


# --------------------------------------------------------------------------- proposals


PARENT = ParentView("chain_sum", "State the final answer to the following arithmetic problem: 31 - 48 =", "-17", 0.125, 8)
KNOWN = {
    task_identity("State the final answer to the following arithmetic problem: 5 + 5 ="): ("chain_sum/heldout/00000", "heldout"),
    task_identity("State the final answer to the following arithmetic problem: 6 + 6 ="): ("chain_sum/train/00001", "train"),
}


def verify_chain_sum(proposed: str, computed: str) -> float:
    return score(Task("probe", "chain_sum", "train", "", computed, "reasoning_gym", {"overrides": {}}), proposed)


def check(question, answer, justification=None, checker=chain_sum_reference, confirm=None, known=KNOWN, **kw):
    p = ProposedTask(question=question, answer=answer, justification=justification or f"which gives {answer}")
    return check_proposal(
        p, PARENT, known, task_identity, checker=checker, verify=verify_chain_sum if checker else None,
        confirm=confirm, answers_match=answers_match, extract=extract_answer, **kw,
    )


Q = "State the final answer to the following arithmetic problem: 27 - 55 + 3 ="


def test_a_proposal_with_a_verified_reference_is_accepted():
    r = check(Q, "-25")
    assert r.accepted and r.check == "verifier" and r.check_detail == {"computed_answer": "-25", "reward": 1.0}
    assert check(Q, "-25.0").accepted  # reasoning-gym's decimal reward accepts the same number written otherwise


@pytest.mark.parametrize(
    ("question", "answer", "justification", "code"),
    [
        (Q, "-24", None, "verifier_disagrees"),
        ("What is 27 minus 55 plus 3?", "-25", None, "not_checkable"),
        (PARENT.question + "  ", "-17", None, "copies_parent"),
        (EXAMPLE_REPLY["question"], "-27", None, "copies_example"),
        ("State the final answer to the following arithmetic problem: 5 + 5 =", "10", None, "heldout"),
        ("State the final answer to the following arithmetic problem: 6 + 6 =", "12", None, "duplicate"),
        (Q, "-25", "Subtract and add the numbers.", "unjustified"),
    ],
)
def test_proposals_without_a_checkable_answer_are_rejected(question, answer, justification, code):
    r = check(question, answer, justification)
    assert not r.accepted and r.reason_code == code and r.reason


CASE_006_HELDOUT = "State the final answer to the following arithmetic problem: 12 + 5 ="


def case_006_known(heldout=CASE_006_HELDOUT):
    """The session's known tasks as the curriculum builds them: the CASE-006 held-out task and a train task."""
    return known_tasks([
        Task("chain_sum/train/00000", "chain_sum", "train",
             "State the final answer to the following arithmetic problem: 6 + 6 =", "12", "reasoning_gym"),
        Task("chain_sum/heldout/00007", "chain_sum", "heldout", heldout, "17", "reasoning_gym"),
    ])


def test_case_006_a_held_out_task_written_without_spaces_is_refused_as_held_out():
    """CASE-006: the proposal "…12+5 =" is the held-out "…12 + 5 =" to the chain_sum verifier, so it is refused."""
    proposal = "State the final answer to the following arithmetic problem: 12+5 ="
    assert chain_sum_reference(proposal) == ("17", None)  # the verifier reads it as 12 + 5: it would be accepted
    r = check(proposal, "17", known=case_006_known())
    assert not r.accepted and r.reason_code == "heldout"
    assert r.reason == "the question is held-out task chain_sum/heldout/00007"


@pytest.mark.parametrize(
    "proposal",
    [
        "State the final answer to the following arithmetic problem: 12+5 =",
        "State the final answer to the following arithmetic problem: 12 +5=",
        "State the final answer to the following arithmetic problem:   12   +   5   =  ",
        "State the final answer to the following arithmetic problem:12+5",  # no "="
        "STATE THE FINAL ANSWER TO THE FOLLOWING ARITHMETIC PROBLEM: 12 + 5 =",
        "State the final answer to the following arithmetic problem: \uff11\uff12 + \uff15 =",  # full-width digits
        "State the final answer to the following arithmetic problem: 12\u00a0+\u00a05\u00a0=",  # NBSP
        "State the final answer to the following arithmetic problem: 12\u3000+\u20005 =",  # other Unicode spaces
        "State the final answer to the following arithmetic problem: 1\u200b2 + 5 =",  # zero-width space
        "State the final answer to the following arithmetic problem: 12 + 5 = ?",  # trailing punctuation
        "State the final answer to the following arithmetic problem: 12 + 5 =.",
        "State the final answer to the following arithmetic problem: 12 + +5 =",  # the same signed terms
        "State the final answer to the following arithmetic problem: 12 + 05 =",
        "State the final answer to the following arithmetic problem : 12 + 5 =",  # punctuation spacing
        "State the final answer to the following arithmetic problem: 12\t+\n5 =",  # tab and newline between terms
        "State the final answer to the following arithmetic problem:\n12 + 5 =",  # the terms on their own line
        "  State  the final answer to the following  arithmetic problem: 12 + 5 =",  # whitespace moved in the text
        "state the final answer to the following arithmetic problem: 12 + 5 =",  # lower case
        "sTaTe ThE fInAl AnSwEr To ThE fOlLoWiNg ArItHmEtIc PrObLeM: 12 + 5 =",  # mixed case
        "State the final answer to the following arithmetic problem: \uff11\uff12+\uff15 =",  # full-width, no spaces
        "State the final answer to the following arithmetic problem: \uff11\uff12\uff0b\uff15\uff1d",  # full-width + and =
        "State the final answer to the following arithmetic problem: \u0661\u0662 + \u0665 =",  # Arabic-Indic digits
        "State the final answer to the following arithmetic problem: 12 + 5 =!",  # other trailing punctuation
        "State the final answer to the following arithmetic problem: 12 + 5 =  ?  ",
    ],
)
def test_case_006_every_spelling_of_a_held_out_task_is_refused(proposal):
    """CASE-006: spacing, whitespace of any kind anywhere, case, Unicode digits and operators, trailing
    punctuation: still the held-out task, named as such."""
    r = check(proposal, "17", known=case_006_known())
    assert (r.accepted, r.reason_code, r.reason) == (False, "heldout", "the question is held-out task chain_sum/heldout/00007")


def test_case_006_the_held_out_check_comes_first_and_reads_the_held_out_spelling_too():
    """CASE-006: a held-out task stored in a compact spelling still catches the spaced proposal, even one
    that copies the parent; another task (other terms, or the same terms in another order) is not held out."""
    known = case_006_known("State the final answer to the following arithmetic problem: 12+5=")
    assert check(CASE_006_HELDOUT, "17", known=known).reason_code == "heldout"
    parent_known = {**known, task_identity(PARENT.question): ("chain_sum/heldout/00001", "heldout")}
    assert check(PARENT.question, "-17", known=parent_known).reason_code == "heldout"
    assert check("State the final answer to the following arithmetic problem: 12 - 5 =", "7", known=known).accepted
    # term order counts (documented in arena.tasks.identity): 5 + 12 is another task with the same answer
    assert check("State the final answer to the following arithmetic problem: 5 + 12 =", "17", known=known).accepted
    # a train task respelled is a duplicate, not a new task
    respelled_train = "state the final answer to the following arithmetic problem: 6+6="
    assert check(respelled_train, "12", known=known).reason_code == "duplicate"


def test_case_006_known_tasks_prefer_the_held_out_task_on_a_shared_identity():
    """CASE-006: where a train and a held-out task share an identity, the proposal is refused as held-out."""
    train = Task("x/train/00000", "x", "train", "What is 12 + 5?", "17", "jsonl")
    heldout = Task("chain_sum/heldout/00000", "chain_sum", "heldout", "what is 12+5", "17", "reasoning_gym")
    for order in ([train, heldout], [heldout, train]):
        assert known_tasks(order) == {task_identity("What is 12 + 5?"): ("chain_sum/heldout/00000", "heldout")}


def test_without_a_verifier_the_reference_needs_independent_agreement():
    def confirmer(n_right):
        return FakePolicy(lambda m, i: f"<answer>{'42' if i < n_right else '41'}</answer>", "critic")

    kw = {"checker": None, "samples": 4, "agreement": 0.75}
    q = "How many legs do 10 spiders and 1 bird have together?"
    ok = check(q, "42", confirm=confirmer(3), **kw)
    assert ok.accepted and ok.check == "agreement" and ok.check_detail["agree"] == 3 and ok.check_detail["needed"] == 3
    bad = check(q, "42", confirm=confirmer(2), **kw)
    assert not bad.accepted and bad.reason_code == "no_agreement"
    assert bad.reason == "only 2 of 4 independent samples agree with the reference answer '42' (need 3)"
    # the confirming samples saw the bare question, never the proposed answer
    c = confirmer(4)
    check(q, "42", confirm=c, **kw)
    assert all("42" not in m["content"] for m in c.calls[0][0])
    assert check(q, "42", confirm=None, **kw).reason_code == "not_checkable"


def test_an_unparsable_proposer_reply_is_retried_once_then_reported():
    proposer = FakePolicy(lambda m, i: "Sure! Here is a task: 2 + 2", "p")
    value, error, raw = propose_task(proposer, PARENT, seed=1)
    assert value is None and len(raw) == 2 and "no JSON object" in error
    assert "Your reply could not be used" in proposer.calls[1][0][-1]["content"]
    fenced = FakePolicy(lambda m, i: "```json\n" + json.dumps({"question": Q, "justification": "= -25", "answer": -25}) + "\n```")
    value, error, raw = propose_task(fenced, PARENT)
    assert value == ProposedTask(question=Q, justification="= -25", answer="-25") and error is None


def write_jsonl(path, n=14):
    rows = [{"question": f"A box holds {i} red and {i + 3} blue balls. How many balls are in it?",
             "answer": str(2 * i + 3), "family": "balls"} for i in range(1, n + 1)]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


def test_accepted_proposals_join_the_pool_with_their_parent_and_rejected_ones_keep_the_reason(tmp_path):
    """A JSONL family (no verifier): proposals are checked by agreement of the teacher's own samples."""
    path = write_jsonl(tmp_path / "balls.jsonl")

    def solver(messages, i):  # solves 2 of 8: pass@1 0.25, below the band → every group is a parent
        n = [int(x) for x in re.findall(r"\d+", messages[-1]["content"])]
        return f"<answer>{sum(n[:2]) + (0 if i < 2 else 1)}</answer>"

    def proposer(parent):
        proposer.calls += 1
        a = 100 + proposer.calls
        right = 2 * a + 3
        # odd calls: a correct reference; even calls: a wrong one the confirming samples will not agree with
        answer = right if proposer.calls % 2 else right + 5
        return {"question": f"A box holds {a} red and {a + 3} blue balls. How many balls are in it?",
                "justification": f"{a} + {a + 3} = {answer}", "answer": str(answer)}

    proposer.calls = 0

    def confirm(question, i):
        n = [int(x) for x in re.findall(r"\d+", question)]
        return f"<answer>{n[0] + n[1]}</answer>"

    db = tmp_path / "arena.db"
    cfg = SessionConfig(db=str(db), families=[], tasks_file=path, train_tasks=3, heldout_tasks=4, rounds=2,
                        rollouts=K, hint_modes=["none"], curriculum="frontier", proposals=2)
    splits = load_tasks([], path, 3, 4, 0)
    store = LessonStore(str(db))
    summary = run_session(cfg, store, Roles(FakePolicy(solver), make_teacher(proposer, confirm)), splits, "prop",
                          checkpointer=InMemorySaver())
    sid = store.get_session("prop").id
    # 2 per round, half of them right
    assert summary.curriculum.proposed_tasks == 4 and summary.curriculum.accepted_tasks == 2
    assert summary.curriculum.proposal_rejections == {"no_agreement": 2}
    assert [(r.step, r.action) for r in summary.curriculum.difficulty["balls"]] == [(0, "fixed"), (0, "fixed")]
    records = CurriculumRecords(store)
    props = records.proposals(sid)
    accepted = [p for p in props if p.status == "accepted"]
    assert [p.task_key for p in accepted] == ["balls/train/p001-00", "balls/train/p002-00"]
    assert all(p.check == "agreement" and p.check_detail["agree"] == 4 for p in accepted)
    rejected = [p for p in props if p.status == "rejected"]
    # the even calls (2 and 4) sent a reference 5 above the sum; none of the 4 samples agrees, 3 are needed
    wrong = [str(2 * (100 + c) + 3 + 5) for c in (2, 4)]
    assert [p.answer for p in rejected] == wrong
    assert [p.reason for p in rejected] == [
        f"only 0 of 4 independent samples agree with the reference answer '{w}' (need 3)" for w in wrong]
    tasks = {t.task_key: t for t in records.session_tasks(sid)}
    first = tasks["balls/train/p001-00"]
    assert first.origin == "proposer" and first.parent_key == accepted[0].parent_key and first.source == "proposed"
    assert {tasks[k].origin for k in (t.task_key for t in splits.train)} == {"file"}
    # the proposal accepted after round 1 was attempted in round 2, and scored against its reference
    round2 = [g for g in store.group_outcomes(sid) if g.round == 2]
    assert [g.task_key for g in round2] == [*(t.task_key for t in splits.train), "balls/train/p001-00"]
    assert round2[-1].unguided == [1.0, 1.0] + [0.0] * 6
    store.close()


def test_proposals_for_chain_sum_use_the_family_verifier_and_are_stored_with_the_parent(tmp_path):
    def proposer(parent):
        ref, _ = chain_sum_reference(parent)
        q = parent.replace(" =", " + 1 =")
        return {"question": q, "justification": f"{ref} + 1 = {int(ref) + 1}", "answer": str(int(ref) + 1)}

    cfg, splits, store = session(tmp_path, families=(HARD,), curriculum="frontier", proposals=1, rounds=1)
    summary = run_session(cfg, store, Roles(FakePolicy(curve_solver), make_teacher(proposer)), splits, "cs",
                          checkpointer=InMemorySaver())
    assert summary.curriculum.proposed_tasks == 1 and summary.curriculum.accepted_tasks == 1
    sid = store.get_session("cs").id
    (p,) = CurriculumRecords(store).proposals(sid)
    assert p.check == "verifier" and p.parent_key == splits.train[0].task_key  # all failed: the first in order
    assert p.check_detail["computed_answer"] == str(int(splits.train[0].answer) + 1)
    store.close()


# --------------------------------------------------------------------------- resume and storage


def test_an_interrupted_frontier_session_resumes_with_the_same_trajectory(tmp_path):
    cfg, splits, store = session(tmp_path, curriculum="frontier", proposals=0, rounds=3)
    whole = run_session(cfg, store, Roles(FakePolicy(curve_solver), make_teacher()), splits, "whole",
                        checkpointer=InMemorySaver())
    seen = []

    def stop_after_six(state):
        seen.append(state["task_key"])
        if len(seen) == 6:  # in round 2, after the round-1 decision moved the family up
            raise KeyboardInterrupt

    saver = InMemorySaver()
    with pytest.raises(KeyboardInterrupt):
        run_session(cfg, store, Roles(FakePolicy(curve_solver), make_teacher()), splits, "cut",
                    checkpointer=saver, on_episode=stop_after_six)
    again = run_session(cfg, store, Roles(FakePolicy(curve_solver), make_teacher()), splits, "cut", resume=True,
                        checkpointer=saver)
    assert again.episodes == whole.episodes == 12
    assert again.curriculum.difficulty == whole.curriculum.difficulty
    store.close()


def test_migration_0006_marks_existing_jsonl_tasks_as_file_tasks(tmp_path):
    url = f"sqlite:///{tmp_path / 'old.db'}"
    command.upgrade(alembic_config(url), "0003")
    con = sqlite3.connect(tmp_path / "old.db")
    con.execute("INSERT INTO sessions (id, name, config, seed, status, created_at) VALUES (1, 's', '{}', 0, 'finished', '2026-01-01')")
    for i, source in enumerate(("jsonl", "reasoning_gym")):
        con.execute("INSERT INTO tasks (session_id, task_key, family, split, question, answer, source, metadata) "
                    f"VALUES (1, 'k{i}', 'f', 'train', 'q{i}', 'a', '{source}', '{{}}')")
    con.commit()
    con.close()
    LessonStore(str(tmp_path / "old.db")).close()  # migrates to head
    con = sqlite3.connect(tmp_path / "old.db")
    assert con.execute("SELECT task_key, origin, parent_task_id FROM tasks ORDER BY id").fetchall() == [
        ("k0", "file", None), ("k1", "generator", None)]
    con.close()


def test_cli_refuses_proposals_without_the_frontier_curriculum(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "arena.cli", "run", "--db", str(tmp_path / "a.db"), "--proposals", "2"],
                          check=False, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip() == (
        "arena: error: proposed tasks need the frontier curriculum; pass --curriculum frontier or --proposals 0")
    assert not (tmp_path / "a.db").exists()


def test_final_heldout_is_disjoint_from_training_on_a_small_rung(tmp_path):
    """At a 1-digit rung (a few hundred distinct questions) train and final-difficulty held-out draws collide
    unless the held-out draw excludes the train questions just drawn at the same rung."""
    two_digits = "chain_sum:min_terms=2,max_terms=2,min_digits=2,max_digits=2"
    cfg, splits, store = session(tmp_path, families=(two_digits,), curriculum="frontier", proposals=0, rounds=2,
                                 train=16, heldout=32)
    summary = run_session(cfg, store, Roles(FakePolicy(lambda m, i: "<answer>-99999</answer>"), make_teacher()), splits,
                          "small", checkpointer=InMemorySaver())
    assert [r.step for r in summary.curriculum.difficulty["chain_sum"]] == [0, -1]  # everything fails: down to 1 digit
    tasks = CurriculumRecords(store).session_tasks(store.get_session("small").id)
    small_train = {normalise_text(t.question) for t in tasks if t.split == "train"
                   and (t.metadata.get("curriculum") or {}).get("step") == -1}
    small_heldout = {normalise_text(t.question) for t in tasks if t.split == "heldout"
                     and (t.metadata.get("curriculum") or {}).get("step") == -1}
    assert len(small_train) == 16 and len(small_heldout) == 32
    assert all(digits_of(q) <= 1 for q in small_train | small_heldout)
    assert not small_train & small_heldout
    store.close()
