"""The teacher's prompts and screens on replies recorded from the embedded 1.5B teacher (issue 31).

The replies below were sampled from Qwen2.5-Coder-1.5B-Instruct (Q4_K_M, llama.cpp, JSON-schema
grammar) on groups of the default family during `arena run`; each must be screened as a
post-training researcher would: a lesson that states the task's answer or copies its numbers never
reaches the library, a plausible general lesson does.
"""

from __future__ import annotations

import json

import pytest

from agents.parsing import MAX_JSON_DEPTH, ParseError, extract_json_object, parse_model, sample_and_parse
from agents.capabilities import Capability
from agents.policy import BasePolicy, Completion
from agents.roles.teacher import (
    EXAMPLE_REPLY,
    TEACHER_SYSTEM,
    RolloutView,
    complete_sentences,
    reflect,
    reflection_schema,
    teacher_messages,
)
from lessons.ops import Reflection

Q_SUB = "State the final answer to the following arithmetic problem: 15 - 43 ="
Q_ADD = "State the final answer to the following arithmetic problem: 1 + 5 ="

# (question, reference answer, recorded reply, texts that must be kept, reason fragments of rejections)
RECORDED = [
    (Q_SUB, "-28",
     '{"analysis": "The student made a common mistake of adding 15 and 43 instead of subtracting them.", "add": [{"text": '
     '"Always subtract the smaller number from the larger number to get the correct answer.", "scope": "chain_sum"}]}',
     ["Always subtract the smaller number from the larger number to get the correct answer."], []),
    (Q_SUB, "-28",
     '{"analysis": "The student added instead of subtracting.", "add": [{"text": "To avoid this mistake, always add the '
     'numbers when subtracting. For example, 15 - 43 = 15 + (-43) = -28.", "scope": "chain_sum"}]}',
     [], ["contains the reference answer"]),
    (Q_ADD, "6",
     '{"analysis": "The student failed to add 1 and 5 correctly.", "add": [{"text": "To add two numbers, you simply place '
     'them side by side and add the digits from left to right, starting with the units place. For example, 1 + 5 = 6.", '
     '"scope": "chain_sum"}]}',
     [], ["contains the reference answer"]),
    (Q_SUB, "-28",
     '{"analysis": "x", "add": [{"text": "string palindromes: 15 + 15 = 20 - The last line is an error", "scope": "chain_sum"}]}',
     [], ["task-specific numbers"]),
]


class Replay(BasePolicy):
    """A policy that replays recorded replies and remembers what it was asked (it takes a JSON schema, as llama.cpp's)."""

    name = "replay"
    capabilities = frozenset({Capability.SAMPLE, Capability.JSON_SCHEMA})

    def __init__(self, replies: list[str]) -> None:
        self.replies = list(replies)
        self.calls: list[dict] = []

    def sample(self, messages, n=1, temperature=0.7, max_tokens=256, stop=None, seed=None, prefill="", json_schema=None):
        self.calls.append({"messages": list(messages), "prefill": prefill, "json_schema": json_schema})
        return [Completion(self.replies.pop(0))]


@pytest.mark.parametrize("question, answer, reply, kept, reasons", RECORDED)
def test_recorded_teacher_replies_are_screened(question, answer, reply, kept, reasons) -> None:
    group = [RolloutView("wrong <answer>0</answer>", 0.0, "answer '0' is incorrect"),
             RolloutView("right", 1.0, "answer is correct")]
    policy = Replay([reply, reply])  # a reply screened empty is asked for once more: the same again here
    out = reflect(policy, "chain_sum", question, group, [], reference_answer=answer)
    assert out.error is None
    assert len(policy.calls) == (1 if kept else 2)
    assert [a.text for a in out.reflection.add] == kept
    for fragment in reasons:
        assert any(fragment in r for r in out.rejected), out.rejected


def test_a_reply_screened_empty_is_retried_once_with_the_reasons() -> None:
    first = RECORDED[1][2]  # "... For example, 15 - 43 = 15 + (-43) = -28." (the reference answer)
    second = '{"analysis": "a", "add": [{"text": "When the second number is larger, subtract and keep a minus sign.", "scope": "chain_sum"}]}'
    policy = Replay([first, second])
    group = [RolloutView("w", 0.0, "no"), RolloutView("r", 1.0, "ok")]
    out = reflect(policy, "chain_sum", Q_SUB, group, [], reference_answer="-28")
    assert [a.text for a in out.reflection.add] == ["When the second number is larger, subtract and keep a minus sign."]
    assert "contains the reference answer" in policy.calls[1]["messages"][-1]["content"]
    assert policy.calls[1]["messages"][-2] == {"role": "assistant", "content": first}
    assert len(out.raw) == 2 and any("reference answer" in r for r in out.rejected)


