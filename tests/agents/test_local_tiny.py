"""The local backend's batching, padding, dtype and log-prob logic on a tiny random Llama, on CPU and CUDA.

The tiny model has SmolLM2's tokenizer and architecture family but 2 layers of width 64, so
these run in seconds everywhere; the CUDA case runs where a GPU is present (bf16) and is
skipped cleanly on CPU-only machines. Weights are drawn with a large init scale so greedy
argmaxes are well separated (a near-uniform random model would make greedy ties flip on
rounding noise).
"""

from __future__ import annotations

import math

import pytest
import torch

from agents.backends.local import LocalPolicy, default_dtype
from agents.roles.solver import solver_messages

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device"))]
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja")


@pytest.fixture(scope="module", params=DEVICES)
def tiny(request, tiny_dir):
    policy = LocalPolicy(model_dir=tiny_dir, device=request.param)
    policy.load()
    return policy


def test_dtype_follows_the_device(tiny):
    dtype = next(tiny.model.parameters()).dtype
    assert dtype == default_dtype(tiny.device)  # bf16 on CUDA; on the CPU what $ARENA_CPU_DTYPE picks (auto by default)
    assert tiny.tokenizer.pad_token_id != tiny.eos_token_id and tiny.tokenizer.padding_side == "left"


def test_group_is_one_batch_with_per_row_lengths(tiny):
    outs = tiny.sample(solver_messages("What is 2 + 2?"), n=6, temperature=1.0, max_tokens=12, seed=1)
    assert len(outs) == 6
    for o in outs:
        assert 0 < len(o.token_ids) <= 12 and len(o.logprobs) == len(o.token_ids)
        assert tiny.tokenizer.pad_token_id not in o.token_ids and tiny.eos_token_id not in o.token_ids


def test_batched_greedy_equals_sequential_for_mixed_prompt_lengths(tiny):
    chats = [solver_messages(q) for q in ("Hi.", "What is 17 - 5 + 3 - 9? Explain every step carefully.", "Name a prime.")]
    batched = tiny.sample_batch(chats, temperature=0.0, max_tokens=16)
    single = [tiny.sample(c, n=1, temperature=0.0, max_tokens=16)[0] for c in chats]
    assert [b.token_ids for b in batched] == [s.token_ids for s in single]


def test_teacher_forced_logprobs_match_sampling_logprobs(tiny):
    chat = solver_messages("Count to three.")
    tol = 0.05 if tiny.device.startswith("cuda") else 1e-3  # bf16 on CUDA, fp32 on CPU
    for o in tiny.sample(chat, n=3, temperature=1.0, max_tokens=10, seed=7):
        forced = tiny.token_logprobs(chat, o.token_ids)
        assert len(forced) == len(o.token_ids)
        assert math.isclose(float(forced.sum()), sum(o.logprobs), abs_tol=tol * len(forced))


def test_next_token_logits_project_only_the_masked_positions_exactly(tiny_dir):
    """The fast path (vocabulary projection on the masked positions only) equals the full forward there, padded or not."""
    from agents.backends.local import next_token_logits

    policy = LocalPolicy(model_dir=tiny_dir, device="cpu", dtype=torch.float32)
    policy.load()
    ids = torch.tensor([[5, 9, 14, 3, 7, 11, 2, 6], [8, 4, 10, 12, 1, 0, 0, 0]])
    attn = torch.tensor([[1] * 8, [1] * 5 + [0] * 3])
    mask = torch.zeros((2, 7), dtype=torch.bool)
    mask[0, 4:] = True
    mask[1, 2:4] = True
    with torch.no_grad():
        fast = next_token_logits(policy.model, ids, attn, mask)
        full = policy.model(input_ids=ids, attention_mask=attn).logits[:, :-1][mask].float()
    assert fast.shape == (5, full.shape[-1])
    assert torch.allclose(fast, full, atol=1e-5)
    # token_logprobs scores a completion through it: log-softmax of the full forward at the completion positions
    msgs = solver_messages("What is 2 + 2?")
    completion = [17, 23, 42]
    prompt = policy.encode(policy.prompt_text(msgs))
    with torch.no_grad():
        logits = policy.model(input_ids=torch.tensor([prompt + completion])).logits[0, len(prompt) - 1 : -1].float()
    want = torch.log_softmax(logits / 0.8, dim=-1).gather(-1, torch.tensor(completion).unsqueeze(-1)).squeeze(-1)
    assert torch.allclose(policy.token_logprobs(msgs, completion, temperature=0.8), want, atol=1e-5)
    policy.close()
