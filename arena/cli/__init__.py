"""`arena` command line (typer): `arena run` runs a self-play session on the embedded model by default.

Errors a user can cause (unknown family, bad override, unreadable task file, unwritable
database, unreachable endpoint, invalid flag combination) end in ONE line on stderr and exit
code 2, never a traceback, and are detected before anything is written.
"""

from __future__ import annotations

import contextlib
import json
import signal
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.table import Table

from arena.cli.support import EXIT_INTERRUPTED, EXIT_USER_ERROR, fail
from arena.cli.support import quiet_libraries as _quiet_libraries

app = typer.Typer(
    name="arena",
    help="Lesson Arena: solver, critic and teacher agents that learn lessons from self-play.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

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
    critic: Annotated[
        Optional[str], typer.Option(help="Critic: verifier (no model), local or openai:MODEL; the judge of rubric rewards. Default: verifier, or local with a rubric reward.")
    ] = None,
    teacher: Annotated[str, typer.Option(help="Teacher model: local or openai:MODEL.")] = "local",
    lesson_tokens: Annotated[int, typer.Option(help="Token budget of the lessons in the solver prompt.")] = 512,
    library_tokens: Annotated[int, typer.Option(help="Token budget of all live lessons; an op past it is rejected.")] = 4096,
    utility_every: Annotated[int, typer.Option(help="Utility A/B of lessons (with vs without) every N episodes; candidates become active on it; 0: off.")] = 4,
    utility_lessons: Annotated[int, typer.Option(help="Lessons measured per utility check.")] = 2,
    utility_tasks: Annotated[int, typer.Option(help="Train tasks per lesson in a utility A/B.")] = 4,
    utility_samples: Annotated[int, typer.Option(help="Samples per task and arm in a utility A/B.")] = 4,
    success_threshold: Annotated[
        Optional[float], typer.Option(help="Reward at which a rollout succeeds; a group with none gets a hint. Default: 1.0, or 0.8 with a rubric reward.")
    ] = None,
    hint_mode: Annotated[
        Optional[list[str]],
        typer.Option("--hint-mode", help="Hints for all-fail groups: plan, feedback, answer (repeatable or comma-separated), or none. Default: feedback,answer."),
    ] = None,
    reward: Annotated[str, typer.Option(help="Reward: verifier, rubric-explicit or rubric-implicit (RaR; judged by --critic).")] = "verifier",
    online_rubrics: Annotated[int, typer.Option(help="Every N episodes, add rubric criteria that separate current from reference rollouts (0: off).")] = 0,
    include_flagged: Annotated[bool, typer.Option("--include-flagged", help="Let reward-hack-flagged rollouts reach reflection.")] = False,
    adapter: Annotated[Optional[str], typer.Option(help="LoRA adapter of the local solver: an id (adapter-0001) or a directory; its distilled lessons leave the prompt.")] = None,
    curriculum: Annotated[str, typer.Option(help="Train difficulty: fixed, or frontier (move each family's difficulty to keep its train pass@1 in --target-pass).")] = "fixed",
    target_pass: Annotated[str, typer.Option(help="Target band LO:HI of train pass@1 per family and round (frontier).")] = "0.3:0.7",
    proposer: Annotated[str, typer.Option(help="Who writes proposed tasks: teacher (its model), local or openai:MODEL.")] = "teacher",
    proposals: Annotated[Optional[int], typer.Option(help="Proposed tasks per family per round (frontier; default 2).")] = None,
    proposal_samples: Annotated[int, typer.Option(help="Independent samples that must confirm a proposal's answer where no verifier exists.")] = 4,
    proposal_agreement: Annotated[float, typer.Option(help="Share of those samples that must agree with the proposed answer.")] = 0.75,
    concurrency: Annotated[int, typer.Option(help="Episodes of a round in flight at once; their model calls are batched together. Results do not depend on it.")] = 4,
    reflect: Annotated[bool, typer.Option("--reflect/--no-reflect", help="Teacher reflection on every group (lessons); --no-reflect: weight-only learning.")] = True,
    cycles: Annotated[int, typer.Option(help="Wake–sleep cycles: --rounds rounds of episodes, then a sleep (distillation into a LoRA the next cycle samples with).")] = 1,
    sleep_objective: Annotated[Optional[str], typer.Option(help="arena distill objective of each sleep: distill, sft or guided-unweighted. Default: none with --cycles 1, distill with more.")] = None,
    sleep_from: Annotated[str, typer.Option(help="base: each sleep trains a fresh LoRA on every cycle's successes so far (STaR); previous: continue the last adapter on this cycle's.")] = "base",
    sleep_epochs: Annotated[float, typer.Option(help="Passes over a sleep's examples (when --sleep-steps is 0).")] = 4.0,
    sleep_steps: Annotated[int, typer.Option(help="Optimizer steps per sleep, batch 8 (the schedule arena bench learning measured; 0: from --sleep-epochs).")] = 40,
    sleep_lr: Annotated[float, typer.Option(help="Peak learning rate of a sleep.")] = 5e-4,
    sleep_min_examples: Annotated[int, typer.Option(help="Refuse a sleep with fewer training examples than this.")] = 16,
    sleep_min_guided_log_ratio: Annotated[float, typer.Option(help="Guided successes whose mean log π(y|x) − log π_old(y|x,hint) is below this (nats/token) are not trained.")] = -1.0,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON summary object on stdout at the end.")] = False,
) -> None:
    """Run a self-play session: held-out pass@1, rounds of solve → grade → reflect → curate, pass@1 again."""
    _quiet_libraries()
    from agents.policy import PolicyError
    from arena.config import DEFAULT_FAMILY, ConfigError, SessionConfig, check_db
    from arena.distill.trainer import TrainingError
    from arena.tasks.model import TaskError
    from arena.tasks.sources import load_tasks
    from lessons.library.store import LessonStore, StoreError, check_database

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
            rubric = reward != "verifier"
            if rubric and not family and tasks_file is None:
                from arena.tasks.jsonl import BUILTIN_RUBRIC_TASKS

                tasks_file = BUILTIN_RUBRIC_TASKS  # the shipped rubric tasks: runs offline
            families = list(family) if family else ([] if tasks_file else [DEFAULT_FAMILY])
            critic = critic or ("local" if rubric else "verifier")
            success_threshold = success_threshold if success_threshold is not None else (0.8 if rubric else 1.0)
            cfg = SessionConfig(
                db=db, families=families, tasks_file=tasks_file, train_tasks=train_tasks, heldout_tasks=heldout_tasks,
                rounds=rounds, rollouts=rollouts, temperature=temperature, max_tokens=max_tokens, seed=seed,
                session=session, solver=solver, critic=critic, teacher=teacher, lesson_tokens=lesson_tokens,
                library_tokens=library_tokens, utility_every=utility_every, utility_lessons=utility_lessons,
                utility_tasks=utility_tasks, utility_samples=utility_samples,
                success_threshold=success_threshold, reward=reward, online_rubrics=online_rubrics,
                include_flagged=include_flagged,
                curriculum=curriculum, target_pass=target_pass, proposer=proposer, proposals=proposals,
                proposal_samples=proposal_samples, proposal_agreement=proposal_agreement,
                concurrency=concurrency, reflect=reflect, cycles=cycles, sleep_objective=sleep_objective, sleep_from=sleep_from,
                sleep_epochs=sleep_epochs, sleep_steps=sleep_steps, sleep_lr=sleep_lr,
                sleep_min_examples=sleep_min_examples, sleep_min_guided_log_ratio=sleep_min_guided_log_ratio,
                adapter=adapter,
                **({"hint_modes": list(hint_mode)} if hint_mode is not None else {}),
            )
            if adapter is not None:
                from arena.distill.pipeline import adapter_for_run

                cfg = cfg.model_copy(update={"adapter": str(adapter_for_run(db, adapter, cfg.solver))})
        # Validate tasks, endpoints and prompt sizes before touching the database, so bad input writes nothing.
        with contextlib.redirect_stdout(sys.stderr):  # some task generators print; stdout is for --json
            splits = load_tasks(cfg.families, cfg.tasks_file, cfg.train_tasks, cfg.heldout_tasks, cfg.seed)
        from arena.episode.rewards import check_reward_tasks
        from arena.session.runner import check_prompt_lengths, make_roles, run_session

        check_reward_tasks(cfg.reward, [*splits.train, *splits.heldout])
        cfg.check_cycle_budget(len(splits.train))
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
    except (ConfigError, TaskError, StoreError, PolicyError, ValueError, TrainingError) as e:  # DistillError, AdapterError are ValueErrors
        raise fail(" ".join(str(e).split())) from None
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


