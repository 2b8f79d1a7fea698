"""`arena` command line (typer): `arena run` runs a self-play session on the embedded model by default.

Errors a user can cause (unknown family, bad override, unreadable task file, unwritable
database, unreachable endpoint, invalid flag combination) end in ONE line on stderr and exit
code 2, never a traceback, and are detected before anything is written.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.table import Table

app = typer.Typer(
    name="arena",
    help="Lesson Arena: solver, critic and teacher agents that learn lessons from self-play.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

EXIT_USER_ERROR = 2
EXIT_INTERRUPTED = 130


def fail(message: str, code: int = EXIT_USER_ERROR) -> typer.Exit:
    """Print ``arena: error: <message>`` as one line on stderr and return the Exit to raise."""
    line = " ".join(str(message).split())
    print(f"arena: error: {line}", file=sys.stderr)
    return typer.Exit(code)


def _quiet_libraries() -> None:
    """Keep library chatter (conversion progress bars, generation warnings) off the user's terminal."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    logging.getLogger("transformers").setLevel(logging.ERROR)
    import warnings

    warnings.filterwarnings("ignore", category=UserWarning)
    warnings.filterwarnings("ignore", category=FutureWarning)


_FLAG_OF_FIELD = {"families": "family", "hint_modes": "hint-mode"}


def _config_error(e: ValidationError) -> str:
    err = e.errors()[0]
    field = str(err["loc"][0]) if err["loc"] else ""
    msg = err["msg"].removeprefix("Value error, ")
    flag = _FLAG_OF_FIELD.get(field, field.replace("_", "-"))
    return f"--{flag}: {msg}" if field else msg


@app.callback()
def _root() -> None:
    """Lesson Arena command line."""


