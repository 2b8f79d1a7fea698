"""Batched decoding (agents/batching.py) and the local policy's continuous batching, on a tiny random Llama.

The tiny model (2 layers of width 64, SmolLM2's tokenizer, large init scale so argmaxes are well
separated) runs in milliseconds per step, so these tests check exact token equality between
batched and one-at-a-time decoding, against transformers' own ``generate`` as an independent path.
"""

from __future__ import annotations

import math
import threading

import pytest
import torch

from agents.backends.batching import DecodeEngine, DecodeRow, _pick_tokens, decode_rows, plan_batches, row_seed
from agents.backends.local import LocalPolicy
from agents.roles.solver import solver_messages

QUESTIONS = ["Hi.", "What is 17 - 5 + 3 - 9? Explain every step carefully, then answer.", "Name a prime.",
             "A much longer question about adding numbers: 12 + 30 + 7 + 41 + 5 + 6, show your work please."]


@pytest.fixture(scope="module")
def tiny_cpu(tiny_dir):
    # fp32: these tests check that batching alone leaves a row's tokens unchanged; bf16's rounding (~1e-2 relative)
    # flips near-tied tokens between batch shapes (docs/howto/speed.md, "Per-row randomness"), fp32's (~1e-6) practically never
    policy = LocalPolicy(model_dir=tiny_dir, device="cpu", batch_window_s=0.2, dtype=torch.float32)
    policy.load()
    return policy


def rows_for(policy, questions, **kw):
    return [DecodeRow(policy.encode(policy.prompt_text(solver_messages(q))), **kw) for q in questions]


def decode(policy, rows):
    return decode_rows(policy.model, policy.decode, rows, policy.eos_token_id, policy.tokenizer.pad_token_id)


# --------------------------------------------------------------------------- pure functions


def test_pick_tokens_inverse_cdf_by_hand():
    probs = torch.tensor([0.2, 0.5, 0.3])  # cdf 0.2, 0.7, 1.0
    logits = probs.log().repeat(5, 1)
    temps = torch.tensor([1.0, 1.0, 1.0, 1.0, 0.0])
    u = torch.tensor([0.1, 0.25, 0.69, 0.71, 0.99])
    assert _pick_tokens(logits, temps, u).tolist() == [0, 1, 1, 2, 1]  # last row greedy: argmax
    # temperature 0.5 squares and renormalises: 0.04, 0.25, 0.09 / 0.38 → cdf 0.105, 0.763, 1
    half = _pick_tokens(probs.log().repeat(3, 1), torch.full((3,), 0.5), torch.tensor([0.1, 0.11, 0.77]))
    assert half.tolist() == [0, 1, 2]


def test_zero_probability_tokens_are_never_sampled():
    logits = torch.tensor([[0.0, -math.inf, 0.0]])
    for u in (0.0, 0.4999, 0.5, 0.9999):
        assert _pick_tokens(logits, torch.tensor([1.0]), torch.tensor([u])).item() in (0, 2)


def test_plan_batches_groups_by_length_within_limits():
    lengths = [100, 40, 42, 400, 45, 101, 60]
    new = [10] * 7
    # sorted: 40(1) 42(2) 45(4) 60(6) 100(0) 101(5) 400(3); slack: longest <= max(shortest + 32, 1.5 * shortest)
    assert plan_batches(lengths, new) == [[1, 2, 4, 6], [0, 5], [3]]
    assert plan_batches(lengths, new, max_rows=2) == [[1, 2], [4, 6], [0, 5], [3]]
    # KV budget: rows × (longest + max new) <= 120 → 2 rows of ≤ 50 tokens
    assert plan_batches([40, 42, 45], [10, 10, 10], max_tokens=120) == [[0, 1], [2]]
    assert plan_batches([5000], [100], max_tokens=10) == [[0]]  # a row alone always fits


def test_row_seeds_are_stable_and_distinct():
    assert row_seed(7, 0) == row_seed(7, 0)
    assert len({row_seed(s, i) for s in range(4) for i in range(8)}) == 32
    assert all(0 <= row_seed(s, i) < 2**63 for s in (0, 2**32 - 1) for i in (0, 255))


# --------------------------------------------------------------------------- the decoding loop


def test_greedy_decoding_matches_transformers_generate(tiny_cpu):
    """The slab KV cache and explicit positions give transformers' own greedy tokens (independent path)."""
    for row in rows_for(tiny_cpu, QUESTIONS[:2], temperature=0.0, max_tokens=12):
        ours = decode(tiny_cpu, [row])[0]
        ids = torch.tensor([row.prompt_ids])
        with torch.no_grad():
            ref = tiny_cpu.model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                          max_new_tokens=12, eos_token_id=tiny_cpu.eos_token_id,
                                          pad_token_id=tiny_cpu.tokenizer.pad_token_id)[0, len(row.prompt_ids):].tolist()
        ref = ref[: ref.index(tiny_cpu.eos_token_id)] if tiny_cpu.eos_token_id in ref else ref
        assert ours.token_ids == ref and len(ours.token_ids) > 0