def _fmt_paired(p: dict | None) -> str:
    if not p:
        return "-"
    lo, hi = p["ci95"]
    return f"{p['diff']:+.3f}  [{lo:+.3f}, {hi:+.3f}]  McNemar p={p['p_value']:.3g}  n={p['n']}"


def print_summary(summary: dict, console: Console) -> None:
    """The end-of-session table: counts, rewards and held-out pass@1 with 95% Wilson intervals."""
    t = Table(title=f"session {summary['session']}", show_header=False)
    t.add_column("metric", style="bold")
    t.add_column("value")
    for key in (
        "episodes", "rollouts", "mean_reward", "lessons_added", "lessons_active", "lessons_candidate",
        "lessons_retired", "library_tokens_used", "utility_checks", "reflections_failed",
    ):
        t.add_row(key.replace("_", " "), str(summary.get(key)))
    t.add_row("all-fail groups → guided", f"{summary.get('all_fail_groups')} → {summary.get('guided_groups')} "
              f"(guided success rate {summary.get('guided_success_rate')})")
    t.add_row("pass@k unguided → with hints", f"{summary.get('pass_at_k_unguided')} → {summary.get('pass_at_k_with_hints')}")
    for r in summary.get("rounds", []):
        extra = ", ".join(f"{k} {v}" for k, v in r.items() if k.startswith("pass_at"))
        t.add_row(f"round {r['round']}", f"mean reward {r['mean_reward']}, {extra}")
    if "graded_rollouts" in summary:  # rubric rewards
        t.add_row("graded / ungraded rollouts", f"{summary['graded_rollouts']} / {summary['ungraded_rollouts']}")
        flags = ", ".join(f"{k} {v}" for k, v in summary["hack_flags"].items()) or "none"
        t.add_row("reward-hack flagged rollouts", f"{summary['flagged_rollouts']} ({flags})")
        t.add_row("rubric versions added online", str(summary["rubric_versions_added"]))
        for fam, c in summary["critic_calibration"].items():
            t.add_row(f"critic vs verifier: {fam}", f"accuracy {c['accuracy']:.3f}, ECE {c['ece']:.3f}, n={c['n']}")
        for name, m in summary["heldout_mean_reward"].items():
            t.add_row(f"{name} mean reward", "-" if m is None else f"{m:.3f}")
    for fam, rows in (summary.get("difficulty") or {}).items():
        steps = " → ".join(f"{r['step']:+d}" + (f" ({r['train_pass_rate']:.2f})" if r["train_pass_rate"] is not None else "")
                           for r in rows)
        t.add_row(f"difficulty {fam}", f"rung (train pass@1) by round: {steps}")
    if summary.get("proposed_tasks"):
        t.add_row("proposed → accepted tasks", f"{summary['proposed_tasks']} → {summary['accepted_tasks']} "
                  f"(rejected: {summary.get('proposal_rejections')})")
    t.add_row("held-out pass@1 before", _fmt_eval(summary.get("heldout_before")))
    t.add_row("held-out pass@1 after", _fmt_eval(summary.get("heldout_after")))
    t.add_row("  … after, no lessons", _fmt_eval(summary.get("heldout_after_no_lessons")))
    for key, label in (("heldout_after_vs_before", "after − before (paired)"),
                       ("lessons_vs_no_lessons", "lessons − no lessons (paired)")):
        t.add_row(label, _fmt_paired(summary.get(key)))
    if len(summary.get("cycles") or []) > 1 or any(c.get("adapter_id") for c in summary.get("cycles") or []):
        for c in summary["cycles"]:
            t.add_row(f"cycle {c['cycle']}", f"{c['adapter_id'] or 'no sleep'}: {c['examples']} examples; held-out "
                      f"{_fmt_eval(c['heldout'])}; no lessons {_fmt_eval(c['heldout_no_lessons'])}; train pass@1 "
                      f"{c['train_pass_at_1']}, pass@k {c['train_pass_at_k']}; vs before {_fmt_paired(c['vs_before'])}")
    if any(v["step"] != 0 for v in (summary.get("difficulty_final") or {}).values()):
        t.add_row("held-out pass@1 at final difficulty", _fmt_eval(summary.get("heldout_final_difficulty")))
        t.add_row("  … no lessons", _fmt_eval(summary.get("heldout_final_difficulty_no_lessons")))
    t.add_row("wall time", f"{summary.get('wall_time_s')} s")
    console.print(t)