def test_a_lesson_text_may_hold_no_digit_by_grammar() -> None:
    import re

    pattern = reflection_schema([], "chain_sum")["properties"]["add"]["items"]["properties"]["text"]["pattern"]
    assert re.fullmatch(pattern, "Keep the minus sign when the second number is larger.")
    assert not re.fullmatch(pattern, "Subtract 30 from 37.")
    assert not re.fullmatch(pattern, "Too short")


def test_a_schema_teacher_gets_the_schema_and_no_worked_example() -> None:
    shown = [("chain_sum-00002", "Check the sign of the result.")]
    policy = Replay(['{"analysis": "a", "add": [], "tags": [{"lesson_id": "chain_sum-00002", "tag": "helpful"}]}'])
    out = reflect(policy, "chain_sum", Q_SUB, [RolloutView("r", 1.0, "ok"), RolloutView("w", 0.0, "no")], shown)
    call = policy.calls[0]
    assert call["json_schema"] == reflection_schema(["chain_sum-00002"], "chain_sum")
    assert call["prefill"] == ""  # the grammar starts at the reply's first character
    assert [m["role"] for m in call["messages"]] == ["system", "user"]
    assert json.dumps(EXAMPLE_REPLY) not in json.dumps(call["messages"])
    assert [t.tag for t in out.reflection.tags] == ["helpful"]


def test_a_teacher_without_a_grammar_keeps_the_worked_example() -> None:
    msgs = teacher_messages("chain_sum", Q_SUB, [RolloutView("r", 1.0, "ok")], [])
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "user"] and msgs[0]["content"] == TEACHER_SYSTEM


def test_the_reflection_schema_allows_only_shown_ids_and_two_adds() -> None:
    s = reflection_schema(["a-1", "a-2"], "chain_sum")
    assert list(s["properties"])[:2] == ["analysis", "add"]  # reasoning before lessons
    assert s["properties"]["add"]["maxItems"] == 2
    assert s["properties"]["add"]["items"]["properties"]["scope"]["enum"] == ["chain_sum", "global"]
    assert s["properties"]["tags"]["items"]["properties"]["lesson_id"]["enum"] == ["a-1", "a-2"]
    assert "merge" in s["properties"]
    bare = reflection_schema([], "chain_sum")
    assert set(bare["properties"]) == {"analysis", "add"} and bare["required"] == ["analysis", "add"]


def test_case_004_a_deeply_nested_reply_is_a_parse_error_not_a_recursion_error() -> None:
    """CASE-004: 1,200 levels of nesting cost the one reflection (a ParseError), never the session."""
    deep = '{"a": ' + "[" * 1200 + "]" * 1200 + "}"
    with pytest.raises(ParseError, match="nested 1201 levels deep"):
        extract_json_object(deep)
    with pytest.raises(ParseError):
        parse_model(deep, Reflection)
    truncated = '{"a": ' + "[" * 5000  # unclosed: the repair path must be bounded too
    with pytest.raises(ParseError):
        extract_json_object(truncated)
    ok = '{"a": ' + "[" * (MAX_JSON_DEPTH - 1) + "]" * (MAX_JSON_DEPTH - 1) + "}"
    assert "a" in extract_json_object(ok)
    # brackets inside strings do not count
    assert extract_json_object('{"analysis": "' + "[" * 2000 + '", "add": []}')["add"] == []


def test_case_004_a_nested_reply_costs_one_reflection_and_is_retried() -> None:
    deep = '{"add": ' + "[" * 1200 + "]" * 1200 + "}"
    policy = Replay([deep, '{"analysis": "fine", "add": [{"text": "Keep the sign of the larger number.", "scope": "chain_sum"}]}'])
    out = sample_and_parse(policy, [{"role": "user", "content": "x"}], Reflection, "error: {error}", 0.3, 64, 0)
    assert out.value is not None and out.attempts == 2 and "nested" in policy.calls[1]["messages"][-1]["content"]


def test_a_lesson_citing_numbers_of_another_task_is_rejected() -> None:
    # recorded from the 1.5B teacher on a task with other numbers: a worked example, not a lesson
    reply = '{"analysis": "a", "add": [{"text": "To solve this problem, you should subtract 30 from 37 to get the correct answer.", "scope": "chain_sum"}, {"text": "Carry a one when a column adds up to more than 9.", "scope": "chain_sum"}]}'
    out = reflect(Replay([reply]), "chain_sum", Q_ADD, [RolloutView("r", 1.0, "ok"), RolloutView("w", 0.0, "no")], [],
                  reference_answer="6")
    assert [a.text for a in out.reflection.add] == ["Carry a one when a column adds up to more than 9."]
    assert any("specific numbers ['30', '37']" in r for r in out.rejected)