def test_mixed_batch_equals_rows_alone_greedy_and_sampled(tiny_cpu):
    rows = rows_for(tiny_cpu, QUESTIONS, temperature=0.0, max_tokens=10)
    rows += [DecodeRow(r.prompt_ids, temperature=1.0, max_tokens=14, seed=row_seed(3, i)) for i, r in enumerate(rows)]
    together = decode(tiny_cpu, rows)
    alone = [decode(tiny_cpu, [r])[0] for r in rows]
    assert [t.token_ids for t in together] == [a.token_ids for a in alone]
    for t, a in zip(together, alone):
        assert t.logprobs == pytest.approx(a.logprobs, abs=1e-4)
    sampled = [t.token_ids for t in together[4:]]
    assert sampled != [t.token_ids for t in together[:4]]  # sampling differs from greedy


def test_per_row_max_tokens_and_stop_strings(tiny_cpu):
    [probe] = decode(tiny_cpu, rows_for(tiny_cpu, QUESTIONS[1:2], temperature=0.0, max_tokens=12))
    assert len(probe.token_ids) >= 6, "the tiny model should not end its turn this early"
    stop = tiny_cpu.decode(probe.token_ids[4:5]).strip() or tiny_cpu.decode(probe.token_ids[4:6])
    rows = rows_for(tiny_cpu, [QUESTIONS[1]] * 3, temperature=0.0, max_tokens=12)
    rows[0].max_tokens = 3
    rows[1].stop = (stop,)
    out = decode(tiny_cpu, rows)
    assert out[0].token_ids == probe.token_ids[:3]
    assert stop in tiny_cpu.decode(out[1].token_ids) and stop not in tiny_cpu.decode(out[1].token_ids[:-1])
    assert out[1].token_ids == probe.token_ids[: len(out[1].token_ids)] and len(out[1].token_ids) < 12
    assert out[2].token_ids == probe.token_ids


def test_rows_that_join_mid_flight_decode_as_alone(tiny_cpu):
    first = rows_for(tiny_cpu, QUESTIONS[:2], temperature=1.0, max_tokens=16, seed=11)
    late = rows_for(tiny_cpu, QUESTIONS[2:], temperature=0.0, max_tokens=10)
    engine = DecodeEngine(tiny_cpu.model, tiny_cpu.decode, tiny_cpu.eos_token_id, tiny_cpu.tokenizer.pad_token_id)
    engine.admit(first, ["a", "b"])
    done = {}
    for _ in range(3):
        done.update({tag: d for tag, _, d in engine.step()})
    engine.admit(late, ["c", "d"])  # joins a batch that has decoded 3 tokens
    assert len(engine) == 4 - len(done)
    while len(engine):
        done.update({tag: d for tag, _, d in engine.step()})
    alone = [decode(tiny_cpu, [r])[0].token_ids for r in first + late]
    assert [done[t].token_ids for t in "abcd"] == alone


# --------------------------------------------------------------------------- the policy's scheduler


def test_concurrent_requests_share_batches_and_match_one_at_a_time(tiny_cpu):
    chats = [solver_messages(q) for q in QUESTIONS]
    alone = [tiny_cpu.sample(c, n=3, temperature=1.0, max_tokens=12, seed=i) for i, c in enumerate(chats)]
    greedy_alone = tiny_cpu.sample_batch(chats, temperature=0.0, max_tokens=12)
    tiny_cpu.batches.clear()
    results: dict[int, list] = {}
    barrier = threading.Barrier(len(chats))

    def episode(i: int) -> None:
        barrier.wait()
        results[i] = tiny_cpu.sample(chats[i], n=3, temperature=1.0, max_tokens=12, seed=i)

    threads = [threading.Thread(target=episode, args=(i,)) for i in range(len(chats))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert max(tiny_cpu.batches) > 3  # rows of several requests decoded together
    for i in range(len(chats)):
        assert [o.token_ids for o in results[i]] == [o.token_ids for o in alone[i]]
        assert [o.text for o in results[i]] == [o.text for o in alone[i]]
    single = [tiny_cpu.sample(c, n=1, temperature=0.0, max_tokens=12)[0] for c in chats]
    assert [g.token_ids for g in greedy_alone] == [s.token_ids for s in single]


def test_a_bad_request_fails_only_its_own_thread(tiny_cpu):
    with pytest.raises(ValueError, match="max_tokens must be"):
        tiny_cpu.sample(solver_messages("Hi."), n=2, max_tokens=0)
    assert tiny_cpu.sample(solver_messages("Hi."), n=0) == []
    assert len(tiny_cpu.sample(solver_messages("Hi."), n=2, max_tokens=4, seed=1)) == 2