@app.command()
def run(
    db: Annotated[str, typer.Option(help="Lesson library: SQLite path or SQLAlchemy URL.")] = "arena.db",
    family: Annotated[
        Optional[list[str]],
        typer.Option("--family", help="reasoning-gym family with overrides, e.g. chain_sum:min_terms=2,max_terms=2 (repeatable)."),
    ] = None,
    tasks_file: Annotated[Optional[Path], typer.Option(help='JSONL tasks, one {"question", "answer"} per line.')] = None,
    train_tasks: Annotated[int, typer.Option(help="Train tasks per family (one episode per round each).")] = 4,
    heldout_tasks: Annotated[int, typer.Option(help="Held-out tasks per family for pass@1 before/after.")] = 32,
    rounds: Annotated[int, typer.Option(help="Passes over the train tasks.")] = 2,
    rollouts: Annotated[int, typer.Option(help="Group size k: rollouts per episode.")] = 8,
    temperature: Annotated[float, typer.Option(help="Solver sampling temperature for rollouts.")] = 0.8,
    max_tokens: Annotated[int, typer.Option(help="Solver completion cap in tokens.")] = 96,
    seed: Annotated[int, typer.Option(help="Seed for task draws and sampling.")] = 0,
    session: Annotated[Optional[str], typer.Option(help="Name of the new session (default run-YYYYMMDD-HHMMSS).")] = None,
    resume: Annotated[Optional[str], typer.Option(help="Continue an interrupted session by name (its stored settings are used).")] = None,
    solver: Annotated[str, typer.Option(help="Solver model: local or openai:MODEL.")] = "local",
    critic: Annotated[str, typer.Option(help="Critic: verifier (no model), local or openai:MODEL.")] = "verifier",
    teacher: Annotated[str, typer.Option(help="Teacher model: local or openai:MODEL.")] = "local",
    lesson_tokens: Annotated[int, typer.Option(help="Token budget of the lessons in the solver prompt.")] = 512,
    success_threshold: Annotated[float, typer.Option(help="Reward at which a rollout succeeds; a group with none gets a hint.")] = 1.0,
    hint_mode: Annotated[
        Optional[list[str]],
        typer.Option("--hint-mode", help="Hints for all-fail groups: plan, feedback, answer (repeatable or comma-separated), or none. Default: feedback,answer."),
    ] = None,
    adapter: Annotated[Optional[str], typer.Option(help="LoRA adapter of the local solver: an id (adapter-0001) or a directory; its distilled lessons leave the prompt.")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON summary object on stdout at the end.")] = False,
) -> None:
    """Run a self-play session: held-out pass@1, rounds of solve → grade → reflect → curate, pass@1 again."""
    _quiet_libraries()
    from agents.policy import PolicyError
    from arena.config import DEFAULT_FAMILY, ConfigError, SessionConfig, check_db
    from arena.tasks import TaskError, load_tasks
    from lessons.store import LessonStore, StoreError, check_database

    console = Console(stderr=True)
    store = None
    name = resume or session or "NAME"
    signal.signal(signal.SIGTERM, _raise_interrupt)  # `kill`/`timeout`: stop like Ctrl-C, session marked interrupted
    try:
        check_db(db)
        check_database(db)  # a bad path fails here, before the model loads or anything is created
        if resume:
            store = LessonStore(db)
            info = store.get_session(resume)
            if info is None:
                raise StoreError(f"no session named {resume!r} in {db}")
            if info.status == "finished":
                raise StoreError(f"session {resume!r} already finished; start a new one with --session NAME")
            cfg = SessionConfig.model_validate({**info.config, "db": db})
            name = resume
        else:
            families = list(family) if family else ([] if tasks_file else [DEFAULT_FAMILY])
            cfg = SessionConfig(
                db=db, families=families, tasks_file=tasks_file, train_tasks=train_tasks, heldout_tasks=heldout_tasks,
                rounds=rounds, rollouts=rollouts, temperature=temperature, max_tokens=max_tokens, seed=seed,
                session=session, solver=solver, critic=critic, teacher=teacher, lesson_tokens=lesson_tokens,
                success_threshold=success_threshold,
                **({"hint_modes": list(hint_mode)} if hint_mode is not None else {}),
            )
            if adapter is not None:
                from arena.distill import adapter_for_run

                cfg = cfg.model_copy(update={"adapter": str(adapter_for_run(db, adapter, cfg.solver))})
        # Validate tasks, endpoints and prompt sizes before touching the database, so bad input writes nothing.
        with contextlib.redirect_stdout(sys.stderr):  # some task generators print; stdout is for --json
            splits = load_tasks(cfg.families, cfg.tasks_file, cfg.train_tasks, cfg.heldout_tasks, cfg.seed)
        from arena.runner import check_prompt_lengths, make_roles, run_session

        roles = make_roles(cfg)
        check_prompt_lengths(roles.solver, [*splits.train, *splits.heldout], cfg)
        if store is None:
            store = LessonStore(db)
            name = cfg.session or store.new_session_name()
            if store.get_session(name) is not None:
                raise StoreError(f"session {name!r} already exists; use --resume {name} or pick another --session")
        with contextlib.redirect_stdout(sys.stderr):
            summary = run_session(cfg, store, roles, splits, name, resume=bool(resume), console=console)
    except ValidationError as e:
        raise fail(_config_error(e)) from None
    except (ConfigError, TaskError, StoreError, PolicyError, ValueError) as e:  # DistillError, AdapterError are ValueErrors
        raise fail(str(e)) from None
    except KeyboardInterrupt:
        if store is not None and store.get_session(name) is not None:
            raise fail(f"interrupted; continue with: arena run --db {db} --resume {name}", EXIT_INTERRUPTED) from None
        raise fail("interrupted before the session started; nothing was stored", EXIT_INTERRUPTED) from None
    finally:
        if store is not None:
            store.close()
    if json_out:
        print(json.dumps(summary))
    else:
        print_summary(summary, Console())


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _fmt_eval(e: dict | None) -> str:
    if not e:
        return "-"
    lo, hi = e["ci95"]
    return f"{e['pass_at_1']:.3f}  [{lo:.3f}, {hi:.3f}]  n={e['n']}"


def print_summary(summary: dict, console: Console) -> None:
    """The end-of-session table: counts, rewards and held-out pass@1 with 95% Wilson intervals."""
    t = Table(title=f"session {summary['session']}", show_header=False)
    t.add_column("metric", style="bold")
    t.add_column("value")
    for key in ("episodes", "rollouts", "mean_reward", "lessons_added", "lessons_active", "reflections_failed"):
        t.add_row(key.replace("_", " "), str(summary.get(key)))
    t.add_row("all-fail groups → guided", f"{summary.get('all_fail_groups')} → {summary.get('guided_groups')} "
              f"(guided success rate {summary.get('guided_success_rate')})")
    t.add_row("pass@k unguided → with hints", f"{summary.get('pass_at_k_unguided')} → {summary.get('pass_at_k_with_hints')}")
    for r in summary.get("rounds", []):
        extra = ", ".join(f"{k} {v}" for k, v in r.items() if k.startswith("pass_at"))
        t.add_row(f"round {r['round']}", f"mean reward {r['mean_reward']}, {extra}")
    t.add_row("held-out pass@1 before", _fmt_eval(summary.get("heldout_before")))
    t.add_row("held-out pass@1 after", _fmt_eval(summary.get("heldout_after")))
    t.add_row("  … after, no lessons", _fmt_eval(summary.get("heldout_after_no_lessons")))
    t.add_row("wall time", f"{summary.get('wall_time_s')} s")
    console.print(t)


lessons_app = typer.Typer(help="Inspect and audit the lesson library.", no_args_is_help=True)
app.add_typer(lessons_app, name="lessons")


@lessons_app.command("leaks")
def lessons_leaks(
    db: Annotated[str, typer.Option(help="Lesson library: SQLite path or SQLAlchemy URL.")] = "arena.db",
    session: Annotated[Optional[str], typer.Option(help="Check only this session's held-out tasks and hints.")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the matches as a JSON array.")] = False,
) -> None:
    """Report every lesson or hint that contains a held-out task's question or distinctive answer.

    Exit code 0: no leak; 1: at least one leak (each printed with the task it leaks); 2: bad input.
    """
    _quiet_libraries()
    from dataclasses import asdict

    from lessons.leaks import find_leaks
    from lessons.store import LessonStore, StoreError

    try:
        if "://" not in db and not Path(db).exists():
            raise StoreError(f"no database at {db}; run `arena run --db {db}` first")
        with LessonStore(db) as store:
            if session is not None and store.get_session(session) is None:
                raise StoreError(f"no session named {session!r} in {db}")
            leaks = find_leaks(store, session)
    except StoreError as e:
        raise fail(str(e)) from None
    if json_out:
        print(json.dumps([asdict(x) for x in leaks]))
    elif leaks:
        t = Table(title=f"{len(leaks)} leak(s) of held-out tasks")
        for col in ("source", "id", "leaks task", "by", "text"):
            t.add_column(col)
        for x in leaks:
            t.add_row(x.source, x.source_id, f"{x.session}:{x.task_key}", x.kind, x.excerpt)
        Console().print(t)
    else:
        Console().print("no leaks: no lesson or hint contains a held-out question or distinctive answer")
    if leaks:
        raise typer.Exit(1)


# --------------------------------------------------------------------------- distillation


def _require_db_file(db: str) -> None:
    """A bare SQLite path must exist (opening would create an empty library)."""
    from lessons.store import StoreError

    if "://" not in db and not Path(db).exists():
        raise StoreError(f"no database at {db}; run `arena run --db {db}` first")


def _print_eval_table(title: str, evals: dict, console: Console) -> None:
    from arena.distill import CONDITION_LABELS

    t = Table(title=title)
    for col in ("condition", "held-out pass@1", "95% CI", "n"):
        t.add_column(col)
    for name, e in evals.items():
        lo, hi = e["ci95"]
        t.add_row(CONDITION_LABELS.get(name, name), f"{e['pass_at_1']:.3f}", f"[{lo:.3f}, {hi:.3f}]", str(e["n"]))
    console.print(t)


@app.command()
def distill(
    db: Annotated[str, typer.Option(help="Lesson library: SQLite path or SQLAlchemy URL.")] = "arena.db",
    session: Annotated[Optional[str], typer.Option(help="Session whose train rollouts are the data (default: the newest with rollouts).")] = None,
    objective: Annotated[str, typer.Option(help="distill (lessons-free context distillation + importance-weighted guided successes), sft (rejection-sampling SFT on unguided successes) or guided-unweighted (ablation).")] = "distill",
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
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object on stdout at the end.")] = False,
) -> None:
    """Distill a session's lessons and guided successes into a LoRA adapter, then evaluate and register it."""
    _quiet_libraries()
    from agents.policy import PolicyError
    from arena.distill import DistillError, run_distill
    from lessons.adapters import AdapterError
    from lessons.distill import NoTrainingData
    from lessons.distill_config import DistillConfig, TrainConfig
    from lessons.distill_trainer import TrainingError
    from lessons.store import LessonStore, StoreError

    console = Console(stderr=True)
    store = None
    try:
        cfg = DistillConfig(
            objective=objective, success_threshold=success_threshold, lesson_tokens=lesson_tokens,
            eval_max_tokens=eval_max_tokens,
            train=TrainConfig(max_steps=steps, epochs=epochs, lr=lr, rank=rank, alpha=alpha, batch_size=batch_size,
                              grad_accum=grad_accum, max_seq_len=max_seq_len, seed=seed),
        )
        if base_model is not None and not (base_model / "config.json").is_file():
            raise DistillError(f"--base-model {base_model}: not a transformers checkpoint directory (no config.json)")
        _require_db_file(db)
        store = LessonStore(db)
        if session is None:
            from arena.distill import latest_session

            session = latest_session(store, db)
        with contextlib.redirect_stdout(sys.stderr):
            summary = run_distill(store, db, session, cfg, out, base_model, console=console)
    except ValidationError as e:
        raise fail(_config_error(e)) from None
    except (DistillError, NoTrainingData, AdapterError, TrainingError, StoreError, PolicyError) as e:
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


@app.command("eval")
def eval_cmd(
    db: Annotated[str, typer.Option(help="Lesson library: SQLite path or SQLAlchemy URL.")] = "arena.db",
    session: Annotated[Optional[str], typer.Option(help="Session whose held-out tasks are evaluated (default: the newest with rollouts).")] = None,
    adapter: Annotated[Optional[str], typer.Option(help="Adapter id (adapter-0001) or directory; without it the base model is evaluated.")] = None,
    base_model: Annotated[Optional[Path], typer.Option(help="A transformers checkpoint directory (default: the embedded model).")] = None,
    lesson_tokens: Annotated[int, typer.Option(help="Lessons budget of the with-lessons evaluation, tokens.")] = 512,
    max_tokens: Annotated[int, typer.Option(help="Completion cap, tokens.")] = 96,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object on stdout.")] = False,
) -> None:
    """Held-out greedy pass@1 of the local solver (optionally with an adapter), without and with lessons."""
    _quiet_libraries()
    from agents.policy import PolicyError
    from arena.distill import DistillError, latest_session, run_eval
    from lessons.adapters import AdapterError
    from lessons.store import LessonStore, StoreError

    store = None
    try:
        if lesson_tokens < 0 or not 1 <= max_tokens <= 4096:
            raise DistillError("--lesson-tokens must be >= 0 and --max-tokens in [1, 4096]")
        _require_db_file(db)
        store = LessonStore(db)
        session = session or latest_session(store, db)
        with contextlib.redirect_stdout(sys.stderr):
            result = run_eval(store, db, session, adapter, lesson_tokens, max_tokens, base_model)
    except (DistillError, AdapterError, StoreError, PolicyError) as e:
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


bench_app = typer.Typer(help="Benchmarks that print ratios against a named baseline.", no_args_is_help=True)
app.add_typer(bench_app, name="bench")


@bench_app.command("distill")
def bench_distill(
    steps: Annotated[int, typer.Option(help="Optimizer steps per trainer: one epoch of steps x batch-size examples, all timed.")] = 8,
    batch_size: Annotated[int, typer.Option(help="Sequences per step.")] = 4,
    rank: Annotated[int, typer.Option(help="LoRA rank.")] = 16,
    base_model: Annotated[Optional[Path], typer.Option(help="A transformers checkpoint directory (default: the embedded model).")] = None,
    device: Annotated[Optional[str], typer.Option(help="cpu or cuda (default: cuda when available); bf16 on CUDA, fp32 on CPU.")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object on stdout.")] = False,
) -> None:
    """Train tokens/s of our LoRA trainer against TRL's SFTTrainer: same model, LoRA config, data and batch.

    Data: steps x batch-size chain_sum questions with worked reference-answer completions, one epoch each.
    """
    _quiet_libraries()
    from agents.policy import PolicyError
    from arena.bench import BenchError, bench_distill_speed

    try:
        if steps < 1 or batch_size < 1 or rank < 1:
            raise BenchError("--steps, --batch-size and --rank must be >= 1")
        with contextlib.redirect_stdout(sys.stderr):
            result = bench_distill_speed(steps=steps, batch_size=batch_size, rank=rank,
                                         base_model=base_model, device=device)
    except (BenchError, PolicyError) as e:
        raise fail(str(e)) from None
    if json_out:
        print(json.dumps(result))
        return
    t = Table(title="LoRA training throughput (tokens/s; higher is better)")
    for col in ("trainer", "tokens/s", "s/step", "final loss"):
        t.add_column(col)
    for name in ("ours", "trl"):
        r = result[name]
        if r is None:
            continue
        t.add_row(name, f"{r['tokens_per_s']:.0f}", f"{r['s_per_step']:.3f}", f"{r['final_loss']:.4f}")
    Console().print(t)
    if result.get("ratio") is not None:
        Console().print(f"ratio ours / TRL SFTTrainer: {result['ratio']:.2f}x (target >= 1.0)")
    else:
        Console().print(f"TRL not measured: {result.get('trl_error')}")
    if result.get("mfu") is not None:
        Console().print(f"MFU (ours, {result['device']}): {result['mfu']:.3f}")


def main() -> None:
    """Console-script entry point: usage errors are one line on stderr too (exit 2)."""
    try:
        rc = app(standalone_mode=False)  # returns the exit code of typer.Exit instead of exiting
        sys.exit(rc if isinstance(rc, int) else 0)
    except typer.Exit as e:
        sys.exit(e.exit_code)
    except typer.Abort:
        sys.exit(EXIT_INTERRUPTED)
    except typer.TyperException as e:  # usage errors: bad or missing option values, unknown options
        text = e.format_message() if hasattr(e, "format_message") else str(e)
        cmd = f" (see `arena {' '.join(sys.argv[1:2])} --help`)" if len(sys.argv) > 1 else ""
        if text.strip():  # no_args_is_help has printed the help already
            print(f"arena: error: {' '.join(text.split())}{cmd}", file=sys.stderr)
        sys.exit(EXIT_USER_ERROR)


if __name__ == "__main__":
    main()