def test_a_worked_example_whose_numbers_the_grammar_kept_out_is_rejected() -> None:
    # recorded: with digits forbidden, the teacher wrote its worked example anyway, numbers missing
    hollow = "To find the final answer to an arithmetic problem, add the two numbers. For example, the final answer to + is ."
    reply = json.dumps({"analysis": "a", "add": [{"text": hollow, "scope": "chain_sum"},
                                                  {"text": "Use a + sign only when the task adds.", "scope": "chain_sum"}]})
    out = reflect(Replay([reply]), "chain_sum", Q_ADD, [RolloutView("r", 1.0, "ok"), RolloutView("w", 0.0, "no")], [],
                  reference_answer="6")
    assert [a.text for a in out.reflection.add] == ["Use a + sign only when the task adds."]
    assert any("a worked example without its numbers" in r for r in out.rejected)


def test_a_lesson_that_continues_a_cut_off_analysis_is_rejected_as_a_fragment() -> None:
    # recorded from the 1.5B teacher (default run, session 20): the analysis hit its length limit mid-sentence
    # and the sentence went on in the lesson
    analysis = "Remember that the goal of solving a problem is to find "
    reply = json.dumps({"analysis": analysis, "add": [
        {"text": "the correct answer, not just a way to get the right answer.", "scope": "chain_sum"},
        {"text": "\"and then keep the sign.\"", "scope": "chain_sum"},
        {"text": "Keep the sign of the larger number.", "scope": "chain_sum"}]})
    out = reflect(Replay([reply]), "chain_sum", Q_ADD, [RolloutView("r", 1.0, "ok"), RolloutView("w", 0.0, "no")], [],
                  reference_answer="6")
    assert [a.text for a in out.reflection.add] == ["Keep the sign of the larger number."]
    assert sum("starts mid-sentence" in r for r in out.rejected) == 2


def test_a_lesson_cut_at_the_length_limit_keeps_its_complete_sentences_or_is_rejected() -> None:
    # recorded from the 1.5B teacher (default run, session 21): the grammar's 160-character limit cut it mid-sentence
    cut = ("To ensure that the answer is in the correct format, always include the <answer> tag. If you are unsure "
           "about the correct answer, check the previous attempts for")
    no_sentence = ("Always write the final value of the whole computation inside the answer tags at the very end of the "
                   "reply and check every sign of every term once more, and then")
    assert len(cut) == len(no_sentence) == 160
    reply = json.dumps({"analysis": "Most attempts had no tag.", "add": [
        {"text": cut, "scope": "chain_sum"}, {"text": no_sentence, "scope": "chain_sum"}]})
    out = reflect(Replay([reply]), "chain_sum", Q_ADD, [RolloutView("r", 1.0, "ok"), RolloutView("w", 0.0, "no")], [],
                  reference_answer="6")
    assert [a.text for a in out.reflection.add] == [
        "To ensure that the answer is in the correct format, always include the <answer> tag."]
    assert [r for r in out.rejected if "cut off mid-sentence at the length limit" in r] == [
        f"ADD rejected (cut off mid-sentence at the length limit): {no_sentence!r}"]
    # shorter than the limit, or ending a sentence: unchanged (another teacher may leave out the full stop)
    assert complete_sentences("Keep the sign. Then add the terms") == "Keep the sign. Then add the terms"
    assert complete_sentences(cut[:150] + " ok now.") == cut[:150] + " ok now."


def test_holes_and_space_padding_where_the_grammar_kept_a_number_out_are_rejected() -> None:
    # recorded from the 1.5B teacher (`arena bench learning`, lessons condition, session 24): the reply grammar
    # allows no digit in a lesson, so where it meant numbers it left holes, or padded a sentence it could not
    # finish with spaces to the limit. Cleaning collapses the spaces: both read as lessons, and votes made
    # the first active. The screen reads the raw text.
    holed = ("To solve this problem, consider a set of numbers and find the relation between them. Think of  and  "
             "which have the relation of  and in the context of arithmetic")
    padded = "To solve this arithmetic problem, we need to first understand that"
    padded_raw = padded + " " * (160 - len(padded))
    whole = "Always write the final value inside the answer tag. Then check that"
    whole_raw = whole + " " * (160 - len(whole))
    short_hole = "Think of  and  as the two terms, then subtract the smaller from the larger."
    assert len(holed) == 160  # at the limit without a full stop: cut back to its first sentence, the hole with the rest
    reply = json.dumps({"analysis": "Most attempts had no tag.", "add": [
        {"text": holed, "scope": "chain_sum"}, {"text": padded_raw, "scope": "chain_sum"},
        {"text": whole_raw, "scope": "chain_sum"}, {"text": short_hole, "scope": "chain_sum"}]})
    out = reflect(Replay([reply]), "chain_sum", Q_ADD, [RolloutView("r", 1.0, "ok"), RolloutView("w", 0.0, "no")], [],
                  reference_answer="6")
    assert [a.text for a in out.reflection.add] == [
        "To solve this problem, consider a set of numbers and find the relation between them.",
        "Always write the final value inside the answer tag."]
    assert [r.split(":")[0] for r in out.rejected] == [
        "ADD rejected (cut off mid-sentence at the length limit)", "ADD rejected (a hole where a number was left out)"]
    # a reply cannot hide a hole by sending its own raw text; the stored op does not carry it
    op = Reflection.model_validate({"analysis": "a", "add": [{"text": holed, "scope": "x", "raw_text": "clean"}]}).add[0]
    assert op.raw_text == holed and "raw_text" not in op.model_dump()
    # single spaces and a short text without a full stop are lessons
    assert complete_sentences("Keep the sign of each term", "Keep the sign of each term") == "Keep the sign of each term"


