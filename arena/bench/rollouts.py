"""`arena bench rollouts`: rollout throughput of the local backend against llama.cpp, in one run.

The same P prompts (solver chats for tasks of the default family) × k completions at a fixed
max tokens and temperature go through

(a) **ours**: :class:`agents.backends.local.LocalPolicy` exactly as ``arena run`` uses it — ``concurrency``
    episode threads, each sampling one group of k with ``sample(chat, n=k)``; the policy decodes
    the overlapping requests together (batched, KV-cached, grouped by prompt length);
(b) **llama.cpp**: ``llama-cpp-python`` on the same GGUF file, one completion at a time
    (single stream), with the same prompt text (the chat template applied by our tokenizer),
    the same temperature and the same plain sampling (top-k / top-p / min-p / repetition
    penalty off).

Both count completion tokens the same way (generated tokens, end-of-turn excluded) and time
sampling only (model loading excluded). The figure is completion tokens per second of wall
time and the ratio ours / llama.cpp.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import math
import os
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
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
MAX_LOAD = 1.0  # the 1-minute load average a run must start below (README: "uptime below 1 before you start")
KNOWN_MIN_TOKENS = 64  # the known figure is for completions this long or longer (short ones are prompt-bound)


def ratio_refusal(load_before: float, llamacpp_tok_s: float | None, threads: int, max_tokens: int) -> str | None:
    """Why a measured ratio must not be reported, or None when it may be.

    A ratio is refused when the machine was loaded at the start (another job shares the cores
    and slows both samplers unequally) or when the llama.cpp baseline is far from its known
    figure for this thread count (the 4.54× once recorded came from a 27.5 tok/s baseline on a
    machine that gives it ~91). Without a known figure for ``threads`` (another machine), or
    with completions shorter than :data:`KNOWN_MIN_TOKENS`, only the load is checked.

    Args:
        load_before: 1-minute load average when the run started (``os.getloadavg()[0]``).
        llamacpp_tok_s: the baseline's completion tokens/s; None: no baseline, nothing to refuse.
        threads: CPU threads both samplers used.
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
             concurrency: int, seed: int = 0) -> Throughput:
    """Sample k completions per chat through ``policy.sample`` from ``concurrency`` threads (as ``arena run`` does)."""
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
            with lock:
                counts[0] += sum(len(o.token_ids) for o in outs)
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
    concurrency: int = 4,
    seed: int = 0,
    on_baseline_missing=None,
    threads: int | None = None,
    force: bool = False,
) -> dict[str, Any]:
    """Measure (a) ours and (b) llama.cpp single-stream on the same prompts; return the figures.

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
        threads: CPU threads for both samplers (torch intra-op and llama.cpp); default torch's.

    Returns:
        ``{"ours_tok_s", "llamacpp_tok_s", "ratio", "prompts", "k"}`` plus the details
        (max_tokens, temperature, concurrency, token and completion counts, seconds, threads,
        batch sizes, load average before the run).

    Raises:
        ValueError: a count, temperature or thread number out of range.
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

    from agents.backends.local import LocalPolicy
    from agents.backends.model_files import smollm2_gguf_path

    load_before = os.getloadavg()[0]
    try:
        llama_cpp = load_llama_cpp()
    except BaselineUnavailable as e:
        llama_cpp = None
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
    if llama_cpp is not None:
        texts = [policy.prompt_text(c) for c in chats]
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
    result["loadavg_1min_after"] = round(os.getloadavg()[0], 2)
    refused = ratio_refusal(load_before, result["llamacpp_tok_s"], torch.get_num_threads(), max_tokens)
    result["ratio_refused"] = refused
    if refused is not None and not force:
        result["ratio"] = None
    return result
