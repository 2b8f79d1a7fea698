"""`arena bench judge`: the shipped labelled completions, and scripted judges (FakePolicy) scored against them."""

from __future__ import annotations

import json
import re
from collections import Counter

import pytest
from cli_helpers import assert_one_line_error

from agents.backends.fake import FakePolicy
from agents.policy import PolicyError
from arena.bench.judge import (
    BASELINE_JUDGE, DEFAULT_JUDGES, FIXTURES, JudgeBenchError, bench_judges, judge_accuracy, load_fixtures,
)
from arena.tasks.jsonl import BUILTIN_RUBRIC_TASKS

FAMILIES = {"explain_science", "everyday_advice", "writing", "facts", "word_problems"}


@pytest.fixture(scope="module")
def fixtures():
    return load_fixtures()


def _response(messages) -> str:
    prompt = messages[-1]["content"]
    return prompt.split("Student response:\n", 1)[1].rsplit("\nWrite the JSON object now.", 1)[0]


def scripted(decide):
    """An explicit judge that passes a response when ``decide(response)``: every positive criterion met and
    no pitfall made, or nothing met; the implicit prompt gets a rating of 10 or 1."""

    def reply(messages, i):
        prompt = messages[-1]["content"]
        ok = decide(_response(messages))
        lines = re.findall(r"^\d+\. (.*)$", prompt.split("Student response:")[0], re.M)
        if "weight" in prompt.split("Student response:")[0] and "rating" in messages[0]["content"]:
            return json.dumps({"rating": 10 if ok else 1, "critique": "scripted"})
        return json.dumps({"verdicts": [{"id": k, "met": ok != ("Pitfall Criteria" in line), "reason": "scripted"}
                                        for k, line in enumerate(lines, 1)]})

    return reply


def test_shipped_fixtures_load_balanced_over_every_family(fixtures):
    questions = {json.loads(line)["question"] for line in BUILTIN_RUBRIC_TASKS.read_text().splitlines() if line.strip()}
    assert 40 <= len(fixtures) <= 60
    assert all(f.task.question in questions for f in fixtures)
    share = sum(f.passes for f in fixtures) / len(fixtures)
    assert 0.4 <= share <= 0.6
    assert {f.task.family for f in fixtures} == FAMILIES
    for fam, n in Counter(f.task.family for f in fixtures).items():  # each family has both labels
        assert 0 < sum(f.passes for f in fixtures if f.task.family == fam) < n, fam
    for f in fixtures:
        assert f.why and f.task.metadata["rubric"]
        if f.task.metadata.get("verifiable"):
            assert re.search(r"<answer>.+</answer>\s*$", f.completion), f.line


@pytest.mark.parametrize("mode", ["explicit", "implicit"])
def test_a_judge_that_agrees_with_the_labels_scores_one(fixtures, mode):
    labels = {f.completion.strip(): f.passes for f in fixtures}
    r = judge_accuracy(fixtures, FakePolicy(scripted(lambda resp: labels[resp.strip()])), mode=mode)
    assert r["n"] == r["graded"] == len(fixtures) and r["ungraded"] == 0
    assert r["accuracy"]["value"] == 1.0 and r["accuracy_graded"]["value"] == 1.0
    assert r["accuracy"]["ci95"][1] == 1.0 and r["accuracy"]["ci95"][0] > 0.9
    assert r["ece"] == 0.0
    assert r["confusion"]["fp"] == r["confusion"]["fn"] == 0
    assert set(r["families"]) == FAMILIES and all(f["accuracy"] == 1.0 for f in r["families"].values())
    assert r["judge_completion_tokens"] > 0


def test_a_judge_that_passes_everything_scores_the_pass_share(fixtures):
    r = judge_accuracy(fixtures, FakePolicy(scripted(lambda resp: True)))
    share = round(sum(f.passes for f in fixtures) / len(fixtures), 4)
    assert r["accuracy"]["value"] == share
    assert r["judge_pass_rate"] == 1.0 and r["label_pass_rate"] == share
    assert r["confusion"]["tn"] == r["confusion"]["fn"] == 0
    assert r["ece"] == pytest.approx(1 - share, abs=1e-4)  # every reward 1.0 in one bin against the pass share


def test_garbage_replies_are_ungraded_and_count_as_wrong(fixtures):
    r = judge_accuracy(fixtures[:6], FakePolicy(lambda m, i: "I think it is fine."))
    assert r["graded"] == 0 and r["ungraded"] == 6
    assert r["accuracy"]["value"] == 0.0
    assert r["accuracy_graded"] == {"value": None, "n": 0, "ci95": [0.0, 1.0]}
    assert r["ece"] is None
    assert all(row["reward"] is None and row["error"] for row in r["rows"])