def test_a_lesson_restated_under_its_id_label_is_the_lesson_not_a_fragment() -> None:
    # recorded from the 1.5B teacher (`arena bench learning`, lessons condition, session 24): shown two lessons,
    # it re-added them under their ids (the grammar allows no digit: "<id>"), the second cut at the limit.
    # Before, both were refused as fragments and the reflection counted as failed; restated, an ADD upvotes
    # the lesson it repeats (the curator's near-duplicate rule).
    first = "chain_sum-<id>: 'To provide the final answer, always end your response with <answer>...</answer>.'"
    second = ("chain_sum-<id>: 'Always include the <answer> tag to provide the correct answer. If the answer is not "
              "clear or the task is too long, consider breaking it down to")
    assert len(second) == 160
    reply = json.dumps({"analysis": "Most attempts had no tag.", "add": [
        {"text": first, "scope": "chain_sum"}, {"text": second, "scope": "chain_sum"}]})
    out = reflect(Replay([reply]), "chain_sum", Q_ADD, [RolloutView("r", 1.0, "ok"), RolloutView("w", 0.0, "no")],
                  [("chain_sum-00001", "To provide the final answer, always end your response with <answer>...</answer>.")],
                  reference_answer="6")
    assert [a.text for a in out.reflection.add] == [
        "To provide the final answer, always end your response with <answer>...</answer>.",
        "Always include the <answer> tag to provide the correct answer."] and out.rejected == []
    # a label with nothing after it is still nothing
    one = reflect(Replay([json.dumps({"analysis": "a", "add": [{"text": "chain_sum-<id> : 'and then'", "scope": "chain_sum"}]})] * 2),
                  "chain_sum", Q_ADD, [RolloutView("r", 1.0, "ok")], [], reference_answer="6")
    assert one.reflection.add == [] and one.rejected


def test_the_failure_summary_counts_each_kind_of_wrong_attempt_from_the_grades() -> None:
    from agents.roles.critic import NOTE_CUT_OFF, NOTE_NO_TAG
    from agents.roles.teacher import failure_summary, reflect_messages

    group = [
        RolloutView("15 - 43 = 28", 0.0, f"answer '28' is incorrect; {NOTE_NO_TAG}"),
        RolloutView("The answer is 5.", 0.0, f"answer '5' is incorrect; {NOTE_NO_TAG}"),
        RolloutView("To solve this we first", 0.0, f"answer '43' is incorrect; {NOTE_CUT_OFF}"),
        RolloutView("<answer>28</answer>", 0.0, "answer '28' is incorrect"),
        RolloutView("<answer>-28</answer>", 1.0, "answer '-28' is correct"),
        RolloutView("no tag again", 0.0, f"answer is missing; {NOTE_NO_TAG}", guided=True),  # guided: not counted
    ]
    line = "Failure summary: of the 4 wrong attempts, 2 gave no <answer> tag, 1 ran past the length limit, 1 had a wrong value inside the tag."
    assert failure_summary(group) == line
    assert line in reflect_messages("chain_sum", Q_SUB, group, [])
    # nothing wrong, or only rubric-graded attempts: no summary
    assert failure_summary([RolloutView("<answer>-28</answer>", 1.0, "ok")]) is None
    assert failure_summary([RolloutView("An essay", 0.0, "rated 2 of 10", failed_criteria=["cites a source"])]) is None
    assert failure_summary([RolloutView("x", 0.0, f"wrong; {NOTE_NO_TAG}")]) == "Failure summary: of the 1 wrong attempt, 1 gave no <answer> tag."
