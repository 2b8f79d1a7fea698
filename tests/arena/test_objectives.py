"""The objective registry (arena/objectives.py): every list of names comes from it, and a new objective is one module
plus one `register` line — a toy objective (tests/arena/toy_objective.py) registered here trains on the tiny model and
goes through `arena distill` end to end, with nothing else changed."""

from __future__ import annotations

import json
import math
import sqlite3

import pytest
from session_scripts import make_session

from arena.objectives import (
    FAMILIES,
    ObjectiveSpec,
    choices_help,
    get_objective,
    objective_names,
    objective_table,
    register,
    specs,
    unregister,
)

BUILT_IN = ("distill", "sft", "guided-unweighted", "grpo", "guide-grpo", "opcd")


@pytest.fixture
def toy():
    """The toy objective registered for one test, removed after it."""
    import toy_objective

    register(toy_objective.SPEC)
    yield toy_objective.SPEC
    unregister(toy_objective.SPEC.name)


def test_the_built_in_objectives_and_their_families():
    assert objective_names() == BUILT_IN
    assert objective_names("policy-gradient") == ("grpo", "guide-grpo")
    assert objective_names("on-policy") == ("opcd",)
    assert objective_names("supervised") == ("distill", "sft", "guided-unweighted")
    assert {s.family for s in specs()} == set(FAMILIES)
    # LoRA dropout 0 exactly where the loss holds an importance ratio (and for guided-unweighted, its ablation)
    assert {s.name for s in specs() if s.dropout == 0} == {"distill", "guided-unweighted", "grpo", "guide-grpo"}
    assert {s.name for s in specs() if s.sampling_temperature} == {"distill", "grpo", "guide-grpo"}
    assert [s.name for s in specs() if not s.reads_rewards] == ["opcd"]
    for spec in specs():  # every implementation imports and is bound to its spec
        assert spec.load().spec is spec


def test_every_list_of_names_is_the_registry(toy):
    from typer.testing import CliRunner

    from arena.bench.distill import BENCH_OBJECTIVES, TRL_BASELINE
    from arena.cli import app
    from arena.config import SessionConfig
    from arena.distill.config import DistillConfig, default_dropout

    assert "smoothed-sft" in objective_names() and "smoothed-sft (sft with label smoothing 0.1)" in choices_help()
    assert "| `smoothed-sft` | supervised |" in objective_table()
    assert objective_table().count("\n") == 2 + len(objective_names())  # header, rule, one row each
    assert DistillConfig(objective="smoothed-sft").objective == "smoothed-sft"
    assert default_dropout("smoothed-sft") == 0.05
    assert SessionConfig(db="x.db", cycles=2, sleep_objective="smoothed-sft").sleep == "smoothed-sft"
    with pytest.raises(ValueError, match="unknown objective 'nope'; choose one of distill, sft, .*smoothed-sft"):
        DistillConfig(objective="nope")
    assert BENCH_OBJECTIVES == ("sft", "grpo", "guide-grpo") and TRL_BASELINE["sft"] == "SFTTrainer"
    help_text = " ".join(CliRunner().invoke(app, ["distill", "--help"], env={"COLUMNS": "400"}).output.split())
    for name in BUILT_IN:
        assert f"{name} (" in help_text, name


def test_the_architecture_pages_walk_through_is_the_toy_objective():
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    page = (root / "docs" / "architecture.md").read_text(encoding="utf-8")
    block = page.split("This is `tests/arena/toy_objective.py`, whole but for its docstring and `from __future__` line:\n\n```python\n", 1)[1].split("```", 1)[0]
    assert (root / "tests" / "arena" / "toy_objective.py").read_text(encoding="utf-8").endswith(block)


def test_register_refuses_bad_specs():
    base = dict(help="h", family="supervised", implementation="m:C", source="s", kinds=("sft",))
    with pytest.raises(ValueError, match="registered already"):
        register(ObjectiveSpec("sft", **base))
    with pytest.raises(ValueError, match="lower-case words joined by hyphens"):
        register(ObjectiveSpec("My Objective", **base))
    with pytest.raises(ValueError, match="family must be one of"):
        register(ObjectiveSpec("toy", **{**base, "family": "magic"}))
    with pytest.raises(ValueError, match="'module:Class'"):
        register(ObjectiveSpec("toy", **{**base, "implementation": "module.Class"}))
    with pytest.raises(ValueError, match=r"dropout must be in \[0, 1\)"):
        register(ObjectiveSpec("toy", **{**base, "dropout": 1.0}))
    assert "toy" not in objective_names()
    with pytest.raises(ValueError, match="unknown objective"):
        get_objective("toy")


def test_a_registered_toy_objective_trains_on_the_tiny_model(toy, tiny_dir):
    """One module + one register line: `fit` trains it (loss falls), with the label-smoothed loss it declares."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from agents.roles.solver import solver_messages
    from arena.distill.config import TrainConfig
    from arena.distill.data import DistillExample
    from arena.distill.trainer import fit

    tok = AutoTokenizer.from_pretrained(tiny_dir)
    exs = [DistillExample("sft", i, f"t{i}", solver_messages(f"What is {i} + 2?"),
                          tok(f"<answer>{i + 2}</answer>", add_special_tokens=False)["input_ids"], None, True)
           for i in range(4)]
    torch.manual_seed(0)
    model, res = fit(AutoModelForCausalLM.from_pretrained(tiny_dir), tok, exs, TrainConfig(max_steps=8, lr=5e-3,
                     batch_size=4, grad_accum=1, warmup_steps=0), "smoothed-sft", eos_id=tok.eos_token_id)
    assert res.steps == 8 and all(math.isfinite(x) for x in res.losses)
    assert res.losses[-1] < res.losses[0] - 0.5, res.losses
    assert not res.policy_gradient and res.gammas == [] and res.completion_tokens == 8 * sum(len(e.completion_ids) + 1 for e in exs)
    # the first step's loss is the label-smoothed cross-entropy of the untrained model (LoRA B = 0: the base)
    from arena.distill.objectives.base import collate
    from arena.distill.trainer import completion_logits, encode_examples

    base = AutoModelForCausalLM.from_pretrained(tiny_dir).eval()
    batch = collate(encode_examples(tok, exs, 512, tok.eos_token_id)[0], tok.pad_token_id)
    with torch.no_grad():
        logits = completion_logits(base, batch)
        targets = batch["input_ids"][:, 1:][batch["target_mask"]]
        want = float(torch.nn.functional.cross_entropy(logits, targets, label_smoothing=0.1))
        plain = float(torch.nn.functional.cross_entropy(logits, targets))
    assert res.losses[0] == pytest.approx(want, rel=1e-4) and abs(want - plain) > 1e-3


def test_a_registered_toy_objective_goes_through_arena_distill(toy, tmp_path, tiny, arena_inproc):
    db = tmp_path / "arena.db"
    make_session(db, tiny)
    proc = arena_inproc("distill", "--db", str(db), "--base-model", str(tiny), "--objective", "smoothed-sft",
                        "--steps", "2", "--eval-max-tokens", "2", "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    # sft's selection: the two unguided successes, in their sampling context; the guided ones are not used
    assert out["objective"] == "smoothed-sft" and out["data"]["by_kind"] == {"context": 0, "guided": 0, "sft": 2}
    assert out["data"]["skipped"]["guided_not_used"] == 2 and out["train"]["steps"] == 2
    with sqlite3.connect(db) as c:
        (objective, config), = c.execute("select objective, config from adapters").fetchall()
    assert objective == "smoothed-sft" and json.loads(config)["train"]["dropout"] == 0.05
