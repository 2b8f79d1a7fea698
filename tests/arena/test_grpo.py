"""The `grpo` and `guide-grpo` objectives: each loss on a hand-computed example, the groups, π_old at the
sampling temperature, a tiny-model run whose loss falls, and `arena distill --objective grpo|guide-grpo`
end to end with its bad-input errors."""

from __future__ import annotations

import json
import math
import sqlite3
from dataclasses import replace
from types import SimpleNamespace

import pytest
import torch
from cli_helpers import assert_one_line_error
from session_scripts import make_session

from arena.distill.data import BadTrainingData, RLExample, build_rl_dataset, require_rl_examples, rescore_old_logprobs
from arena.distill.losses import (
    group_advantages,
    guided_shaped_loss,
    kl_to_reference,
    ppo_clip_loss,
    tempered_logprobs,
)
from arena.distill.objectives.base import DataContext
from arena.objectives import get_objective
from lessons.library.adapters import TrainingRollout

# --------------------------------------------------------------------------- losses, by hand


def test_group_advantages_by_hand():
    # mean 0.5; sample std sqrt((4 * 0.25) / 3) = 0.57735
    adv = group_advantages([1.0, 0.0, 0.0, 1.0])
    assert adv.tolist() == pytest.approx([0.866025, -0.866025, -0.866025, 0.866025], abs=1e-5)
    assert group_advantages([0.5, 0.5]).tolist() == [0.0, 0.0]  # equal rewards: no signal
    with pytest.raises(ValueError, match="at least 2"):
        group_advantages([1.0])
    with pytest.raises(ValueError, match="finite"):
        group_advantages([1.0, math.nan])


def test_ppo_clip_on_both_sides_by_hand():
    old = torch.full((5,), math.log(0.5))
    ratio = torch.tensor([1.5, 0.5, 0.5, 1.5, 1.1])
    adv = torch.tensor([1.0, -1.0, 1.0, -1.0, 1.0])
    new = (old + ratio.log()).requires_grad_()
    loss = ppo_clip_loss(new, old, adv, clip_eps=0.2)
    # A>0, ρ above 1+ε: clipped to 1.2; A<0, ρ below 1-ε: clipped to 0.8; the pessimistic side is not clipped
    assert loss.tolist() == pytest.approx([-1.2, 0.8, -0.5, 1.5, -1.1], abs=1e-6)
    loss.sum().backward()
    # d(-ρA)/dlog π = -ρA where unclipped, 0 where the clip is active
    assert new.grad.tolist() == pytest.approx([0.0, 0.0, -0.5, 1.5, -1.1], abs=1e-6)


def test_guided_shaped_ratio_and_quantile_by_hand():
    old = torch.full((5,), math.log(0.2))  # π_old(y | x, h): under the hint
    rho = torch.tensor([0.1, 0.5, 1.0, 2.0, 4.0])
    new = (old + rho.log()).requires_grad_()  # π_θ(y | x): without the hint
    loss, gamma = guided_shaped_loss(new, old, torch.ones(5))
    # γ = 0.9-quantile of ρ (linear interpolation at 0.9 * 4 = 3.6 between 2 and 4) = 3.2; not clipped
    assert gamma == pytest.approx(3.2, abs=1e-5)
    assert loss.tolist() == pytest.approx([-0.1 / 3.3, -0.5 / 3.7, -1 / 4.2, -2 / 5.2, -4 / 7.2], abs=1e-6)
    loss.sum().backward()
    # γ detached: d/dlog π [-ρ/(ρ+γ)] = -γρ/(ρ+γ)²
    assert new.grad.tolist() == pytest.approx([-(3.2 * r) / (r + 3.2) ** 2 for r in rho.tolist()], abs=1e-6)
    # the floor: ratios far below 1e-4 give γ = 1e-4
    _, g = guided_shaped_loss(old + math.log(1e-7), old, torch.ones(5))
    assert g == pytest.approx(1e-4)


