"""Task sources (reasoning-gym families, JSONL files) and the verifiers."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest

from arena.tasks.extract import normalise_text
from arena.tasks.gym import make_family_tasks, parse_family_spec
from arena.tasks.identity import answer_identity, check_disjoint, task_identity
from arena.tasks.jsonl import load_tasks_file
from arena.tasks.model import FamilySpec, Task, TaskError
from arena.tasks.sources import load_tasks
from arena.tasks.verify import score, verifier_feedback

EASY = "chain_sum:min_terms=2,max_terms=2,min_digits=1,max_digits=1"


def questions(tasks: list[Task]) -> set[str]:
    return {normalise_text(t.question) for t in tasks}


# --- family specs ------------------------------------------------------------------------


def test_parse_family_spec_types():
    spec = parse_family_spec(" chain_sum : min_terms=2, max_terms=3, allow_negation=TRUE ")
    assert spec == FamilySpec("chain_sum", {"min_terms": 2, "max_terms": 3, "allow_negation": True})
    assert isinstance(spec.overrides["min_terms"], int)
    assert parse_family_spec("chain_sum").overrides == {}


def test_parse_family_spec_float_and_str_fields():
    # basic_arithmetic: `whitespace` is a str field, digits stay a string there
    spec = parse_family_spec("letter_counting:min_words=5,max_words=7")
    assert spec.overrides == {"min_words": 5, "max_words": 7}
    spec = parse_family_spec("basic_arithmetic:whitespace=single")
    assert spec.overrides == {"whitespace": "single"}


@pytest.mark.parametrize(
    "spec", ["chain_sum:min_terms", "chain_sum:=2", "chain_sum:min_terms=", ":min_terms=2", "chain_sum:min_terms=2,min_terms=3"]
)
def test_malformed_spec(spec):
    with pytest.raises(TaskError, match="malformed"):
        parse_family_spec(spec)


def test_unknown_family_suggests_close_match():
    with pytest.raises(TaskError) as e:
        parse_family_spec("chian_sum")
    msg = str(e.value)
    assert "unknown task family 'chian_sum'" in msg and "did you mean: chain_sum" in msg
    assert "\n" not in msg


def test_unknown_option_lists_valid_keys():
    with pytest.raises(TaskError) as e:
        parse_family_spec("chain_sum:max_term=3")
    msg = str(e.value)
    assert "'max_term'" in msg and "did you mean 'max_terms'" in msg
    for key in ("min_terms", "max_terms", "min_digits", "max_digits", "allow_negation"):
        assert key in msg
    assert "seed" not in msg.split("valid options:")[1]


def test_reserved_option_rejected():
    with pytest.raises(TaskError, match="set by the session"):
        parse_family_spec("chain_sum:seed=3")


def test_invalid_config_values():
    with pytest.raises(TaskError, match="invalid configuration.*max_terms must be >= min_terms"):
        parse_family_spec("chain_sum:min_terms=5,max_terms=2")
    with pytest.raises(TaskError, match="invalid configuration"):
        make_family_tasks(FamilySpec("chain_sum", {"min_digits": 0}), 2, 2, seed=0)


# --- drawing tasks -------------------------------------------------------------------------


def test_make_family_tasks_counts_disjoint_deterministic():
    spec = parse_family_spec(EASY)
    train, heldout = make_family_tasks(spec, n_train=30, n_heldout=20, seed=7)
    assert len(train) == 30 and len(heldout) == 20
    assert len(questions(train)) == 30 and len(questions(heldout)) == 20  # no duplicates in a split
    assert not questions(train) & questions(heldout)
    assert {t.split for t in train} == {"train"} and {t.split for t in heldout} == {"heldout"}
    assert train[3].task_key == "chain_sum/train/00003" and heldout[0].task_key == "chain_sum/heldout/00000"
    assert all(t.source == "reasoning_gym" and t.family == "chain_sum" for t in train + heldout)
    assert len({t.task_key for t in train + heldout}) == 50

    again = make_family_tasks(spec, n_train=30, n_heldout=20, seed=7)
    assert [t.question for t in again[0]] == [t.question for t in train]
    assert [t.question for t in again[1]] == [t.question for t in heldout]

    other = make_family_tasks(spec, n_train=30, n_heldout=20, seed=8)
    assert [t.question for t in other[0]] != [t.question for t in train]


def test_family_too_small_for_request():
    # 1-digit, 2-term sums: only 200 distinct questions exist
    with pytest.raises(TaskError, match="fewer tasks or a harder difficulty"):
        make_family_tasks(parse_family_spec(EASY), n_train=150, n_heldout=100, seed=0)


def test_load_tasks_scales_with_families_and_stays_disjoint(tmp_path):
    f = tmp_path / "extra.jsonl"
    f.write_text("\n".join(json.dumps({"question": f"What is {i} + 100?", "answer": i + 100}) for i in range(6)))
    splits = load_tasks([EASY, "chain_sum:min_terms=2,max_terms=2,min_digits=1,max_digits=2"], f, 4, 3, seed=1)
    assert len(splits.train) == 4 + 4 + 3 and len(splits.heldout) == 3 + 3 + 3
    assert not questions(splits.train) & questions(splits.heldout)
    keys = [t.task_key for t in splits.train + splits.heldout]
    assert len(set(keys)) == len(keys)
    assert any(k.startswith("chain_sum#2/") for k in keys)
    assert splits.families == ["chain_sum", "extra"]


def test_load_tasks_needs_a_source():
    with pytest.raises(TaskError, match="no tasks"):
        load_tasks([], None, 4, 4, seed=0)


# --- verifiers -------------------------------------------------------------------------------


def test_score_reasoning_gym():
    train, _ = make_family_tasks(parse_family_spec(EASY), 5, 1, seed=0)
    t = train[0]
    assert score(t, t.answer) == 1.0
    wrong = str(int(t.answer) + 1)
    assert score(t, wrong) == 0.0
    assert score(t, None) == 0.0
    assert score(t, "   ") == 0.0
    # an entry missing (task rebuilt from storage) is regenerated
    bare = dataclasses.replace(t, entry=None)
    assert score(bare, t.answer) == 1.0 and score(bare, wrong) == 0.0


def test_verifier_feedback_does_not_reveal_reference():
    train, _ = make_family_tasks(parse_family_spec(EASY), 3, 1, seed=0)
    t = train[0]
    wrong = str(int(t.answer) + 1)
    assert verifier_feedback(t, None).startswith("no answer found")
    assert verifier_feedback(t, wrong) == f"answer '{wrong}' is incorrect"
    assert verifier_feedback(t, t.answer) == f"answer '{t.answer}' is correct"
    assert "\n" not in verifier_feedback(t, "a\nb")


def jsonl_task(answer: str) -> Task:
    return Task("f/train/00000", "f", "train", "q?", answer, "jsonl")


@pytest.mark.parametrize(
    "reference, extracted, reward",
    [
        ("3", "3.0", 1.0),
        ("3.0", "3", 1.0),
        ("1000", "1,000", 1.0),
        ("0.1", "0.1000000001", 1.0),
        ("3", "4", 0.0),
        ("Paris", "  paris ", 1.0),
        ("New  York", "new york", 1.0),
        ("Paris", "London", 0.0),
        ("3", None, 0.0),
    ],
)
def test_score_jsonl(reference, extracted, reward):
    assert score(jsonl_task(reference), extracted) == reward


# --- JSONL files -------------------------------------------------------------------------------


def write_jsonl(path: Path, rows: list[object]) -> Path:
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n")
    return path


def test_load_tasks_file_good(tmp_path):
    rows = [{"question": f"q{i}", "answer": str(i)} for i in range(10)]
    rows[0]["family"] = "custom"
    rows[1]["metadata"] = {"level": 2}
    rows[2]["id"] = "x-2"  # unknown keys land in metadata
    path = write_jsonl(tmp_path / "mytasks.jsonl", rows + [""])  # blank lines are skipped
    train, heldout = load_tasks_file(path, n_train=6, n_heldout=3, seed=0)
    assert len(train) == 6 and len(heldout) == 3
    assert not questions(train) & questions(heldout)
    by_q = {t.question: t for t in train + heldout}
    for t in by_q.values():
        assert t.source == "jsonl" and t.entry is None
        assert t.family == ("custom" if t.question == "q0" else "mytasks")  # default: file stem
    if "q1" in by_q:
        assert by_q["q1"].metadata["level"] == 2 and by_q["q1"].metadata["source_line"] == 2
    if "q2" in by_q:
        assert by_q["q2"].metadata["id"] == "x-2"
    # deterministic for a seed
    assert load_tasks_file(path, 6, 3, seed=0) == (train, heldout)


def test_load_tasks_file_numbers_as_answers(tmp_path):
    path = write_jsonl(tmp_path / "nums.jsonl", [{"question": "a", "answer": 3}, {"question": "b", "answer": 2.5}])
    train, heldout = load_tasks_file(path, 5, 5, seed=0)
    assert len(train) == 1 and len(heldout) == 1
    answers = {t.question: t.answer for t in train + heldout}
    assert answers == {"a": "3", "b": "2.5"}
    assert all(isinstance(a, str) for a in answers.values())


def test_load_tasks_file_dedupes_questions(tmp_path):
    path = write_jsonl(tmp_path / "d.jsonl", [{"question": "Same  Q", "answer": "1"}, {"question": "same q", "answer": "1"}, {"question": "other", "answer": "2"}])
    train, heldout = load_tasks_file(path, 5, 5, seed=0)
    assert len(train) + len(heldout) == 2


@pytest.mark.parametrize(
    "bad, fragment",
    [
        ('{"question": "q"}', "answer"),
        ('{"question": "q", "answer": "1"', "invalid JSON"),
        ('["q", "1"]', "expected a JSON object"),
        ('{"question": "", "answer": "1"}', "question"),
        ('{"question": "q", "answer": null}', "answer"),
        ('{"question": "q", "answer": "1", "metadata": 3}', "metadata"),
    ],
)
def test_load_tasks_file_bad_line_reports_line_number(tmp_path, bad, fragment):
    rows = [{"question": f"q{i}", "answer": str(i)} for i in range(6)]
    path = write_jsonl(tmp_path / "tasks.jsonl", [*rows, bad])
    with pytest.raises(TaskError) as e:
        load_tasks_file(path, 2, 2, seed=0)
    msg = str(e.value)
    assert msg.startswith(f"{path}:7: ") and fragment in msg and "\n" not in msg


def test_load_tasks_file_missing(tmp_path):
    with pytest.raises(TaskError, match="cannot read task file .*nope.jsonl"):
        load_tasks_file(tmp_path / "nope.jsonl", 2, 2, seed=0)


def test_load_tasks_file_empty_or_too_small(tmp_path):
    with pytest.raises(TaskError, match="empty"):
        load_tasks_file(write_jsonl(tmp_path / "e.jsonl", ["", "  "]), 2, 2, seed=0)
    with pytest.raises(TaskError, match="at least 2"):
        load_tasks_file(write_jsonl(tmp_path / "one.jsonl", [{"question": "q", "answer": "a"}]), 2, 2, seed=0)


def test_load_tasks_file_family_clashing_with_reasoning_gym(tmp_path):
    path = write_jsonl(tmp_path / "t.jsonl", [{"question": f"q{i}", "answer": "1", "family": "chain_sum"} for i in range(3)])
    with pytest.raises(TaskError, match="rename the \"family\""):
        load_tasks(["chain_sum"], path, 1, 1, seed=0)


@pytest.mark.parametrize("raw", ["true", "2.5", "abc"])
def test_override_value_of_the_wrong_type_names_the_option(raw):
    with pytest.raises(TaskError, match=rf"option 'min_terms' expects an integer, got '{re.escape(raw)}'"):
        parse_family_spec(f"chain_sum:min_terms={raw}")


# --- task identity (CASE-006): held-out isolation compares what the verifier reads, not text ----------

PROBLEM = "State the final answer to the following arithmetic problem:"


@pytest.mark.parametrize(
    "spelling",
    [
        f"{PROBLEM} 12+5 =",  # the CASE-006 proposal
        f"{PROBLEM} 12 +5 =",
        f"{PROBLEM}12+5=",
        f"  {PROBLEM}\t12  +\n5 =  ",
        f"{PROBLEM} 12 + 5",  # no "="
        PROBLEM.lower() + " 12 + 5 =",
        PROBLEM.upper() + " 12 + 5 =",
        f"{PROBLEM} \uff11\uff12 \uff0b \uff15 \uff1d",  # full-width digits, plus and equals
        f"{PROBLEM}\u00a012\u00a0+\u00a05\u00a0=",  # NBSP
        f"\ufeff{PROBLEM} 1\u200b2 + 5 =",  # BOM, zero-width space
        f"{PROBLEM} 12 + 5 = ?",
        f"{PROBLEM} 12 + 5 =.",
        f"{PROBLEM} 12 + +5 =",  # the same signed terms
        f"{PROBLEM} 012 + 5 =",
    ],
)
def test_case_006_spellings_of_a_chain_sum_question_share_its_identity(spelling):
    """CASE-006: every spelling the chain_sum verifier reads as 12 + 5 is the task "…12 + 5 =" itself."""
    assert task_identity(spelling) == task_identity(f"{PROBLEM} 12 + 5 =")


def test_case_006_identity_keeps_tasks_that_compute_differently_apart():
    """CASE-006: other terms, other signs or another order (a documented choice) are other tasks."""
    base = task_identity(f"{PROBLEM} 12 + 5 =")
    for other in (f"{PROBLEM} 12 - 5 =", f"{PROBLEM} 12 + 5 + 0 =", f"{PROBLEM} 125 =", f"{PROBLEM} 1 + 25 =",
                  f"{PROBLEM} 5 + 12 =", f"{PROBLEM} 12 + 6 =", "What is 12 + 5?"):
        assert task_identity(other) != base, other
    # signs written differently but equal: the same terms (12, -5)
    minus = task_identity(f"{PROBLEM} 12 - 5 =")
    assert minus == task_identity(f"{PROBLEM} 12 + -5 =") == task_identity(f"{PROBLEM} 12 \u2212 5 =")
    assert task_identity(f"{PROBLEM} -3 - -4 =") == task_identity(f"{PROBLEM} -3 + 4 =")


def test_case_006_identity_of_other_families_ignores_spacing_case_unicode_and_trailing_punctuation():
    """CASE-006: a question of a family without a parser is its NFKC text without spacing, case or end punctuation."""
    q = 'How many times does the letter "r" appear in the text: "strawberry fields"?'
    curly = "How many times does the letter \u201cr\u201d appear in the text: \u201cstrawberry\u00a0fields\u201d ?"
    for spelling in ('how many times does the letter "R" appear in the text:"strawberry  fields"', curly, q.upper() + "."):
        assert task_identity(spelling) == task_identity(q), spelling
    assert task_identity(q.replace("strawberry", "blueberry")) != task_identity(q)
    t = Task("f/train/00000", "f", "train", q, "3", "jsonl")
    assert task_identity(t) == task_identity(q)  # a task or its question
    # every pair normalise_text equates, identity equates too (it only merges)
    assert task_identity("  The  Answer\n is  B ") == task_identity("the answer is b")


def test_case_006_answer_identity_normalises_numbers_and_text():
    """CASE-006: the normalised answer (JSONL files compare it to tell a repeat from a conflict)."""
    assert answer_identity("17") == answer_identity("17.0") == answer_identity("+17.")
    assert answer_identity("17") == answer_identity("\uff11\uff17")
    assert answer_identity("-17") == answer_identity("\u221217") != answer_identity("17")
    assert answer_identity("Paris") == answer_identity(" paris. ") != answer_identity("Rome")


def test_case_006_a_task_file_never_puts_two_spellings_of_one_question_in_both_splits(tmp_path, caplog):
    """CASE-006, import path: a JSONL file that holds one question in two spellings yields one task."""
    rows = [{"question": f"{PROBLEM} 12 + 5 =", "answer": "17"}, {"question": f"{PROBLEM} 12+5 =", "answer": "17"},
            {"question": f"{PROBLEM} \uff11\uff12 + \uff15 = ?", "answer": "17.0"}]
    rows += [{"question": f"{PROBLEM} {i} + 100 =", "answer": str(i + 100)} for i in range(5)]
    path = write_jsonl(tmp_path / "arith.jsonl", rows)
    for seed in range(8):  # whichever way the shuffle falls, the three spellings are one task
        train, heldout = load_tasks_file(path, n_train=10, n_heldout=3, seed=seed)
        assert len(train) + len(heldout) == 6
        assert not {task_identity(t) for t in train} & {task_identity(t) for t in heldout}
        check_disjoint(train, heldout)
    assert "another answer" not in caplog.text  # 17 and 17.0 are the same answer
    conflict = write_jsonl(tmp_path / "c.jsonl", [rows[0], {"question": f"{PROBLEM} 12+5", "answer": "18"}, rows[3]])
    with caplog.at_level("WARNING"):
        train, heldout = load_tasks_file(conflict, 5, 1, seed=0)
    assert len(train) + len(heldout) == 2 and "another answer" in caplog.text


def test_case_006_a_task_file_respelling_a_family_question_is_excluded_from_the_draws(tmp_path):
    """CASE-006, import path: a file line that is a reasoning-gym question written differently (and under
    another family name) is the same task: the family's draws skip it, so it never sits in both splits."""
    spec = parse_family_spec(EASY)
    train, heldout = make_family_tasks(spec, n_train=4, n_heldout=3, seed=5)
    respelled = [t.question.replace(" ", "") for t in train[:2] + heldout[:2]]
    rows = [{"question": q, "answer": t.answer} for q, t in zip(respelled, train[:2] + heldout[:2])]
    rows += [{"question": f"What is {i} + 100?", "answer": i + 100} for i in range(4)]
    path = write_jsonl(tmp_path / "extra.jsonl", rows)
    splits = load_tasks([EASY], path, 4, 3, seed=5)
    family = [t for t in splits.train + splits.heldout if t.family == "chain_sum"]
    assert len(family) == 7
    assert not {task_identity(t) for t in family} & {task_identity(q) for q in respelled}
    assert not {task_identity(t) for t in splits.train} & {task_identity(t) for t in splits.heldout}
    # the family's draw with those excluded equals load_tasks' draw
    again = make_family_tasks(spec, 4, 3, seed=5, exclude={task_identity(t) for t in splits.train + splits.heldout
                                                           if t.family == "extra"})
    assert [t.question for t in again[0] + again[1]] == [t.question for t in family]


