"""`arena distill` and `arena eval`: LoRA adapters from a session's rollouts, and their held-out pass@1."""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.table import Table

from arena.cli.critic import critic_calibrate
from arena.cli.support import EXIT_INTERRUPTED, config_error, fail, fmt_rate, quiet_libraries, require_db_file
from arena.objectives import choices_help, get_objective


def _print_eval_table(title: str, evals: dict, console: Console) -> None:
    from arena.distill.pipeline import CONDITION_LABELS

    t = Table(title=title)
    for col in ("condition", "held-out pass@1", "95% CI", "n"):
        t.add_column(col)
    for name, e in evals.items():
        lo, hi = e["ci95"]
        t.add_row(CONDITION_LABELS.get(name, name), fmt_rate(e["pass_at_1"]), f"[{lo:.3f}, {hi:.3f}]", str(e["n"]))
    console.print(t)


def distill(
    db: Annotated[str, typer.Option(help="Lesson library: SQLite path or SQLAlchemy URL.")] = "arena.db",
    session: Annotated[Optional[str], typer.Option(help="Session whose train rollouts are the data (default: the newest with rollouts).")] = None,
    objective: Annotated[str, typer.Option(help=f"The training objective: {choices_help()}.")] = "distill",
    out: Annotated[Optional[Path], typer.Option(help="Adapter directory (default: adapters/<adapter id> beside the database).")] = None,
    base_model: Annotated[Optional[Path], typer.Option(help="A transformers checkpoint directory (default: the embedded SmolLM2-135M-Instruct).")] = None,
    success_threshold: Annotated[float, typer.Option(help="Reward at which a rollout is training data.")] = 1.0,
    lesson_tokens: Annotated[int, typer.Option(help="Lessons budget of the with-lessons evaluations, tokens.")] = 512,
    eval_max_tokens: Annotated[int, typer.Option(help="Completion cap of the held-out evaluation, tokens.")] = 96,
    steps: Annotated[int, typer.Option(help="Optimizer steps (0: from --epochs).")] = 0,
    epochs: Annotated[float, typer.Option(help="Passes over the data when --steps is 0.")] = 3.0,
    lr: Annotated[float, typer.Option(help="Peak learning rate (AdamW, warm-up then cosine decay).")] = 2e-4,
    rank: Annotated[int, typer.Option(help="LoRA rank.")] = 16,
    alpha: Annotated[int, typer.Option(help="LoRA alpha.")] = 32,
    batch_size: Annotated[int, typer.Option(help="Sequences per micro-batch.")] = 4,
    grad_accum: Annotated[int, typer.Option(help="Micro-batches per optimizer step.")] = 2,
    max_seq_len: Annotated[int, typer.Option(help="Longest prompt + completion trained on, tokens.")] = 512,
    seed: Annotated[int, typer.Option(help="Seed of data order, LoRA init and dropout.")] = 0,
    min_guided_log_ratio: Annotated[float, typer.Option(help="Guided successes whose mean log π(y|x) − log π_old(y|x,hint) is below this (nats/token) are skipped; -inf keeps all.")] = -1.0,
    min_examples: Annotated[int, typer.Option(help="Refuse to train on fewer examples than this.")] = 1,
    kl_coef: Annotated[float, typer.Option(help="grpo / guide-grpo: weight of the per-token KL to the base model (adapter disabled); 0: none.")] = 0.0,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object on stdout at the end.")] = False,
) -> None:
    """Distill a session's lessons and guided successes into a LoRA adapter, then evaluate and register it."""
    try:
        get_objective(objective)  # before anything that imports torch, and before its default dropout is looked up
    except ValueError as e:
        raise fail(f"--objective: {e}") from None
    quiet_libraries()
    from agents.policy import PolicyError
    from arena.distill.config import DistillConfig, TrainConfig, default_dropout
    from arena.distill.data import NoTrainingData
    from arena.distill.pipeline import DistillError, run_distill
    from arena.distill.errors import TrainingError
    from arena.distill.weights import AdapterError
    from arena.tasks.model import TaskError
    from lessons.library.store import LessonStore, StoreError

    console = Console(stderr=True)
    store = None
    try:
        cfg = DistillConfig(
            objective=objective, success_threshold=success_threshold, lesson_tokens=lesson_tokens,
            eval_max_tokens=eval_max_tokens, min_guided_log_ratio=min_guided_log_ratio, min_examples=min_examples,
            train=TrainConfig(max_steps=steps, epochs=epochs, lr=lr, rank=rank, alpha=alpha, batch_size=batch_size,
                              grad_accum=grad_accum, max_seq_len=max_seq_len, seed=seed, kl_coef=kl_coef,
                              dropout=default_dropout(objective)),
        )
        if base_model is not None and not (base_model / "config.json").is_file():
            raise DistillError(f"--base-model {base_model}: not a transformers checkpoint directory (no config.json)")
        require_db_file(db)
        store = LessonStore(db)
        if session is None:
            from arena.distill.pipeline import latest_session

            session = latest_session(store, db)
        info = store.get_session(session)
        reward = (info.config or {}).get("reward", "verifier") if info is not None else "verifier"
        if reward != "verifier":
            raise DistillError(
                f"session {session!r} uses --reward {reward}: arena distill evaluates verifier pass@1 and "
                "needs a session with verifier rewards"
            )
        with contextlib.redirect_stdout(sys.stderr):
            summary = run_distill(store, db, session, cfg, out, base_model, console=console)
    except ValidationError as e:
        raise fail(config_error(e)) from None
    except (DistillError, NoTrainingData, AdapterError, TrainingError, StoreError, PolicyError, TaskError) as e:
        raise fail(str(e)) from None
    except KeyboardInterrupt:
        raise fail("interrupted; no adapter was registered", EXIT_INTERRUPTED) from None
    finally:
        if store is not None:
            store.close()
    if json_out:
        print(json.dumps(summary))
        return
    c = Console()
    tr = summary["train"]
    c.print(f"[bold]{summary['adapter_id']}[/] → {summary['adapter_path']}  (objective {summary['objective']}, "
            f"session {summary['session']})")
    c.print(f"data: {summary['data']['examples']} examples {summary['data']['by_kind']}; train: {tr['steps']} steps, "
            f"{tr['tokens']} tokens, final loss {tr['final_loss']:.4f}, {tr['tokens_per_s']:.0f} tok/s")
    _print_eval_table(f"held-out pass@1, {summary['adapter_id']}", summary["eval"], c)
    c.print(f"distilled lessons: {', '.join(summary['distilled']) or 'none'}")
    c.print(f"recorded per task as: {', '.join(summary['evaluations'])}")


