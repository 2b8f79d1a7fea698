"""Distillation: importance weights, data set building, loss masking, training, adapter save/load, registry.

Model tests use a tiny random Llama with SmolLM2's tokenizer (2 layers of width 64), so they
run in seconds; the CUDA variants skip cleanly without a GPU.
"""

from __future__ import annotations

import json
import math

import pytest
import torch
from tiny_llama import make_tiny

from agents.roles.solver import (
    LessonView,
    render_lessons,
    solver_messages,
    strip_lessons_section,
)
from arena.distill.config import DistillConfig, TrainConfig
from arena.distill.data import (
    DistillExample,
    NoTrainingData,
    build_dataset,
    require_examples,
)
from arena.distill.losses import importance_weights
from arena.distill.objectives.base import EncodedExample, collate
from arena.distill.trainer import (
    TrainingError,
    encode_examples,
    fit,
    mean_nll,
    target_logprobs,
    warmup_cosine,
)
from arena.distill.weights import (
    AdapterError,
    AdapterSidecar,
    base_fingerprint,
    check_adapter_dir,
    read_sidecar,
    save_adapter,
)
from lessons.library.adapters import AdapterRecord, AdapterStore, TrainingRollout

CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")


# --------------------------------------------------------------------------- importance weights


def test_importance_weights_hand_computed():
    # π_θ = (0.5, 0.2, 0.1, 0.4), π_old = (0.25, 0.4, 0.1, 0.2); the first three tokens are hinted.
    new = torch.log(torch.tensor([0.5, 0.2, 0.1, 0.4]))
    old = torch.log(torch.tensor([0.25, 0.4, 0.1, 0.2]))
    hinted = torch.tensor([True, True, True, False])
    w, gamma = importance_weights(new, old, hinted)
    # ρ = (2, 0.5, 1); 0.9-quantile (linear) of sorted (0.5, 1, 2): position 1.8 → 1 + 0.8 · 1 = 1.8
    assert gamma == pytest.approx(1.8, abs=1e-6)
    expected = [2 / 3.8, 0.5 / 2.3, 1 / 2.8, 1.0]
    assert w.tolist() == pytest.approx(expected, abs=1e-6)


def test_importance_weights_floor_and_no_hinted_tokens_and_detached():
    new = torch.full((3,), math.log(1e-6), requires_grad=True)
    old = torch.zeros(3)  # π_old = 1 → ρ = 1e-6 everywhere; quantile 1e-6 < floor 1e-4
    w, gamma = importance_weights(new, old, torch.ones(3, dtype=torch.bool))
    assert gamma == pytest.approx(1e-4)
    assert w.tolist() == pytest.approx([1e-6 / (1e-6 + 1e-4)] * 3, rel=1e-4)
    assert not w.requires_grad
    w2, g2 = importance_weights(new, torch.full((3,), math.nan), torch.zeros(3, dtype=torch.bool))
    assert g2 is None and w2.tolist() == [1.0, 1.0, 1.0]
    with pytest.raises(ValueError):
        importance_weights(new, old[:2], torch.ones(3, dtype=torch.bool))


# --------------------------------------------------------------------------- data set building


LESSON_SECTION = render_lessons([LessonView("chain_sum-00001", "Add the numbers left to right.")], 512, lambda s: len(s.split()))[0]


def _rollout(rid, reward, guided=False, lessons=True, token_ids=(5, 6, 7), logprobs=(-0.1, -0.2, -0.3), finish="stop"):
    msgs = solver_messages("What is 2 + 3?", LESSON_SECTION if lessons else "")
    guided_msgs = [dict(m) for m in msgs]
    guided_msgs[-1]["content"] += "\n\nHint:\nThe answer is 5."
    return TrainingRollout(
        rollout_id=rid, session="s", task_key="chain_sum/train/00000", family="chain_sum", guided=guided,
        messages=guided_msgs if guided else msgs, unguided_messages=msgs if guided else None, completion="x",
        token_ids=list(token_ids) if token_ids is not None else None,
        logprobs=list(logprobs) if logprobs is not None else None, reward=reward, finish_reason=finish,
        hint_id=9 if guided else None, lessons_in_context=["chain_sum-00001"] if lessons else [],
    )


