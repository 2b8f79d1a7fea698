"""Batched decoding for the local backend: many rollouts, of many prompts, in one KV-cached loop.

The local backend samples every request it has — the k rollouts of a group, the groups of
episodes running concurrently, a teacher's reply — as *rows* of one batched decoding loop:

* rows are sorted by prompt length and packed into batches (:func:`plan_batches`) so that left
  padding stays short and the KV cache stays inside a token budget;
* one prefill forward over the left-padded prompts fills a KV cache of preallocated slabs (a
  transformers ``Cache`` whose layers write in place instead of concatenating every step);
  then one forward per step decodes one token for every unfinished row;
* every row has its own temperature (0 = greedy), max tokens, stop strings and random stream:
  a ``torch.Generator`` seeded from the request's seed and the row's index draws one uniform
  number per step, and the token is picked by inverse-CDF sampling from the row's own softmax.
  So a row's tokens depend on its prompt, its settings and its seed only — not on which other
  rows share its batch — up to floating-point differences between batched and unbatched matmuls
  (see :func:`decode_rows`);
* finished rows (end of turn, pad, a stop string, max tokens) leave the batch: their entries
  are dropped from the KV cache, so long rows do not make short ones pay for their steps;
* new rows join the running batch between steps (:meth:`DecodeEngine.admit`): prefilled on
  their own, then stacked under the running rows — continuous batching as in Orca (Yu et al.,
  OSDI 2022) and vLLM, without paged attention (rows share one padded width), on top of
  transformers' model forward and cache classes.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

MAX_BATCH_ROWS = 64  # rows decoded together at most
MAX_BATCH_TOKENS = 16_384  # rows × (longest prompt + max new tokens) per batch: bounds KV-cache memory
PAD_SLACK_TOKENS = 32  # a batch may left-pad its rows by this many tokens …
PAD_SLACK_RATIO = 1.5  # … or to this multiple of its shortest prompt, whichever is larger


def row_seed(seed: int, index: int) -> int:
    """The random-stream seed of row ``index`` of a request sampled with ``seed`` (63-bit, stable across runs)."""
    return int.from_bytes(hashlib.sha256(f"{seed}:{index}".encode()).digest()[:8], "little") >> 1


@dataclass
class DecodeRow:
    """One completion to decode.

    Attributes:
        prompt_ids: prompt token ids (length P ≥ 1), chat template already applied.
        temperature: 0 → greedy (argmax); > 0 → ancestral sampling from softmax(logits / T)
            (no top-k / top-p).
        max_tokens: completion tokens at most (≥ 1).
        stop: strings that end the row once the decoded completion contains one.
        seed: seed of the row's own ``torch.Generator`` (see :func:`row_seed`); unused when greedy.
    """

    prompt_ids: list[int]
    temperature: float
    max_tokens: int
    stop: tuple[str, ...] = ()
    seed: int = 0


@dataclass
class DecodedRow:
    """What :func:`decode_rows` produced for one row.

    Attributes:
        token_ids: completion ids (length T ≤ max_tokens), the end-of-turn / pad token excluded;
            a stop string is *not* cut here (the caller trims text and ids).
        logprobs: length T, natural log, temperature-1 model log-probs of each sampled token
            under the row's context (π_old for later importance ratios).
        ended: True when the row produced the end-of-turn or pad token.
    """

    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    ended: bool = False


def plan_batches(
    lengths: Sequence[int],
    max_new: Sequence[int],
    max_rows: int = MAX_BATCH_ROWS,
    max_tokens: int = MAX_BATCH_TOKENS,
) -> list[list[int]]:
    """Group rows into batches by prompt length.

    Rows are sorted by prompt length (stable, so equal lengths keep their order) and packed
    greedily: a batch takes the next row while it has fewer than ``max_rows`` rows, its KV
    footprint ``rows × (longest prompt + largest max_new)`` stays within ``max_tokens``, and the
    longest prompt is at most ``max(shortest + PAD_SLACK_TOKENS, PAD_SLACK_RATIO × shortest)``
    tokens (left padding stays short). A single row always forms a batch, whatever its size.

    Args:
        lengths: prompt length of each row, tokens.
        max_new: max new tokens of each row.
        max_rows: rows per batch at most.
        max_tokens: token budget per batch (see above).

    Returns:
        Batches as lists of row indices into ``lengths``; every index appears exactly once.
    """
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    batches: list[list[int]] = []
    cur: list[int] = []
    for i in order:
        if cur:
            shortest = lengths[cur[0]]
            longest = max(lengths[i], lengths[cur[-1]])
            new = max(max(max_new[j] for j in cur), max_new[i])
            fits = (
                len(cur) < max_rows
                and (len(cur) + 1) * (longest + new) <= max_tokens
                and longest <= max(shortest + PAD_SLACK_TOKENS, PAD_SLACK_RATIO * shortest)
            )
            if not fits:
                batches.append(cur)
                cur = []
        cur.append(i)
    if cur:
        batches.append(cur)
    return batches


def _cache_kwarg(model) -> str:
    """The forward argument that takes the KV cache: ``cache`` (transformers ≥ 5.x) or ``past_key_values``."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model  # peft-wrapped models
    return "cache" if "cache" in inspect.signature(base.forward).parameters else "past_key_values"


