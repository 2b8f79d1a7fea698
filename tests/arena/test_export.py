"""``arena export rollouts`` and ``arena.rewards``: the exported rows re-scored by the engines' reward functions give the stored rewards."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from cli_helpers import arena, assert_one_line_error

from arena.rewards import compute_score, task_from_json, trl_reward
from arena.tasks.sources import load_tasks
from lessons.library.store import EpisodeRecord, HintRecord, LessonStore, RolloutRecord
from lessons.ops import Reflection

HINT = "Add the numbers one at a time."


def _rollout(idx: int, text: str, reward: float | None, guided: bool = False, ids: bool = False) -> RolloutRecord:
    unguided = [{"role": "system", "content": "Solve it."}, {"role": "user", "content": "q"}]
    msgs = [unguided[0], {"role": "user", "content": f"q\n\nHint: {HINT}"}] if guided else unguided
    return RolloutRecord(idx=idx, messages=msgs, completion=text, extracted_answer=None, reward=reward, critique="",
                         prompt_tokens=10, completion_tokens=3, finish_reason="stop", latency_s=0.1, guided=guided,
                         token_ids=[11, 12, 13] if ids else None, logprobs=[-0.5, -0.25, -1.0] if ids else None,
                         unguided_messages=unguided if guided else None)


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list]:
    """Two reasoning-gym chain_sum train tasks: task 0 solved twice of three, task 1 all wrong then rescued by a hint."""
    path = tmp_path_factory.mktemp("export") / "arena.db"
    tasks = load_tasks(["chain_sum"], None, 2, 1, seed=0).train
    a, b = tasks
    with LessonStore(str(path)) as store:
        sid = store.create_session("s", {"families": ["chain_sum"], "rollouts": 3, "train_tasks": 2, "heldout_tasks": 1}, seed=0)
        store.upsert_tasks(sid, tasks)
        store.record_episode(EpisodeRecord(sid, "r001-a", 1, a.task_key, "Solve it.", [], [
            _rollout(0, f"<answer>{a.answer}</answer>", 1.0, ids=True),
            _rollout(1, "<answer>-1</answer>", 0.0, ids=True),
            _rollout(2, f"so it is {a.answer}", 1.0, ids=True),
            _rollout(3, "judge crashed", None),  # ungraded: never exported
        ], Reflection(analysis="-"), reflection_raw="{}"))
        store.record_episode(EpisodeRecord(sid, "r001-b", 1, b.task_key, "Solve it.", [], [
            _rollout(0, "<answer>-1</answer>", 0.0), _rollout(1, "no idea", 0.0), _rollout(2, "<answer>-2</answer>", 0.0),
            _rollout(0, f"<answer>{b.answer}</answer>", 1.0, guided=True), _rollout(1, "<answer>-3</answer>", 0.0, guided=True),
        ], Reflection(analysis="-"), reflection_raw="{}", hint=HintRecord("plan", HINT)))
        store.create_session("empty", {"families": ["chain_sum"]}, seed=1)
    return path, tasks


def _read(path: str) -> list[dict]:
    from datasets import Dataset

    return Dataset.from_parquet(path).to_list()


def test_hf_layout_reads_back_and_trl_reward_gives_the_stored_rewards(db, tmp_path: Path) -> None:
    path, (a, b) = db
    proc = arena("export", "rollouts", str(tmp_path / "hf"), "--session", "s", "--db", str(path), "--json")
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    assert (info["rows"], info["groups"], info["guided"]) == (8, 3, 2)  # 9 rollouts, the ungraded one left out
    rows = _read(info["path"])
    assert [r["reward"] for r in rows] == [1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0, 0.0]
    assert rows[0]["token_ids"] == [11, 12, 13] and rows[0]["logprobs"] == [-0.5, -0.25, -1.0]
    assert rows[3]["token_ids"] is None
    guided = [r for r in rows if r["guided"]]
    assert len(guided) == 2 and all(r["hint"] == HINT for r in guided)
    assert all(HINT not in m["content"] for r in rows for m in r["prompt"])  # the unguided context only
    assert len({r["group_id"] for r in rows}) == 3
    assert {r["answer"] for r in rows} == {a.answer, b.answer}
    # TRL calls the reward function with the batch's columns as lists
    rewards = trl_reward([r["prompt"] for r in rows], [r["completion"] for r in rows],
                         task=[r["task"] for r in rows], answer=[r["answer"] for r in rows])
    assert rewards == [r["reward"] for r in rows]
    sidecar = json.loads((tmp_path / "hf" / "arena_export.json").read_text())
    assert (sidecar["format"], sidecar["session"], sidecar["rows"]) == ("hf", "s", 8)
    assert sidecar["reward_function"] == "arena.rewards.trl_reward" and len(sidecar["rollout_ids"]) == 8


def test_verl_layout_and_compute_score(db, tmp_path: Path) -> None:
    path, (a, _) = db
    proc = arena("export", "rollouts", str(tmp_path / "verl"), "--session", "s", "--db", str(path), "--format", "verl")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("wrote 8 rollouts (3 groups, 2 guided)")
    rows = _read(str(tmp_path / "verl" / "train.parquet"))
    assert set(rows[0]) == {"data_source", "prompt", "ability", "reward_model", "extra_info", "hint"}
    assert rows[0]["data_source"] == "lesson_arena/chain_sum"
    assert rows[0]["reward_model"] == {"style": "rule", "ground_truth": a.answer}
    assert [r["hint"] for r in rows] == [""] * 6 + [HINT] * 2
    scores = [compute_score(r["data_source"], r["extra_info"]["completion"], r["reward_model"]["ground_truth"], r["extra_info"])
              for r in rows]
    assert scores == [r["extra_info"]["reward"] for r in rows]
    # without the task JSON the response is matched against ground_truth as a JSONL task is
    assert compute_score("x", "<answer>42</answer>", "42") == 1.0 and compute_score("x", "<answer>41</answer>", "42") == 0.0


def test_existing_export_is_never_overwritten(db, tmp_path: Path) -> None:
    path, _ = db
    out = tmp_path / "once"
    assert arena("export", "rollouts", str(out), "--session", "s", "--db", str(path)).returncode == 0
    before = (out / "train.parquet").read_bytes()
    assert_one_line_error(arena("export", "rollouts", str(out), "--session", "s", "--db", str(path)), "already holds an export")
    assert (out / "train.parquet").read_bytes() == before


def test_an_export_is_an_ordinary_file_and_its_one_line_is_the_only_output(db, tmp_path: Path) -> None:
    """The data file and sidecar get ``0666`` less the umask (not mkstemp's ``0600``: the trainer is often another
    user's job), and stderr stays empty: no ``datasets`` progress bar beside the one line on stdout."""
    path, _ = db
    old = os.umask(0o022)
    try:
        proc = arena("export", "rollouts", str(tmp_path / "x"), "--session", "s", "--db", str(path))
    finally:
        os.umask(old)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert proc.stdout.count("\n") == 1
    for name in ("train.parquet", "arena_export.json"):
        assert stat.S_IMODE((tmp_path / "x" / name).stat().st_mode) == 0o644, name


@pytest.mark.parametrize(("args", "fragment"), [
    (["--session", "nope"], "no session named 'nope'"),
    (["--session", "empty"], "has no train rollout to export"),
    (["--session", "s", "--format", "jsonl"], "--format must be one of hf, verl"),
])
def test_bad_input_is_one_line(db, tmp_path: Path, args: list[str], fragment: str) -> None:
    path, _ = db
    assert_one_line_error(arena("export", "rollouts", str(tmp_path / "o"), "--db", str(path), *args), fragment)
    assert not (tmp_path / "o").exists()


def test_reward_function_rejects_malformed_columns() -> None:
    with pytest.raises(ValueError, match="needs the `task` column"):
        trl_reward(["p"], ["c"])
    with pytest.raises(ValueError, match="1 completions but 2 tasks"):
        trl_reward(["p"], ["c"], task=["{}", "{}"])
    with pytest.raises(ValueError, match="lacks"):
        task_from_json('{"task_key": "k"}')
    with pytest.raises(ValueError, match="not a JSON object"):
        task_from_json("[1, 2")
    good = {"task_key": "f/train/00000", "family": "f", "split": "train", "question": "q", "answer": "7",
            "source": "shell", "metadata": {}}
    with pytest.raises(ValueError, match="unknown source 'shell'"):
        task_from_json(good)
    assert trl_reward(["p"], ["<answer>7</answer>"], task=[json.dumps({**good, "source": "jsonl"})]) == [1.0]
    assert trl_reward(["p"], [[{"role": "assistant", "content": "<answer>7</answer>"}]],
                      task=[json.dumps({**good, "source": "jsonl"})]) == [1.0]


@pytest.mark.slow
def test_trl_grpo_trainer_trains_on_an_export_with_our_reward_and_arena_eval_loads_its_adapter(db, tmp_path: Path) -> None:
    """Not a mock: TRL's GRPOTrainer, two steps on CPU, the embedded model with a peft LoRA, the exported
    data set and ``arena.rewards.trl_reward``; the adapter it saves is then evaluated by ``arena eval``."""
    from datasets import Dataset
    from peft import LoraConfig
    from trl import GRPOConfig, GRPOTrainer

    from agents.backends.local import LocalPolicy

    path, _ = db
    assert arena("export", "rollouts", str(tmp_path / "hf"), "--session", "s", "--db", str(path)).returncode == 0
    data = Dataset.from_parquet(str(tmp_path / "hf" / "train.parquet"))
    seen: list[tuple[str, float]] = []

    def reward(prompts, completions, **columns):
        out = trl_reward(prompts, completions, **columns)
        seen.extend(zip(columns["task_key"], out, strict=True))
        return out

    policy = LocalPolicy()
    policy.load()
    args = GRPOConfig(output_dir=str(tmp_path / "trl"), max_steps=2, per_device_train_batch_size=2, num_generations=2,
                      generation_batch_size=2, max_completion_length=16, use_cpu=True, report_to=[], logging_steps=1,
                      save_strategy="no", learning_rate=1e-4, disable_tqdm=True, seed=0)
    trainer = GRPOTrainer(model=policy.model, reward_funcs=[reward], args=args, train_dataset=data,
                          processing_class=policy.tokenizer,
                          peft_config=LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM"))
    trainer.train()
    steps = [h for h in trainer.state.log_history if "reward" in h]
    assert [h["step"] for h in steps] == [1, 2]
    assert len(seen) == 4 and all(0.0 <= r <= 1.0 for _, r in seen)  # 2 steps × 2 generations, scored by our verifier
    assert {k for k, _ in seen} <= set(data["task_key"])
    trainer.save_model(str(tmp_path / "adapter"))
    assert (tmp_path / "adapter" / "adapter_model.safetensors").exists()
    # imported: checked against the base model, copied, evaluated, registered with lineage to the export
    proc = arena("adapters", "import", str(tmp_path / "adapter"), "--session", "s", "--db", str(path), "--name", "trl-grpo",
                 "--data", str(tmp_path / "hf"), "--max-tokens", "16", "--json")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert (result["adapter_id"], result["objective"], result["rank"]) == ("trl-grpo", "imported", 8)
    assert set(result["eval"]) >= {"base", "base_lessons", "adapter", "adapter_lessons"}
    assert result["eval"]["adapter"]["n"] == 1 and result["eval"]["adapter"]["pass_at_1"] in (0.0, 1.0)
    with LessonStore(str(path)) as store:
        from lessons.library.adapters import AdapterStore

        (info,) = [a for a in AdapterStore(store).list_adapters() if a.adapter_id == "trl-grpo"]
    sidecar = json.loads((tmp_path / "hf" / "arena_export.json").read_text())
    assert info.data["rollout_ids"] == sidecar["rollout_ids"] and info.data["export"]["format"] == "hf"
    assert Path(info.path).is_dir() and Path(info.path) != tmp_path / "adapter"
    # the same name twice is refused, and nothing is copied again
    again = arena("adapters", "import", str(tmp_path / "adapter"), "--session", "s", "--db", str(path), "--name", "trl-grpo")
    assert_one_line_error(again, "already registered")
    # arena eval loads it by id
    proc = arena("eval", "--db", str(path), "--session", "s", "--adapter", "trl-grpo", "--max-tokens", "16", "--json")
    assert proc.returncode == 0, proc.stderr


def _peft_adapter(base_dir: Path, out: Path) -> Path:
    """A LoRA adapter (r = 4, q/v projections) made with peft on the checkpoint in ``base_dir``."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    model = get_peft_model(AutoModelForCausalLM.from_pretrained(base_dir),
                           LoraConfig(r=4, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM"))
    model.save_pretrained(out)
    return out


def test_lora_shapes_are_checked_against_the_base_model(tmp_path: Path) -> None:
    from tiny_llama import make_tiny

    from arena.distill.imports import check_lora_shapes
    from arena.distill.weights import AdapterError

    narrow = make_tiny(tmp_path / "narrow", hidden=64)
    wide = make_tiny(tmp_path / "wide", hidden=128)
    adapter = _peft_adapter(narrow, tmp_path / "lora")
    assert check_lora_shapes(adapter, narrow) == 4
    with pytest.raises(AdapterError, match="trained on another model size"):
        check_lora_shapes(adapter, wide)
    from safetensors.torch import load_file, save_file

    tensors = load_file(str(adapter / "adapter_model.safetensors"))
    save_file({k.replace("q_proj", "nope_proj"): v for k, v in tensors.items()}, str(adapter / "adapter_model.safetensors"))
    with pytest.raises(AdapterError, match="names no linear module"):
        check_lora_shapes(adapter, narrow)
    save_file({"some.other.weight": next(iter(tensors.values()))}, str(adapter / "adapter_model.safetensors"))
    with pytest.raises(AdapterError, match="holds no LoRA tensor"):
        check_lora_shapes(adapter, narrow)


@pytest.mark.parametrize(("args", "fragment"), [
    (["{missing}", "--session", "s"], "no adapter directory at"),
    (["{adapter}", "--session", "nope"], "no session named 'nope'"),
    (["{adapter}", "--session", "s", "--name", "../escape"], "--name must be 1-50 letters"),
    (["{adapter}", "--session", "s", "--data", "{missing}"], "cannot read arena_export.json"),
])
def test_adapters_import_bad_input_is_one_line(db, tmp_path: Path, args: list[str], fragment: str) -> None:
    path, _ = db
    adapter = tmp_path / "not-lora"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text('{"peft_type": "LORA"}')  # no weights: never reached past the first check
    args = [a.format(missing=tmp_path / "missing", adapter=adapter) for a in args]
    adapters = path.parent / "adapters"
    before = sorted(adapters.iterdir()) if adapters.exists() else []
    assert_one_line_error(arena("adapters", "import", *args, "--db", str(path)), fragment)
    assert (sorted(adapters.iterdir()) if adapters.exists() else []) == before  # nothing copied


def test_an_export_into_a_read_only_directory_is_one_error_and_leaves_nothing(db, tmp_path: Path, monkeypatch) -> None:
    """A new user's trial: on a read-only OUT the clean-up's unlink failed too and the export ended in a traceback.

    The read-only filesystem is simulated (CI runs as root, for whom a mode bit is no barrier): every file
    operation under OUT fails with EROFS, as on a ``mount -o ro`` tmpfs.
    """
    import errno
    import tempfile

    from arena.export import ExportError, export_rollouts

    path, _ = db
    out = tmp_path / "ro"
    out.mkdir()
    erofs = OSError(errno.EROFS, os.strerror(errno.EROFS))
    real_unlink = Path.unlink

    def no_file(*a, **k):
        raise erofs

    def unlink(self, missing_ok=False):
        if self.parent == out:
            raise erofs
        return real_unlink(self, missing_ok=missing_ok)

    monkeypatch.setattr(tempfile, "mkstemp", no_file)
    monkeypatch.setattr(Path, "unlink", unlink)
    with LessonStore(str(path)) as store, pytest.raises(ExportError, match="cannot write the export to .*Read-only file system"):
        export_rollouts(store, str(path), "s", "hf", out)
    assert list(out.iterdir()) == []