def test_strip_lessons_section_gives_the_chat_without_lessons():
    assert LESSON_SECTION
    assert strip_lessons_section(solver_messages("Q?", LESSON_SECTION)) == solver_messages("Q?")
    assert strip_lessons_section(solver_messages("Q?")) == solver_messages("Q?")


def test_build_dataset_objectives():
    rollouts = [
        _rollout(1, 1.0),  # unguided success with a lesson in context
        _rollout(2, 0.0),  # failure
        _rollout(3, 1.0, guided=True),  # guided success
        _rollout(4, 1.0, token_ids=None),  # chat API: no token ids
        _rollout(5, 1.0, guided=True, logprobs=(-0.1,)),  # log-probs do not cover every token
    ]
    d = build_dataset(rollouts, "distill", 1.0, strip_lessons_section)
    assert [(e.kind, e.rollout_id) for e in d.examples] == [("context", 1), ("guided", 3)]
    ctx, gd = d.examples
    assert ctx.messages == solver_messages("What is 2 + 3?") and ctx.old_logprobs is None and ctx.add_eos
    assert gd.messages == solver_messages("What is 2 + 3?")  # hint and lessons removed
    assert gd.old_logprobs == [-0.1, -0.2, -0.3] and gd.weighted and gd.hint_id == 9
    assert dict(d.skipped) == {"failed": 1, "no_token_ids": 1, "guided_without_logprobs": 1}
    prov = d.provenance()
    assert prov["by_kind"] == {"context": 1, "guided": 1, "sft": 0} and prov["rollout_ids"] == [1, 3]
    assert prov["hint_ids"] == [9] and d.lessons_in_context == ["chain_sum-00001"]

    # each objective's selection, as its implementation asks build_dataset for it
    from arena.distill.objectives.base import DataContext
    from arena.objectives import get_objective

    ctx = DataContext(store=None, session="s", success_threshold=1.0)
    assert get_objective("distill").load().build_dataset(rollouts, ctx).examples == d.examples
    u = get_objective("guided-unweighted").load().build_dataset(rollouts, ctx)
    assert u.objective == "guided-unweighted"
    assert [(e.kind, e.rollout_id, e.weighted) for e in u.examples] == [("context", 1, False), ("guided", 3, False), ("guided", 5, False)]

    s = get_objective("sft").load().build_dataset(rollouts, ctx)
    assert s.examples == build_dataset(rollouts, "sft", 1.0, strip_lessons_section, sampling_context=True,
                                       guided="none").examples
    assert [(e.kind, e.rollout_id) for e in s.examples] == [("sft", 1)]
    assert s.examples[0].messages == solver_messages("What is 2 + 3?", LESSON_SECTION)  # as sampled
    assert s.skipped["guided_not_used"] == 2

    with pytest.raises(ValueError, match="unknown objective 'rl'"):
        build_dataset(rollouts, "rl", 1.0, strip_lessons_section)
    with pytest.raises(ValueError, match="must be one of distill, sft, guided-unweighted, not 'grpo'"):
        build_dataset(rollouts, "grpo", 1.0, strip_lessons_section)


def test_no_eligible_training_data_says_why():
    d = build_dataset([_rollout(1, 0.0), _rollout(2, 0.5)], "distill", 1.0, strip_lessons_section)
    with pytest.raises(NoTrainingData, match=r"2 rollouts, none usable \(2 failed\); lower --success-threshold"):
        require_examples(d, "s", 1.0)
    with pytest.raises(NoTrainingData, match="no rollouts of train tasks"):
        require_examples(build_dataset([], "distill", 1.0, strip_lessons_section), "s", 1.0)