@functools.lru_cache(maxsize=1)
def _slab_layer_class():
    """A transformers ``DynamicLayer`` that writes into a preallocated buffer instead of ``torch.cat``.

    ``DynamicLayer.update`` concatenates the whole cache with each new token, copying
    (B, H, S, D) keys and values of every layer at every step; with 64 rows that copy costs as
    much as the matmuls on a CPU. A slab of capacity S + max new tokens is written in place;
    ``keys`` / ``values`` are views of its filled part.
    """
    from transformers.cache_utils import DynamicLayer

    class SlabLayer(DynamicLayer):
        def __init__(self, capacity: int) -> None:
            super().__init__()
            self.capacity = capacity
            self.length = 0
            self.k_buf: torch.Tensor | None = None
            self.v_buf: torch.Tensor | None = None

        def _views(self) -> None:
            self.keys = self.k_buf[:, :, : self.length]
            self.values = self.v_buf[:, :, : self.length]

        def update(self, key_states, value_states, *args, **kwargs):
            B, H, q, D = key_states.shape
            if self.k_buf is None:
                self.k_buf = key_states.new_zeros((B, H, max(self.capacity, q), D))
                self.v_buf = value_states.new_zeros((B, H, max(self.capacity, q), D))
                self.device, self.is_initialized = key_states.device, True
            if self.length + q > self.k_buf.shape[2]:  # past capacity (not expected): grow
                grow = self.length + q - self.k_buf.shape[2]
                self.k_buf = torch.nn.functional.pad(self.k_buf, (0, 0, 0, grow))
                self.v_buf = torch.nn.functional.pad(self.v_buf, (0, 0, 0, grow))
            self.k_buf[:, :, self.length : self.length + q] = key_states
            self.v_buf[:, :, self.length : self.length + q] = value_states
            self.length += q
            self._views()
            return self.keys, self.values

        def get_seq_length(self) -> int:
            return self.length

        def select_rows(self, idx: torch.Tensor) -> None:
            self.k_buf, self.v_buf = self.k_buf[idx], self.v_buf[idx]
            self._views()

        def trim_left(self, cols: int) -> None:
            self.k_buf, self.v_buf = self.k_buf[:, :, cols:], self.v_buf[:, :, cols:]
            self.length -= cols
            self._views()

        def merge(self, other: "SlabLayer", capacity: int) -> None:
            """Stack ``other``'s rows under this layer's, both right-aligned at the longer length."""
            S = max(self.length, other.length)
            B1, B2 = self.k_buf.shape[0], other.k_buf.shape[0]
            H, D = self.k_buf.shape[1], self.k_buf.shape[3]
            k = self.k_buf.new_zeros((B1 + B2, H, max(capacity, S), D))
            v = self.v_buf.new_zeros((B1 + B2, H, max(capacity, S), D))
            k[:B1, :, S - self.length : S] = self.k_buf[:, :, : self.length]
            v[:B1, :, S - self.length : S] = self.v_buf[:, :, : self.length]
            k[B1:, :, S - other.length : S] = other.k_buf[:, :, : other.length]
            v[B1:, :, S - other.length : S] = other.v_buf[:, :, : other.length]
            self.k_buf, self.v_buf, self.length = k, v, S
            self._views()

    return SlabLayer