def test_case_006_split_disjointness_is_checked_by_identity_not_text():
    """CASE-006, split check: a held-out task that is a train task respelled fails the check, naming both."""
    train = [Task("chain_sum/train/00000", "chain_sum", "train", f"{PROBLEM} 12 + 5 =", "17", "reasoning_gym")]
    heldout = [Task("x/heldout/00000", "x", "heldout", f"{PROBLEM} 12+5=", "17", "jsonl")]
    with pytest.raises(TaskError, match=r"held-out task x/heldout/00000 is train task chain_sum/train/00000"):
        check_disjoint(train, heldout)
    check_disjoint(train, [dataclasses.replace(heldout[0], question=f"{PROBLEM} 5 + 12 =")])  # another task
    # the family draws are disjoint by identity, and excluding an identity excludes every spelling
    spec = parse_family_spec(EASY)
    tr, ho = make_family_tasks(spec, n_train=30, n_heldout=20, seed=7)
    check_disjoint(tr, ho)
    assert len({task_identity(t) for t in tr}) == 30 and len({task_identity(t) for t in ho}) == 20
    banned = tr[0].question.replace(" ", "").upper()
    tr2, ho2 = make_family_tasks(spec, n_train=30, n_heldout=20, seed=7, exclude={task_identity(banned)})
    assert tr[0].question not in [t.question for t in tr2 + ho2]
