"""`plan` hints written again for a session's all-fail groups, and the guided groups they give: how many are rescued.

Guide's rescue rate (issue 31 §3: the share of all-fail groups with a guided success, from hints that
state no answer) depends on the teacher's plan prompt, the plan screen and the solver. A session
measures it once, on its own groups; this script holds the groups fixed and replays only the hint
step with today's code: for each all-fail train group of a stored session, the teacher writes a
``plan`` hint from the group's own failed attempts (:func:`agents.roles.hints.write_hint`, the
session's teacher and plan length), and the solver samples one guided group with it (the session's
k, temperature and completion cap; plan and guided group seeded with the session seed + the episode id), graded by the task's
verifier. So two prompts or screens can be compared on the same groups.

One JSON object on stdout: ``groups`` (all-fail train groups replayed), ``written`` (a plan passed
the screen), ``rescued`` (a guided success), ``all_fail_rescued`` (rescued / groups; null with none),
``plan_rejections`` (refused attempts by reason) and ``rows`` (per group: task, answer, plan,
guided successes of k, refused attempts). The embedded models load in process (minutes on a
CPU: each plan is a teacher call, each group k solver samples); nothing is written to the library.
Bad input (no library, no such session, a task file edited since the session ran): one line on
stderr, exit 2.

Usage::

    python bench/plan_hints.py --db /tmp/p1/arena.db [--session NAME] [--limit N]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections import Counter
from typing import Any


def replay(db: str, session: str | None, limit: int | None, teacher: Any = None, solver: Any = None) -> dict[str, Any]:
    """Write a plan for each of the session's all-fail train groups and sample its guided group.

    Args:
        db: the session's library.
        session: its name; None: the newest session with episodes.
        limit: replay the first N all-fail groups only; None: all.
        teacher, solver: policies to use; None: the session's own (``build_policy`` of its specs).

    Raises:
        SystemExit: no library at ``db`` (none is created), not a library, no such session or none
            with episodes, or its tasks cannot be rebuilt (one line).
    """
    from agents.backends.registry import build_policy
    from agents.policy import PolicyError
    from agents.roles.hints import FailedAttempt, HintRefused, plan_rejection_reasons, write_hint
    from agents.roles.solver import guided_messages
    from arena.config import SessionConfig
    from arena.episode.context import EpisodeSettings
    from arena.tasks.extract import extract_answer
    from arena.tasks.sources import load_tasks
    from arena.tasks.verify import score, verifiable_answer
    from lessons.library.adapters import AdapterStore
    from lessons.library.read_models import ArenaData, DatabaseProblem, open_store
    from lessons.outcomes import passes

    try:
        opened = open_store(db)  # never creates a library where a path was mistyped
    except DatabaseProblem as e:
        raise SystemExit(f"plan_hints.py: {e}") from None
    with opened as store:
        name = session or store.latest_session_with_episodes()
        info = store.get_session(name) if name else None
        if info is None:
            raise SystemExit(f"plan_hints.py: no session {session!r} in {db}" if session
                             else f"plan_hints.py: no session with episodes in {db}")
        session = name
        cfg = SessionConfig.model_validate({**info.config, "db": db})
        try:
            with contextlib.redirect_stdout(sys.stderr):
                tasks = {t.task_key: t for t in load_tasks(cfg.families, cfg.tasks_file, cfg.train_tasks,
                                                           cfg.heldout_tasks, cfg.seed).train}
        except Exception as e:  # noqa: BLE001 - a stored config that no longer loads
            raise SystemExit(f"plan_hints.py: cannot rebuild the tasks of session {session!r}: {' '.join(str(e).split())}") from None
        stored = {t.task_key: (t.question, t.answer) for t in store.stored_tasks(session, split="train")}
        if any(stored.get(k, (t.question, t.answer)) != (t.question, t.answer) for k, t in tasks.items()):
            # task keys are positions in the task file: an edited file would pair one task's attempts with another
            raise SystemExit(f"plan_hints.py: the train tasks of session {session!r} changed since it ran "
                             "(was the task file edited?)")
        reads = ArenaData(store)
        details = [reads.episode(e.id) for e in reads.episodes(info.id) if e.task_key in tasks]
        chats = {r.rollout_id: r.messages for r in AdapterStore(store).training_rollouts(session) if not r.guided}
    groups = [d for d in details if d is not None
              and not any(passes(r.reward, cfg.success_threshold) for r in d.rollouts if not r.guided and r.reward is not None)]
    groups = groups[:limit] if limit else groups
    try:
        teacher = teacher or build_policy(cfg.teacher)
        solver = solver or build_policy(cfg.solver)
    except PolicyError as e:
        raise SystemExit(f"plan_hints.py: {e}") from None
    rows: list[dict[str, Any]] = []
    reasons: Counter[str] = Counter()
    for d in groups:
        task = tasks[d.task_key]
        unguided = [r for r in d.rollouts if not r.guided and r.fault is None]
        if not unguided or unguided[0].id not in chats:
            continue  # nothing delivered to learn from: the session wrote no hint for it either
        failed = [FailedAttempt(r.completion, r.extracted_answer, r.critique) for r in unguided]
        seed = cfg.seed + d.id
        try:
            hint = write_hint(teacher, ("plan",), task.question, failed, verifiable_answer(task),
                              max_tokens=EpisodeSettings.hint_max_tokens, seed=seed, family=task.family)
            plan, refused = hint.text, hint.rejected
        except HintRefused as e:
            plan, refused = "", e.rejected
        reasons.update(r for line in refused for r in plan_rejection_reasons(line))
        successes = None
        if plan:
            guided = solver.sample(guided_messages(chats[unguided[0].id], plan), n=cfg.rollouts,
                                   temperature=cfg.temperature, max_tokens=cfg.max_tokens, seed=seed)
            successes = sum(passes(score(task, extract_answer(c.text)), cfg.success_threshold) for c in guided)
        rows.append({"task": task.question, "answer": task.answer, "plan": plan,
                     "guided_successes": successes, "refused": refused})
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    written = sum(bool(r["plan"]) for r in rows)
    rescued = sum(bool(r["guided_successes"]) for r in rows)
    return {"session": session, "k": cfg.rollouts, "groups": len(rows), "written": written, "rescued": rescued,
            "all_fail_rescued": round(rescued / len(rows), 4) if rows else None,
            "plan_rejections": dict(reasons.most_common()), "rows": rows}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--db", required=True, help="the session's library (SQLite path or URL)")
    p.add_argument("--session", help="session name (default: the newest with episodes)")
    p.add_argument("--limit", type=int, help="replay the first N all-fail groups only")
    args = p.parse_args(argv)
    if args.limit is not None and args.limit < 1:
        p.error(f"--limit must be >= 1, got {args.limit}")
    if args.session is not None and not args.session.strip():
        p.error("--session must name a session (omit it for the newest)")
    try:
        out = replay(args.db, args.session, args.limit)
    except SystemExit as e:  # bad input: its one line, exit 2 as the arena commands do
        print(e.code, file=sys.stderr)
        return 2
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
