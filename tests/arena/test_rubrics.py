"""Rubric rewards (RaR): criteria validation, aggregation, judge parsing with repair/retry, hack flags,
online-criteria deduplication and critic calibration — all with hand-computed values and scripted judges."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from agents.backends.fake import FakePolicy
from agents.roles.rubric import (
    explicit_reward,
    failed_criteria,
    implicit_reward,
    judge_explicit,
    judge_implicit,
)
from arena.episode.calibration import calibration_report, expected_calibration_error
from arena.episode.rewards import HackConfig, detect_hacks
from arena.session.online_rubrics import criterion_similarity, dedupe_criteria, propose_criteria
from arena.tasks.jsonl import BUILTIN_RUBRIC_TASKS, load_tasks_file
from arena.tasks.model import TaskError
from arena.tasks.verify import has_verifier
from lessons.criteria import Criterion, check_rubric


def crit(title, cat, w, text=None):
    return Criterion(title=title, description=f"{cat} Criteria: {text or title}", weight=w)


RUBRIC = [
    crit("Mentions scattering", "Essential", 5, "Says that sunlight is scattered by the air."),
    crit("Blue scatters more", "Important", 3, "Says blue light is scattered more than red light."),
    crit("Sunlight has colours", "Optional", 1),
    crit("Ocean reflection", "Pitfall", -2, "Claims the sky is blue because it reflects the ocean."),
]

# --------------------------------------------------------------------------- aggregation


def test_explicit_reward_hand_computed():
    w = [c.weight for c in RUBRIC]  # 5, 3, 1, -2; positive total 9
    assert explicit_reward(w, [True, False, True, True]) == pytest.approx((5 + 1 - 2) / 9)
    assert explicit_reward(w, [True, True, True, False]) == pytest.approx(1.0)
    assert explicit_reward(w, [False, True, False, False]) == pytest.approx(3 / 9)
    assert explicit_reward(w, [False, False, False, True]) == 0.0  # -2/9 clipped to 0
    assert explicit_reward([1, -5], [True, True]) == 0.0  # (1 - 5) / 1 clipped


def test_explicit_reward_all_negative_weights():
    # no positive weight: 1 - sum|w| c / sum|w|
    assert explicit_reward([-2, -3], [True, False]) == pytest.approx(1 - 2 / 5)
    assert explicit_reward([-2, -3], [False, False]) == 1.0
    assert explicit_reward([-2, -3], [True, True]) == 0.0


def test_explicit_reward_errors():
    with pytest.raises(ValueError, match="2 weights but 1 verdicts"):
        explicit_reward([1, 2], [True])
    with pytest.raises(ValueError):
        explicit_reward([], [])


def test_implicit_reward():
    assert implicit_reward(1) == 0.0
    assert implicit_reward(10) == 1.0
    assert implicit_reward(7) == pytest.approx(6 / 9)
    with pytest.raises(ValueError):
        implicit_reward(0)
    with pytest.raises(ValueError):
        implicit_reward(11)


def test_failed_criteria_lists_missed_positives_and_made_pitfalls():
    assert failed_criteria(RUBRIC, [True, False, True, True]) == ["Blue scatters more", "pitfall: Ocean reflection"]
    assert failed_criteria(RUBRIC, [True, True, True, False]) == []


# --------------------------------------------------------------------------- validation


@pytest.mark.parametrize(
    "item, message",
    [
        ({"title": "x", "description": "Pitfall Criteria: wrong", "weight": 2}, "negative weight"),
        ({"title": "x", "description": "Essential Criteria: ok", "weight": -2}, "needs a 'Pitfall Criteria:'"),
        ({"title": "x", "description": "Essential Criteria: ok", "weight": 0}, "weight must be in"),
        ({"title": "x", "description": "Essential Criteria: ok", "weight": 6}, "weight must be in"),
        ({"title": "x", "description": "Essential Criteria: ok", "weight": 0.5}, "weight must be in"),
        ({"title": "x", "description": "Essential Criteria: ok", "weight": True}, "must be a number"),
        ({"title": "x", "description": "Says something", "weight": 3}, "must start with its category"),
        ({"title": "x", "description": "Important Criteria:   ", "weight": 3}, "no text after it"),
        ({"title": " ", "description": "Important Criteria: y", "weight": 3}, "must not be empty"),
        ({"title": "x", "description": "Important Criteria: y", "weight": 3, "extra": 1}, "Extra inputs"),
    ],
)
def test_criterion_validation(item, message):
    with pytest.raises(ValidationError, match=message):
        Criterion.model_validate(item)


def test_category_variants():
    assert Criterion(title="a", description="important criterion: b", weight=3).category == "important"
    assert Criterion(title="a", description="Pitfall: b", weight=-1).category == "pitfall"


def test_check_rubric():
    with pytest.raises(ValueError, match="at least one"):
        check_rubric([])
    with pytest.raises(ValueError, match="same title"):
        check_rubric([crit("Same", "Essential", 5), crit("same", "Optional", 1)])


def _line(**kw):
    base = {"question": "Why is the sky blue?", "rubric": [c.model_dump() for c in RUBRIC]}
    base.update(kw)
    return json.dumps(base)


def test_rubric_file_validation_names_the_line(tmp_path):
    bad = [c.model_dump() for c in RUBRIC]
    bad[1]["weight"] = -3
    p = tmp_path / "r.jsonl"
    p.write_text(_line() + "\n" + _line(question="Other?", rubric=bad) + "\n")
    with pytest.raises(TaskError, match=r"r\.jsonl:2: field 'rubric\.1': .*Pitfall"):
        load_tasks_file(p, 1, 1, 0)
    p.write_text(_line() + "\n" + json.dumps({"question": "No grading?"}) + "\n")
    with pytest.raises(TaskError, match=r":2: .*\"answer\" \(verifier\) or a \"rubric\""):
        load_tasks_file(p, 1, 1, 0)
    p.write_text(_line(rubric=[RUBRIC[0].model_dump(), RUBRIC[0].model_dump()]) + "\n")
    with pytest.raises(TaskError, match=r":1: field 'rubric': .*same title"):
        load_tasks_file(p, 1, 1, 0)
    p.write_text(_line(rubric=[]) + "\n")
    with pytest.raises(TaskError, match=r":1: .*at least one criterion"):
        load_tasks_file(p, 1, 1, 0)


def test_rubric_lines_load_with_and_without_verifier(tmp_path):
    p = tmp_path / "r.jsonl"
    p.write_text(_line(reference="Rayleigh scattering.") + "\n" + _line(question="Capital of France?", answer="Paris") + "\n")
    train, heldout = load_tasks_file(p, 1, 1, 0)
    by_q = {t.question: t for t in train + heldout}
    sky, paris = by_q["Why is the sky blue?"], by_q["Capital of France?"]
    assert not has_verifier(sky) and sky.answer == "Rayleigh scattering." and sky.metadata["reference"] == "Rayleigh scattering."
    assert has_verifier(paris) and paris.answer == "Paris"
    assert [c["weight"] for c in sky.metadata["rubric"]] == [5, 3, 1, -2]


def test_builtin_rubric_tasks_are_valid():
    train, heldout = load_tasks_file(BUILTIN_RUBRIC_TASKS, 100, 100, 0)
    tasks = train + heldout
    assert len(tasks) >= 30
    assert all(t.metadata.get("rubric") for t in tasks)
    assert sum(has_verifier(t) for t in tasks) >= 10  # calibration needs tasks with both
    assert any(any(c["weight"] < 0 for c in t.metadata["rubric"]) for t in tasks)


# --------------------------------------------------------------------------- judge calls


def scripted(*replies):
    it = iter(replies)
    return FakePolicy(lambda messages, i: next(it), "judge")


def test_judge_explicit_parses_fenced_json_and_repairs_booleans():
    reply = "Sure!\n```json\n" + json.dumps({"verdicts": [
        {"id": 1, "met": "yes", "reason": "says scattered"}, {"id": 2, "met": False},
        {"id": 3, "met": 1}, {"id": 4, "met": "No."}]}) + "\n```"
    judge = scripted(reply)
    res = judge_explicit(judge, "Why is the sky blue?", "Air scatters sunlight.", RUBRIC)
    assert res.graded and res.met == [True, False, True, False]
    assert res.reward == pytest.approx((5 + 1) / 9)
    assert res.reasons[0] == "says scattered"
    assert "missed: Blue scatters more" in res.critique
    prompt = judge.calls[0][0][-1]["content"]
    assert "1. Mentions scattering: Essential Criteria:" in prompt and "4. Ocean reflection" in prompt
    assert judge.calls[0][0][2]["role"] == "assistant"  # the worked example


def test_judge_explicit_retries_with_the_error_then_succeeds():
    good = json.dumps({"verdicts": [{"id": i, "met": True} for i in range(1, 5)]})
    judge = scripted('{"verdicts": [{"id": 1, "met": true}]}', good)
    res = judge_explicit(judge, "q", "r", RUBRIC)
    assert res.graded and len(res.raw) == 2
    assert res.reward == pytest.approx((5 + 3 + 1 - 2) / 9)
    retry_msg = judge.calls[1][0][-1]["content"]
    assert "no verdict for criteria [2, 3, 4]" in retry_msg


def test_judge_explicit_marks_ungraded_after_failed_retry():
    judge = scripted("I think it is good.", '{"verdicts": [{"id": 9, "met": true}]}')
    res = judge_explicit(judge, "q", "r", RUBRIC)
    assert not res.graded and res.reward is None and res.met is None
    assert "no verdict for criteria [1, 2, 3, 4]" in res.error  # id 9 names no criterion and is dropped
    assert res.critique.startswith("ungraded")


def test_judge_explicit_repairs_broken_json_and_drops_unknown_ids():
    # the 135M judge's typical reply: "}}}" for "}]}" and a fifth verdict copied from the 4-criterion example
    text = ('{"verdicts": [{"id": 1, "met": "yes", "reason": "a"}, {"id": 2, "met": "no", "reason": "b"}, '
            '{"id": 3, "met": "yes"}, {"id": 4, "met": "no"}, {"id": 5, "met": "yes"}}}')
    res = judge_explicit(scripted(text), "q", "r", RUBRIC)
    assert res.graded and res.met == [True, False, True, False] and len(res.raw) == 1
    assert res.reward == pytest.approx((5 + 1) / 9)


def test_judge_rejects_copies_of_the_example_and_template():
    from agents.roles.rubric import EXAMPLE_EXPLICIT

    res = judge_explicit(scripted(json.dumps(EXAMPLE_EXPLICIT), json.dumps(EXAMPLE_EXPLICIT)), "q", "r", RUBRIC)
    assert not res.graded and "copies the worked example" in res.error
    echo = '{"rating": 5, "critique": "one sentence: the main weakness"}'
    res = judge_implicit(scripted(echo, echo), "q", "r", RUBRIC)
    assert not res.graded and "echoes the template" in res.error


def test_judge_implicit_rating_and_ungraded():
    res = judge_implicit(scripted('{"rating": "7/10", "critique": "misses the wavelength"}'), "q", "r", RUBRIC)
    assert res.graded and res.rating == 7 and res.reward == pytest.approx(6 / 9)
    assert res.critique == "misses the wavelength"
    judge = scripted('{"rating": 42}', '{"rating": 0}')
    res = judge_implicit(judge, "q", "r", RUBRIC)
    assert not res.graded and res.reward is None
    assert "(weight -2)" in judge.calls[0][0][-1]["content"]


# --------------------------------------------------------------------------- hack flags


def test_detect_hacks():
    met_all = [True, True, True, False]
    assert detect_hacks("long enough answer", 0.5, RUBRIC, met=met_all, verifier_reward=0.0) == []  # low reward
    assert detect_hacks("x", None, RUBRIC) == []
    assert detect_hacks("Air scatters sunlight; blue scatters more.", 1.0, RUBRIC, met=met_all, verifier_reward=0.0) == [
        "verifier_disagrees"
    ]
    # reward 0.78 with the essential criterion failed: the judge's own verdict disagrees
    assert detect_hacks("Blue is scattered more.", 0.78, RUBRIC, met=[False, True, True, False]) == ["critique_disagrees"]
    assert detect_hacks("fine", 0.9, RUBRIC, critique="The answer is wrong about the cause.") == ["critique_disagrees"]
    assert detect_hacks("<answer>7</answer>", 1.0, RUBRIC, met=met_all, requires_work=True) == ["answer_without_work"]
    worked = "Sam starts with 12 apples and gives away 5, so 12 - 5 = 7 apples are left. <answer>7</answer>"
    assert detect_hacks(worked, 1.0, RUBRIC, met=met_all, requires_work=True) == []
    echo = "The response says that sunlight is scattered by the air and it is blue."
    assert detect_hacks(echo, 1.0, RUBRIC, met=met_all) == ["rubric_echo"]
    assert detect_hacks(echo, 1.0, RUBRIC, met=met_all, cfg=HackConfig(echo_words=9)) == []


# --------------------------------------------------------------------------- online criteria


def test_dedupe_criteria_against_rubric_and_each_other():
    proposed = [
        crit("Mentions Rayleigh scattering", "Important", 3, "Says sunlight is scattered by the air molecules."),
        crit("Names wavelength", "Important", 3, "Explains that blue light has a shorter wavelength."),
        crit("Names wavelengths", "Optional", 1, "Says blue has a short wavelength."),
        crit("Sunset colours", "Optional", 2, "Explains why sunsets look red or orange."),
    ]
    kept, rejected = dedupe_criteria(proposed, RUBRIC)
    assert [c.title for c in kept] == ["Names wavelength", "Sunset colours"]
    assert "'Mentions Rayleigh scattering' duplicates 'Mentions scattering'" in rejected[0]
    assert "'Names wavelengths' duplicates 'Names wavelength'" in rejected[1]
    # by hand: content words {rayleigh, scattering, sunlight, scattered, air, molecule} vs
    # {scattering, sunlight, scattered, air}: Jaccard 4/6; titles {rayleigh, scattering} vs {scattering}: 1/2
    assert criterion_similarity(proposed[0], RUBRIC[0]) == pytest.approx(4 / 6)
    assert criterion_similarity(proposed[3], RUBRIC[0]) == 0.0
    assert criterion_similarity(RUBRIC[0], RUBRIC[0]) == 1.0


def test_propose_criteria_validates_each_item_and_dedupes():
    reply = json.dumps({"analysis": "A explains wavelength; B does not.", "criteria": [
        {"title": "Names wavelength", "description": "Important Criteria: Explains that blue light has a shorter wavelength.", "weight": 3},
        {"title": "Bad weight", "description": "Pitfall Criteria: Says the sky is green.", "weight": 3},
        {"title": "Mentions scattering", "description": "Essential Criteria: Says that sunlight is scattered by the air.", "weight": 5},
    ]})
    teacher = scripted(reply)
    res = propose_criteria(teacher, "Why is the sky blue?", RUBRIC, ["A: blue has a short wavelength"], ["B: it is blue"])
    assert [c.title for c in res.criteria] == ["Names wavelength"]
    assert any("Bad weight" in r and "negative weight" in r for r in res.rejected)
    assert any("duplicates 'Mentions scattering'" in r for r in res.rejected)
    prompt = teacher.calls[0][0][1]["content"]
    assert "Responses A (current student):" in prompt and "B1." in prompt and "- Mentions scattering (5)" in prompt


# --------------------------------------------------------------------------- calibration


def test_calibration_on_hand_computed_set():
    pairs = [("a", 0.9, 1.0)] * 3 + [("a", 0.9, 0.0)] + [("a", 0.1, 0.0)] * 3 + [("a", 0.1, 1.0)]
    pairs += [("b", 1.0, 1.0)] * 2 + [("b", 0.0, 0.0)] * 2
    rep = calibration_report(pairs)
    assert rep["a"]["n"] == 8 and rep["a"]["accuracy"] == 0.75
    # bin of 0.9: accuracy 3/4, confidence 0.9 → 0.15; bin of 0.1: 1/4 vs 0.1 → 0.15; each half the items
    assert rep["a"]["ece"] == pytest.approx(0.15)
    assert rep["b"]["accuracy"] == 1.0 and rep["b"]["ece"] == 0.0
    # pooled: 10 of 12 agree; top bin 6 items (mean conf 5.6/6, acc 5/6), bottom bin 6 items (0.4/6 vs 1/6)
    assert rep["all"]["accuracy"] == pytest.approx(round(10 / 12, 4))
    assert rep["all"]["ece"] == pytest.approx(0.1)
    assert rep["all"]["judge_pass_rate"] == 0.5 and rep["all"]["verifier_pass_rate"] == 0.5
    assert calibration_report([]) == {}


def test_calibration_recovers_known_accuracy_on_synthetic_set():
    # 1000 rollouts: the verifier passes every other one; the judge agrees except on every 5th (accuracy 0.8)
    pairs = []
    for i in range(1000):
        ok = i % 2 == 0
        judge_says = ok if i % 5 else not ok
        pairs.append(("fam", 1.0 if judge_says else 0.0, 1.0 if ok else 0.0))
    rep = calibration_report(pairs)
    assert rep["fam"]["accuracy"] == 0.8
    # confidences are 0 or 1, so ECE = share of disagreements = 0.2
    assert rep["fam"]["ece"] == pytest.approx(0.2)


def test_ece_errors():
    assert expected_calibration_error([], []) == 0.0
    with pytest.raises(ValueError):
        expected_calibration_error([0.5], [True, False])
    with pytest.raises(ValueError):
        expected_calibration_error([1.5], [True])


@pytest.mark.slow
def test_real_judge_returns_a_consistent_grade_or_ungraded(local_policy):
    """The embedded 135M model as explicit judge: its verdicts aggregate exactly, or the rollout is ungraded."""
    train, _ = load_tasks_file(BUILTIN_RUBRIC_TASKS, 100, 1, 0)
    task = next(t for t in train if t.question.startswith("Why is the sky blue"))
    criteria = [Criterion.model_validate(c) for c in task.metadata["rubric"]]
    res = judge_explicit(local_policy, task.question, task.metadata["reference"], criteria, seed=0)
    assert res.raw and all(r.startswith('{"verdicts": [{"id": 1, "met": "') for r in res.raw)  # prefill honoured
    if res.graded:
        assert len(res.met) == len(criteria)
        # RaR's explicit aggregate, written out here (not the judge's own function): Σ met w / Σ positive w, in [0, 1]
        weights = [c.weight for c in criteria]
        assert any(w > 0 for w in weights)
        by_hand = sum(w for w, m in zip(weights, res.met, strict=True) if m) / sum(w for w in weights if w > 0)
        assert res.reward == pytest.approx(min(1.0, max(0.0, by_hand)))
    else:
        assert res.reward is None and res.error