def test_configs_reject_bad_values_with_the_fix():
    with pytest.raises(ValueError, match="pass --rank 16"):
        TrainConfig(rank=0)
    with pytest.raises(ValueError, match="learning rate"):
        TrainConfig(lr=0)
    with pytest.raises(ValueError):
        DistillConfig(objective="rl")
    assert warmup_cosine(0, 4, 20, 0.1) == pytest.approx(0.25)
    assert warmup_cosine(4, 4, 20, 0.1) == pytest.approx(1.0)
    assert warmup_cosine(20, 4, 20, 0.1) == pytest.approx(0.1)
    assert warmup_cosine(12, 4, 20, 0.1) == pytest.approx(0.55)  # half-way: 0.1 + 0.9 · 0.5


# --------------------------------------------------------------------------- tiny model


def _policy(tiny_dir, device="cpu", adapter=None):
    from agents.backends.local import LocalPolicy

    p = LocalPolicy(model_dir=tiny_dir, device=device, adapter=adapter)
    p.load()
    return p


def _examples(tok, n=8, weighted=False):
    out = []
    for i in range(n):
        ids = tok(f"<answer>{i + 1}</answer>", add_special_tokens=False)["input_ids"]
        out.append(DistillExample("guided" if weighted else "sft", i, f"t{i}", solver_messages(f"What is {i} + 1?"), ids,
                                  [-1.0] * len(ids) if weighted else None, True))
    return out


def test_collate_masks_prompt_and_padding():
    a = EncodedExample([1, 2, 3, 4, 5, 9], 3, [-0.5, -0.7, math.nan], True)  # prompt 1 2 3; completion 4 5; eos 9
    b = EncodedExample([1, 2, 7], 2, [math.nan], False)
    batch = collate([a, b], pad_id=0)
    assert batch["input_ids"].tolist() == [[1, 2, 3, 4, 5, 9], [1, 2, 7, 0, 0, 0]]
    assert batch["attention_mask"].tolist() == [[1] * 6, [1, 1, 1, 0, 0, 0]]
    # position i predicts token i+1: row a predicts 4, 5, 9 from positions 2, 3, 4; row b predicts 7 from 1
    assert batch["target_mask"].tolist() == [[False, False, True, True, True], [False, True, False, False, False]]
    assert batch["hinted"].tolist() == [[False, False, True, True, False], [False] * 5]  # eos and unweighted rows: weight 1
    assert batch["input_ids"][:, 1:][batch["target_mask"]].tolist() == [4, 5, 9, 7]


def test_target_logprobs_equal_full_forward_and_ignore_padding(tiny_dir):
    p = _policy(tiny_dir)
    tok = p.tokenizer
    exs = _examples(tok, 3)
    enc, dropped = encode_examples(tok, exs, 512, p.eos_token_id)
    assert dropped == 0 and enc[0].input_ids[-1] == p.eos_token_id
    with torch.no_grad():
        batched = target_logprobs(p.model, collate(enc, tok.pad_token_id))
        # the same tokens scored one example at a time through the model's own full forward
        ref = []
        for e in enc:
            ids = torch.tensor([e.input_ids])
            logp = torch.log_softmax(p.model(input_ids=ids).logits[0, :-1].float(), -1)
            ref += logp[e.n_prompt - 1 :].gather(-1, ids[0, e.n_prompt :, None]).squeeze(-1).tolist()
    assert len(batched) == sum(len(e.input_ids) - e.n_prompt for e in enc)
    assert batched.tolist() == pytest.approx(ref, abs=1e-4)
    # and they match the policy's teacher forcing used for π_θ elsewhere
    forced = p.token_logprobs(exs[0].messages, exs[0].completion_ids)
    assert forced.tolist() == pytest.approx(ref[: len(forced)], abs=1e-4)