def test_tempered_logprobs_and_kl_by_hand():
    logits, target = torch.tensor([[2.0, 0.0, 0.0]]), torch.tensor([0])
    assert tempered_logprobs(logits, target, 1.0).item() == pytest.approx(2 - math.log(math.exp(2) + 2), abs=1e-6)
    assert tempered_logprobs(logits, target, 0.5).item() == pytest.approx(4 - math.log(math.exp(4) + 2), abs=1e-6)
    # k3: exp(d) - d - 1 with d = log π_ref - log π_θ = log(0.25 / 0.5)
    kl = kl_to_reference(torch.tensor([math.log(0.5)]), torch.tensor([math.log(0.25)]))
    assert kl.item() == pytest.approx(0.5 + math.log(2) - 1, abs=1e-6)
    assert kl_to_reference(torch.tensor([-1.0]), torch.tensor([-1.0])).item() == 0.0


# --------------------------------------------------------------------------- groups


def roll(rid, episode, reward, guided=False, logprobs=True, adapter=None):
    hinted = [{"role": "user", "content": "q\n\nHint: h"}]
    plain = [{"role": "user", "content": "q"}]
    return TrainingRollout(rid, "s", f"t{episode}", "f", guided, hinted if guided else plain, plain if guided else None,
                           "c", [5, 6], [-0.5, -0.5] if logprobs else None, reward, "stop", 7 if guided else None, [],
                           "h" if guided else None, adapter, 1, episode)


def test_groups_advantages_and_what_is_dropped():
    rs = [roll(1, 1, 1.0), roll(2, 1, 0.0), roll(3, 1, 0.0), roll(4, 1, 1.0),  # a group with signal
          roll(5, 2, 0.0), roll(6, 2, 0.0),  # all fail: dropped ...
          roll(7, 2, 1.0, guided=True), roll(8, 2, 0.0, guided=True),  # ... its guided re-attempt, normalised on its own
          roll(9, 3, 1.0)]  # a group of one
    g = build_rl_dataset(rs, "guide-grpo")
    assert [e.rollout_id for e in g.examples] == [1, 2, 3, 4, 7, 8]
    assert [e.kind for e in g.examples] == ["grpo"] * 4 + ["guided-grpo"] * 2
    assert [round(e.advantage, 4) for e in g.examples] == [0.866, -0.866, -0.866, 0.866, 0.7071, -0.7071]
    assert g.groups == 2 and dict(g.skipped) == {"equal_rewards": 2, "group_of_one": 1}
    # the guided example trains under the chat WITHOUT the hint; π_old is scored under the hinted one
    ex = g.examples[4]
    assert ex.messages == [{"role": "user", "content": "q"}] and "Hint" in ex.sampling_messages[0]["content"]
    assert g.provenance()["by_kind"] == {"grpo": 4, "guided-grpo": 2}

    plain = build_rl_dataset(rs, "grpo", guided=False)  # the ablation: no guided rollouts
    no_session = SimpleNamespace(get_session=lambda name: None)  # a verifier session: pass / fail advantages
    assert get_objective("grpo").load().build_dataset(rs, DataContext(no_session, "s", 1.0)).examples == \
        build_rl_dataset(rs, "grpo", 1.0, guided=False).examples  # grpo's spec: uses_hints False
    assert get_objective("guide-grpo").load().build_dataset(rs, DataContext(no_session, "s", 1.0)).examples == \
        build_rl_dataset(rs, "guide-grpo", 1.0).examples
    assert [e.rollout_id for e in plain.examples] == [1, 2, 3, 4] and plain.skipped["guided_not_used"] == 2


