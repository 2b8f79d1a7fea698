"""Untrusted teacher output: fences, chatter, truncation, wrong types, retry with the error shown."""

import pytest

from agents.parsing import ParseError, extract_json_object, parse_model, parse_with_retry
from lessons.ops import Reflection

GOOD = '{"analysis": "a", "add": [{"text": "Check the sign of each term.", "scope": "chain_sum"}], "tags": []}'


def test_fenced_json_with_chatter():
    text = "Sure! Here it is:\n```json\n" + GOOD + "\n```\nHope that helps."
    r = parse_model(text, Reflection)
    assert [a.text for a in r.add] == ["Check the sign of each term."]
    assert r.add[0].scope == "chain_sum"


def test_prose_around_unfenced_object():
    r = parse_model("My answer: " + GOOD + " -- end", Reflection)
    assert r.analysis == "a"


def test_truncated_object_is_closed():
    cut = '{"analysis": "the good ones carried", "add": [{"text": "Carry the one when a column exceeds nine.", "scope": "glo'
    r = parse_model(cut, Reflection)
    assert r.add[0].text == "Carry the one when a column exceeds nine."
    assert r.add[0].scope == "glo"


def test_truncated_after_key_is_closed():
    assert extract_json_object('{"analysis": "x", "add":') == {"analysis": "x", "add": None}


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("no json here", "no JSON object"),
        ("[1, 2, 3]", "no JSON object"),
        ('{"add": [{"text": 5}]}', "add.0.text"),
        ('{"add": "Check twice."}', "add"),
        ('{"tags": [{"lesson_id": "x-00001", "tag": "great"}]}', "tags.0.tag"),
        ('{"add": [{"text": "short"}]}', "at least 8 characters"),
    ],
)
def test_invalid_replies_raise_one_line_errors(text, fragment):
    with pytest.raises(ParseError) as e:
        parse_model(text, Reflection)
    assert fragment in str(e.value)
    assert "\n" not in str(e.value)


def test_tags_are_case_insensitive_and_extra_keys_ignored():
    r = parse_model('{"tags": [{"lesson_id": "a-00001", "tag": "Helpful"}], "mood": "happy"}', Reflection)
    assert r.tags[0].tag == "helpful"


def test_retry_shows_the_error_then_succeeds():
    seen = []

    def ask(error):
        seen.append(error)
        return "garbage" if error is None else GOOD

    out = parse_with_retry(ask, Reflection)
    assert out.value is not None and out.error is None and out.attempts == 2
    assert seen[0] is None and "no JSON object" in seen[1]


def test_retry_gives_up_after_one_retry_without_raising():
    out = parse_with_retry(lambda e: '{"add": [{"text": 1}]}', Reflection)
    assert out.value is None and out.attempts == 2
    assert "add.0.text" in out.error


def test_a_raw_newline_inside_a_string_is_accepted():
    # llama.cpp's JSON grammar lets a string hold a raw newline; the reply is still the object it means
    from agents.parsing import extract_json_object

    assert extract_json_object('{"why": "two\nlines"}') == {"why": "two\nlines"}
