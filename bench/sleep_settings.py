"""A session's sleep trained again under other settings, on the same wake: held-out pass@1 paired with the session's adapter.

How much of a sleep's held-out gain is its schedule and how much its wake? Two default runs differ
in both. This script keeps the wake: it rebuilds the first sleep's data exactly as the session did
(:func:`arena.session.cycles.sleep_config`, :func:`arena.distill.pipeline.collect_data`,
:func:`~arena.distill.pipeline.screen_data` with π_old rescored), trains a fresh LoRA with only
``--dropout`` and / or ``--steps`` changed (same seed, objective and learning rate), evaluates it as
the session evaluated its adapter (greedy, no lessons, the session's held-out tasks) and compares it
task by task with the session's stored ``heldout_cycle1_no_lessons``: the paired difference with
Newcombe's 95% interval and the exact McNemar p (:func:`arena.stats.paired_comparison`).

One JSON object on stdout. Models load in fp32 (training) and the sampling dtype (evaluation) on
the CPU, as in a session. The adapter directory (``--out``) is replaced.

Usage::

    python bench/sleep_settings.py --db /tmp/r1/arena.db --dropout 0 --steps 28 --out /tmp/r1/probe-adapter
"""

from __future__ import annotations

import argparse
import gc
import json
import shutil
import sys
from pathlib import Path
from typing import Any


def retrain(db: str, session: str | None, dropout: float | None, steps: int | None, out: Path) -> dict[str, Any]:
    """Train the session's cycle-1 sleep again with ``dropout`` / ``steps`` changed and compare it with the session's adapter.

    Raises:
        SystemExit: no session with episodes, or the session has no ``heldout_cycle1_no_lessons`` evaluation.
    """
    from agents.backends.local import LocalPolicy, default_device, training_dtype
    from arena.distill.pipeline import collect_data, screen_data, session_heldout, train_and_save
    from arena.distill.weights import AdapterSidecar
    from arena.evaluation import evaluate_heldout
    from arena.session.cycles import sleep_config
    from arena.stats import paired_comparison
    from lessons.library.adapters import AdapterStore
    from lessons.library.store import LessonStore
    from lessons.outcomes import passes

    with LessonStore(db) as store:
        session = session or store.latest_session_with_episodes()
        if session is None:
            raise SystemExit(f"sleep_settings.py: no session with episodes in {db}")
        cfg, tasks = session_heldout(store, db, session)
        stored = store.evaluations(store.get_session(session).id).get("heldout_cycle1_no_lessons")
        if stored is None:
            raise SystemExit(f"sleep_settings.py: session {session!r} has no sleep evaluation (heldout_cycle1_no_lessons)")
        dcfg = sleep_config(cfg, 1)
        theirs_adapter = next((a for a in AdapterStore(store).list_adapters() if a.session == session and a.cycle == 1), None)
        train_cfg = (theirs_adapter.config or {}).get("train", {}) if theirs_adapter is not None else {}
        session_train = {"dropout": train_cfg.get("dropout"), "steps": train_cfg.get("max_steps")}
        changes = {k: v for k, v in (("dropout", dropout), ("max_steps", steps)) if v is not None}
        dcfg = dcfg.model_copy(update={"train": dcfg.train.model_validate({**dcfg.train.model_dump(), **changes})})
        trainee = LocalPolicy(dtype=training_dtype(default_device()))
        trainee.load()
        rollouts, data = collect_data(store, session, dcfg, None, trainee.count_tokens, ())
        report = screen_data(store, session, rollouts, data, trainee, dcfg)
        shutil.rmtree(out, ignore_errors=True)
        sidecar = AdapterSidecar(adapter_id=out.name, base_model="", objective=dcfg.objective, session=session,
                                 config=dcfg.model_dump(mode="json"), data={"report": report}, metrics={}, created_at="")
        path, metrics = train_and_save(trainee, data, dcfg, out, sidecar)
        del trainee
        gc.collect()
        policy = LocalPolicy(adapter=path)
        policy.load()
        ours = evaluate_heldout(store, policy, tasks, False, cfg.lesson_tokens, cfg.max_tokens).passes
        policy.close()
    theirs = [passes(row.get("reward")) for row in stored.details["tasks"]]
    if len(theirs) != len(ours):
        raise SystemExit(f"sleep_settings.py: the stored evaluation has {len(theirs)} tasks, the session {len(ours)}")
    return {
        "session": session, "objective": dcfg.objective, "dropout": dcfg.train.dropout, "steps": dcfg.train.max_steps,
        "session_sleep": session_train, "examples": len(data.examples),
        "train_s": metrics.get("wall_s"), "tokens_per_s": metrics.get("tokens_per_s"), "final_loss": metrics.get("final_loss"),
        "pass_at_1": sum(ours) / len(ours), "session_adapter_pass_at_1": sum(theirs) / len(theirs),
        "vs_session_adapter": paired_comparison(ours, theirs),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--db", required=True, help="the session's library (SQLite path or SQLAlchemy URL)")
    ap.add_argument("--session", help="session name (default: the newest with episodes)")
    ap.add_argument("--dropout", type=float, help="LoRA dropout (default: the session's)")
    ap.add_argument("--steps", type=int, help="optimizer steps (default: the session's)")
    ap.add_argument("--out", type=Path, required=True, help="adapter directory to write (replaced)")
    args = ap.parse_args(argv)
    print(json.dumps(retrain(args.db, args.session, args.dropout, args.steps, args.out)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
