"""`arena bench rollouts`: bad input is one line; without llama-cpp-python it measures ours and says why the baseline is missing."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from cli_helpers import arena, assert_one_line_error

# Runs the CLI with `llama_cpp` unimportable, as where neither the bench nor the test extra is installed.
NO_LLAMA = "import sys; sys.modules['llama_cpp'] = None; sys.argv = ['arena', *sys.argv[1:]]; from arena.cli import main; main()"


@pytest.mark.parametrize("args, fragment", [
    (["--k", "0"], "--k must be in [1, 256], got 0"),
    (["--temperature", "0"], "--temperature must be in (0, 5]"),
    (["--temperature", "nan"], "--temperature must be in (0, 5]"),
    (["--max-tokens", "99999999999999999999"], "--max-tokens must be in [1, 4096]"),
    (["--concurrency", "65"], "--concurrency must be in [1, 64]"),
    (["--threads", "99999"], "--threads must be in [1, 1024]"),
    (["--prompts", "many"], "Invalid value for '--prompts'"),
])
def test_bad_input_is_one_line(args, fragment):
    assert_one_line_error(arena("bench", "rollouts", *args), fragment)


def test_missing_baseline_error_names_the_extra():
    from arena.bench.rollouts import BaselineUnavailable, load_llama_cpp

    saved = sys.modules.get("llama_cpp")
    sys.modules["llama_cpp"] = None  # type: ignore[assignment]
    try:
        with pytest.raises(BaselineUnavailable, match=r"llama-cpp-python is not installed; install the bench extra"):
            load_llama_cpp()
    finally:
        if saved is None:
            del sys.modules["llama_cpp"]
        else:
            sys.modules["llama_cpp"] = saved


@pytest.mark.slow
def test_without_llama_cpp_ours_is_measured_and_one_line_explains(tmp_path):
    proc = subprocess.run([sys.executable, "-c", NO_LLAMA, "bench", "rollouts", "--prompts", "2", "--k", "2",
                           "--max-tokens", "4", "--json"], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "OMP_NUM_THREADS": "1"}, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
    assert lines == ["arena: llama.cpp baseline skipped: llama-cpp-python is not installed; install the bench extra: "
                     "pip install -e '.[bench]' (the test extra has it too)"]
    r = json.loads(proc.stdout)
    assert r["llamacpp_tok_s"] is None and r["ratio"] is None and r["prompts"] == 2 and r["k"] == 2
    assert r["ours"]["completions"] == 4 and 0 < r["ours"]["tokens"] <= 16 and r["ours_tok_s"] > 0


@pytest.mark.parametrize("load, base, threads, max_tokens, refused", [
    (0.4, 91.0, 2, 96, None),  # quiet, baseline at its known figure: the ratio stands
    (1.0, 91.0, 2, 96, "load average 1.00 at the start (must be below 1)"),
    (3.5, 91.0, 2, 96, "load average 3.50"),
    (0.2, 27.5, 2, 96, "llama.cpp baseline 27.5 tok/s is far from its known 85–110 tok/s at 2 threads"),  # the 4.54× run
    (0.2, 63.8, 2, 96, None),  # 85 × 0.75 = 63.75 is the edge: just above it is not refused ...
    (0.2, 63.0, 2, 96, "is far from its known"),  # ... just below it is
    (0.2, 140.0, 2, 96, "is far from its known"),  # 110 × 1.25 = 137.5
    (0.2, 27.5, 16, 96, None),  # no known figure for 16 threads: only the load is checked
    (0.2, 27.5, 2, 8, None),  # 8-token completions are prompt-bound: the known figure does not apply
    (5.0, None, 2, 96, None),  # no baseline: no ratio to refuse
])
def test_ratio_refusal(load, base, threads, max_tokens, refused):
    from arena.bench.rollouts import ratio_refusal

    got = ratio_refusal(load, base, threads, max_tokens)
    if refused is None:
        assert got is None
    else:
        assert got is not None and refused in got, got
