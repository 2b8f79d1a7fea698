"""`arena bench rollouts`: rollout throughput of the local backend against llama.cpp, in one run.

The same P prompts (solver chats for tasks of the default family) × k completions at a fixed
max tokens and temperature go through

(a) **ours**: :class:`agents.backends.local.LocalPolicy` exactly as ``arena run`` uses it — ``concurrency``
    episode threads, each sampling one group of k with ``sample(chat, n=k)``; the policy decodes
    the overlapping requests together (batched, KV-cached, grouped by prompt length);
(b) **llama.cpp**: ``llama-cpp-python`` on the same GGUF file, one completion at a time
    (single stream), with the same prompt text (the chat template applied by our tokenizer),
    the same temperature and the same plain sampling (top-k / top-p / min-p / repetition
    penalty off);
(c) **llama.cpp's server** (optional, ``--llama-server PATH`` or ``llama-server`` on ``PATH``): the
    ``llama-server`` binary of llama.cpp on the same GGUF, with ``concurrency × k`` parallel slots
    and continuous batching, driven through our own OpenAI-compatible backend
    (:class:`agents.backends.openai_backend.OpenAIPolicy`) from the same ``concurrency`` episode
    threads — the strongest thing a user would pick instead of our sampler. Its completions are
    counted by re-tokenising their text with the model's tokenizer (the chat API returns no ids).

Both count completion tokens the same way (generated tokens, end-of-turn excluded) and time
sampling only (model loading excluded). The figure is completion tokens per second of wall
time and the ratio ours / llama.cpp.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import io
import math
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEFAULT_PROMPTS = 16
DEFAULT_K = 8
DEFAULT_MAX_TOKENS = 96  # arena run's --max-tokens default
DEFAULT_TEMPERATURE = 0.8  # arena run's --temperature default
BASELINE_MISSING = (
    "llama.cpp baseline skipped: llama-cpp-python is not installed; "
    "install the bench extra: pip install -e '.[bench]' (the test extra has it too)"
)


# llama-cpp-python single-stream completion tok/s on the embedded GGUF, by CPU threads, on the machine the
# project is measured on (2 cores; shared/DESIGN.md "Known figures": ~85–110, 91 on the bench's own prompts).
KNOWN_LLAMACPP_TOK_S: dict[int, tuple[float, float]] = {2: (85.0, 110.0)}
FAR = 0.25  # a baseline more than 25% outside its known range is a measurement bug, not a figure
MAX_LOAD = 1.0  # the 1-minute load average a run must start below (docs/howto/bench.md, "Rollout speed": a ratio is refused otherwise)
KNOWN_MIN_TOKENS = 64  # the known figure is for completions this long or longer (short ones are prompt-bound)


def ratio_refusal(load_before: float, llamacpp_tok_s: float | None, threads: int | None, max_tokens: int) -> str | None:
    """Why a measured ratio must not be reported, or None when it may be.

    A ratio is refused when the machine was loaded at the start (another job shares the cores
    and slows both samplers unequally) or when the llama.cpp baseline is far from its known
    figure for this thread count (the 4.54× once recorded came from a 27.5 tok/s baseline on a
    machine that gives it ~91). Without a known figure for ``threads`` (another machine), or
    with completions shorter than :data:`KNOWN_MIN_TOKENS`, only the load is checked.

    Args:
        load_before: 1-minute load average when the run started (``os.getloadavg()[0]``).
        llamacpp_tok_s: the baseline's completion tokens/s; None: no baseline, nothing to refuse.
        threads: CPU threads both samplers used; None: a baseline without a known figure (the server).
        max_tokens: the completion cap of the run.

    Returns:
        One line saying what was wrong and what to do, or None.
    """
    if llamacpp_tok_s is None:
        return None
    if load_before >= MAX_LOAD:
        return (f"load average {load_before:.2f} at the start (must be below {MAX_LOAD:g}): another job shares the "
                "cores; run the benchmark alone")
    known = KNOWN_LLAMACPP_TOK_S.get(threads)
    if known is None or max_tokens < KNOWN_MIN_TOKENS:
        return None
    lo, hi = known
    if not lo * (1 - FAR) <= llamacpp_tok_s <= hi * (1 + FAR):
        return (f"llama.cpp baseline {llamacpp_tok_s:.1f} tok/s is far from its known {lo:g}–{hi:g} tok/s at {threads} "
                "threads: a measurement problem (threads, load, prompt re-evaluation) to find before any ratio")
    return None


class BaselineUnavailable(RuntimeError):
    """llama-cpp-python cannot be imported (the ``bench`` / ``test`` extra is not installed)."""


SERVER_MISSING = (
    "llama.cpp server baseline skipped: no llama-server binary (pass --llama-server PATH, or put llama.cpp's "
    "llama-server on PATH; llama-cpp-python does not ship one)"
)
SERVER_START_S = 120.0  # the server must answer /health within this many seconds of its start


class ServerUnavailable(RuntimeError):
    """The ``llama-server`` binary is missing, or did not start (its one-line reason)."""


def find_llama_server(path: str | os.PathLike | None) -> Path:
    """The ``llama-server`` binary to start: ``path`` when given, else ``llama-server`` on ``PATH``.

    Raises:
        ServerUnavailable: ``path`` is not an executable file, or none was given and none is on ``PATH``.
    """
    if path is None:
        found = shutil.which("llama-server")
        if found is None:
            raise ServerUnavailable(SERVER_MISSING)
        return Path(found)
    if not str(path).strip():
        raise ServerUnavailable("--llama-server: empty path; pass the llama-server binary's path")
    # absolute: a bare name ("llama-server", "./llama-server" becomes that) would be looked up on PATH by Popen
    p = Path(path).expanduser().absolute()
    if not (p.is_file() and os.access(p, os.X_OK)):
        raise ServerUnavailable(f"--llama-server {path}: not an executable file")
    return p


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def llama_server(binary: Path, gguf: Path, threads: int, slots: int, ctx_per_slot: int,
                 start_s: float = SERVER_START_S) -> Iterator[str]:
    """Run llama.cpp's ``llama-server`` on a free loopback port for the duration of the block; yields its ``/v1`` URL.

    The server gets ``slots`` parallel slots with continuous batching (``-np slots -cb``), one
    KV buffer shared by all slots (``-kvu``: 1.2–1.4× its throughput with separate per-slot
    buffers here, so the baseline runs at its best), a context of ``slots × ctx_per_slot``
    positions, ``threads`` CPU threads for decoding and prefill, and plain sampling by default
    (top-k / top-p / min-p / repetition penalty off, as the other two samplers), so its
    completions come from the same distribution.

    Args:
        binary: the ``llama-server`` executable.
        gguf: the model file.
        threads: CPU threads (``-t`` and ``-tb``).
        slots: parallel sequences decoded together (``-np``).
        ctx_per_slot: positions each slot may hold (longest prompt + max tokens, rounded up).
        start_s: seconds to wait for ``/health`` to answer 200.

    Raises:
        ServerUnavailable: the process exited or did not answer in time (its last output line says why).
    """
    port = _free_port()
    cmd = [str(binary), "-m", str(gguf), "--host", "127.0.0.1", "--port", str(port), "-t", str(threads),
           "-tb", str(threads), "-np", str(slots), "-c", str(slots * ctx_per_slot), "-cb", "-kvu", "--no-webui",
           "--top-k", "0", "--top-p", "1.0", "--min-p", "0.0", "--repeat-penalty", "1.0"]
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

        def last_line() -> str:
            log.seek(0)
            lines = [ln for ln in log.read().decode(errors="replace").splitlines() if ln.strip()]
            return lines[-1].strip()[:300] if lines else "no output"

        try:
            deadline = time.monotonic() + start_s
            while True:
                if proc.poll() is not None:
                    raise ServerUnavailable(f"llama-server exited with code {proc.returncode} at start: {last_line()}")
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                        if r.status == 200:
                            break
                except (urllib.error.URLError, OSError):
                    pass  # not listening yet, or loading the model (503)
                if time.monotonic() > deadline:
                    raise ServerUnavailable(f"llama-server did not answer /health within {start_s:g} s: {last_line()}")
                time.sleep(0.2)
            yield f"http://127.0.0.1:{port}/v1"
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@dataclass
class Throughput:
    """Completion tokens sampled in ``seconds`` of wall time."""

    tokens: int
    completions: int
    seconds: float

    @property
    def tok_s(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0


def bench_chats(n: int, seed: int = 0) -> list[list[dict[str, str]]]:
    """``n`` solver chats (system prompt + question) for train tasks of the default family."""
    from agents.roles.solver import solver_messages
    from arena.config import DEFAULT_FAMILY
    from arena.tasks.sources import load_tasks

    with contextlib.redirect_stdout(io.StringIO()):
        splits = load_tasks([DEFAULT_FAMILY], None, n, 1, seed)
    return [solver_messages(t.question) for t in splits.train[:n]]


def load_llama_cpp():
    """Import ``llama_cpp``; raises :class:`BaselineUnavailable` with the one-line fix when it is missing."""
    try:
        return importlib.import_module("llama_cpp")
    except Exception as e:  # noqa: BLE001 - ImportError, or a broken shared library
        raise BaselineUnavailable(BASELINE_MISSING) from e


def run_ours(policy, chats: Sequence[Sequence[dict[str, str]]], k: int, max_tokens: int, temperature: float,
             concurrency: int, seed: int = 0, count_tokens: Callable[[Any], int] | None = None) -> Throughput:
    """Sample k completions per chat through ``policy.sample`` from ``concurrency`` threads (as ``arena run`` does).

    ``count_tokens(completion)`` counts a completion's tokens; default ``len(completion.token_ids)``
    (backends that return no ids pass a tokenizer count).
    """
    count = count_tokens or (lambda o: len(o.token_ids))
    todo = list(enumerate(chats))
    lock = threading.Lock()
    counts = [0, 0]
    errors: list[BaseException] = []

    def worker() -> None:
        while True:
            with lock:
                if not todo or errors:
                    return
                i, chat = todo.pop(0)
            try:
                outs = policy.sample(chat, n=k, temperature=temperature, max_tokens=max_tokens, seed=seed + i)
            except BaseException as e:  # noqa: BLE001 - re-raised in the caller
                with lock:
                    errors.append(e)
                return
            tokens = sum(count(o) for o in outs)
            with lock:
                counts[0] += tokens
                counts[1] += len(outs)

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(max(1, concurrency))]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seconds = time.perf_counter() - t0
    if errors:
        raise errors[0]
    return Throughput(counts[0], counts[1], seconds)


def run_llama_cpp(llm, prompts: Sequence[str], k: int, max_tokens: int, temperature: float, seed: int = 0) -> Throughput:
    """k completions per prompt text, one at a time, with llama-cpp-python's ``create_completion``."""
    tokens = completions = 0
    t0 = time.perf_counter()
    for i, prompt in enumerate(prompts):
        for j in range(k):
            out = llm.create_completion(
                prompt, max_tokens=max_tokens, temperature=temperature, top_k=0, top_p=1.0, min_p=0.0,
                repeat_penalty=1.0, seed=(seed + i) * 1000 + j,
            )
            tokens += int(out["usage"]["completion_tokens"])
            completions += 1
    return Throughput(tokens, completions, time.perf_counter() - t0)


