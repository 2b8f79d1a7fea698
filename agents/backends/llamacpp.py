"""A GGUF model run in-process through llama-cpp-python, for the roles that only generate text.

The teacher, the rubric judge and the task proposer never need log-probs of arbitrary text or
LoRA training, so they can run a larger quantised model than the solver: the embedded teacher
(Qwen2.5-Coder-1.5B-Instruct, Q4_K_M, :mod:`agents.backends.teacher_files`) or any GGUF file
(role spec ``llamacpp:PATH``). In process there is no HTTP hop, no request timeout and no
one-slot server queue: calls from concurrent episodes take turns on one llama.cpp context.

Structured replies: :meth:`LlamaCppPolicy.sample` takes a JSON schema (``json_schema=``) and
decodes under the grammar llama.cpp derives from it (``LlamaGrammar.from_json_schema``), so a
small teacher's reply is JSON of the right shape by construction; the caller still validates it.
Library: llama-cpp-python (``llama_cpp.Llama``), chat template from the GGUF's metadata.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from agents.backends.registry import LLAMACPP_CAPABILITIES
from agents.policy import BasePolicy, Completion, EndpointFault, LogprobsUnavailable, Message, PolicyError, RoleStats

DEFAULT_N_CTX = 4096  # context window of the llama.cpp context, tokens (reflection prompts are ~1–2k)
# The longest string bound a grammar keeps. llama.cpp writes ``maxLength: N`` as N nested optional rules and
# refuses a grammar past its repetition limit (2,000); llama-cpp-python then crashed the whole process with
# SIGSEGV on the first token (the proposer's 4,000-character justification, `arena run --curriculum frontier`,
# session 24). Longer bounds are left to validation after the reply and to ``max_tokens``.
GRAMMAR_MAX_LENGTH = 500


def grammar_schema(schema: object) -> object:
    """``schema`` with every ``maxLength`` above :data:`GRAMMAR_MAX_LENGTH` removed, for llama.cpp's grammar.

    ``minLength`` above it is lowered to it (a grammar cannot require what it may not repeat). The
    caller's schema is not changed; the reply is still validated against the full model.
    """
    if isinstance(schema, dict):
        out = {k: grammar_schema(v) for k, v in schema.items()}
        if isinstance(out.get("maxLength"), int) and out["maxLength"] > GRAMMAR_MAX_LENGTH:
            del out["maxLength"]
        if isinstance(out.get("minLength"), int) and out["minLength"] > GRAMMAR_MAX_LENGTH:
            out["minLength"] = GRAMMAR_MAX_LENGTH
        return out
    if isinstance(schema, list):
        return [grammar_schema(v) for v in schema]
    return schema


THREADS_PER_CPU_MAX = 4  # ARENA_TEACHER_THREADS above this many per usable CPU is refused (llama.cpp aborts on 100,000)


def usable_cpus() -> int:
    """The CPUs this process may use (its affinity mask on Linux, else ``os.cpu_count()``), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def default_threads() -> int:
    """llama.cpp threads: ``ARENA_TEACHER_THREADS`` if set, else the CPUs this process may use.

    Raises:
        PolicyError: ``ARENA_TEACHER_THREADS`` is not a whole number in [1, 4 × the usable CPUs]
            (llama.cpp allocates per thread: a huge count ends the process with std::bad_alloc).
    """
    env = os.environ.get("ARENA_TEACHER_THREADS")
    cpus = usable_cpus()
    if env:
        try:
            n = int(env)
        except ValueError:
            raise PolicyError(f"ARENA_TEACHER_THREADS must be a whole number of threads, got {env!r}") from None
        top = THREADS_PER_CPU_MAX * cpus
        if not 1 <= n <= top:
            raise PolicyError(f"ARENA_TEACHER_THREADS must be in [1, {top}] ({THREADS_PER_CPU_MAX} per usable CPU, "
                              f"{cpus} here), got {n}")
        return n
    return cpus


