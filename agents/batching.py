"""Batched decoding for the local backend: many rollouts, of many prompts, in one KV-cached loop.

The local backend samples every request it has — the k rollouts of a group, the groups of
episodes running concurrently, a teacher's reply — as *rows* of one batched decoding loop:

* rows are sorted by prompt length and packed into batches (:func:`plan_batches`) so that left
  padding stays short and the KV cache stays inside a token budget;
* one prefill forward over the left-padded prompts fills a ``transformers`` ``DynamicCache``;
  then one forward per step decodes one token for every unfinished row;
* every row has its own temperature (0 = greedy), max tokens, stop strings and random stream:
  a ``torch.Generator`` seeded from the request's seed and the row's index draws one uniform
  number per step, and the token is picked by inverse-CDF sampling from the row's own softmax.
  So a row's tokens depend on its prompt, its settings and its seed only — not on which other
  rows share its batch — up to floating-point differences between batched and unbatched matmuls
  (see :func:`decode_rows`);
* finished rows (end of turn, pad, a stop string, max tokens) leave the batch: their entries
  are dropped from the KV cache, so long rows do not make short ones pay for their steps.

This is the continuous-batching idea of Orca (Yu et al., OSDI 2022) and vLLM in its simplest
static form (rows leave early, none join mid-flight), on top of transformers' model forward
and cache classes.
"""

from __future__ import annotations

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


def _keep_rows(cache, keep: torch.Tensor) -> None:
    """Drop finished rows from a ``DynamicCache`` (batch dimension), in place."""
    cache.batch_select_indices(keep)


def _trim_left(cache, cols: int) -> None:
    """Drop the first ``cols`` positions (padding of every remaining row) from each cache layer."""
    for layer in getattr(cache, "layers", []):
        if getattr(layer, "keys", None) is not None and layer.keys.dim() == 4:
            layer.keys = layer.keys[:, :, cols:, :]
            layer.values = layer.values[:, :, cols:, :]


def _pick_tokens(logits: torch.Tensor, temps: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
    """Next token per row: argmax where temperature is 0, else inverse-CDF sampling with ``uniforms``.

    Args:
        logits: (B, V) float32 next-token logits.
        temps: (B,) float32 temperatures (0 = greedy).
        uniforms: (B,) float32 in [0, 1), one draw from each row's own generator.

    Returns:
        (B,) int64 token ids.
    """
    greedy = logits.argmax(dim=-1)
    sampled_rows = temps > 0
    if not bool(sampled_rows.any()):
        return greedy
    t = torch.where(sampled_rows, temps, torch.ones_like(temps))
    probs = torch.softmax(logits / t.unsqueeze(-1), dim=-1)  # (B, V)
    cdf = probs.cumsum(dim=-1)  # (B, V), last entry ≈ 1
    target = (uniforms * cdf[:, -1]).unsqueeze(-1)  # (B, 1) in [0, total)
    # first index whose cdf exceeds the target: token i with probability probs[i]; zero-probability tokens never win
    sampled = torch.searchsorted(cdf, target, right=True).squeeze(-1).clamp(max=logits.shape[-1] - 1)
    return torch.where(sampled_rows, sampled, greedy)


@torch.inference_mode()
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

    Reproducibility: greedy rows give the tokens of decoding each row alone, and a sampled row's
    random draws come from its own generator, so its tokens do not depend on the other rows —
    in both cases up to the floating-point differences between a batched and an unbatched
    forward pass (different matmul shapes and left padding change logits by ~1e-6 relative),
    which can flip a token only where two tokens' logits (greedy) or a draw and a CDF boundary
    (sampling) lie that close.
    """
    from transformers import DynamicCache

    if not rows:
        return []
    for r in rows:
        if not r.prompt_ids:
            raise ValueError("every row needs at least one prompt token")
        if r.max_tokens < 1:
            raise ValueError(f"max_tokens must be ≥ 1, got {r.max_tokens}")
    B = len(rows)
    P = max(len(r.prompt_ids) for r in rows)
    input_ids = torch.full((B, P), pad_id, dtype=torch.long)
    attn = torch.zeros((B, P), dtype=torch.long)
    for b, r in enumerate(rows):
        input_ids[b, P - len(r.prompt_ids) :] = torch.tensor(r.prompt_ids, dtype=torch.long)
        attn[b, P - len(r.prompt_ids) :] = 1
    position_ids = (attn.cumsum(-1) - 1).clamp(min=0)  # (B, P): 0.. for real tokens, 0 for padding
    input_ids, attn, position_ids = input_ids.to(device), attn.to(device), position_ids.to(device)

    temps_all = torch.tensor([max(0.0, float(r.temperature)) for r in rows], dtype=torch.float32)
    gens = [torch.Generator().manual_seed(int(r.seed)) if r.temperature > 0 else None for r in rows]
    out = [DecodedRow() for _ in rows]
    active = list(range(B))  # row index of each batch position
    cache = DynamicCache()
    cache_kw = {_cache_kwarg(model): cache}
    logits = model(
        input_ids=input_ids, attention_mask=attn, position_ids=position_ids, use_cache=True, logits_to_keep=1, **cache_kw
    ).logits[:, -1, :].float()  # (B, V)
    positions = position_ids[:, -1]  # (B,) position of each row's last token

    while active:
        temps = temps_all[active].to(logits.device)
        uniforms = torch.tensor(
            [float(torch.rand(1, generator=gens[i])) if gens[i] is not None else 0.0 for i in active],
            dtype=torch.float32,
        ).to(logits.device)
        tokens = _pick_tokens(logits, temps, uniforms)  # (b,)
        logp = torch.log_softmax(logits, dim=-1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1)  # (b,) temperature 1
        tokens_l, logp_l = tokens.tolist(), logp.tolist()
        keep: list[int] = []
        for pos, i in enumerate(active):
            tok, r, o = tokens_l[pos], rows[i], out[i]
            if tok == eos_id or tok == pad_id:
                o.ended = True
                continue
            o.token_ids.append(tok)
            o.logprobs.append(logp_l[pos])
            if len(o.token_ids) >= r.max_tokens:
                continue
            if r.stop:
                text = decode_text(o.token_ids)
                if any(s and s in text for s in r.stop):
                    continue
            keep.append(pos)
        if not keep:
            break
        if len(keep) < len(active):
            idx = torch.tensor(keep, dtype=torch.long, device=logits.device)
            _keep_rows(cache, idx)
            attn, positions, tokens = attn[idx], positions[idx], tokens[idx]
            active = [active[p] for p in keep]
            lead = int((attn.sum(0) == 0).long().cumprod(0).sum())  # columns that are padding in every row
            if lead:
                _trim_left(cache, lead)
                attn = attn[:, lead:]
        attn = torch.cat([attn, attn.new_ones((len(active), 1))], dim=1)
        positions = positions + 1
        logits = model(
            input_ids=tokens.unsqueeze(-1), attention_mask=attn, position_ids=positions.unsqueeze(-1), use_cache=True, **cache_kw
        ).logits[:, -1, :].float()
    return out
