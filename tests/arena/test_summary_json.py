"""`arena run --json` (and the table of `arena run`) print what they printed before the summary became a typed model.

The expected stdout of each scripted session (``summary_scripts``: fake policies, a fixed clock)
was written by the code before the change (``data/summary/make_fixtures.py`` says how); the test
runs the same session through the CLI today and compares the text byte for byte, so a renamed or
reordered key, a changed rounding, a ``null`` that became absent (or the reverse), a changed
separator or a changed row of the table fails.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError
from summary_scripts import SCENARIOS, run_scenario

from arena.session.summary import RoundFigures, RunSummary, summary_fields_markdown

FIXTURES = Path(__file__).parent / "data" / "summary"


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_run_json_prints_the_pinned_summary(scenario, tmp_path):
    expected = (FIXTURES / f"{scenario}.json").read_text()
    got = run_scenario(scenario, tmp_path)
    assert json.loads(got) == json.loads(expected)  # a readable diff of the values first
    assert got == expected  # then the exact text: key order, separators, number formatting


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_run_prints_the_pinned_table(scenario, tmp_path):
    assert run_scenario(scenario, tmp_path, json_out=False) == (FIXTURES / f"{scenario}.table.txt").read_text()


# --------------------------------------------------------------------------- the model describes the JSON


def pinned(scenario: str) -> str:
    return (FIXTURES / f"{scenario}.json").read_text()


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_the_model_reads_the_pinned_json_back_and_writes_the_same_text(scenario):
    """Every key of the old output is a field of the model (unknown keys are refused), and back again unchanged."""
    summary = RunSummary.model_validate_json(pinned(scenario))
    assert summary.to_json() + "\n" == pinned(scenario)  # print() added the newline
    assert json.loads(summary.model_dump_json()) == json.loads(pinned(scenario))  # compact UTF-8, the same object


@pytest.mark.parametrize("edit, where", [
    (lambda d: d.update(heldout_befor=None), "heldout_befor"),  # a misspelt key
    (lambda d: d.pop("wall_time_s"), "wall_time_s"),  # a missing one
    (lambda d: d["cycles"][0].update(adapter=None), "adapter"),  # in a nested model
    (lambda d: d["rounds"][0].update(pass_at_2=0.5), "one pass@k figure"),  # two pass@k keys in a round
    (lambda d: d["heldout_before"].update(ci95=[0.1]), "ci95"),  # an interval is two numbers
])
def test_the_model_refuses_json_it_does_not_describe(edit, where):
    data = json.loads(pinned("frontier"))
    edit(data)
    with pytest.raises(ValidationError, match=where):
        RunSummary.model_validate(data)


def test_the_pass_at_k_key_of_a_round_is_named_after_k():
    r = RoundFigures(round=1, episodes=2, mean_reward=0.5, pass_at_1=0.25, k=8, pass_at_k=0.75)
    assert r.model_dump() == {"round": 1, "episodes": 2, "mean_reward": 0.5, "pass_at_1": 0.25, "pass_at_8": 0.75}
    assert list(r.model_dump()) == ["round", "episodes", "mean_reward", "pass_at_1", "pass_at_8"]
    one = RoundFigures(round=1, episodes=2, mean_reward=0.5, pass_at_1=0.25, k=1, pass_at_k=0.25)
    assert one.model_dump() == {"round": 1, "episodes": 2, "mean_reward": 0.5, "pass_at_1": 0.25}  # one key, as before
    assert RoundFigures.model_validate(r.model_dump()) == r and RoundFigures.model_validate(one.model_dump()) == one


def test_the_rubric_and_online_parts_are_absent_not_null_when_off():
    summary = RunSummary.model_validate_json(pinned("frontier"))  # verifier reward, no --online-rubrics
    assert summary.rubric is None and summary.online_rubric_updates is None
    dumped = summary.model_dump()
    assert not {"graded_rollouts", "hack_flags", "online_rubric_updates", "rubric", "hints"} & set(dumped)
    rubric = RunSummary.model_validate_json(pinned("rubric"))
    assert rubric.rubric.hack_flags == {"answer_without_work": 2, "verifier_disagrees": 2}
    assert rubric.online_rubric_updates.versions_added == 2 and "online_rubric_updates" in rubric.model_dump()


def test_the_schema_lists_the_keys_of_the_json_in_its_order_each_with_a_description():
    schema = RunSummary.model_json_schema(mode="serialization")
    names = list(schema["properties"])
    seen: list[str] = []
    for scenario in SCENARIOS:
        keys = list(json.loads(pinned(scenario)))
        assert [n for n in names if n in keys] == keys, scenario  # the JSON's order is the schema's
        assert set(schema["required"]) <= set(keys), scenario  # a required key is always written
        seen += [k for k in keys if k not in seen]
    assert set(seen) == set(names)  # every key the schema lists, some scenario prints

    def described(s, where):
        for name, prop in {**s.get("properties", {}), **s.get("patternProperties", {})}.items():
            assert prop.get("description", "").strip(), f"{where}.{name} has no description"

    described(schema, "RunSummary")
    for name, sub in schema["$defs"].items():
        assert sub.get("description"), name
        described(sub, name)


def test_the_docs_table_lists_every_top_level_field():
    md = summary_fields_markdown()
    top = md.split("\n\n### ")[0].splitlines()
    assert top[:2] == ["| name | type | description |", "| --- | --- | --- |"]
    rows = [line.split(" | ") for line in top[2:]]
    names = [r[0].removeprefix("| `").removesuffix("`") for r in rows]
    assert names == list(RunSummary.model_json_schema(mode="serialization")["properties"])
    assert set(names) == {k for s in SCENARIOS for k in json.loads(pinned(s))}
    assert all(len(r) == 3 and r[1].strip() and r[2].strip(" |") for r in rows)
    assert next(r for r in rows if r[0] == "| `rounds`")[1] == "array of RoundFigures"
    assert "Absent with --reward verifier." in next(r for r in rows if r[0] == "| `hack_flags`")[2]
    for model in ("EvalFigure", "PairedComparison", "RoundFigures", "CycleSummary", "CalibrationFigures",
                  "DifficultyStep", "DifficultyEnd", "OnlineRubricUpdates", "RoleSpeed"):
        assert f"\n### {model}\n" in md, model
    assert "| `pass_at_{k}` | number |" in md.split("### RoundFigures")[1]
