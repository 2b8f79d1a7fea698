"""`arena bench distill`: each objective's trainer against TRL's (SFTTrainer, GRPOTrainer) on the same data.

The tiny random Llama of ``tiny_llama`` stands in for the embedded model, so these run in
seconds; the figures of the real model are in bench/RESULTS.md.
"""

from __future__ import annotations

import json

import pytest
import torch

from agents.backends.local import LocalPolicy
from agents.roles.solver import guided_messages
from arena.bench.distill import GUIDE_HINT, SAMPLING_TEMPERATURE, _rl_data


@pytest.fixture(scope="module")
def tiny_policy(tiny_dir):
    p = LocalPolicy(model_dir=tiny_dir, device="cpu")
    p.load()
    return p


def test_bench_distill_compares_every_objective_with_its_trl_trainer(tiny_dir, arena_inproc):
    """End to end: sft vs SFTTrainer, grpo and guide-grpo vs GRPOTrainer, token for token the same data."""
    proc = arena_inproc("bench", "distill", "--steps", "2", "--batch-size", "4", "--group-size", "2", "--rank", "4",
                        "--base-model", str(tiny_dir), "--device", "cpu", "--json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    r = json.loads(proc.stdout)
    assert (r["steps"], r["batch_size"], r["group_size"], r["dtype"], r["trl_error"]) == (2, 4, 2, "float32", None)
    rows = r["objectives"]
    assert list(rows) == ["sft", "grpo", "guide-grpo"]
    assert [rows[o]["baseline"] for o in rows] == ["TRL SFTTrainer", "TRL GRPOTrainer", "TRL GRPOTrainer"]
    for name, row in rows.items():
        assert row["examples"] == 8, name  # 2 steps x 4 sequences, one pass
        assert row["ours"]["tokens"] == row["trl"]["tokens"] > 0, name  # the same data, token for token
        assert row["ratio"] == pytest.approx(row["ours"]["tokens_per_s"] / row["trl"]["tokens_per_s"], rel=1e-2)
        assert row["mfu"] is None  # CPU: no peak to compare against
    assert rows["grpo"]["ours"]["tokens"] == rows["guide-grpo"]["ours"]["tokens"]  # same rollouts, guided or not


def test_the_grpo_data_has_signal_in_every_group_and_guided_groups_scored_under_the_hint(tiny_policy):
    data = _rl_data(tiny_policy, n_groups=4, size=2, guided=True)
    assert data.rewards == [1.0, 0.0] * 4  # right then wrong in every group: no group without an advantage
    # Â = (r − mean) / (std + 1e-6) with Bessel's std of (1, 0) = 1/√2
    assert [e.advantage for e in data.examples] == pytest.approx([0.70710576, -0.70710576] * 4, abs=1e-6)
    assert [e.guided for e in data.examples] == [False, False, True, True] * 2  # every other group was guided
    for e in data.examples:
        assert e.add_eos and len(e.old_logprobs) == len(e.completion_ids) + 1  # π_old covers the end of turn
        assert "Hint:" not in e.messages[-1]["content"]  # trained under the chat without the hint
    guided = data.examples[2]
    assert guided.sampling_messages == guided_messages(guided.messages, GUIDE_HINT)
    ids = [*guided.completion_ids, tiny_policy.eos_token_id]
    under_hint = tiny_policy.token_logprobs(guided.sampling_messages, ids, temperature=SAMPLING_TEMPERATURE)
    assert torch.allclose(torch.tensor(guided.old_logprobs), under_hint, atol=1e-5)  # π_old: the hinted, tempered policy
    without = tiny_policy.token_logprobs(guided.messages, ids, temperature=SAMPLING_TEMPERATURE)
    assert not torch.allclose(under_hint, without, atol=1e-3)


@pytest.mark.parametrize(("args", "message"), [
    (["--objective", "opcd"], "--objective 'opcd' has no trainer to compare with; choose from sft, grpo, guide-grpo"),
    (["--objective", "grpo", "--batch-size", "3", "--group-size", "2"],
     "--batch-size 3 is not a whole number of groups of --group-size 2"),
    (["--objective", "guide-grpo", "--group-size", "1"], "--group-size must be >= 2"),
    (["--steps", "0"], "--steps, --batch-size and --rank must be >= 1"),
    (["--objective", ","], "--objective: name at least one of sft, grpo, guide-grpo"),
])
def test_bench_distill_bad_input_is_one_line(arena_inproc, tiny_dir, args, message):
    proc = arena_inproc("bench", "distill", "--base-model", str(tiny_dir), "--device", "cpu", *args)
    assert proc.returncode == 2
    assert message in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert proc.stdout == ""


def test_sft_alone_takes_any_batch_size(tiny_dir, arena_inproc):
    """Whole groups are a GRPOTrainer constraint: sft alone runs with a batch of 3 and reports no group size."""
    proc = arena_inproc("bench", "distill", "--objective", "sft", "--steps", "1", "--batch-size", "3", "--rank", "4",
                        "--base-model", str(tiny_dir), "--device", "cpu", "--json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    r = json.loads(proc.stdout)
    assert list(r["objectives"]) == ["sft"] and r["group_size"] is None and r["objectives"]["sft"]["examples"] == 3
