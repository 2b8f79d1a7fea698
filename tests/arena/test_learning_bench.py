"""`arena bench learning --quick` end to end on the real embedded model, and the pieces it is made of."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from PIL import Image

from arena.bench.learning import CONDITIONS, LearningBenchConfig, LearningBenchError, oracle_examples, session_config


def test_conditions_differ_only_in_what_they_learn_with(tmp_path):
    bcfg = LearningBenchConfig()
    cfgs = {c: session_config(c, bcfg, tmp_path / f"{c}.db") for c in ("lessons", "sft", "distill", "loop")}
    for c in cfgs.values():  # same tasks, seeds and group size everywhere
        assert (c.train_tasks, c.heldout_tasks, c.rollouts, c.seed, c.families) == (32, 128, 8, 0, [bcfg.family])
    assert cfgs["lessons"].sleep is None and cfgs["lessons"].hint_modes == [] and cfgs["lessons"].rounds == 2
    assert cfgs["sft"].sleep == "sft" and cfgs["sft"].hint_modes == [] and cfgs["sft"].lesson_tokens == 0
    assert cfgs["distill"].sleep == "distill" and cfgs["distill"].lesson_tokens == 0 and cfgs["distill"].hint_modes
    assert cfgs["loop"].sleep == "distill" and cfgs["loop"].lesson_tokens == 512
    assert cfgs["loop"].reflect and cfgs["lessons"].reflect and not cfgs["sft"].reflect and not cfgs["distill"].reflect
    for name in ("sft", "distill", "loop"):
        assert cfgs[name].cycles == 2 and cfgs[name].sleep_steps == 40


def test_lesson_conditions_measure_lessons_and_teach_as_arena_run_does(tmp_path):
    """Session 24: the bench built its sessions from SessionConfig's small defaults, so its utility A/B compared
    16 sampled pairs (±0.24) where `arena run` compares 96 greedy ones, and the teacher's replies were capped at
    192 tokens where the run gives 320. The bench must measure what a run does."""
    import inspect

    from arena.cli.run import run
    from arena.config import SessionConfig

    cli = {p.name: p.default for p in inspect.signature(run).parameters.values()}
    bcfg = LearningBenchConfig()
    for name in ("lessons", "loop", "opcd"):
        c = session_config(name, bcfg, tmp_path / f"{name}.db")
        assert (c.utility_every, c.utility_tasks, c.utility_samples) == (
            cli["utility_every"], cli["utility_tasks"], cli["utility_samples"]) == (16, 96, 1)
        assert c.teacher_max_tokens == SessionConfig.model_fields["teacher_max_tokens"].default == 320
        assert c.teacher == SessionConfig.model_fields["teacher"].default


def test_on_policy_rows_continue_the_sampling_adapter(tmp_path):
    bcfg = LearningBenchConfig()
    cfgs = {c: session_config(c, bcfg, tmp_path / f"{c}.db") for c in ("grpo", "guide-grpo", "opcd", "sft")}
    for name in ("grpo", "guide-grpo", "opcd"):  # on-policy: each cycle's rollouts come from the current adapter
        assert cfgs[name].sleep == name and cfgs[name].sleep_from == "previous" and cfgs[name].cycles == 2
        assert (cfgs[name].sleep_steps, cfgs[name].sleep_lr) == (cfgs["sft"].sleep_steps, cfgs["sft"].sleep_lr)
    assert cfgs["sft"].sleep_from == "base"
    # grpo is Guide's ablation: no hints; guide-grpo adds the guided groups; neither writes or shows lessons
    assert cfgs["grpo"].hint_modes == [] and cfgs["guide-grpo"].hint_modes == ["feedback", "answer"]
    for name in ("grpo", "guide-grpo"):
        assert cfgs[name].lesson_tokens == 0 and not cfgs[name].reflect and cfgs[name].utility_every == 0
    # opcd distils the library's active lessons (reflection and utility A/B on) and the plan parts of hints
    assert cfgs["opcd"].reflect and cfgs["opcd"].lesson_tokens == 512 and cfgs["opcd"].hint_modes
    one = LearningBenchConfig(cycles=1)  # one cycle: the previous policy is the base model
    assert session_config("grpo", one, tmp_path / "g.db").sleep_from == "base"


def test_hint_modes_reach_only_the_hinted_conditions(tmp_path):
    bcfg = LearningBenchConfig(hint_modes=["feedback,plan"])
    assert bcfg.hint_modes == ["plan", "feedback"]  # canonical order, as arena run stores them
    cfgs = {c: session_config(c, bcfg, tmp_path / f"{c}.db") for c in ("lessons", "sft", "distill", "grpo", "guide-grpo", "opcd", "loop")}
    for name in ("distill", "guide-grpo", "opcd", "loop"):
        assert cfgs[name].hint_modes == ["plan", "feedback"]
    for name in ("lessons", "sft", "grpo"):  # the ablations stay hint-free whatever --hint-mode says
        assert cfgs[name].hint_modes == []
    off = LearningBenchConfig(hint_modes=["none"])
    assert session_config("guide-grpo", off, tmp_path / "g.db").hint_modes == []
    with pytest.raises(LearningBenchError, match="unknown hint mode 'answers'"):
        LearningBenchConfig(hint_modes=["answers"])


def test_bad_settings_are_refused():
    with pytest.raises(LearningBenchError, match="unknown condition"):
        LearningBenchConfig(conditions=["base", "magic"])
    with pytest.raises(LearningBenchError, match="--cycles must be >= 1"):
        LearningBenchConfig(cycles=0)


def test_oracle_targets_are_worked_reference_answers():
    from arena.tasks.model import Task

    t = Task("chain_sum/train/00000", "chain_sum", "train", "State the final answer to the following arithmetic problem: 12 + 30 =", "42", "reasoning_gym")
    (ex,) = oracle_examples([t], lambda s: list(range(len(s.split()))))
    assert ex.kind == "sft" and ex.add_eos and ex.messages[-1]["content"].endswith(t.question)
    assert len(ex.completion_ids) == len("We add the terms in order: 12 + 30 = 42. So the result is 42.\n<answer>42</answer>".split())


@pytest.mark.slow
@pytest.mark.timeout(2400)  # nine conditions, each a short session; minutes on a quiet machine, many more loaded
def test_quick_bench_end_to_end(tmp_path):
    out = tmp_path / "bench"
    proc = subprocess.run([sys.executable, "-m", "arena.cli", "bench", "learning", "--quick", "--out", str(out), "--json"],
                          capture_output=True, text=True, timeout=2400, env={**os.environ})
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout)
    assert list(result["conditions"]) == list(CONDITIONS)
    base = result["conditions"]["base"]
    for name, c in result["conditions"].items():
        h = c["heldout"]
        assert h["n"] == 4 and 0 <= h["ci95"][0] <= h["pass_at_1"] <= h["ci95"][1] <= 1, name
        assert set(c["sampled"]) >= {"pass_at_1", "pass_at_2", "n"} and c["sampled"]["n"] == 2
        assert c["wall_s"] > 0 and c["error"] is None, (name, c["error"])
        if name != "base":
            v = c["vs_base"]
            assert v["n"] == 4 and 0 <= v["p_value"] <= 1 and v["b_pass_at_1"] == base["heldout"]["pass_at_1"]
    for name in ("lessons", "sft", "distill", "grpo", "guide-grpo", "opcd", "loop"):
        c = result["conditions"][name]
        assert c["rollouts"] >= 16  # 4 train tasks x k=4, plus guided ones where hints are on
        assert c["curve"][0][0] == 0 and c["curve"][-1][0] == c["rollouts"]
    # --quick has no utility A/B, so no lesson turns active, and its hints (feedback, answer) have no plan part: opcd,
    # which distils active lessons and plan parts only (tests/arena/test_opcd.py), has nothing to train on
    opcd = result["conditions"]["opcd"]
    assert opcd["adapters"] == [] and opcd["lessons_active"] == 0 and opcd["train_tokens"] == 0
    assert "no train task has an active lesson" in opcd["cycles"][0]["sleep_refused"]
    for name in ("sft", "distill", "grpo", "guide-grpo", "loop"):
        assert result["conditions"][name]["adapters"] == ["adapter-0001"]
        assert result["conditions"][name]["train_tokens"] > 0
        (sleep,) = result["conditions"][name]["lessons"]
        assert sleep["cycle"] == 1 and set(sleep["distilled"]) <= set(sleep["in_context"])
        assert all(sleep[k] is None or 0 <= sleep[k] <= 1 for k in ("wake", "wake_lessons", "adapter"))
    assert result["conditions"]["grpo"]["rollouts"] == 16  # no hints: exactly 4 tasks x k = 4
    assert result["conditions"]["oracle"]["ceiling"] is True and result["conditions"]["oracle"]["steps"] == 1
    assert json.loads((out / "learning.json").read_text())["conditions"].keys() == result["conditions"].keys()
    img = Image.open(out / "learning.png").convert("L")
    assert img.size[0] > 400 and img.size[1] > 300
    lo, hi = img.getextrema()
    assert hi - lo > 100  # not a blank picture
