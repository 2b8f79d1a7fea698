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
                          env={**os.environ, "OMP_NUM_THREADS": "1", "PATH": os.path.dirname(sys.executable)}, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
    assert lines == ["arena: llama.cpp server baseline skipped: no llama-server binary (pass --llama-server PATH, or put "
                     "llama.cpp's llama-server on PATH; llama-cpp-python does not ship one)",
                     "arena: llama.cpp baseline skipped: llama-cpp-python is not installed; install the bench extra: "
                     "pip install -e '.[bench]' (the test extra has it too)"]
    r = json.loads(proc.stdout)
    assert r["llamacpp_tok_s"] is None and r["ratio"] is None and r["prompts"] == 2 and r["k"] == 2
    assert r["server_tok_s"] is None and r["ratio_server"] is None and r["forced"] is False
    assert sorted(r["skipped"]) == ["llamacpp", "server"] and "llama-cpp-python is not installed" in r["skipped"]["llamacpp"]
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


# --------------------------------------------------------------------------- (c) llama.cpp's server
# A stand-in for llama.cpp's `llama-server` (stdlib, loopback): records its command line, answers /health and
# chat completions with n choices of a fixed reply; `--fail` makes it exit at start with one line.
STAND_IN = '''#!{python}
import json, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
argv = sys.argv[1:]
open({argv_file!r}, "w").write(json.dumps(argv))
if {fail!r}:
    print("error: failed to load model", flush=True)
    sys.exit(1)
port = int(argv[argv.index("--port") + 1])
class H(BaseHTTPRequestHandler):
    def log_message(self, *a): pass
    def _send(self, obj):
        body = json.dumps(obj).encode()
        self.send_response(200); self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body))); self.end_headers(); self.wfile.write(body)
    def do_GET(self):
        self._send({{"status": "ok"}})
    def do_POST(self):
        req = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        n = int(req.get("n", 1))
        choices = [{{"index": i, "message": {{"role": "assistant", "content": "one two three"}}, "finish_reason": "stop"}}
                   for i in range(n)]
        self._send({{"id": "x", "object": "chat.completion", "created": 0, "model": "m", "choices": choices,
                    "usage": {{"prompt_tokens": 5, "completion_tokens": 3 * n, "total_tokens": 5 + 3 * n}}}})
ThreadingHTTPServer(("127.0.0.1", port), H).serve_forever()
'''


def words(text):
    """Whitespace 'tokens' (no model)."""
    return len(text.split())


def stand_in(tmp_path, fail=False):
    path = tmp_path / "llama-server"
    path.write_text(STAND_IN.format(python=sys.executable, argv_file=str(tmp_path / "argv.json"), fail=fail))
    path.chmod(0o755)
    return path


def test_server_baseline_runs_the_binary_with_slots_and_counts_its_completions(tmp_path):
    from arena.bench.rollouts import run_server

    chats = [[{"role": "user", "content": "a b c d"}], [{"role": "user", "content": "a b"}]]  # longest: 4
    got = run_server(stand_in(tmp_path), chats, k=3, max_tokens=60, temperature=0.8, concurrency=2, seed=0, threads=2,
                     longest_prompt=4, count_tokens=words)
    assert (got.completions, got.tokens) == (6, 18)  # 2 chats × k = 3, 3 words each; the warm-up is not counted
    argv = json.loads((tmp_path / "argv.json").read_text())
    opt = {argv[i]: argv[i + 1] for i in range(len(argv) - 1) if argv[i].startswith("-")}
    # 2 threads × 3 completions in flight = 6 slots; each holds the longest prompt (4) + 60 + 8, rounded up to 64
    assert opt["-np"] == "6" and opt["-c"] == str(6 * 128) and opt["-t"] == "2" and opt["-tb"] == "2"
    assert "-cb" in argv and "-kvu" in argv  # continuous batching, one KV buffer for every slot
    assert (opt["--top-k"], opt["--top-p"], opt["--min-p"], opt["--repeat-penalty"]) == ("0", "1.0", "0.0", "1.0")
    assert opt["--host"] == "127.0.0.1"


def test_a_server_that_exits_at_start_is_one_reason(tmp_path):
    from arena.bench.rollouts import run_server

    with pytest.raises(ValueError, match=r"^llama-server exited with code 1 at start: error: failed to load model$"):
        run_server(stand_in(tmp_path, fail=True), [[{"role": "user", "content": "a"}]], k=1, max_tokens=8,
                   temperature=0.8, concurrency=1, seed=0, threads=1, longest_prompt=1, count_tokens=words)


def test_a_bad_server_path_is_one_line_before_any_model_loads(tmp_path):
    not_exec = tmp_path / "llama-server"
    not_exec.write_text("")
    for path in (tmp_path / "missing", not_exec, tmp_path):
        assert_one_line_error(arena("bench", "rollouts", "--llama-server", str(path)),
                              f"--llama-server {path}: not an executable file")


def test_without_a_server_on_path_the_server_row_is_skipped_with_one_line(monkeypatch):
    from arena.bench.rollouts import SERVER_MISSING, ServerUnavailable, find_llama_server

    monkeypatch.setenv("PATH", "")
    with pytest.raises(ServerUnavailable) as e:
        find_llama_server(None)
    assert str(e.value) == SERVER_MISSING


def test_a_relative_server_path_runs_that_binary_not_one_on_path(tmp_path, monkeypatch):
    from arena.bench.rollouts import find_llama_server

    binary = stand_in(tmp_path)
    monkeypatch.chdir(tmp_path)
    assert find_llama_server("./llama-server") == binary  # absolute: Popen would look a bare name up on PATH
    assert find_llama_server("llama-server") == binary


def test_an_empty_server_path_says_so():
    assert_one_line_error(arena("bench", "rollouts", "--llama-server", ""), "--llama-server: empty path")


def test_a_bad_cpu_dtype_is_the_only_line(tmp_path):
    """Checked before the baselines are looked for: one line, not a 'skipped' line and then the error."""
    proc = arena("bench", "rollouts", env={"ARENA_CPU_DTYPE": "fp16", "PATH": os.path.dirname(sys.executable)})
    assert_one_line_error(proc, "ARENA_CPU_DTYPE='fp16' is not a CPU dtype")


# A process that starts a server that never answers, then is sent SIGTERM while it waits for /health.
TERMINATED = """
import sys
from pathlib import Path
from arena.bench.rollouts import llama_server
from arena.cli.support import stop_on_sigterm
stop_on_sigterm()
try:
    with llama_server(Path(sys.argv[1]), Path("model.gguf"), 1, 1, 64, start_s=120):
        pass
except KeyboardInterrupt:
    sys.exit(130)
"""


def test_sigterm_while_the_server_starts_ends_the_server_too(tmp_path):
    import signal
    import time

    hang = tmp_path / "llama-server"
    hang.write_text(f"#!/bin/sh\necho $$ > {tmp_path / 'pid'}\nexec sleep 600\n")
    hang.chmod(0o755)
    proc = subprocess.Popen([sys.executable, "-c", TERMINATED, str(hang)])
    deadline = time.monotonic() + 60
    while not (tmp_path / "pid").exists() or not (tmp_path / "pid").read_text().strip():
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.05)
    child = int((tmp_path / "pid").read_text())
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 130
    with pytest.raises(ProcessLookupError):  # terminated and reaped, not left running
        os.kill(child, 0)
