"""Answer extraction: priority order, tolerance of small-model formats, number fallback."""

from __future__ import annotations

import pytest

from arena.tasks.extract import extract_answer, normalise_number, normalise_text


def test_answer_tag_beats_answer_line_and_numbers():
    text = "Answer: 7\nI computed 3 + 4 = 7, but\n<answer>8</answer> then 99"
    assert extract_answer(text) == "8"


def test_answer_line_beats_last_number():
    assert extract_answer("Answer: 12\nchecked with 3 * 4 = 12 and 100") == "12"


def test_last_answer_tag_wins():
    assert extract_answer("<answer>1</answer> no wait <ANSWER> 2 </Answer>") == "2"


def test_truncated_answer_tag_at_end():
    assert extract_answer("so the sum is <answer> 42") == "42"


def test_empty_last_tag_falls_back_to_previous_block():
    assert extract_answer("<answer>5</answer> and finally <answer>") == "5"


def test_echoed_placeholder_is_not_an_answer():
    assert extract_answer("I will end with <answer>…</answer>. The sum is 9.") == "9"


def test_multiline_tag_content_kept():
    assert extract_answer("<answer>\n1 2\n3 4\n</answer>") == "1 2\n3 4"


@pytest.mark.parametrize(
    "text, expected",
    [
        ("Answer: 42", "42"),
        ("answer: -3.5.", "-3.5"),
        ("work\nFinal answer: yes", "yes"),
        ("**Answer:** 17", "17"),
        ("**Final Answer**: `blue`.", "blue"),
        ("### Answer: **6**", "6"),
        ("Answer: first\nmore text\nAnswer: second", "second"),
        ("Answer:\n  21\n", "21"),
        ("Answer: $\\boxed{10}$", "10"),
    ],
)
def test_answer_line(text, expected):
    assert extract_answer(text) == expected


def test_boxed_before_last_number():
    assert extract_answer("so \\boxed{x^{2}} for n = 3") == "x^{2}"


@pytest.mark.parametrize(
    "text, expected",
    [
        ("5 - 9 gives -4", "-4"),
        ("the total is 3.25 dollars.", "3.25"),
        ("about 1,234 people and then 1,234,567.5 more", "1234567.5"),
        ("from 2 to 12.", "12"),
        ("result: −7", "-7"),  # Unicode minus
        ("x2 is 5 and v1.2.3", "5"),  # no digits from identifiers or versions
        ("list 1,2,3", "3"),
    ],
)
def test_last_number_fallback(text, expected):
    assert extract_answer(text) == expected


@pytest.mark.parametrize("text", ["", "   ", "I do not know", "<answer>   </answer>", "Answer:   "])
def test_nothing_found_is_none(text):
    assert extract_answer(text) is None


@pytest.mark.parametrize(
    "s, expected",
    [
        ("42", 42.0),
        (" -3.50 ", -3.5),
        ("+7", 7.0),
        ("1,234", 1234.0),
        ("**8**", 8.0),
        ("3.", 3.0),
        ("1e3", 1000.0),
        ("3/4", 0.75),
        ("−2", -2.0),
    ],
)
def test_normalise_number(s, expected):
    assert normalise_number(s) == pytest.approx(expected)


@pytest.mark.parametrize("s", ["", "abc", "12 apples", "nan", "inf", "1/0", "1,23", "50%", "e5"])
def test_normalise_number_rejects(s):
    assert normalise_number(s) is None


def test_normalise_text():
    assert normalise_text("  The  Answer\n is  B ") == "the answer is b"
