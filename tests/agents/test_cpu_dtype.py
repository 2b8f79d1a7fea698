"""The dtype local models load in on the CPU: ``$ARENA_CPU_DTYPE`` (auto = bf16 where the CPU has bf16 matmul instructions,
the default; fp32; bf16) for sampling and scoring, fp32 for training."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from agents.backends.local import CPU_DTYPE_ENV, LocalPolicy, cpu_bf16_matmul_flag, default_dtype, training_dtype
from agents.policy import PolicyError
from agents.roles.solver import solver_messages

SAPPHIRE_RAPIDS = "processor\t: 0\nflags\t\t: fpu sse avx512f avx512_bf16 amx_bf16 amx_tile amx_int8\n"
ZEN4 = "processor\t: 0\nflags\t\t: fpu sse avx512f avx512_bf16 avx512_vnni\n"  # bf16 dot products, no AMX
ZEN3 = "processor\t: 0\nflags\t\t: fpu sse avx2 fma\n"  # no bf16 instructions: torch emulates bf16


def test_bf16_matmul_flags_are_read_from_the_flags_line_only():
    assert cpu_bf16_matmul_flag(SAPPHIRE_RAPIDS) == "amx_bf16"  # the tile unit first
    assert cpu_bf16_matmul_flag(ZEN4) == "avx512_bf16"
    assert cpu_bf16_matmul_flag(ZEN3) is None
    assert cpu_bf16_matmul_flag("model name\t: amx_bf16 avx512_bf16 in a name are not flags\nflags\t\t: fpu\n") is None
    assert cpu_bf16_matmul_flag("") is None


@pytest.mark.parametrize(("value", "expected"), [("", None), ("auto", None), ("fp32", torch.float32),
                                                 ("bf16", torch.bfloat16), (" BF16 ", torch.bfloat16)])
def test_the_cpu_dtype_is_what_the_environment_says(monkeypatch, value, expected):
    from agents.backends import local

    monkeypatch.setattr(local, "cpu_bf16_matmul_flag", lambda text=None: cpu_bf16_matmul_flag(ZEN3))
    monkeypatch.setenv(CPU_DTYPE_ENV, value)
    assert default_dtype("cpu") == (expected or torch.float32)  # auto on a CPU without bf16 instructions: fp32
    assert default_dtype("cuda") == torch.bfloat16  # CUDA is bf16 whatever the variable says


@pytest.mark.parametrize(("cpuinfo", "expected"), [(SAPPHIRE_RAPIDS, torch.bfloat16), (ZEN4, torch.bfloat16),
                                                   (ZEN3, torch.float32)])
@pytest.mark.parametrize("value", [None, "auto"])
def test_auto_is_the_default_and_bf16_where_the_cpu_has_bf16_matmuls(monkeypatch, cpuinfo, expected, value):
    from agents.backends import local

    if value is None:
        monkeypatch.delenv(CPU_DTYPE_ENV, raising=False)
    else:
        monkeypatch.setenv(CPU_DTYPE_ENV, value)
    monkeypatch.setattr(local, "cpu_bf16_matmul_flag", lambda text=None: cpu_bf16_matmul_flag(cpuinfo))  # this CPU's flags
    assert default_dtype("cpu") == expected


@pytest.mark.parametrize("value", [None, "auto", "bf16", "fp32"])
def test_training_is_fp32_on_the_cpu_whatever_the_sampling_dtype(monkeypatch, value):
    from agents.backends import local

    monkeypatch.setattr(local, "cpu_bf16_matmul_flag", lambda text=None: cpu_bf16_matmul_flag(ZEN4))
    if value is None:
        monkeypatch.delenv(CPU_DTYPE_ENV, raising=False)
    else:
        monkeypatch.setenv(CPU_DTYPE_ENV, value)
    assert training_dtype("cpu") == torch.float32 and training_dtype("cuda") == torch.bfloat16


def test_a_bad_value_is_a_policy_error_naming_the_choices(monkeypatch):
    monkeypatch.setenv(CPU_DTYPE_ENV, "fp16")
    with pytest.raises(PolicyError, match=r"ARENA_CPU_DTYPE='fp16' is not a CPU dtype; use fp32, bf16 or auto"):
        LocalPolicy(model_dir=None, device="cpu")


def test_arena_run_with_a_bad_cpu_dtype_is_one_line_before_any_model_loads(tmp_path):
    env = {"PATH": "/usr/bin:/bin", CPU_DTYPE_ENV: "fp16", "HOME": str(tmp_path)}
    proc = subprocess.run([sys.executable, "-m", "arena.cli", "run", "--db", str(tmp_path / "a.db")],
                          capture_output=True, text=True, env=env, timeout=300, check=False)
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "ARENA_CPU_DTYPE='fp16' is not a CPU dtype" in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_bf16_policy_samples_and_scores_in_float32_logprobs(tiny_dir):
    """bf16 weights, float32 log-probs: sampling and teacher forcing agree as they do in fp32."""
    p = LocalPolicy(model_dir=tiny_dir, device="cpu", dtype=torch.bfloat16)
    p.load()
    try:
        assert next(p.model.parameters()).dtype == torch.bfloat16
        chat = solver_messages("What is 2 + 3?")
        (c,) = p.sample(chat, n=1, temperature=1.0, max_tokens=12, seed=0)
        assert c.token_ids and len(c.logprobs) == len(c.token_ids)
        scored = p.token_logprobs(chat, c.token_ids)
        assert scored.dtype == torch.float32 and bool(torch.isfinite(scored).all())
        # the same model scores what it sampled: equal up to bf16 batching numerics (fp32 agrees to ~1e-5)
        assert torch.allclose(scored, torch.tensor(c.logprobs), atol=0.1)
    finally:
        p.close()
