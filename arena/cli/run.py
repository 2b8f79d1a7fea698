"""`arena run`: a self-play session, and the end-of-session summary table.

Errors a user can cause (unknown family, bad override, unreadable task file, unwritable
database, unreachable endpoint, invalid flag combination, a session another live process runs)
end in ONE line on stderr and exit code 2, never a traceback, and are detected before anything
is written. A database fault during the run (a full disk, a read-only file, a server gone past
the retries) ends in one line naming the library and exit code 3; what was committed stays, and
``--resume`` continues once the cause is fixed.
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.table import Table

from agents.backends.registry import spec_list
from arena.config import RUN_UTILITY_EVERY, RUN_UTILITY_SAMPLES, RUN_UTILITY_TASKS, SOLVER_NEEDS
from arena.objectives import objective_names
from arena.cli.support import EXIT_INTERRUPTED, EXIT_STORE_FAULT, config_error, fail, fmt_rate, quiet_libraries, stop_on_sigterm

if TYPE_CHECKING:
    from arena.session.summary import EvalFigure, PairedComparison, RunSummary


def run(
    db: Annotated[str, typer.Option(help="Lesson library: SQLite path or SQLAlchemy URL.")] = "arena.db",
    family: Annotated[
        Optional[list[str]],
        typer.Option("--family", help="reasoning-gym family with overrides, e.g. chain_sum:min_terms=2,max_terms=2 (repeatable)."),
    ] = None,
    tasks_file: Annotated[Optional[Path], typer.Option(help='JSONL tasks, one {"question", "answer"} per line.')] = None,
    train_tasks: Annotated[int, typer.Option(help="Train tasks per family (one episode per round each).")] = 32,
    heldout_tasks: Annotated[int, typer.Option(help="Held-out tasks per family for pass@1 before/after.")] = 128,
    rounds: Annotated[int, typer.Option(help="Passes over the train tasks.")] = 1,
    rollouts: Annotated[int, typer.Option(help="Group size k: rollouts per episode.")] = 8,
    temperature: Annotated[float, typer.Option(help="Solver sampling temperature for rollouts.")] = 0.8,
    max_tokens: Annotated[int, typer.Option(help="Solver completion cap in tokens.")] = 96,
    seed: Annotated[int, typer.Option(help="Seed for task draws and sampling.")] = 0,
    session: Annotated[Optional[str], typer.Option(help="Name of the new session (default run-YYYYMMDD-HHMMSS).")] = None,
    resume: Annotated[Optional[str], typer.Option(help="Continue an interrupted session by name (its stored settings are used).")] = None,
    solver: Annotated[str, typer.Option(help=f"Solver model: {spec_list(SOLVER_NEEDS)}.")] = "local",
    critic: Annotated[
        Optional[str], typer.Option(help=f"Critic: verifier (no model), {spec_list()}; the judge of rubric rewards. Default: verifier, or the teacher's model with a rubric reward.")
    ] = None,
    teacher: Annotated[str, typer.Option(help=f"Teacher model: {spec_list(about=True)}.")] = "qwen2.5-coder-1.5b",
    request_timeout: Annotated[float, typer.Option(help="Per-request timeout of OpenAI-compatible endpoints, seconds.")] = 600.0,
    teacher_in_flight: Annotated[int, typer.Option(help="Teacher / judge / proposer requests in flight at once per endpoint (a llama.cpp server has one slot).")] = 1,
    solver_in_flight: Annotated[int, typer.Option(help="Solver requests in flight at once per endpoint.")] = 8,
    lesson_tokens: Annotated[int, typer.Option(help="Token budget of the lessons in the solver prompt.")] = 512,
    library_tokens: Annotated[int, typer.Option(help="Token budget of all live lessons; an op past it is rejected.")] = 4096,
    utility_every: Annotated[int, typer.Option(help="Utility A/B of lessons (with vs without) every N episodes; candidates become active on it; 0: off.")] = RUN_UTILITY_EVERY,
    utility_lessons: Annotated[int, typer.Option(help="Lessons measured per utility check.")] = 2,
    utility_tasks: Annotated[int, typer.Option(help="Tasks per lesson in a utility A/B: the family's train tasks, topped up with validation tasks (never trained on, never held-out).")] = RUN_UTILITY_TASKS,
    utility_samples: Annotated[int, typer.Option(help="Completions per task and arm in a utility A/B: 1 greedy (as held-out pass@1); more: sampled at --temperature on common seeds.")] = RUN_UTILITY_SAMPLES,
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
    proposer: Annotated[str, typer.Option(help=f"Who writes proposed tasks (--curriculum frontier): teacher (the teacher's model), {spec_list()}.")] = "teacher",
    proposals: Annotated[Optional[int], typer.Option(help="Proposed tasks per family per round (frontier; default 2).")] = None,
    proposal_samples: Annotated[int, typer.Option(help="Independent samples that must confirm a proposal's answer where no verifier exists.")] = 4,
    proposal_agreement: Annotated[float, typer.Option(help="Share of those samples that must agree with the proposed answer.")] = 0.75,
    concurrency: Annotated[int, typer.Option(help="Episodes of a round in flight at once; their model calls are batched together. Results do not depend on it.")] = 8,
    reflect: Annotated[bool, typer.Option("--reflect/--no-reflect", help="Teacher reflection (lessons) on the groups --reflect-on picks; --no-reflect: weight-only learning.")] = True,
    reflect_on: Annotated[str, typer.Option(help="Groups the teacher reflects on: mixed (successes and failures: a contrast to learn from) or all.")] = "mixed",
    reflections_per_round: Annotated[int, typer.Option(help="The teacher's budget: reflections per round, spent in task order; 0: no limit.")] = 4,
    cycles: Annotated[int, typer.Option(help="Wake–sleep cycles: --rounds rounds of episodes, then a sleep (distillation into a LoRA the next cycle samples with).")] = 1,
    sleep_objective: Annotated[str, typer.Option(help=f"arena distill objective of each sleep: {', '.join(objective_names())}; none: no sleep; auto: distill where a sleep can run and has enough to learn from (local solver, verifier reward, a wake of at least 32 episodes and --sleep-min-examples rollouts), else none.")] = "auto",
    sleep_from: Annotated[str, typer.Option(help="base: each sleep trains a fresh LoRA on every cycle's successes so far (STaR); previous: continue the last adapter on this cycle's.")] = "base",
    sleep_epochs: Annotated[float, typer.Option(help="Passes over a sleep's examples (when --sleep-steps is 0).")] = 4.0,
    sleep_steps: Annotated[int, typer.Option(help="Optimizer steps per sleep, batch 8 (measured on the default run's wakes, bench/RESULTS.md; 0: from --sleep-epochs).")] = 28,
    sleep_lr: Annotated[float, typer.Option(help="Peak learning rate of a sleep.")] = 5e-4,
    sleep_min_examples: Annotated[int, typer.Option(help="Refuse a sleep with fewer training examples than this.")] = 16,
    sleep_min_guided_log_ratio: Annotated[float, typer.Option(help="Guided successes whose mean log π(y|x) − log π_old(y|x,hint) is below this (nats/token) are not trained.")] = -1.0,
    sleep_kl_coef: Annotated[float, typer.Option(help="grpo / guide-grpo sleeps: β of the per-token KL to the base model (adapter disabled); 0: none, as Guide.")] = 0.0,
    lease_ttl: Annotated[Optional[float], typer.Option(help="Seconds the session's lease lasts without a heartbeat (renewed every quarter of it): how long after a crash --resume must wait. Stored with the session; --resume keeps it unless given again. [default: 60]")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON summary object on stdout at the end.")] = False,
) -> None:
    """Run a self-play session: held-out pass@1, rounds of solve → grade → reflect → curate, pass@1 again."""
    quiet_libraries()
    from agents.policy import PolicyError
    from arena.config import DEFAULT_FAMILY, ConfigError, SessionConfig, check_db, check_lease_ttl
    from arena.distill.errors import TrainingError
    from arena.tasks.model import TaskError
    from arena.tasks.sources import load_tasks
    from arena.session.lease import SessionLease
    from lessons.db.faults import StoreFault, classify, is_damaged_file
    from lessons.library.store import LessonStore, StoreError, check_database

    def damaged(fault: StoreFault) -> str:
        return f"{fault}: the database file {db} is damaged; restore it from a copy (nothing more was written)"

    console = Console(stderr=True)
    store = None
    lease = None
    name = resume or session or "NAME"
    stop_on_sigterm()  # `kill`/`timeout`: stop like Ctrl-C, session marked interrupted
    try:
        if lease_ttl is not None:
            check_lease_ttl(lease_ttl)  # NaN and infinity too; before any file is touched
        for flag, value in (("--resume", resume), ("--session", session)):
            if value is not None and not value.strip():  # '' would silently start a session of a made-up name
                raise ConfigError(f"{flag} needs a session name, got {value!r}")
        if resume is not None and session is not None:
            raise ConfigError("give --resume NAME (continue a session) or --session NAME (start one), not both")
        check_db(db)
        check_database(db)  # a bad path fails here, before the model loads or anything is created
        if resume:
            from lessons.db.engine import parse_url, sqlite_file

            path = sqlite_file(parse_url(db))
            if path is not None and not path.exists():  # a mistyped path: say so, create nothing
                raise StoreError(f"no database at {path}; nothing to resume")
            store = LessonStore(db)
            info = store.get_session(resume)
            if info is None:
                raise StoreError(f"no session named {resume!r} in {db}")
            if info.status == "finished":
                raise StoreError(f"session {resume!r} already finished; start a new one with --session NAME")
            cfg = SessionConfig.model_validate({**info.config, "db": db})  # the session's own --lease-ttl too
            if lease_ttl is not None:  # given again: this run's lease lasts that long
                cfg = cfg.model_copy(update={"lease_ttl_s": lease_ttl})
            lease = SessionLease(store, cfg.lease_ttl_s)
            lease.acquire(info.id)  # before any work: a second owner is refused here, having written nothing
            name = resume
        else:
            if sleep_objective not in (*objective_names(), "auto", "none"):
                raise ConfigError(f"--sleep-objective must be one of {', '.join(objective_names())}, auto or none, "
                                  f"got {sleep_objective!r}")
            if sleep_objective == "none" and cycles > 1:
                raise ConfigError(f"--cycles {cycles} alternates wakes with sleeps; --sleep-objective none needs --cycles 1")
            rubric = reward != "verifier"
            if rubric and not family and tasks_file is None:
                from arena.tasks.jsonl import BUILTIN_RUBRIC_TASKS

                tasks_file = BUILTIN_RUBRIC_TASKS  # the shipped rubric tasks: runs offline
            families = list(family) if family else ([] if tasks_file else [DEFAULT_FAMILY])
            critic = critic or (teacher if rubric else "verifier")
            success_threshold = success_threshold if success_threshold is not None else (0.8 if rubric else 1.0)
            cfg = SessionConfig(
                db=db, families=families, tasks_file=tasks_file, train_tasks=train_tasks, heldout_tasks=heldout_tasks,
                rounds=rounds, rollouts=rollouts, temperature=temperature, max_tokens=max_tokens, seed=seed,
                session=session, solver=solver, critic=critic, teacher=teacher, lesson_tokens=lesson_tokens,
                request_timeout_s=request_timeout, teacher_in_flight=teacher_in_flight, solver_in_flight=solver_in_flight,
                library_tokens=library_tokens, utility_every=utility_every, utility_lessons=utility_lessons,
                utility_tasks=utility_tasks, utility_samples=utility_samples,
                success_threshold=success_threshold, reward=reward, online_rubrics=online_rubrics,
                include_flagged=include_flagged,
                curriculum=curriculum, target_pass=target_pass, proposer=proposer, proposals=proposals,
                proposal_samples=proposal_samples, proposal_agreement=proposal_agreement,
                concurrency=concurrency, reflect=reflect, reflect_on=reflect_on, reflections_per_round=reflections_per_round, cycles=cycles, sleep_objective=None if sleep_objective in ("auto", "none") else sleep_objective, sleep_from=sleep_from,
                sleep_epochs=sleep_epochs, sleep_steps=sleep_steps, sleep_lr=sleep_lr,
                sleep_min_examples=sleep_min_examples, sleep_min_guided_log_ratio=sleep_min_guided_log_ratio,
                sleep_kl_coef=sleep_kl_coef, adapter=adapter,
                **({"lease_ttl_s": lease_ttl} if lease_ttl is not None else {}),
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
        if not resume and sleep_objective == "auto":
            cfg = cfg.with_auto_sleep(len(splits.train))
        cfg.check_cycle_budget(len(splits.train))
        roles = make_roles(cfg)
        check_prompt_lengths(roles.solver, [*splits.train, *splits.heldout], cfg)
        if store is None:
            store = LessonStore(db)
            name = cfg.session or store.new_session_name()
            if store.get_session(name) is not None:
                raise StoreError(f"session {name!r} already exists; use --resume {name} or pick another --session")
            lease = SessionLease(store, cfg.lease_ttl_s)  # taken with the session's row (open_session)
        with contextlib.redirect_stdout(sys.stderr):
            summary = run_session(cfg, store, roles, splits, name, resume=bool(resume), console=console, lease=lease)
    except StoreFault as e:  # a full disk, a read-only file, a server gone for good: nothing committed is lost
        if is_damaged_file(e):  # a resume would read the same damaged pages
            raise fail(damaged(e)) from None
        raise fail(f"{e}; nothing committed was lost; fix it and continue with: arena run --db {db} --resume {name}",
                   EXIT_STORE_FAULT) from None
    except ValidationError as e:
        raise fail(config_error(e)) from None
    except (ConfigError, TaskError, StoreError, PolicyError, ValueError, TrainingError) as e:  # DistillError, AdapterError are ValueErrors
        raise fail(" ".join(str(e).split())) from None
    except KeyboardInterrupt:
        try:
            stored = store.get_session(name) if store is not None else None
        except Exception as e:  # noqa: BLE001 - the database went with the interrupt: say what is known
            if classify(e) is None:
                raise
            raise fail(f"interrupted; continue with: arena run --db {db} --resume {name}", EXIT_INTERRUPTED) from None
        if stored is not None and stored.status == "finished":  # the signal came after the session was complete
            raise fail(f"interrupted after session {name!r} finished; its summary: arena report --db {db} --session {name}",
                       EXIT_INTERRUPTED) from None
        if stored is not None:
            raise fail(f"interrupted; continue with: arena run --db {db} --resume {name}", EXIT_INTERRUPTED) from None
        raise fail("interrupted before the session started; nothing was stored", EXIT_INTERRUPTED) from None
    except Exception as e:  # a database fault outside the session's run (opening, checking): one line, not a traceback
        fault = classify(e)
        if fault is None:
            raise
        if is_damaged_file(fault):
            raise fail(damaged(fault)) from None
        raise fail(f"{fault}; nothing committed was lost; fix it and run again", EXIT_STORE_FAULT) from None
    finally:
        if lease is not None:
            lease.release()
        if store is not None:
            store.close()
    if json_out:
        print(summary.to_json())
    else:
        print_summary(summary, Console())


def _fmt_eval(e: EvalFigure | None) -> str:
    if e is None:
        return "-"
    lo, hi = e.ci95
    return f"{fmt_rate(e.pass_at_1)}  [{lo:.3f}, {hi:.3f}]  n={e.n}"


def _fmt_paired(p: PairedComparison | None) -> str:
    if p is None:
        return "-"
    lo, hi = p.ci95
    return f"{p.diff:+.3f}  [{lo:+.3f}, {hi:+.3f}]  McNemar p={p.p_value:.3g}  n={p.n}"


def print_summary(summary: RunSummary, console: Console) -> None:
    """The end-of-session table: counts, rewards and held-out pass@1 with 95% Wilson intervals.

    Args:
        summary: the session's summary (:func:`arena.session.runner.run_session`).
        console: where the table is printed.
    """
    s, hints, cur = summary, summary.hints, summary.curriculum
    t = Table(title=f"session {s.session}", show_header=False)
    t.add_column("metric", style="bold")
    t.add_column("value")
    for label, value in (
        ("episodes", s.episodes), ("rollouts", s.rollouts), ("mean reward", s.mean_reward),
        ("lessons added", s.lessons_added), ("lessons active", s.lessons_active),
        ("lessons candidate", s.lessons_candidate), ("lessons retired", s.lessons_retired),
        ("library tokens used", s.library_tokens_used), ("utility checks", s.utility_checks),
        ("reflections failed", s.reflections_failed), ("curation rejected", s.curation_rejected),
    ):
        t.add_row(label, str(value))
    if s.utility_skipped:
        t.add_row("utility A/B skipped", s.utility_skipped)
    t.add_row("faults", ", ".join(f"{k} {v}" for k, v in s.faults.items()) or "none")
    t.add_row("all-fail groups → guided", f"{hints.all_fail_groups} → {hints.guided_groups} "
              f"(guided success rate {hints.guided_success_rate})")
    if hints.all_fail_rescued is not None:
        t.add_row("all-fail groups rescued", str(hints.all_fail_rescued))
    if hints.hints_refused or hints.plan_rejections:
        reasons = ", ".join(f"{k} {v}" for k, v in hints.plan_rejections.items()) or "none"
        n = hints.hints_refused
        t.add_row("hints not written", f"{n} group{'' if n == 1 else 's'} (every part refused); "
                  f"plan attempts refused: {reasons}")
    t.add_row("pass@k unguided → with hints", f"{hints.pass_at_k_unguided} → {hints.pass_at_k_with_hints}")
    for r in s.rounds:
        extra = ", ".join(f"{k} {v}" for k, v in r.pass_rates().items())
        t.add_row(f"round {r.round}", f"mean reward {r.mean_reward}, {extra}")
    if s.rubric is not None:  # rubric rewards
        rub = s.rubric
        t.add_row("graded / ungraded rollouts", f"{rub.graded_rollouts} / {rub.ungraded_rollouts}")
        flags = ", ".join(f"{k} {v}" for k, v in rub.hack_flags.items()) or "none"
        t.add_row("reward-hack flagged rollouts", f"{rub.flagged_rollouts} ({flags})")
        t.add_row("rubric versions added online", str(rub.rubric_versions_added))
        for fam, c in rub.critic_calibration.items():
            t.add_row(f"critic vs verifier: {fam}", f"accuracy {c.accuracy:.3f}, ECE {c.ece:.3f}, n={c.n}")
        for name, m in rub.heldout_mean_reward.items():
            t.add_row(f"{name} mean reward", "-" if m is None else f"{m:.3f}")
    for fam, rows in cur.difficulty.items():
        steps = " → ".join(f"{r.step:+d}" + (f" ({r.train_pass_rate:.2f})" if r.train_pass_rate is not None else "")
                           for r in rows)
        t.add_row(f"difficulty {fam}", f"rung (train pass@1) by round: {steps}")
    if cur.proposed_tasks:
        t.add_row("proposed → accepted tasks", f"{cur.proposed_tasks} → {cur.accepted_tasks} "
                  f"(rejected: {cur.proposal_rejections})")
    t.add_row("held-out pass@1 before", _fmt_eval(s.heldout_before))
    t.add_row("held-out pass@1 after", _fmt_eval(s.heldout_after))
    t.add_row("  … after, no lessons", _fmt_eval(s.heldout_after_no_lessons))
    t.add_row("after − before (paired)", _fmt_paired(s.heldout_after_vs_before))
    t.add_row("lessons − no lessons (paired)", _fmt_paired(s.lessons_vs_no_lessons))
    if len(s.cycles) > 1 or any(c.adapter_id for c in s.cycles):
        for c in s.cycles:
            t.add_row(f"cycle {c.cycle}", f"{c.adapter_id or 'no sleep'}: {c.examples} examples; held-out "
                      f"{_fmt_eval(c.heldout)}; no lessons {_fmt_eval(c.heldout_no_lessons)}; train pass@1 "
                      f"{c.train_pass_at_1}, pass@k {c.train_pass_at_k}; vs before {_fmt_paired(c.vs_before)}")
    if any(v.step != 0 for v in cur.difficulty_final.values()):
        t.add_row("held-out pass@1 at final difficulty", _fmt_eval(s.heldout_final_difficulty))
        t.add_row("  … no lessons", _fmt_eval(s.heldout_final_difficulty_no_lessons))
    for role, r in s.role_speed.items():
        t.add_row(f"{role} model", f"{r.model}: {r.completion_tokens} tokens in {r.seconds} s busy "
                  f"({r.tokens_per_s} tok/s, {r.share_of_wall:.0%} of wall), {r.calls} calls")
    t.add_row("wall time", f"{s.wall_time_s} s")
    console.print(t)