def test_a_verifiers_partial_credit_is_not_an_advantage_with_a_pass_threshold():
    """chain_sum's verifier gives "-287" for -28 0.75: a wrong answer. With the session's success threshold the group
    below is all-fail (dropped) and the one after has one pass among four; raw rewards (rubrics) keep the grades."""
    partial = [roll(1, 1, 0.75), roll(2, 1, 0.0), roll(3, 1, 0.0), roll(4, 1, 0.0)]
    assert build_rl_dataset(partial, "grpo", pass_threshold=1.0).examples == []
    assert build_rl_dataset(partial, "grpo", pass_threshold=1.0).skipped["equal_rewards"] == 4
    raw = build_rl_dataset(partial, "grpo")  # rewards as graded: (0.75 − 0.1875) / std(n − 1) = 0.5625 / 0.375 = 1.5
    assert [round(e.advantage, 4) for e in raw.examples] == [1.5, -0.5, -0.5, -0.5]
    mixed = [roll(1, 1, 1.0), roll(2, 1, 0.75), roll(3, 1, 0.0), roll(4, 1, 0.0)]
    # pass / fail 1, 0, 0, 0: mean 0.25, sample std 0.5 → +1.5 for the pass, −0.5 for each of the others
    assert [round(e.advantage, 4) for e in build_rl_dataset(mixed, "grpo", pass_threshold=1.0).examples] == [
        1.5, -0.5, -0.5, -0.5]
    # a rubric threshold of 0.7 counts the 0.75 as a pass: 1, 1, 0, 0 → ±0.866
    assert [round(e.advantage, 4) for e in build_rl_dataset(mixed, "grpo", pass_threshold=0.7).examples] == [
        0.866, 0.866, -0.866, -0.866]


def test_bad_groups_are_refused_with_the_reason():
    with pytest.raises(BadTrainingData, match="sampling log-probs"):
        build_rl_dataset([roll(1, 1, 1.0, logprobs=False), roll(2, 1, 0.0, logprobs=False)], "grpo")
    with pytest.raises(BadTrainingData, match="reward nan"):
        build_rl_dataset([roll(1, 1, math.nan), roll(2, 1, 0.0)], "grpo")
    ones = build_rl_dataset([roll(1, 1, 1.0), roll(2, 2, 0.0)], "grpo")
    with pytest.raises(BadTrainingData, match=r"single rollout \(k = 1\).*--rollouts 4"):
        require_rl_examples(ones, "s")


def test_rescoring_uses_the_sampling_context_and_adapter():
    g = build_rl_dataset([roll(1, 1, 1.0, guided=True, adapter="adapter-0002"), roll(2, 1, 0.0, guided=True,
                                                                                     adapter="adapter-0002")],
                         "guide-grpo")
    seen = []

    def score(adapter_id, msgs, ids):
        seen.append((adapter_id, msgs[0]["content"], list(ids)))
        return torch.tensor([-0.4, -0.7, -0.1])

    summary = rescore_old_logprobs(g, score, eos_id=2)
    assert seen[0] == ("adapter-0002", "q\n\nHint: h", [5, 6, 2])  # hinted chat, the sampler, end-of-turn included
    assert g.examples[0].old_logprobs == pytest.approx([-0.4, -0.7, -0.1])
    assert summary["stored_vs_rescored_mean_abs"] == pytest.approx(0.15)


# --------------------------------------------------------------------------- the tiny model


@pytest.fixture(scope="module")
def tiny_policy(tiny_dir):
    from agents.backends.local import LocalPolicy

    p = LocalPolicy(model_dir=tiny_dir, device="cpu")
    p.load()
    yield p
    p.close()


def test_tempered_ratio_on_a_tempered_sample(tiny_policy, tiny_dir):
    """π_old of a rollout sampled at T = 0.8 is softmax(logits / 0.8): the untrained LoRA's ratio is 1 there, not at T = 1."""
    from arena.distill.objectives.base import collate
    from arena.distill.objectives.policy_gradient import encode_rl
    from arena.distill.trainer import target_logprobs

    msgs = [{"role": "user", "content": "What is 2 + 3?"}]
    c = tiny_policy.sample(msgs, n=1, temperature=0.8, max_tokens=12, seed=3)[0]
    assert c.token_ids and c.logprobs is not None
    stored_t1 = torch.tensor(c.logprobs)  # what the DB keeps: temperature-1 log-probs of the sampled tokens
    assert tiny_policy.token_logprobs(msgs, c.token_ids).tolist() == pytest.approx(stored_t1.tolist(), abs=1e-4)
    old_t = tiny_policy.token_logprobs(msgs, c.token_ids, temperature=0.8)
    ex = RLExample("grpo", 1, "t", msgs, msgs, list(c.token_ids), old_t.tolist(), False, 1.0)
    enc, _ = encode_rl(tiny_policy.tokenizer, [ex], 512, tiny_policy.eos_token_id)
    batch = collate(enc, tiny_policy.tokenizer.pad_token_id)
    with torch.no_grad():
        new_t = target_logprobs(tiny_policy.model, batch, temperature=0.8)
        new_1 = target_logprobs(tiny_policy.model, batch, temperature=1.0)
    assert torch.exp(new_t - old_t).tolist() == pytest.approx([1.0] * len(old_t), abs=1e-4)  # the sampler's ratio
    assert not torch.allclose(old_t, stored_t1, atol=1e-3)  # temperature-1 log-probs are another distribution
    assert new_1.tolist() == pytest.approx(stored_t1.tolist(), abs=1e-4)