def eval_cmd(
    db: Annotated[str, typer.Option(help="Lesson library: SQLite path or SQLAlchemy URL.")] = "arena.db",
    session: Annotated[Optional[str], typer.Option(help="Session whose held-out tasks are evaluated (default: the newest with rollouts).")] = None,
    adapter: Annotated[Optional[str], typer.Option(help="Adapter id (adapter-0001) or directory; without it the base model is evaluated.")] = None,
    base_model: Annotated[Optional[Path], typer.Option(help="A transformers checkpoint directory (default: the embedded model).")] = None,
    lesson_tokens: Annotated[Optional[int], typer.Option(help="Lessons budget of the with-lessons evaluation, tokens (default: the session's).")] = None,
    max_tokens: Annotated[Optional[int], typer.Option(help="Completion cap, tokens (default: the session's, so the figures pair with its own held-out evaluations).")] = None,
    critic: Annotated[bool, typer.Option("--critic", help="Instead: the rubric judge's calibration against verifiers (as `arena critic calibrate`).")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object on stdout.")] = False,
) -> None:
    """Held-out greedy pass@1 of the local solver (optionally with an adapter), without and with lessons."""
    if critic:
        critic_calibrate(db=db, session=session, json_out=json_out)
        return
    quiet_libraries()
    from agents.policy import PolicyError
    from arena.distill.pipeline import DistillError, latest_session, run_eval
    from arena.distill.weights import AdapterError
    from arena.tasks.model import TaskError
    from lessons.library.store import LessonStore, StoreError

    store = None
    try:
        if (lesson_tokens is not None and lesson_tokens < 0) or (max_tokens is not None and not 1 <= max_tokens <= 4096):
            raise DistillError("--lesson-tokens must be >= 0 and --max-tokens in [1, 4096]")
        require_db_file(db)
        store = LessonStore(db)
        session = session or latest_session(store, db)
        info = store.get_session(session)
        reward = (info.config or {}).get("reward", "verifier") if info is not None else "verifier"
        if reward != "verifier":
            raise DistillError(
                f"session {session!r} uses --reward {reward}: arena eval measures verifier pass@1; "
                "see its held-out rewards in `arena run --json` and the judge in `arena eval --critic`"
            )
        with contextlib.redirect_stdout(sys.stderr):
            result = run_eval(store, db, session, adapter, lesson_tokens, max_tokens, base_model)
    except (DistillError, AdapterError, StoreError, PolicyError, TaskError) as e:
        raise fail(str(e)) from None
    except KeyboardInterrupt:
        raise fail("interrupted", EXIT_INTERRUPTED) from None
    finally:
        if store is not None:
            store.close()
    if json_out:
        print(json.dumps(result))
    else:
        _print_eval_table(f"held-out pass@1, {result['adapter_id'] or result['adapter_path'] or 'base model'}",
                          result["eval"], Console())