def bench_rollouts(
    prompts: int = DEFAULT_PROMPTS,
    k: int = DEFAULT_K,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    temperature: float = DEFAULT_TEMPERATURE,
    concurrency: int = 8,
    seed: int = 0,
    on_baseline_missing=None,
    threads: int | None = None,
    force: bool = False,
    llama_server_path: str | os.PathLike | None = None,
    on_server_missing=None,
) -> dict[str, Any]:
    """Measure (a) ours, (b) llama.cpp single-stream and (c) llama.cpp's server on the same prompts; return the figures.

    Args:
        prompts: number of distinct prompts P.
        k: completions per prompt (the group size).
        max_tokens: completion cap per completion, tokens.
        temperature: sampling temperature (> 0).
        concurrency: episode threads for ours (``arena run --concurrency``).
        seed: task draws and sampling seeds.
        on_baseline_missing: called with one line when llama-cpp-python is missing; the
            baseline is then skipped and ``llamacpp_tok_s`` / ``ratio`` are None.
        force: keep ``ratio`` even when :func:`ratio_refusal` refuses it (``ratio_refused`` still
            says why); otherwise a refused ratio is None.
        threads: CPU threads for every sampler (torch intra-op and llama.cpp); default torch's.
        llama_server_path: the ``llama-server`` binary for (c); default: ``llama-server`` on ``PATH``.
        on_server_missing: called with one line when no binary was given and none is on ``PATH``;
            (c) is then skipped and ``server_tok_s`` / ``ratio_server`` are None.

    Returns:
        ``{"ours_tok_s", "llamacpp_tok_s", "ratio", "server_tok_s", "ratio_server", "prompts", "k"}``
        plus the details (max_tokens, temperature, concurrency, token and completion counts,
        seconds, threads, slots, batch sizes, load average before the run), ``ratio_refused`` /
        ``ratio_server_refused`` (why a ratio is unreliable, or None), ``forced`` (a refused ratio
        reported anyway) and ``skipped`` (``{"llamacpp" | "server": why}`` for a baseline not run).

    Raises:
        ValueError: a count, temperature or thread number out of range; ``llama_server_path``
            not an executable file, or a server that did not start.
        agents.policy.PolicyError: the embedded model cannot be loaded.
    """
    for flag, value, hi in (("--prompts", prompts, 1024), ("--k", k, 256), ("--max-tokens", max_tokens, 4096),
                            ("--concurrency", concurrency, 64)):
        if not 1 <= value <= hi:
            raise ValueError(f"{flag} must be in [1, {hi}], got {value}")
    if not (math.isfinite(temperature) and 0 < temperature <= 5):
        raise ValueError(f"--temperature must be in (0, 5] (the benchmark samples), got {temperature}")
    if threads is not None and not 1 <= threads <= 1024:
        raise ValueError(f"--threads must be in [1, 1024], got {threads}")
    import torch

    if threads is not None:
        torch.set_num_threads(threads)

    from agents.backends.local import LocalPolicy, default_device, default_dtype
    from agents.backends.model_files import smollm2_gguf_path

    default_dtype(default_device())  # a bad $ARENA_CPU_DTYPE is one PolicyError before anything else is said
    skipped: dict[str, str] = {}
    server_binary: Path | None = None
    try:
        server_binary = find_llama_server(llama_server_path)
    except ServerUnavailable as e:
        if llama_server_path is not None:
            raise ValueError(str(e)) from None
        skipped["server"] = str(e)
        if on_server_missing is not None:
            on_server_missing(str(e))

    load_before = os.getloadavg()[0]
    try:
        llama_cpp = load_llama_cpp()
    except BaselineUnavailable as e:
        llama_cpp = None
        skipped["llamacpp"] = str(e)
        if on_baseline_missing is not None:
            on_baseline_missing(str(e))
    chats = bench_chats(prompts, seed)
    policy = LocalPolicy()
    policy.load()
    policy.sample(chats[0], n=1, temperature=temperature, max_tokens=4, seed=seed)  # warm-up
    policy.batches.clear()
    ours = run_ours(policy, chats, k, max_tokens, temperature, concurrency, seed)
    result: dict[str, Any] = {
        "ours_tok_s": round(ours.tok_s, 1),
        "llamacpp_tok_s": None,
        "ratio": None,
        "prompts": prompts,
        "k": k,
        "max_tokens": max_tokens,
        "temperature": temperature,
        "concurrency": concurrency,
        "ours": {"tokens": ours.tokens, "completions": ours.completions, "seconds": round(ours.seconds, 2),
                 "batches": list(policy.batches)},
        "torch_threads": torch.get_num_threads(),
        "ours_dtype": str(policy.dtype).replace("torch.", ""),  # $ARENA_CPU_DTYPE on the CPU
        "loadavg_1min_before": round(load_before, 2),
    }
    # What the baselines need of our model — prompt texts, their longest length, a token counter — then it is closed:
    # with our decoder thread alive (idle) in this process, llama.cpp single-stream ran at half its speed here
    # (49 vs 98 tok/s on the same prompts; bench/RESULTS.md), the measurement bug behind its "far from known" figures.
    texts = [policy.prompt_text(c) for c in chats]
    longest_prompt = max(len(policy.encode(t)) for t in texts)
    tokenizer = policy.tokenizer
    policy.close()
    del policy
    gc.collect()
    if llama_cpp is not None:
        threads = torch.get_num_threads()
        with contextlib.redirect_stderr(io.StringIO()):
            llm = llama_cpp.Llama(model_path=str(smollm2_gguf_path()), n_ctx=2048, n_threads=threads,
                                  n_threads_batch=threads, verbose=False, seed=seed)
        llm.create_completion(texts[0], max_tokens=4, temperature=temperature)  # warm-up
        try:
            base = run_llama_cpp(llm, texts, k, max_tokens, temperature, seed)
        finally:
            llm.close()  # free the model now, not in a destructor at interpreter exit
        result["llamacpp_tok_s"] = round(base.tok_s, 1)
        result["ratio"] = round(ours.tok_s / base.tok_s, 2) if base.tok_s > 0 else None
        result["llamacpp"] = {"tokens": base.tokens, "completions": base.completions, "seconds": round(base.seconds, 2),
                              "threads": threads}
    result["server_tok_s"] = result["ratio_server"] = None
    if server_binary is not None:
        server = run_server(server_binary, chats, k, max_tokens, temperature, concurrency, seed, torch.get_num_threads(),
                            longest_prompt, lambda text: len(tokenizer(text, add_special_tokens=False)["input_ids"]))
        result["server_tok_s"] = round(server.tok_s, 1)
        result["ratio_server"] = round(ours.tok_s / server.tok_s, 2) if server.tok_s > 0 else None
        result["server"] = {"tokens": server.tokens, "completions": server.completions,
                            "seconds": round(server.seconds, 2), "threads": torch.get_num_threads(),
                            "slots": concurrency * k, "binary": str(server_binary)}
    result["loadavg_1min_after"] = round(os.getloadavg()[0], 2)
    refused = ratio_refusal(load_before, result["llamacpp_tok_s"], torch.get_num_threads(), max_tokens)
    result["ratio_refused"] = refused
    if refused is not None and not force:
        result["ratio"] = None
    # the server has no known figure to check: only the load can make its ratio unreliable
    server_refused = ratio_refusal(load_before, result["server_tok_s"], None, max_tokens)
    result["ratio_server_refused"] = server_refused
    if server_refused is not None and not force:
        result["ratio_server"] = None
    result["forced"] = bool(force and (refused or server_refused))  # a ratio reported although refused: unreliable
    result["skipped"] = skipped  # baselines not run: {"llamacpp" | "server": why}
    return result