def test_guided_ratio_is_scored_without_the_hint(tiny_policy):
    from arena.distill.objectives.base import collate
    from arena.distill.objectives.policy_gradient import encode_rl
    from arena.distill.trainer import target_logprobs

    plain = [{"role": "user", "content": "What is 2 + 3?"}]
    hinted = [{"role": "user", "content": "What is 2 + 3?\n\nHint: the answer is 5."}]
    ids = tiny_policy.encode("<answer>5</answer>")
    old = tiny_policy.token_logprobs(hinted, ids, temperature=0.8)
    ex = RLExample("guided-grpo", 1, "t", plain, hinted, ids, old.tolist(), False, 1.0)
    enc, _ = encode_rl(tiny_policy.tokenizer, [ex], 512, tiny_policy.eos_token_id)
    with torch.no_grad():
        new = target_logprobs(tiny_policy.model, collate(enc, tiny_policy.tokenizer.pad_token_id), 0.8)
    assert new.tolist() == pytest.approx(tiny_policy.token_logprobs(plain, ids, temperature=0.8).tolist(), abs=1e-4)
    assert not torch.allclose(new, old, atol=1e-4)  # π_θ(y | x) / π_old(y | x, h) is not 1


def test_tiny_model_loss_falls(tiny_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from agents.backends.local import LocalPolicy
    from arena.distill.config import TrainConfig
    from arena.distill.trainer import fit

    scorer = LocalPolicy(model_dir=tiny_dir, device="cpu")
    tok = AutoTokenizer.from_pretrained(tiny_dir)
    tok.pad_token = "<|endoftext|>"
    msgs = [{"role": "user", "content": "What is 2 + 3?"}]
    hinted = [{"role": "user", "content": "What is 2 + 3?\n\nHint: 5"}]
    # rollouts with advantage +1 (the first, and the guided last) and -1; distinct words, so the updates do not conflict
    texts = ["five five five", "seven seven seven", "seven eight nine", "five six five"]
    examples = []
    for i, (text, a) in enumerate(zip(texts, [1.0, -1.0, -1.0, 1.0], strict=True)):
        ids = tok(text, add_special_tokens=False)["input_ids"]
        guided = i == 3
        old = scorer.token_logprobs(hinted if guided else msgs, ids, temperature=0.8).tolist()
        examples.append(RLExample("guided-grpo" if guided else "grpo", i, "t", msgs, hinted if guided else msgs, ids,
                                  old, False, a))
    scorer.close()
    model = AutoModelForCausalLM.from_pretrained(tiny_dir)
    cfg = TrainConfig(lr=1e-2, max_steps=12, batch_size=4, grad_accum=1, warmup_steps=0, dropout=0.0, temperature=0.8,
                      kl_coef=0.01)
    _, res = fit(model, tok, examples, cfg, "guide-grpo")
    assert res.steps == 12 and all(math.isfinite(x) for x in res.losses)
    assert res.losses[-1] < res.losses[0] - 0.05, res.losses
    m = res.metrics()
    assert m["gamma_mean"] is not None and 0 <= m["clip_fraction"] <= 1 and m["kl_mean"] > 0


# --------------------------------------------------------------------------- arena distill


@pytest.fixture
def db(tmp_path, tiny):
    path = tmp_path / "arena.db"
    make_session(path, tiny)
    return path


def test_distill_guide_grpo_end_to_end(db, tiny, tmp_path, arena_inproc):  # noqa: F811
    proc = arena_inproc("distill", "--db", str(db), "--base-model", str(tiny), "--objective", "guide-grpo", "--steps", "2",
                        "--eval-max-tokens", "2", "--kl-coef", "0.05", "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["objective"] == "guide-grpo" and out["adapter_id"] == "adapter-0001"
    # per episode: 2 unguided rollouts (rewards 1, 0) and 1 guided one (a group of one: dropped)
    assert out["data"]["by_kind"] == {"grpo": 4, "guided-grpo": 0} and out["data"]["groups"] == 2
    assert out["data"]["skipped"] == {"group_of_one": 2}
    pi_old = out["data"]["report"]["pi_old"]
    assert pi_old["temperature"] == 0.8 and pi_old["examples"] == 4 and pi_old["sampled_by"] == ["base"]
    assert out["train"]["steps"] == 2 and "clip_fraction" in out["train"] and out["train"]["kl_mean"] is not None
    # lessons stay in the training context (PPO's ratio needs the sampling chat): none is trained in or distilled
    assert out["in_context"] == [] and out["distilled"] == []
    with sqlite3.connect(db) as c:
        assert c.execute("select adapter_id, objective from adapters").fetchall() == [("adapter-0001", "guide-grpo")]
        cfg = json.loads(c.execute("select config from adapters").fetchone()[0])
    assert cfg["train"]["temperature"] == 0.8 and cfg["train"]["kl_coef"] == 0.05


def _no_adapter(db, tmp_path):
    assert not (tmp_path / "adapters").exists()
    with sqlite3.connect(db) as c:
        assert c.execute("select count(*) from adapters").fetchone()[0] == 0


def test_rollouts_without_logprobs_are_one_line(db, tiny, tmp_path, arena_inproc):  # noqa: F811
    with sqlite3.connect(db) as c:
        c.execute("update rollouts set logprobs = NULL")
    proc = arena_inproc("distill", "--db", str(db), "--base-model", str(tiny), "--objective", "grpo")
    assert_one_line_error(proc, "objective grpo needs the sampling log-probs", "OpenAI-compatible", "--solver local")
    _no_adapter(db, tmp_path)


def test_groups_of_one_are_one_line(db, tiny, tmp_path, arena_inproc):  # noqa: F811
    with sqlite3.connect(db) as c:  # keep one rollout per episode and guidance: k = 1
        c.execute("delete from rollouts where id not in (select min(id) from rollouts group by episode_id, guided)")
    proc = arena_inproc("distill", "--db", str(db), "--base-model", str(tiny), "--objective", "guide-grpo")
    assert_one_line_error(proc, "single rollout (k = 1)", "--rollouts 4")
    _no_adapter(db, tmp_path)


def test_nan_loss_is_one_line(db, tiny, tmp_path, arena_inproc, monkeypatch):  # noqa: F811
    import arena.distill.objectives.policy_gradient as policy_gradient

    monkeypatch.setattr(policy_gradient, "ppo_clip_loss", lambda new, old, adv, eps: new * math.nan)
    proc = arena_inproc("distill", "--db", str(db), "--base-model", str(tiny), "--objective", "grpo", "--steps", "1",
                        "--eval-max-tokens", "2")
    # in this process the loading and training progress bars share stderr; the error is its one last line
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and proc.stdout == ""
    assert proc.stderr.strip().splitlines()[-1].startswith("arena: error: loss became nan at step 1; lower --lr")
    _no_adapter(db, tmp_path)


def test_kl_coef_needs_a_policy_gradient_objective(db, arena_inproc):  # noqa: F811
    proc = arena_inproc("distill", "--db", str(db), "--kl-coef", "0.1")
    assert_one_line_error(proc, "--kl-coef applies to the objectives grpo, guide-grpo")


def test_sleep_objectives_and_temperature():
    from arena.config import SessionConfig
    from arena.session.cycles import sleep_config

    cfg = SessionConfig(db="x.db", cycles=2, sleep_objective="guide-grpo", temperature=0.7)
    d = sleep_config(cfg, 1)
    assert d.objective == "guide-grpo" and d.train.temperature == 0.7
    # distill: Guide's weights of its guided examples are ratios at the sampling temperature too; sft has none
    assert sleep_config(SessionConfig(db="x.db", cycles=2, temperature=0.7), 1).train.temperature == 0.7
    assert sleep_config(SessionConfig(db="x.db", cycles=2, temperature=0.7, sleep_objective="sft"), 1).train.temperature == 1.0
    assert SessionConfig(db="x.db", cycles=2, sleep_objective="grpo").sleep == "grpo"


# the LoRA dropout each objective trains with by default, in a sleep and in `arena distill`
DEFAULT_DROPOUT = {"grpo": 0.0, "guide-grpo": 0.0, "distill": 0.0, "guided-unweighted": 0.0, "sft": 0.05, "opcd": 0.05}


@pytest.mark.parametrize("objective", sorted(DEFAULT_DROPOUT))
def test_objectives_with_importance_ratios_train_without_lora_dropout(objective, tmp_path, monkeypatch):
    """π_θ in PPO's and Guide's ratios (and distill's Guide weights) is the policy π_old was scored with: no dropout,
    so a ratio is 1 before any update; guided-unweighted, distill's ablation, trains as distill does."""
    from arena.cli import distill as distill_cli
    from arena.config import SessionConfig
    from arena.distill.config import DistillConfig, TrainConfig, default_dropout
    from arena.session.cycles import sleep_config

    dropout = DEFAULT_DROPOUT[objective]
    assert default_dropout(objective) == dropout
    assert sleep_config(SessionConfig(db="x.db", cycles=2, sleep_objective=objective), 1).train.dropout == dropout
    built: list[DistillConfig] = []

    class Captured(Exception):
        pass

    def capture(**kwargs):  # the config `arena distill` builds, stopped before any work
        built.append(DistillConfig(**kwargs))
        raise Captured

    monkeypatch.setattr("arena.distill.config.DistillConfig", capture)
    with pytest.raises(Captured):
        distill_cli.distill(db=str(tmp_path / "x.db"), objective=objective)
    assert built and built[0].train.dropout == dropout
    if objective in ("grpo", "guide-grpo"):  # refused outright: their ratios are on-policy
        with pytest.raises(ValueError, match=rf"{objective} trains with LoRA dropout 0 .* got 0.05; set dropout 0"):
            DistillConfig(objective=objective, train=TrainConfig(dropout=0.05))


@pytest.mark.parametrize("objective", ["distill", "sft"])
def test_a_guided_tokens_weight_is_the_same_on_every_forward_only_without_dropout(objective, tiny_dir):
    """distill's Guide weight of a hinted token, from two training-mode forwards of one adapter: equal without dropout."""
    from peft import get_peft_model

    from agents.backends.local import LocalPolicy
    from arena.distill.config import TrainConfig, default_dropout
    from arena.distill.losses import importance_weights
    from arena.distill.trainer import completion_logits, lora_config

    policy = LocalPolicy(model_dir=tiny_dir, device="cpu", dtype=torch.float32)
    policy.load()
    torch.manual_seed(0)
    model = get_peft_model(policy.model, lora_config(TrainConfig(dropout=default_dropout(objective))))
    with torch.no_grad():  # a trained adapter: B ≠ 0, so dropout on the LoRA input reaches the output
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0.0, 0.5)
    model.train()
    ids = torch.tensor([[1, 5, 9, 14, 3, 7, 11, 2, 6, 8, 4, 10]])
    tmask = torch.zeros(1, 11, dtype=torch.bool)
    tmask[0, 5:] = True
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "target_mask": tmask}
    targets = ids[:, 1:][tmask]
    old = torch.full((6,), -2.0)  # π_old of the hinted tokens under the guided context
    hinted = torch.ones(6, dtype=torch.bool)

    def weights() -> torch.Tensor:
        logp = -torch.nn.functional.cross_entropy(completion_logits(model, batch), targets, reduction="none")
        return importance_weights(logp, old, hinted, 0.9, 1e-4)[0]

    first, second = weights(), weights()
    if objective == "distill":
        assert torch.equal(first, second)
    else:  # sft keeps dropout 0.05: the same adapter gives other log-probs, hence other weights, on each forward
        assert not torch.equal(first, second)
    policy.close()