@app.command()
def tui(
    db: Annotated[str, typer.Option(help="Lesson library: SQLite path or SQLAlchemy URL (the one `arena run --db` writes).")] = "arena.db",
    library_tokens: Annotated[int, typer.Option(help="Token budget of all live lessons, applied to edits (as in `arena run`).")] = 4096,
    solver: Annotated[str, typer.Option(help="Whose tokenizer counts edited lessons' tokens: local (SmolLM2) or openai:MODEL.")] = "local",
) -> None:
    """Browse and curate sessions, episodes, rollouts, lessons and adapters in the terminal (Textual)."""
    _quiet_libraries()
    from arena.config import check_db
    from lessons.library.store import StoreError, check_database

    try:
        check_db(db)
        check_database(db)  # the directory exists and is writable (edits write), without creating the file
        if library_tokens < 1:
            raise ValueError(f"--library-tokens must be >= 1, got {library_tokens}")
        if solver != "local" and not (solver.startswith("openai:") and len(solver) > len("openai:")):
            raise ValueError(f"--solver must be 'local' or 'openai:MODEL', got {solver!r}")
        from lessons.library.read_models import DatabaseProblem, open_store

        try:
            open_store(db).close()  # a corrupt file or newer schema: one line here, not inside the app
        except DatabaseProblem as e:
            if e.kind != "missing":  # a missing database gets the app's how-to-create-one screen
                raise StoreError(str(e)) from None
    except (StoreError, ValueError) as e:
        raise fail(str(e)) from None
    from arena.cli.lessons import token_counter
    from tui.app import run as run_tui

    run_tui(db, library_tokens=library_tokens, token_counter=lambda: token_counter(solver))


