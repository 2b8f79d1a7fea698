"""Clean self-generated data for a sleep: the two guided-data screens, the data report, paired statistics,
and which lessons held-out prompts may show."""

from __future__ import annotations

import math

import pytest
import torch

from arena.distill.data import build_dataset, data_report, guided_log_ratio, mentions_hint, screen_implausible
from arena.stats import mcnemar_exact, paired_comparison, paired_difference_interval
from lessons.library.adapters import TrainingRollout

HINT = "The correct final answer is 42. Work out the steps that lead to it, then give it on the last line as <answer>42</answer>."


@pytest.mark.parametrize("text", [
    "Using the hint, 40 + 2 = 42. <answer>42</answer>",
    "The correct final answer is 42, so <answer>42</answer>",
    "As the earlier attempts were wrong, I add again: 42 <answer>42</answer>",
    "I was told the result; <answer>42</answer>",
    # quotes six consecutive words of the hint
    "work out the steps that lead to it: 40 + 2 = 42 <answer>42</answer>",
])
def test_completions_that_talk_about_or_quote_the_hint_are_caught(text):
    assert mentions_hint(text, HINT)


@pytest.mark.parametrize("text", [
    "40 + 2 = 42. <answer>42</answer>",
    "The final answer is 42. <answer>42</answer>",  # ordinary solving language, not the hint's
    "We work out 40 + 2 step by step: 42 <answer>42</answer>",  # shares words, not six in a row
])
def test_ordinary_solutions_are_not_flagged(text):
    assert not mentions_hint(text, HINT)


def test_guided_log_ratio_is_the_mean_per_token_difference():
    new = torch.tensor([-1.0, -2.0, -0.5])
    assert guided_log_ratio(new, [-0.5, -0.5, -0.5]) == pytest.approx((-0.5 - 1.5 + 0.0) / 3)
    with pytest.raises(ValueError):
        guided_log_ratio(new, [-0.5])


def rollout(i, guided, completion="40 + 2 = 42 <answer>42</answer>", reward=1.0, task="t/train/0", lp=None):
    msgs = [{"role": "system", "content": "solve"}, {"role": "user", "content": "What is 40 + 2?"}]
    hinted = [msgs[0], {"role": "user", "content": msgs[1]["content"] + "\n\nHint:\n" + HINT}]
    return TrainingRollout(
        rollout_id=i, session="s", task_key=task, family="t", guided=guided, messages=hinted if guided else msgs,
        unguided_messages=msgs if guided else None, completion=completion, token_ids=[5, 6, 7, 8],
        logprobs=lp or [-0.2] * 4, reward=reward, finish_reason="stop", hint_id=1 if guided else None,
        lessons_in_context=[], hint_text=HINT if guided else None,
    )


def test_build_dataset_skips_guided_completions_that_mention_the_hint():
    rs = [rollout(1, False), rollout(2, True), rollout(3, True, completion="By the hint: <answer>42</answer>")]
    data = build_dataset(rs, "distill", 1.0, lambda m: m)
    assert [e.rollout_id for e in data.examples] == [1, 2]
    assert data.skipped["mentions_hint"] == 1


def test_screen_drops_guided_successes_implausible_without_their_hint():
    # π_old per token -0.2 for all; the unguided scorer gives rollout 2 -0.5 (ratio -0.3, kept) and rollout 3 -3.2 (ratio -3.0, dropped)
    rs = [rollout(1, False, task="t/train/0"), rollout(2, True, task="t/train/1"), rollout(3, True, task="t/train/2")]
    data = build_dataset(rs, "distill", 1.0, lambda m: m)
    per_rollout = {2: -0.5, 3: -3.2}
    order = iter([2, 3])

    def score(messages, ids):
        assert all("Hint" not in m["content"] for m in messages)  # scored under the unguided context
        return torch.full((len(ids),), per_rollout[next(order)])

    ratios = screen_implausible(data, rs, score, min_log_ratio=-1.0)
    assert ratios == pytest.approx([-0.3, -3.0])
    assert [e.rollout_id for e in data.examples] == [1, 2]
    assert data.skipped["implausible_without_hint"] == 1
    report = data_report(data, ["t/train/0", "t/train/1", "t/train/2", "t/train/3"], ratios)
    assert report["examples"] == 2 and report["by_kind"] == {"context": 1, "guided": 1, "sft": 0}
    assert report["completion_tokens"] == 8 and report["distinct_tasks"] == 2 and report["task_coverage"] == 0.5
    assert report["skipped"] == {"implausible_without_hint": 1}
    assert report["guided_log_ratio"]["n"] == 2 and report["guided_log_ratio"]["p50"] == pytest.approx(-1.65)