def new_cache(n_layers: int, capacity: int):
    """A transformers ``Cache`` of ``n_layers`` slab layers holding up to ``capacity`` positions."""
    from transformers.cache_utils import Cache

    layer = _slab_layer_class()
    return Cache(layers=[layer(capacity) for _ in range(n_layers)])


def _pick_tokens(logits: torch.Tensor, temps: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
    """Next token per row: argmax where temperature is 0, else inverse-CDF sampling with ``uniforms``.

    Args:
        logits: (B, V) float32 next-token logits.
        temps: (B,) float32 temperatures (0 = greedy).
        uniforms: (B,) float32 in [0, 1), one draw from each row's own generator.

    Returns:
        (B,) int64 token ids.
    """
    sampled_rows = temps > 0
    if not bool(sampled_rows.any()):
        return logits.argmax(dim=-1)
    t = torch.where(sampled_rows, temps, torch.ones_like(temps))
    probs = torch.softmax(logits / t.unsqueeze(-1), dim=-1)  # (B, V)
    cdf = probs.cumsum(dim=-1)  # (B, V), last entry ≈ 1
    target = (uniforms * cdf[:, -1]).unsqueeze(-1)  # (B, 1) in [0, total)
    # first index whose cdf exceeds the target: token i with probability probs[i]; zero-probability tokens never win
    sampled = torch.searchsorted(cdf, target, right=True).squeeze(-1).clamp(max=logits.shape[-1] - 1)
    if bool(sampled_rows.all()):
        return sampled
    return torch.where(sampled_rows, sampled, logits.argmax(dim=-1))


class DecodeEngine:
    """The running batch of a continuous-batching decoder: rows join (:meth:`admit`) and leave (:meth:`step`).

    Args:
        model: a transformers causal LM (e.g. ``LlamaForCausalLM``, optionally peft-wrapped).
        decode_text: token ids → text (special tokens skipped); checks stop strings.
        eos_id: end-of-turn token id (``<|im_end|>`` for SmolLM2): ends a row, not returned.
        pad_id: pad token id: fills the left padding; also ends a row if ever produced.
        device: where the model lives.

    Layout: rows are left-padded to a common length S (attention mask 0 on padding, explicit
    position ids per row) in one KV cache of preallocated slabs. New rows are prefilled on
    their own, then stacked under the running rows right-aligned at the longer length, so
    decoding continues for all of them in one forward per step. Not thread-safe: one driver.
    """

    def __init__(self, model, decode_text: Callable[[list[int]], str], eos_id: int, pad_id: int,
                 device: str | torch.device = "cpu") -> None:
        self.model, self.decode_text, self.eos_id, self.pad_id, self.device = model, decode_text, eos_id, pad_id, device
        self.n_layers = int(model.config.num_hidden_layers)
        self.cache_kw = _cache_kwarg(model)
        self.rows: list[DecodeRow] = []  # per batch position
        self.outs: list[DecodedRow] = []
        self.tags: list[object] = []  # caller's id of each row
        self.gens: list[torch.Generator | None] = []
        self.cache = None
        self.attn: torch.Tensor | None = None  # (b, S) 1 = real token
        self.positions: torch.Tensor | None = None  # (b,) position id of each row's last token
        self.logits: torch.Tensor | None = None  # (b, V) float32 next-token logits

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def width(self) -> int:
        """Positions held per row (S): the longest row's prompt + generated tokens, plus padding."""
        return 0 if self.attn is None else int(self.attn.shape[1])

    def footprint(self, extra: Sequence[DecodeRow] = ()) -> int:
        """KV positions (rows × (S + most tokens still to come)) if ``extra`` rows joined now."""
        rows = list(self.rows) + list(extra)
        if not rows:
            return 0
        S = max([self.width] + [len(r.prompt_ids) for r in extra])
        left = [r.max_tokens - len(o.token_ids) for r, o in zip(self.rows, self.outs)] + [r.max_tokens for r in extra]
        return len(rows) * (S + max(left))

    @torch.inference_mode()
    def admit(self, rows: Sequence[DecodeRow], tags: Sequence[object] | None = None) -> None:
        """Prefill ``rows`` (one left-padded forward) and add them to the running batch.

        Raises:
            ValueError: a row with no prompt tokens or ``max_tokens < 1``.
        """
        if not rows:
            return
        for r in rows:
            if not r.prompt_ids:
                raise ValueError("every row needs at least one prompt token")
            if r.max_tokens < 1:
                raise ValueError(f"max_tokens must be ≥ 1, got {r.max_tokens}")
        B, P = len(rows), max(len(r.prompt_ids) for r in rows)
        input_ids = torch.full((B, P), self.pad_id, dtype=torch.long)
        attn = torch.zeros((B, P), dtype=torch.long)
        for b, r in enumerate(rows):
            input_ids[b, P - len(r.prompt_ids) :] = torch.tensor(r.prompt_ids, dtype=torch.long)
            attn[b, P - len(r.prompt_ids) :] = 1
        position_ids = (attn.cumsum(-1) - 1).clamp(min=0)  # (B, P): 0.. on real tokens, 0 on padding
        input_ids, attn, position_ids = input_ids.to(self.device), attn.to(self.device), position_ids.to(self.device)
        capacity = P + max(r.max_tokens for r in rows)
        cache = new_cache(self.n_layers, capacity)
        logits = self.model(
            input_ids=input_ids, attention_mask=attn, position_ids=position_ids, use_cache=True, logits_to_keep=1,
            **{self.cache_kw: cache},
        ).logits[:, -1, :].float()  # (B, V)
        gens = [torch.Generator().manual_seed(int(r.seed)) if r.temperature > 0 else None for r in rows]
        if self.cache is None:
            self.cache, self.attn, self.positions, self.logits = cache, attn, position_ids[:, -1], logits
        else:
            S = max(self.width, P)
            to_come = max([r.max_tokens - len(o.token_ids) for r, o in zip(self.rows, self.outs)] + [r.max_tokens for r in rows])
            for mine, theirs in zip(self.cache.layers, cache.layers):
                mine.merge(theirs, S + to_come)
            pad = lambda m, w: torch.nn.functional.pad(m, (w - m.shape[1], 0))  # noqa: E731 - left-pad a mask to width w
            self.attn = torch.cat([pad(self.attn, S), pad(attn, S)], dim=0)
            self.positions = torch.cat([self.positions, position_ids[:, -1]])
            self.logits = torch.cat([self.logits, logits], dim=0)
        self.rows += list(rows)
        self.outs += [DecodedRow() for _ in rows]
        self.tags += list(tags) if tags is not None else [None] * B
        self.gens += gens

    @torch.inference_mode()
    def step(self) -> list[tuple[object, DecodeRow, DecodedRow]]:
        """Pick one token for every row, retire finished rows, run the forward for the rest.

        Returns:
            ``(tag, row, decoded)`` of each row that finished at this step.
        """
        if not self.rows:
            return []
        logits = self.logits
        temps = torch.tensor([max(0.0, float(r.temperature)) for r in self.rows], dtype=torch.float32, device=logits.device)
        uniforms = torch.tensor(
            [float(torch.rand(1, generator=g)) if g is not None else 0.0 for g in self.gens], dtype=torch.float32
        ).to(logits.device)
        tokens = _pick_tokens(logits, temps, uniforms)  # (b,)
        logp = torch.log_softmax(logits, dim=-1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1)  # (b,) temperature 1
        tokens_l, logp_l = tokens.tolist(), logp.tolist()
        keep: list[int] = []
        done: list[tuple[object, DecodeRow, DecodedRow]] = []
        for pos, (r, o) in enumerate(zip(self.rows, self.outs)):
            tok = tokens_l[pos]
            finished = False
            if tok == self.eos_id or tok == self.pad_id:
                o.ended = finished = True
            else:
                o.token_ids.append(tok)
                o.logprobs.append(logp_l[pos])
                if len(o.token_ids) >= r.max_tokens:
                    finished = True
                elif r.stop:
                    text = self.decode_text(o.token_ids)
                    finished = any(s and s in text for s in r.stop)
            if finished:
                done.append((self.tags[pos], r, o))
            else:
                keep.append(pos)
        if not keep:
            self.__init__(self.model, self.decode_text, self.eos_id, self.pad_id, self.device)  # empty: free the cache
            return done
        if len(keep) < len(self.rows):
            idx = torch.tensor(keep, dtype=torch.long, device=logits.device)
            for layer in self.cache.layers:
                layer.select_rows(idx)
            self.attn, self.positions, tokens = self.attn[idx], self.positions[idx], tokens[idx]
            self.rows = [self.rows[p] for p in keep]
            self.outs = [self.outs[p] for p in keep]
            self.tags = [self.tags[p] for p in keep]
            self.gens = [self.gens[p] for p in keep]
            lead = int((self.attn.sum(0) == 0).long().cumprod(0).sum())  # columns that are padding in every row
            if lead:
                for layer in self.cache.layers:
                    layer.trim_left(lead)
                self.attn = self.attn[:, lead:]
        self.attn = torch.cat([self.attn, self.attn.new_ones((len(self.rows), 1))], dim=1)
        self.positions = self.positions + 1
        self.logits = self.model(
            input_ids=tokens.unsqueeze(-1), attention_mask=self.attn, position_ids=self.positions.unsqueeze(-1),
            use_cache=True, **{self.cache_kw: self.cache},
        ).logits[:, -1, :].float()
        return done


def decode_rows(
    model,
    decode_text: Callable[[list[int]], str],
    rows: Sequence[DecodeRow],
    eos_id: int,
    pad_id: int,
    device: str | torch.device = "cpu",
) -> list[DecodedRow]:
    """Decode ``rows`` together: one left-padded prefill, then one batched forward per step.

    Args:
        model: a transformers causal LM (e.g. ``LlamaForCausalLM``, optionally peft-wrapped).
        decode_text: token ids → text (special tokens skipped); checks stop strings.
        rows: the rows; any mix of prompt lengths, temperatures, max tokens, stop strings and seeds.
        eos_id: end-of-turn token id (``<|im_end|>`` for SmolLM2): ends a row, not returned.
        pad_id: pad token id: fills the left padding; also ends a row if ever produced.
        device: where the model lives.

    Returns:
        One :class:`DecodedRow` per row, in input order.

    Raises:
        ValueError: a row with no prompt tokens or ``max_tokens < 1``.

    Reproducibility: greedy rows give the tokens of decoding each row alone, and a sampled row's
    random draws come from its own generator, so its tokens do not depend on the other rows —
    in both cases up to the floating-point differences between a batched and an unbatched
    forward pass (different matmul shapes and left padding change logits by ~1e-6 relative),
    which can flip a token only where two tokens' logits (greedy) or a draw and a CDF boundary
    (sampling) lie that close.
    """
    engine = DecodeEngine(model, decode_text, eos_id, pad_id, device)
    engine.admit(rows, list(range(len(rows))))
    out: list[DecodedRow | None] = [None] * len(rows)
    while len(engine):
        for tag, _, decoded in engine.step():
            out[tag] = decoded  # type: ignore[index]
    return [o for o in out if o is not None]