from arena.cli.lessons import lessons_app  # noqa: E402 - after `app`, which lessons_cli does not need

app.add_typer(lessons_app, name="lessons")


critic_app = typer.Typer(help="Inspect the critic: rubric verdicts and calibration against verifiers.", no_args_is_help=True)
app.add_typer(critic_app, name="critic")


def _open_existing(db: str):
    from lessons.library.store import LessonStore, StoreError

    if "://" not in db and not Path(db).exists():
        raise StoreError(f"no database at {db}; run `arena run --db {db}` first")
    return LessonStore(db)


@critic_app.command("calibrate")
def critic_calibrate(
    db: Annotated[str, typer.Option(help="Lesson library: SQLite path or SQLAlchemy URL.")] = "arena.db",
    session: Annotated[Optional[str], typer.Option(help="Only this session (default: every session).")] = None,
    threshold: Annotated[float, typer.Option(help="The judge passes a rollout when its reward is at least this.")] = 0.5,
    bins: Annotated[int, typer.Option(help="Bins of the expected calibration error.")] = 10,
    json_out: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
) -> None:
    """Rubric judge vs verifier, per task family: accuracy and expected calibration error (ECE).

    Uses every rubric-graded rollout whose task also has a verifier. Exit code 2 on bad input.
    """
    _quiet_libraries()
    from arena.episode.calibration import calibration_report
    from lessons.library.rubrics import RubricStore
    from lessons.library.store import StoreError

    try:
        if not 0.0 <= threshold <= 1.0:
            raise ValueError(f"--threshold must be in [0, 1], got {threshold}")
        if bins < 1:
            raise ValueError(f"--bins must be >= 1, got {bins}")
        with _open_existing(db) as store:
            sid = None
            if session is not None:
                info = store.get_session(session)
                if info is None:
                    raise StoreError(f"no session named {session!r} in {db}")
                sid = info.id
            report = calibration_report(RubricStore(store).calibration_pairs(sid), threshold, bins)
    except (StoreError, ValueError) as e:
        raise fail(str(e)) from None
    if json_out:
        print(json.dumps(report))
        return
    if not report:
        Console().print("no rubric-graded rollouts on tasks with a verifier; run `arena run --reward rubric-explicit` on such tasks")
        return
    t = Table(title=f"critic calibration (judge passes at reward >= {threshold:g})")
    for col in ("family", "n", "accuracy", "ECE", "judge pass rate", "verifier pass rate"):
        t.add_column(col)
    for fam, c in report.items():
        t.add_row(fam, str(c["n"]), f"{c['accuracy']:.3f}", f"{c['ece']:.3f}", f"{c['judge_pass_rate']:.3f}", f"{c['verifier_pass_rate']:.3f}")
    Console().print(t)