def test_threshold_decides_the_judge_pass(fixtures):
    half = json.dumps({"rating": 5.5, "critique": "scripted"})  # reward (5.5 - 1) / 9 = 0.5
    judge = FakePolicy(lambda m, i: half)
    assert judge_accuracy(fixtures[:4], judge, mode="implicit", threshold=0.5)["judge_pass_rate"] == 1.0
    assert judge_accuracy(fixtures[:4], judge, mode="implicit", threshold=0.6)["judge_pass_rate"] == 0.0
    with pytest.raises(JudgeBenchError, match="--threshold"):
        judge_accuracy(fixtures[:4], judge, threshold=1.5)


def test_bench_judges_loads_one_at_a_time_and_compares_with_the_baseline(fixtures):
    labels = {f.completion.strip(): f.passes for f in fixtures}
    open_now, built = [], []

    class Closing(FakePolicy):
        def close(self):
            open_now.remove(self)

    def make(spec):
        if spec == "broken":
            raise PolicyError("cannot load broken")
        assert not open_now, "a judge was built while another was still open"
        p = Closing(scripted((lambda resp: True) if spec == BASELINE_JUDGE else (lambda resp: labels[resp.strip()])), spec)
        open_now.append(p)
        built.append(spec)
        return p

    r = bench_judges([BASELINE_JUDGE, "good", "broken", "good"], fixtures, make=make)
    assert built == [BASELINE_JUDGE, "good"] and not open_now
    assert r["judges"]["broken"] == {"error": "cannot load broken"}
    assert r["judges"]["good"]["accuracy"]["value"] == 1.0
    v = r["vs_baseline"]["good"]
    assert v["n"] == len(fixtures) and v["diff"] == pytest.approx(1 - r["judges"][BASELINE_JUDGE]["accuracy"]["value"], abs=1e-4)
    assert v["b_only"] == 0 and v["p_value"] < 0.001
    assert DEFAULT_JUDGES == ("local", "qwen2.5-coder-1.5b")


@pytest.mark.parametrize(("line", "needle"), [
    ('{"question": "Why is the sky blue on a clear day?", "completion": "x", "label": "maybe", "why": "w"}', "field 'label'"),
    ('{"question": "Why is the grass green?", "completion": "x", "label": "pass", "why": "w"}', "is not a task of"),
    ('{"question": "Why is the sky blue on a clear day?", "label": "pass"}', "field 'completion'"),
    ('{"question": "Why is the sky blue on a clear day?", "completion": "x", "label": "pass", "extra": 1}', "field 'extra'"),
    ('{"question": ', "invalid JSON"),
    ('["a list"]', "expected a JSON object"),
])
def test_a_bad_fixtures_line_is_one_line_naming_it(tmp_path, line, needle):
    good = FIXTURES.read_text().splitlines()[0]
    path = tmp_path / "fx.jsonl"
    path.write_text(good + "\n\n" + line + "\n")
    with pytest.raises(JudgeBenchError) as e:
        load_fixtures(path)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"{path}:3: ") and needle in msg, msg


def test_an_empty_or_missing_fixtures_file_is_refused(tmp_path):
    (tmp_path / "empty.jsonl").write_text("\n")
    with pytest.raises(JudgeBenchError, match="is empty"):
        load_fixtures(tmp_path / "empty.jsonl")
    with pytest.raises(JudgeBenchError, match="cannot read fixtures file"):
        load_fixtures(tmp_path / "missing.jsonl")


@pytest.mark.parametrize(("args", "needle"), [
    (["--threshold", "2"], "--threshold must be in [0, 1]"),
    (["--mode", "holistic"], "--mode must be explicit or implicit"),
    (["--limit", "0"], "--limit must be >= 1"),
])
def test_cli_bad_input_is_one_line_exit_2(arena_inproc, args, needle):
    assert_one_line_error(arena_inproc("bench", "judge", *args), needle)


def test_cli_bad_fixtures_line_is_one_line_exit_2(arena_inproc, tmp_path):
    path = tmp_path / "fx.jsonl"
    path.write_text('{"question": "Why is the grass green?", "completion": "x", "label": "pass"}\n')
    assert_one_line_error(arena_inproc("bench", "judge", "--fixtures", str(path)), f"{path}:1:", "is not a task of")


def test_cli_json_with_a_scripted_judge(arena_inproc, monkeypatch, fixtures):
    import agents.backends.registry as registry

    labels = {f.completion.strip(): f.passes for f in fixtures}
    monkeypatch.setattr(registry, "build_policy", lambda spec: FakePolicy(scripted(lambda resp: labels[resp.strip()]), spec))
    proc = arena_inproc("bench", "judge", "--judge", "local", "--limit", "10", "--json")
    assert proc.returncode in (0, None), proc.stderr
    out = json.loads(proc.stdout)
    assert out["n"] == 10 and out["judges"]["local"]["accuracy"]["value"] == 1.0 and out["vs_baseline"] == {}
    table = arena_inproc("bench", "judge", "--judge", "local", "--limit", "4")
    assert table.returncode in (0, None), table.stderr
    assert "arena bench judge" in table.stdout and "1.000" in table.stdout