def test_too_long_examples_are_dropped(tiny_dir):
    p = _policy(tiny_dir)
    enc, dropped = encode_examples(p.tokenizer, _examples(p.tokenizer, 2), 10, p.eos_token_id)
    assert enc == [] and dropped == 2
    with pytest.raises(TrainingError, match="--max-seq-len 10"):
        fit(p.model, p.tokenizer, _examples(p.tokenizer, 2), TrainConfig(max_seq_len=10, max_steps=1), "distill")


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=CUDA)])
def test_tiny_training_lowers_the_loss_and_round_trips(tiny_dir, tmp_path, device):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    p = _policy(tiny_dir, device)
    tok = p.tokenizer
    exs = _examples(tok, 8, weighted=True)
    before = mean_nll(p.model, tok, exs, p.eos_token_id)
    cfg = TrainConfig(max_steps=30, lr=1e-2, batch_size=4, grad_accum=2, warmup_steps=2, seed=3)
    model, res = fit(p.model, tok, exs, cfg, "distill", eos_id=p.eos_token_id)
    after = mean_nll(model, tok, exs, p.eos_token_id)
    assert res.steps == 30 and len(res.losses) == 30 and res.gammas  # guided tokens were weighted
    assert res.tokens == 30 * 8 * len(encode_examples(tok, exs[:1], 512, p.eos_token_id)[0][0].input_ids)
    assert after < before - 0.5, (before, after)  # the weighted loss moves with the weights; the NLL must fall

    path = save_adapter(model, tmp_path / "adapter", AdapterSidecar(adapter_id="adapter-0001",
                                                                    base_model=base_fingerprint(tiny_dir)))
    assert {"adapter_config.json", "adapter_model.safetensors", "arena_adapter.json"} <= {x.name for x in path.iterdir()}
    assert not [x for x in tmp_path.iterdir() if x.name.startswith(".")]  # no temp dir left behind
    chat, ids = exs[0].messages, exs[0].completion_ids
    with torch.no_grad():
        enc = collate(encode_examples(tok, exs, 512, p.eos_token_id)[0], tok.pad_token_id, model.device)
        trained = target_logprobs(model, enc).float().cpu()
    # 1) the solver's loader
    loaded = _policy(tiny_dir, device, adapter=path)
    with torch.no_grad():
        again = target_logprobs(loaded.model, enc).float().cpu()
    assert torch.equal(trained, again)
    # 2) plain peft on the same base
    base = AutoModelForCausalLM.from_pretrained(tiny_dir, dtype=next(model.parameters()).dtype).to(device)
    plain = PeftModel.from_pretrained(base, str(path)).eval()
    with torch.no_grad():
        plain_lp = target_logprobs(plain, enc).float().cpu()
    assert torch.equal(trained, plain_lp)
    assert loaded.token_logprobs(chat, ids).tolist() == pytest.approx(trained[: len(ids)].tolist(), abs=1e-5)
    assert read_sidecar(path).adapter_id == "adapter-0001"


def test_nan_loss_is_a_clear_error(tiny_dir):
    p = _policy(tiny_dir)
    with torch.no_grad():
        p.model.get_output_embeddings().weight[0, 0] = float("nan")
    with pytest.raises(TrainingError, match="loss became nan at step 1; lower --lr"):
        fit(p.model, p.tokenizer, _examples(p.tokenizer, 4), TrainConfig(max_steps=2), "distill")


# --------------------------------------------------------------------------- adapter directories


def test_adapter_dir_checks(tiny_dir, tmp_path):
    p = _policy(tiny_dir)
    from peft import get_peft_model

    from arena.distill.trainer import lora_config

    model = get_peft_model(p.model, lora_config(TrainConfig(rank=2)))
    fp = base_fingerprint(tiny_dir)
    good = save_adapter(model, tmp_path / "good", AdapterSidecar(base_model=fp))
    assert check_adapter_dir(good, fp).base_model == fp
    with pytest.raises(AdapterError, match="already exists"):
        save_adapter(model, good, AdapterSidecar())

    other = make_tiny(tmp_path / "other-base", seed=1)
    assert base_fingerprint(other) != fp  # same architecture, other weights
    with pytest.raises(AdapterError, match="was trained on base model .* but the solver's base model is"):
        check_adapter_dir(good, base_fingerprint(other))

    with pytest.raises(AdapterError, match="no adapter directory"):
        check_adapter_dir(tmp_path / "missing")
    import shutil

    broken = tmp_path / "broken"
    shutil.copytree(good, broken)
    (broken / "adapter_model.safetensors").write_bytes(b"\x00\x01garbage")
    with pytest.raises(AdapterError, match="corrupt adapter directory .*adapter_model.safetensors"):
        check_adapter_dir(broken)
    (broken / "adapter_model.safetensors").unlink()
    with pytest.raises(AdapterError, match="adapter_model.safetensors is missing"):
        check_adapter_dir(broken)
    shutil.copy(good / "adapter_model.safetensors", broken)
    (broken / "arena_adapter.json").write_text("{not json")
    with pytest.raises(AdapterError, match="corrupt adapter sidecar"):
        check_adapter_dir(broken)
    # an older sidecar without newer fields still loads
    (broken / "arena_adapter.json").write_text(json.dumps({"format_version": 0, "objective": "sft", "old_field": 1}))
    assert check_adapter_dir(broken, fp).base_model is None