def test_distill_rescores_pi_old_under_the_adapter_that_sampled(db, tiny, tmp_path, arena_inproc):  # noqa: F811
    proc = arena_inproc("distill", "--db", str(db), "--base-model", str(tiny), "--objective", "grpo", "--steps", "1",
                        "--eval-max-tokens", "2", "--json")
    assert proc.returncode == 0, proc.stderr
    base_pi_old = json.loads(proc.stdout)["data"]["report"]["pi_old"]
    with sqlite3.connect(db) as c:  # as if adapter-0001 had sampled the session (arena run --adapter adapter-0001)
        c.execute("update rollouts set adapter_id = 'adapter-0001'")
    proc = arena_inproc("distill", "--db", str(db), "--base-model", str(tiny), "--objective", "grpo", "--steps", "1",
                        "--eval-max-tokens", "2", "--json")
    assert proc.returncode == 0, proc.stderr
    pi_old = json.loads(proc.stdout)["data"]["report"]["pi_old"]
    assert pi_old["sampled_by"] == ["adapter-0001"] and base_pi_old["sampled_by"] == ["base"]
    assert pi_old["stored_vs_rescored_mean_abs"] != base_pi_old["stored_vs_rescored_mean_abs"]  # another policy
    with sqlite3.connect(db) as c:
        c.execute("update rollouts set adapter_id = 'adapter-0099'")
    proc = arena_inproc("distill", "--db", str(db), "--base-model", str(tiny), "--objective", "grpo")
    assert proc.returncode == 2 and "sampled by adapter 'adapter-0099'" in proc.stderr.strip().splitlines()[-1]


