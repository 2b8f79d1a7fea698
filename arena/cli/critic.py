"""`arena critic ...`: rubric verdicts and the rubric judge's calibration against verifiers."""

from __future__ import annotations

import json
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.table import Table

from arena.cli.support import fail, open_existing, quiet_libraries

critic_app = typer.Typer(help="Inspect the critic: rubric verdicts and calibration against verifiers.", no_args_is_help=True)


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
    quiet_libraries()
    from arena.episode.calibration import calibration_report
    from lessons.library.rubrics import RubricStore
    from lessons.library.store import StoreError

    try:
        if not 0.0 <= threshold <= 1.0:
            raise ValueError(f"--threshold must be in [0, 1], got {threshold}")
        if bins < 1:
            raise ValueError(f"--bins must be >= 1, got {bins}")
        with open_existing(db) as store:
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
    quiet_libraries()
    from lessons.library.rubrics import RubricStore
    from lessons.library.store import StoreError

    try:
        with open_existing(db) as store:
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