def test_minus_infinity_keeps_every_guided_success():
    rs = [rollout(2, True)]
    data = build_dataset(rs, "distill", 1.0, lambda m: m)
    screen_implausible(data, rs, lambda m, ids: torch.full((len(ids),), -50.0), min_log_ratio=-math.inf)
    assert len(data.examples) == 1


# ---------------------------------------------------------------- paired statistics


def test_exact_mcnemar_against_hand_computed_values():
    # 5 tasks pass only under A, 1 only under B: p = 2 * P(Bin(6, 1/2) <= 1) = 2 * 7/64
    a = [True] * 5 + [False] * 1 + [True] * 3 + [False] * 3
    b = [False] * 5 + [True] * 1 + [True] * 3 + [False] * 3
    assert mcnemar_exact(a, b) == (5, 1, pytest.approx(14 / 64))
    # no discordant pair: no evidence either way
    assert mcnemar_exact([True, False], [True, False])[2] == 1.0
    # 10 vs 0: p = 2 / 2^10
    assert mcnemar_exact([True] * 10, [False] * 10)[2] == pytest.approx(2 / 1024)
    with pytest.raises(ValueError):
        mcnemar_exact([True], [True, False])


def test_paired_comparison_reports_difference_interval_and_p():
    a = [True] * 5 + [False] * 1 + [True] * 3 + [False] * 3
    b = [False] * 5 + [True] * 1 + [True] * 3 + [False] * 3
    got = paired_comparison(a, b)
    diff, lo, hi = paired_difference_interval(a, b)
    assert got["n"] == 12 and got["a_pass_at_1"] == pytest.approx(8 / 12, abs=1e-4)
    assert got["b_pass_at_1"] == pytest.approx(4 / 12, abs=1e-4)
    assert got["diff"] == pytest.approx(4 / 12, abs=1e-4) == pytest.approx(diff, abs=1e-4)
    assert got["ci95"] == [pytest.approx(lo, abs=1e-4), pytest.approx(hi, abs=1e-4)] and lo < diff < hi
    assert (got["a_only"], got["b_only"]) == (5, 1) and got["p_value"] == pytest.approx(14 / 64, abs=1e-6)


# ---------------------------------------------------------------- which lessons a prompt may show


def test_held_out_prompts_show_active_lessons_only_train_prompts_candidates_too(tmp_path):
    from arena.episode.prompt import retrieve_for_task
    from arena.tasks.model import Task
    from lessons.library.curation import Provenance
    from lessons.library.store import LessonStore

    with LessonStore(str(tmp_path / "a.db")) as store:
        prov = Provenance(origin={"by": "test"})
        with store.curate() as c:
            cand = c.add("Add the ones digits first, then the tens.", "chain_sum", "", prov)
            act = c.add("Write the final number inside the answer tag.", "chain_sum", "", prov, status="active")
        train = Task("chain_sum/train/00000", "chain_sum", "train", "What is 12 + 30?", "42", "reasoning_gym", {})
        held = Task("chain_sum/heldout/00000", "chain_sum", "heldout", "What is 12 + 30?", "42", "reasoning_gym", {})
        count = lambda s: len(s.split())  # noqa: E731
        shown_train = [i for i, _ in retrieve_for_task(store, train, 512, count)[1]]
        shown_held = [i for i, _ in retrieve_for_task(store, held, 512, count)[1]]
    assert set(shown_train) == {cand, act}
    assert shown_held == [act]