class LlamaCppPolicy(BasePolicy):
    """A chat model from a GGUF file, run in-process by llama-cpp-python (generation only).

    Args:
        path: the GGUF file.
        name: the policy's name in stored rows (default ``llamacpp:<file name>``).
        n_ctx: context window, tokens; a reply is capped at what the prompt leaves of it, and a
            prompt that leaves fewer than 16 tokens is refused (:class:`EndpointFault`, kind ``oversized``).
        n_threads: llama.cpp threads (default :func:`default_threads`).

    The model loads lazily on first use (:meth:`load`). Thread-safe: calls take turns on one context.
    :meth:`logprobs` raises :class:`LogprobsUnavailable`: this backend does not score given text, and its
    completions carry no log-probs. Capabilities: sampling, a prefilled reply (``prefill=``) and
    grammar-constrained decoding (``json_schema=``).

    Raises:
        PolicyError: (from :meth:`load`) the file is missing, not a GGUF, truncated, or llama.cpp
            cannot load it; llama-cpp-python is not installed.
    """

    capabilities = LLAMACPP_CAPABILITIES  # agents.backends.registry: known there without importing this module

    def __init__(self, path: Path, name: str | None = None, n_ctx: int = DEFAULT_N_CTX, n_threads: int | None = None) -> None:
        self.path = Path(path)
        self.name = name or f"llamacpp:{self.path.name}"
        self.context_window = n_ctx
        self.n_threads = n_threads or default_threads()
        self.stats = RoleStats()
        self._llm = None
        self._formatter = None
        self._lock = threading.Lock()
        self._grammars: dict[str, object] = {}
        self.load_seconds: float | None = None

    # ------------------------------------------------------------------ loading
    def check(self) -> None:
        """Check the file is a whole GGUF before any work (cheap: header and tensor index only).

        Raises:
            PolicyError: one line naming the file and what is wrong with it.
        """
        from agents.backends.teacher_files import TeacherFilesError, check_gguf

        try:
            check_gguf(self.path)
        except TeacherFilesError as e:
            raise PolicyError(str(e)) from None

    def load(self) -> None:
        """Load the model (idempotent).

        Raises:
            PolicyError: see the class docstring.
        """
        with self._lock:
            self._load_locked()

    def _load_locked(self) -> None:
        if self._llm is not None:
            return
        self.check()
        try:
            import llama_cpp
            from llama_cpp.llama_chat_format import Jinja2ChatFormatter
        except ImportError:
            raise PolicyError("the llamacpp backend needs llama-cpp-python: pip install 'llama-cpp-python>=0.3'") from None
        t0 = time.perf_counter()
        try:
            llm = llama_cpp.Llama(model_path=str(self.path), n_ctx=self.context_window, n_threads=self.n_threads,
                                  n_threads_batch=self.n_threads, n_batch=512, verbose=False)
        except (ValueError, RuntimeError, OSError) as e:
            raise PolicyError(f"llama.cpp could not load {self.path}: {str(e)[:200]}") from None
        template = llm.metadata.get("tokenizer.chat_template")
        if not template:
            raise PolicyError(f"{self.path} has no chat template (tokenizer.chat_template) in its metadata; "
                              "the llamacpp backend needs an instruct model")
        eos = llm._model.token_get_text(llm.token_eos())
        bos = llm._model.token_get_text(llm.token_bos()) if llm.token_bos() >= 0 else ""
        self._formatter = Jinja2ChatFormatter(template=template, eos_token=eos, bos_token=bos)
        self._eos_text = eos
        self._llm = llm
        self.load_seconds = time.perf_counter() - t0

    def close(self) -> None:
        """Free the model (the next call loads it again)."""
        with self._lock:
            if self._llm is not None:
                self._llm.close()
            self._llm = None
            self._grammars.clear()

    # ------------------------------------------------------------------ helpers
    def prompt_text(self, messages: Sequence[Message], prefill: str = "") -> str:
        """The chat rendered by the GGUF's own template, with the assistant turn opened and ``prefill`` appended."""
        self.load()
        return self._formatter(messages=[dict(m) for m in messages]).prompt + prefill

    def count_tokens(self, text: str) -> int:
        """Tokens ``text`` takes in this model's tokenizer."""
        self.load()
        with self._lock:
            return len(self._llm.tokenize(text.encode("utf-8"), add_bos=False, special=False))

    def logprobs(self, messages: Sequence[Message], completion: str) -> list[float]:
        raise LogprobsUnavailable(f"{self.name} generates only; score completions with the local backend")

    def _grammar(self, schema: dict):
        key = json.dumps(schema, sort_keys=True)
        if key not in self._grammars:
            from llama_cpp import LlamaGrammar

            # the schema's own key order is the order the reply must follow (analysis before lessons)
            self._grammars[key] = LlamaGrammar.from_json_schema(json.dumps(grammar_schema(schema)), verbose=False)
        return self._grammars[key]

    # ------------------------------------------------------------------ sampling
    def sample(
        self,
        messages: Sequence[Message],
        n: int = 1,
        temperature: float = 0.7,
        max_tokens: int = 256,
        stop: Sequence[str] | None = None,
        seed: int | None = None,
        prefill: str = "",
        json_schema: dict | None = None,
    ) -> list[Completion]:
        """Sample ``n`` completions of one chat, one after another on the shared context.

        Args:
            messages, n, temperature, max_tokens, stop, seed: as :meth:`agents.policy.Policy.sample`
                (temperature 0 is greedy; completion ``i`` uses ``seed + i``).
            prefill: text the assistant turn starts with (not part of the returned text); ignored
                with ``json_schema``, whose grammar starts at the reply's first character.
            json_schema: a JSON schema the reply must match (grammar-constrained decoding).

        Returns:
            ``n`` :class:`Completion` objects (token ids, no log-probs).

        Raises:
            PolicyError: the model cannot be loaded.
            EndpointFault: (kind ``oversized``) the prompt alone does not fit the context window;
                it costs the one reflection, hint or grade that asked.
        """
        self.load()
        if json_schema is not None:
            prefill = ""
        prompt = self.prompt_text(messages, prefill)
        out: list[Completion] = []
        with self._lock:
            tokens = self._llm.tokenize(prompt.encode("utf-8"), add_bos=False, special=True)
            room = self.context_window - len(tokens)
            if room < 16:
                raise EndpointFault(f"{self.name}: the prompt takes {len(tokens)} tokens of the {self.context_window}-token "
                                    "context; no room to reply", "oversized")
            grammar = self._grammar(json_schema) if json_schema is not None else None
            for i in range(n):
                self.stats.begin()
                res = self._llm.create_completion(
                    prompt=tokens, max_tokens=min(max_tokens, room), temperature=max(0.0, temperature),
                    top_p=1.0 if temperature <= 0 else 0.95, top_k=0 if temperature > 0 else 1, min_p=0.0,
                    repeat_penalty=1.0, stop=list(stop or []) or None, grammar=grammar,
                    seed=None if seed is None else (seed + i) % 2**31,
                )
                choice = res["choices"][0]
                usage = res.get("usage") or {}
                text = choice.get("text") or ""
                ids = self._llm.tokenize(text.encode("utf-8"), add_bos=False, special=True) if text else []
                self.stats.end(int(usage.get("prompt_tokens", len(tokens))), int(usage.get("completion_tokens", len(ids))))
                out.append(Completion(
                    text=text.replace(self._eos_text, "").strip() if json_schema is None else text.strip(),
                    token_ids=ids, logprobs=None, finish_reason="length" if choice.get("finish_reason") == "length" else "stop",
                    prompt_tokens=len(tokens),
                ))
        return out
