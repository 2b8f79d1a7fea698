"""`bench/context_gap.py`: the per-token reverse KL between a model without lessons and the base model with them."""

from __future__ import annotations

import importlib.util
import json
import math
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from session_scripts import make_session

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "context_gap.py"
spec = importlib.util.spec_from_file_location("context_gap", SCRIPT)
context_gap = importlib.util.module_from_spec(spec)
spec.loader.exec_module(context_gap)


def test_the_gap_is_zero_without_context_and_an_untrained_adapter_keeps_the_base_gap(tiny_dir):
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from arena.distill.objectives.base import prompt_ids

    tok = AutoTokenizer.from_pretrained(tiny_dir)
    plain = prompt_ids(tok, [{"role": "user", "content": "What is 2 + 3?"}])
    taught = prompt_ids(tok, [{"role": "system", "content": "Lesson: add the ones first."},
                              {"role": "user", "content": "What is 2 + 3?"}])
    comps = [tok("5", add_special_tokens=False)["input_ids"], tok("It is 5 then", add_special_tokens=False)["input_ids"]]
    model = AutoModelForCausalLM.from_pretrained(tiny_dir, dtype=torch.float32).eval()
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    same = context_gap.task_gaps(model, [(plain, plain, c) for c in comps], pad, adapter=False)
    assert same == pytest.approx([0.0, 0.0], abs=1e-6)
    gaps = context_gap.task_gaps(model, [(plain, taught, c) for c in comps], pad, adapter=False, batch=1)
    assert all(g > 1e-6 for g in gaps)
    # CASE-007: a gap is a difference of two nearly equal log-probs (|log p| up to ~11 nats over a 49k vocabulary), so
    # the batched (padded) and one-at-a-time forwards may differ by float32 rounding of the log-probs themselves:
    # ~11 · eps(fp32) · (a few accumulations) ≈ 2e-5 absolute (the CASE-007 CPU: 8.4e-7), whatever the gap's size. A relative tolerance on
    # the difference magnified that rounding (1.7e-4 relative on an AVX2-only CPU); compare absolutely.
    tol = 11 * torch.finfo(torch.float32).eps * 16
    assert context_gap.task_gaps(model, [(plain, taught, c) for c in comps], pad, adapter=False) == pytest.approx(gaps, abs=tol)
    # a fresh LoRA (B = 0) is the base model: its gap is the base's, computed with the adapter disabled for the teacher
    peft_model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"])).eval()
    assert context_gap.task_gaps(peft_model, [(plain, taught, c) for c in comps], pad, adapter=True) == pytest.approx(gaps, abs=tol)


def test_summary_by_hand():
    row = context_gap.summarise("a", [0.1, 0.3], [1, 3], [0.0, 0.1])
    assert row["kl_token_mean"] == pytest.approx((0.1 * 1 + 0.3 * 3) / 4) and row["kl_task_mean"] == pytest.approx(0.2)
    half = 12.7062047 * 0.1  # t(0.975, 1) · sem, sem = sd / √2 = 0.1414 / 1.414; a KL is >= 0: the low end is cut at 0
    assert row["ci95"] == pytest.approx([0.0, 0.2 + half], abs=1e-4)
    narrow = context_gap.summarise("b", [0.2, 0.2, 0.3, 0.3], [1, 1, 1, 1], None)["ci95"]
    sem = (0.01 / 3) ** 0.5 / 2  # sd = √(4 · 0.05² / 3), over √4
    assert narrow == pytest.approx([0.25 - 3.1824463 * sem, 0.25 + 3.1824463 * sem], abs=1e-4)  # t(0.975, 3)
    one = context_gap.summarise("c", [0.2], [3], None)
    assert one["ci95"] is None and json.loads(json.dumps(one), parse_constant=pytest.fail) == one  # valid JSON, no NaN
    assert row["diff_vs_base"] == pytest.approx(0.15) and row["tasks_closer_than_base"] == 0
    assert 0 < row["wilcoxon_p"] <= 1
    assert "diff_vs_base" not in context_gap.summarise("base", [0.1, 0.3], [1, 3], None)


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, check=False)


def test_a_session_with_an_active_lesson_gets_a_base_row_and_bad_input_one_line(tmp_path, tiny):
    db = tmp_path / "arena.db"
    make_session(db, tiny)
    out = run("--db", str(db), "--session", "demo", "--base-model", str(tiny))
    assert out.returncode == 2 and out.stderr.strip() == (
        "context_gap: no held-out prompt of session 'demo' shows an active lesson")  # the lesson is a candidate
    with sqlite3.connect(db) as c:
        c.execute("update lessons set status = 'active'")
    out = run("--db", str(db), "--session", "demo", "--base-model", str(tiny), "--max-tokens", "4")
    assert out.returncode == 0, out.stderr
    (row,) = [json.loads(line) for line in out.stdout.splitlines()]
    assert row["model"] == "base" and row["lessons_shown"] == 4 and row["tasks"] <= 4 and row["tokens"] >= row["tasks"]
    assert row["kl_task_mean"] > 0 and math.isfinite(row["kl_token_mean"])
    for args, fragment in ((["--db", str(tmp_path / "nope.db"), "--session", "demo"], "no library at"),
                           (["--db", str(db), "--session", "other", "--base-model", str(tiny)], "no session named 'other'"),
                           (["--db", str(db), "--session", "demo", "--adapter", "adapter-0009", "--base-model", str(tiny)],
                            "no adapter 'adapter-0009'"),
                           (["--db", str(db), "--session", "demo", "--tasks", "-1"], "--tasks must be >= 0"),
                           (["--db", str(db), "--session", "demo", "--adapter", str(tmp_path), "--base-model", str(tiny)],
                            "adapter_config.json"),  # a directory that holds no adapter: refused before any row
                           (["--db", str(db), "--session", "demo", "--base-model", str(tmp_path / "none")],
                            "no base model directory")):
        bad = run(*args)
        assert bad.returncode == 2 and bad.stdout == "" and fragment in bad.stderr, (args, bad.stderr)
        assert len(bad.stderr.strip().splitlines()) == 1