# --------------------------------------------------------------------------- arena run --cycles --sleep-objective grpo


def test_wake_sleep_cycles_with_a_grpo_sleep(tmp_path, tiny):
    from langgraph.checkpoint.memory import InMemorySaver
    from session_scripts import solver_responder, teacher_responder, write_tasks

    from agents.backends.fake import FakePolicy
    from agents.capabilities import Capability
    from arena.config import SessionConfig
    from arena.episode.context import Roles
    from arena.session.cycles import cycle_adapters
    from arena.session.runner import run_session
    from arena.tasks.sources import load_tasks
    from lessons.library.store import LessonStore

    class SamplerWithLogprobs(FakePolicy):
        """The fake solver, with sampling log-probs as the local backend records them."""

        capabilities = frozenset({Capability.SAMPLE, Capability.SAMPLE_LOGPROBS})

        def sample(self, messages, n=1, **kw):
            outs = super().sample(messages, n, **kw)
            return [replace(c, logprobs=[-1.0] * len(c.token_ids)) for c in outs]

    tasks = write_tasks(tmp_path / "adding.jsonl")
    cfg = SessionConfig(db=str(tmp_path / "arena.db"), families=[], tasks_file=tasks, train_tasks=2, heldout_tasks=2,
                        rounds=1, rollouts=4, cycles=2, sleep_objective="grpo", sleep_steps=1, sleep_min_examples=2,
                        utility_every=0, hint_modes=[], max_tokens=8, concurrency=1, temperature=0.7)
    splits = load_tasks([], tasks, n_train=2, n_heldout=2, seed=0)
    with LessonStore(cfg.db) as store:
        roles = Roles(SamplerWithLogprobs(solver_responder, "solver"), FakePolicy(teacher_responder, "teacher"))
        run_session(cfg, store, roles, splits, "s", checkpointer=InMemorySaver(), base_model=tiny)
        a1 = cycle_adapters(store, "s")[1]
    assert a1.objective == "grpo"
    # 2 groups of 4 rollouts, 2 correct in each: every rollout has an advantage of ±0.866
    assert a1.data["report"]["by_kind"] == {"grpo": 8, "guided-grpo": 0} and a1.data["groups"] == 2
    assert a1.data["report"]["pi_old"]["temperature"] == 0.7 and a1.data["report"]["pi_old"]["sampled_by"] == ["base"]
    assert a1.config["train"]["temperature"] == 0.7 and a1.metrics["steps"] == 1