def run_server(binary: Path, chats: Sequence[Sequence[dict[str, str]]], k: int, max_tokens: int, temperature: float,
               concurrency: int, seed: int, threads: int, longest_prompt: int,
               count_tokens: Callable[[str], int]) -> Throughput:
    """(c): llama.cpp's server with ``concurrency × k`` slots, sampled through our OpenAI backend like (a).

    Each slot holds ``longest_prompt + max_tokens`` positions (rounded up to 64); ``count_tokens``
    counts a completion text's tokens with the model's tokenizer (the chat API returns no ids).

    Raises:
        ValueError: the server did not start (its one-line reason).
        agents.policy.EndpointFault: a reply stayed faulty after the backend's retries.
    """
    from agents.backends.model_files import smollm2_gguf_path
    from agents.backends.openai_backend import OpenAIPolicy

    slots = concurrency * k
    ctx_per_slot = -(-(longest_prompt + max_tokens + 8) // 64) * 64
    try:
        with llama_server(binary, smollm2_gguf_path(), threads, slots, ctx_per_slot) as base_url:
            client = OpenAIPolicy("smollm2", base_url=base_url, api_key="none", max_concurrency=slots)
            client.sample(chats[0], n=1, temperature=temperature, max_tokens=4, seed=seed)  # warm-up
            return run_ours(client, chats, k, max_tokens, temperature, concurrency, seed,
                            count_tokens=lambda o: count_tokens(o.text) if o.text else 0)
    except ServerUnavailable as e:
        raise ValueError(str(e)) from None