@critic_app.command("verdicts")
def critic_verdicts(
    session: Annotated[str, typer.Option(help="The session.")],
    db: Annotated[str, typer.Option(help="Lesson library: SQLite path or SQLAlchemy URL.")] = "arena.db",
    episode: Annotated[Optional[str], typer.Option(help="Only this episode key, e.g. r001-explain/train/00000.")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object per rollout, as a JSON array.")] = False,
) -> None:
    """Each rubric-graded rollout with its reward, grading status, hack flags and per-criterion verdicts."""
    _quiet_libraries()
    from lessons.library.rubrics import RubricStore
    from lessons.library.store import StoreError

    try:
        with _open_existing(db) as store:
            info = store.get_session(session)
            if info is None:
                raise StoreError(f"no session named {session!r} in {db}")
            rs = RubricStore(store)
            rows = rs.session_rollouts(info.id, episode)
            if episode is not None and not rows:
                raise StoreError(f"no episode {episode!r} in session {session!r}")
            out = [
                {"rollout_id": r.id, "episode": ek, "idx": r.idx, "guided": r.guided, "reward": r.reward,
                 "grading_status": r.grading_status or "graded", "reward_kind": r.reward_kind,
                 "judge_rating": r.judge_rating, "verifier_reward": r.verifier_reward, "hack_flags": r.hack_flags or [],
                 "verdicts": [{"criterion": v.title, "weight": v.weight, "met": v.met, "reason": v.reason} for v in rs.verdicts(r.id)]}
                for r, ek in rows
            ]
    except StoreError as e:
        raise fail(str(e)) from None
    if json_out:
        print(json.dumps(out))
        return
    t = Table(title=f"rubric verdicts of session {session}")
    for col in ("episode", "#", "reward", "status", "flags", "criteria (✓ met, ✗ not met; pitfalls: ✓ = mistake made)"):
        t.add_column(col)
    for r in out:
        crit = "; ".join(f"{'✓' if v['met'] else '✗'} {v['criterion']} ({v['weight']:g})" for v in r["verdicts"])
        if r["judge_rating"] is not None:
            crit = f"rating {r['judge_rating']:g}/10"
        reward_txt = "-" if r["reward"] is None else f"{r['reward']:.2f}"
        t.add_row(r["episode"], str(r["idx"]) + ("g" if r["guided"] else ""), reward_txt, r["grading_status"],
                  ", ".join(r["hack_flags"]), crit)
    Console().print(t)


# --------------------------------------------------------------------------- distillation


def _require_db_file(db: str) -> None:
    """A bare SQLite path must exist (opening would create an empty library)."""
    from lessons.library.store import StoreError

    if "://" not in db and not Path(db).exists():
        raise StoreError(f"no database at {db}; run `arena run --db {db}` first")


def _print_eval_table(title: str, evals: dict, console: Console) -> None:
    from arena.distill.pipeline import CONDITION_LABELS

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
    min_guided_log_ratio: Annotated[float, typer.Option(help="Guided successes whose mean log π(y|x) − log π_old(y|x,hint) is below this (nats/token) are skipped; -inf keeps all.")] = -1.0,
    min_examples: Annotated[int, typer.Option(help="Refuse to train on fewer examples than this.")] = 1,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object on stdout at the end.")] = False,
) -> None:
    """Distill a session's lessons and guided successes into a LoRA adapter, then evaluate and register it."""
    _quiet_libraries()
    from agents.policy import PolicyError
    from arena.distill.config import DistillConfig, TrainConfig
    from arena.distill.data import NoTrainingData
    from arena.distill.pipeline import DistillError, run_distill
    from arena.distill.trainer import TrainingError
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
                              grad_accum=grad_accum, max_seq_len=max_seq_len, seed=seed),
        )
        if base_model is not None and not (base_model / "config.json").is_file():
            raise DistillError(f"--base-model {base_model}: not a transformers checkpoint directory (no config.json)")
        _require_db_file(db)
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
        raise fail(_config_error(e)) from None
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