# --------------------------------------------------------------------------- registry and retrieval


def test_register_adapter_marks_lessons_distilled_and_retrieval_excludes_them(tmp_path):
    from arena.episode.prompt import retrieve_for_task
    from arena.tasks.model import Task
    from lessons.library.store import EpisodeRecord, LessonStore, RolloutRecord, StoreError
    from lessons.ops import AddOp, Reflection

    store = LessonStore(str(tmp_path / "arena.db"))
    sid = store.create_session("s", {}, 0)
    task = Task("chain_sum/train/00000", "chain_sum", "train", "What is 2 + 3?", "5", "reasoning_gym")
    store.upsert_tasks(sid, [task])
    r = RolloutRecord(0, solver_messages(task.question), "5", "5", 1.0, "ok", 10, 3, "stop", 0.1, token_ids=[1, 2, 3],
                      logprobs=[-0.1, -0.1, -0.1])
    refl = Reflection(analysis="a", add=[AddOp(text="Add left to right.", scope="chain_sum", rationale="r"),
                                         AddOp(text="Check the sign of each term.", scope="chain_sum", rationale="r")])
    store.record_episode(EpisodeRecord(sid, "r001-x", 1, task.task_key, "sys", [], [r], refl))
    a, b = [les.lesson_id for les in store.live_lessons("chain_sum")]  # new lessons are candidates
    astore = AdapterStore(store)
    assert astore.next_adapter_id() == "adapter-0001"
    rows = astore.training_rollouts("s")
    assert [(x.rollout_id, x.token_ids, x.reward) for x in rows] == [(1, [1, 2, 3], 1.0)]
    with pytest.raises(StoreError):
        astore.training_rollouts("nope")

    info = astore.register_adapter(AdapterRecord(
        adapter_id="adapter-0001", path=str(tmp_path / "ad"), base_model="llama-x", objective="distill",
        session_id=sid, config={"k": 1}, data={"examples": 1}, metrics={"steps": 1}, eval={"adapter": {}},
        in_context=[a, b], distilled={a: "pass@1 0.5 vs CI [0.3, 0.6]"},
    ))
    assert info.in_context == [a, b] and info.distilled == [a] and info.session == "s"
    assert astore.next_adapter_id() == "adapter-0002"
    assert astore.get_adapter("adapter-0001").eval == {"adapter": {}}
    assert astore.find_by_path(tmp_path / "ad").adapter_id == "adapter-0001"
    assert store.get_lesson(a).status == "distilled" and store.get_lesson(b).status == "candidate"
    ev = store.lesson_events(a)[-1]
    assert (ev.op, ev.before, ev.after) == ("DISTILL", "candidate", "distilled")
    from lessons.library.provenance import build_graph, lineage

    assert lineage(build_graph(store), a)["descendants"] == ["adapter:adapter-0001"]
    assert build_graph(store).edges[f"lesson:{a}", "adapter:adapter-0001"]["relation"] == "distilled_into"
    assert ev.rationale == "adapter-0001: pass@1 0.5 vs CI [0.3, 0.6]"
    with pytest.raises(StoreError, match="already registered"):
        astore.register_adapter(AdapterRecord("adapter-0001", "/elsewhere", "x", "sft", None, {}, {}, {}, {}, [], {}))
    # the library checks an objective's form (a registry name or "imported"), not a list of names it would have to keep
    for bad in ("Distill", "two words", "", "x" * 31, "grpo-"):
        with pytest.raises(ValueError, match="lower-case words joined by hyphens, at most 30 characters"):
            astore.register_adapter(AdapterRecord("adapter-0009", "/other", "x", bad, None, {}, {}, {}, {}, [], {}))
    assert astore.get_adapter("adapter-0009") is None

    count = lambda s: len(s.split())
    _, shown = retrieve_for_task(store, task, 512, count)  # no adapter: distilled lessons stay in the prompt
    assert {i for i, _ in shown} == {a, b}
    _, shown = retrieve_for_task(store, task, 512, count, exclude=set(info.distilled))  # with the adapter
    assert [i for i, _ in shown] == [b]
    store.close()


