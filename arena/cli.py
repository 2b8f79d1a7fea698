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
    concurrency: Annotated[int, typer.Option(help="Episodes of a round in flight at once; their model calls are batched together. Results do not depend on it.")] = 4,
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
                success_threshold=success_threshold, concurrency=concurrency,
                **({"hint_modes": list(hint_mode)} if hint_mode is not None else {}),
            )
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
    except (ConfigError, TaskError, StoreError, PolicyError, ValueError) as e:
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


bench_app = typer.Typer(help="Benchmarks against named baselines.", no_args_is_help=True)
app.add_typer(bench_app, name="bench")


@bench_app.command("rollouts")
def bench_rollouts(
    prompts: Annotated[int, typer.Option(help="Distinct prompts (solver chats of default-family tasks).")] = 16,
    k: Annotated[int, typer.Option(help="Completions per prompt (group size).")] = 8,
    max_tokens: Annotated[int, typer.Option(help="Completion cap per completion, tokens.")] = 96,
    temperature: Annotated[float, typer.Option(help="Sampling temperature (> 0).")] = 0.8,
    concurrency: Annotated[int, typer.Option(help="Episode threads for our backend, as `arena run --concurrency`.")] = 4,
    seed: Annotated[int, typer.Option(help="Seed for task draws and sampling.")] = 0,
    threads: Annotated[Optional[int], typer.Option(help="CPU threads for both samplers (default: all cores).")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object on stdout.")] = False,
) -> None:
    """Completion tokens/s of the local backend (batched, as `arena run` samples) vs llama.cpp single-stream, same GGUF."""
    _quiet_libraries()
    from agents.policy import PolicyError
    from arena.rollout_bench import bench_rollouts as run_bench

    def missing(line: str) -> None:
        print(f"arena: {line}", file=sys.stderr)

    try:
        with contextlib.redirect_stdout(sys.stderr):
            r = run_bench(prompts, k, max_tokens, temperature, concurrency, seed, on_baseline_missing=missing, threads=threads)
    except (PolicyError, ValueError) as e:
        raise fail(str(e)) from None
    except KeyboardInterrupt:
        raise fail("interrupted", EXIT_INTERRUPTED) from None
    if json_out:
        print(json.dumps(r))
        return
    t = Table(title=f"rollouts: {r['prompts']} prompts × k={r['k']}, max {r['max_tokens']} tokens, T={r['temperature']}")
    t.add_column("sampler")
    t.add_column("completion tok/s", justify="right")
    t.add_column("tokens", justify="right")
    t.add_column("seconds", justify="right")
    t.add_row(f"ours (torch, batched, concurrency {r['concurrency']})", f"{r['ours_tok_s']:.1f}",
              str(r["ours"]["tokens"]), f"{r['ours']['seconds']:.1f}")
    if r["llamacpp_tok_s"] is not None:
        t.add_row("llama.cpp single-stream", f"{r['llamacpp_tok_s']:.1f}", str(r["llamacpp"]["tokens"]),
                  f"{r['llamacpp']['seconds']:.1f}")
    Console().print(t)
    ratio = f"{r['ratio']:.2f}" if r["ratio"] is not None else "n/a (no baseline)"
    Console().print(f"ratio ours / llama.cpp: {ratio}   (load average before {r['loadavg_1min_before']}, "
                    f"after {r['loadavg_1min_after']}; {r['torch_threads']} threads)")


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