@app.command("eval")
def eval_cmd(
    db: Annotated[str, typer.Option(help="Lesson library: SQLite path or SQLAlchemy URL.")] = "arena.db",
    session: Annotated[Optional[str], typer.Option(help="Session whose held-out tasks are evaluated (default: the newest with rollouts).")] = None,
    adapter: Annotated[Optional[str], typer.Option(help="Adapter id (adapter-0001) or directory; without it the base model is evaluated.")] = None,
    base_model: Annotated[Optional[Path], typer.Option(help="A transformers checkpoint directory (default: the embedded model).")] = None,
    lesson_tokens: Annotated[int, typer.Option(help="Lessons budget of the with-lessons evaluation, tokens.")] = 512,
    max_tokens: Annotated[int, typer.Option(help="Completion cap, tokens.")] = 96,
    critic: Annotated[bool, typer.Option("--critic", help="Instead: the rubric judge's calibration against verifiers (as `arena critic calibrate`).")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object on stdout.")] = False,
) -> None:
    """Held-out greedy pass@1 of the local solver (optionally with an adapter), without and with lessons."""
    if critic:
        critic_calibrate(db=db, session=session, json_out=json_out)
        return
    _quiet_libraries()
    from agents.policy import PolicyError
    from arena.distill.pipeline import DistillError, latest_session, run_eval
    from arena.distill.weights import AdapterError
    from arena.tasks.model import TaskError
    from lessons.library.store import LessonStore, StoreError

    store = None
    try:
        if lesson_tokens < 0 or not 1 <= max_tokens <= 4096:
            raise DistillError("--lesson-tokens must be >= 0 and --max-tokens in [1, 4096]")
        _require_db_file(db)
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
    from arena.bench.distill import BenchError, bench_distill_speed

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
    from arena.bench.rollouts import bench_rollouts as run_bench

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


@bench_app.command("learning")
def bench_learning(
    out: Annotated[Path, typer.Option(help="Directory for the condition libraries, learning.json and learning.png.")] = Path("bench-learning"),
    quick: Annotated[bool, typer.Option("--quick", help="A tiny run of every condition (minutes): what the test suite runs.")] = False,
    condition: Annotated[Optional[list[str]], typer.Option("--condition", help="base, lessons, sft, distill, loop, oracle (repeatable; default all).")] = None,
    family: Annotated[Optional[str], typer.Option(help="reasoning-gym spec of the tasks (default: the default family).")] = None,
    train_tasks: Annotated[Optional[int], typer.Option(help="Train tasks (default 32; --quick 4).")] = None,
    heldout_tasks: Annotated[Optional[int], typer.Option(help="Held-out tasks of greedy pass@1 (default 128; --quick 6).")] = None,
    rollouts: Annotated[Optional[int], typer.Option(help="Group size k (default 8; --quick 4).")] = None,
    rounds: Annotated[Optional[int], typer.Option(help="Wake rounds per cycle (default 1).")] = None,
    cycles: Annotated[Optional[int], typer.Option(help="Wake–sleep cycles (default 2; --quick 1).")] = None,
    sleep_steps: Annotated[Optional[int], typer.Option(help="Optimizer steps per sleep and of the oracle (default 40; --quick 2).")] = None,
    sleep_lr: Annotated[Optional[float], typer.Option(help="Peak learning rate of a sleep (default 5e-4).")] = None,
    utility_every: Annotated[Optional[int], typer.Option(help="Utility A/B every N episodes in lessons and loop (default 16; --quick off).")] = None,
    pass_k_tasks: Annotated[Optional[int], typer.Option(help="Held-out tasks of the sampled pass@1 / pass@k (default 32).")] = None,
    seed: Annotated[int, typer.Option(help="Seed of task draws and sampling.")] = 0,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object on stdout.")] = False,
) -> None:
    """Does the loop make the solver better? base, lessons, sft, distill, loop and the oracle ceiling at one rollout budget."""
    _quiet_libraries()
    from agents.policy import PolicyError
    from arena.bench.learning import CONDITIONS, LearningBenchConfig, LearningBenchError, run_learning_bench
    from arena.distill.trainer import TrainingError
    from arena.distill.weights import AdapterError
    from lessons.library.store import StoreError

    given = {k: v for k, v in dict(
        family=family, train_tasks=train_tasks, heldout_tasks=heldout_tasks, rollouts=rollouts, rounds=rounds,
        cycles=cycles, sleep_steps=sleep_steps, sleep_lr=sleep_lr, utility_every=utility_every,
        pass_k_tasks=pass_k_tasks, seed=seed,
        conditions=[c for spec in condition for c in spec.split(",") if c] if condition else None,
    ).items() if v is not None}
    console = Console(stderr=True)
    try:
        bcfg = LearningBenchConfig.quick(**given) if quick else LearningBenchConfig(**given)
        if family is not None:
            from arena.tasks.sources import load_tasks

            with contextlib.redirect_stdout(sys.stderr):
                load_tasks([family], None, 1, 1, seed)  # a bad spec fails here, before any model loads
        result = run_learning_bench(bcfg, out, console=console if not json_out else None,
                                    log=lambda m: console.print(m))
    except (LearningBenchError, PolicyError, AdapterError, TrainingError, StoreError, ValueError) as e:
        raise fail(" ".join(str(e).split())) from None
    except KeyboardInterrupt:
        raise fail("interrupted", EXIT_INTERRUPTED) from None
    if json_out:
        print(json.dumps(result))
        return
    t = Table(title=f"arena bench learning: held-out greedy pass@1 (n = {bcfg.heldout_tasks}), vs base paired")
    for col in ("condition", "pass@1 [95% CI]", "vs base (diff [CI], McNemar p)", "sampled pass@1 / pass@k",
                "rollouts", "train tokens", "wall s"):
        t.add_column(col)
    for name in CONDITIONS:
        r = result["conditions"].get(name)
        if r is None:
            continue
        h, v, sp = r["heldout"], r.get("vs_base"), r.get("sampled") or {}
        spk = sp.get(f"pass_at_{sp.get('k')}")
        vs = f"{v['diff']:+.3f} [{v['ci95'][0]:+.3f}, {v['ci95'][1]:+.3f}], p={v['p_value']:.3g}" if v else "-"
        t.add_row(name + (" (ceiling)" if r.get("ceiling") else "") + (" !" if r.get("error") else ""),
                  f"{h['pass_at_1']:.3f} [{h['ci95'][0]:.3f}, {h['ci95'][1]:.3f}]", vs,
                  f"{sp['pass_at_1']:.3f} / {spk:.3f} (k={sp['k']}, n={sp['n']})" if sp else "-",
                  str(r["rollouts"]), str(r["train_tokens"]), f"{r['wall_s']:.0f}")
    Console().print(t)
    for name, r in result["conditions"].items():
        if r.get("error"):
            Console().print(f"{name} stopped early: {r['error']}")
    Console().print(f"figure {result['files']['png']}; figures {result['files']['json']}; load average before "
                    f"{result['loadavg_before']}, after {result['loadavg_after']}; {result['wall_s']:.0f} s")


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