# --------------------------------------------------------------------------- benchmark and the real model


@pytest.mark.slow
def test_real_model_lora_step_and_plain_peft_round_trip(tmp_path):
    """Two LoRA steps on the embedded SmolLM2; plain peft reloads the adapter with identical log-probs."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from agents.backends.local import LocalPolicy, default_device, training_dtype

    # its own copy (LoRA layers are injected into the model it trains), in the dtype sleeps train in: fp32 on the CPU
    p = LocalPolicy(dtype=training_dtype(default_device()))
    p.load()
    tok = p.tokenizer
    exs = [DistillExample("sft", i, f"t{i}", solver_messages(f"What is {i} + 2?"),
                          tok(f"{i} + 2 = {i + 2}.\n<answer>{i + 2}</answer>", add_special_tokens=False)["input_ids"],
                          None, True) for i in range(4)]
    model, res = fit(p.model, tok, exs, TrainConfig(max_steps=2, batch_size=2, grad_accum=1, lr=1e-3), "distill",
                       eos_id=p.eos_token_id)
    assert res.steps == 2 and math.isfinite(res.final_loss)
    path = save_adapter(model, tmp_path / "a", AdapterSidecar(base_model=base_fingerprint(p.model_dir)))
    enc = collate(encode_examples(tok, exs, 512, p.eos_token_id)[0], tok.pad_token_id)
    with torch.no_grad():
        trained = target_logprobs(model, enc)
        plain = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(p.model_dir), str(path)).eval()
        assert torch.equal(trained, target_logprobs(plain, enc))
    check_adapter_dir(path, base_fingerprint(p.model_dir))


def test_only_lessons_that_helped_are_marked_distilled():
    from arena.distill.pipeline import distilled_lessons
    from arena.evaluation import EvalResult

    shown = [["a"], ["a"], ["b"], ["b"]]
    base = EvalResult([0.0, 0.0, 1.0, 1.0], [[]] * 4)
    with_lessons = EvalResult([1.0, 1.0, 0.0, 0.0], shown)  # a helped (0/2 -> 2/2), b hurt (2/2 -> 0/2)
    adapter = EvalResult([1.0, 1.0, 1.0, 1.0], [[]] * 4)  # beats both
    out = distilled_lessons(["a", "b", "c"], base, with_lessons, adapter)
    assert list(out) == ["a"] and "base alone 0/2" in out["a"]
    weak = EvalResult([0.0, 0.0, 1.0, 1.0], [[]] * 4)  # a's effect lost: 0/2 < Wilson lo of 2/2 (0.342)
    assert distilled_lessons(["a"], base, with_lessons, weak) == {}


@pytest.mark.parametrize("epochs", [float("nan"), float("inf"), 1e9])
def test_non_finite_or_absurd_epochs_are_refused_up_front(epochs):
    from pydantic import ValidationError

    from arena.distill.config import TrainConfig

    with pytest.raises(ValidationError, match="--epochs must be a finite number"):
        TrainConfig(epochs=epochs)
