"""The session runner: held-out pass@1 before, rounds of episodes through the graph, held-out pass@1 after.

``run_session`` is what ``arena run`` calls. It owns the session's life cycle in the store
(``running`` → ``finished`` / ``interrupted`` / ``failed``), the checkpointer (LangGraph
``SqliteSaver`` in a file beside the database, one thread per episode), and the summary.

Concurrency: a round runs in two phases. First every episode of the round runs the graph up
to ``curate`` (LangGraph ``interrupt_before``), ``cfg.concurrency`` episodes at a time in
threads — their model calls overlap, so the local backend decodes them in shared batches and
an OpenAI-compatible endpoint sees concurrent requests. Then the episodes are curated (written
to the store) one by one in task order. So every episode of a round sees the lesson library as
the previous round left it, and what is stored does not depend on ``--concurrency``: the
library is updated between rounds, as in batch-wise experience updates (Training-Free GRPO).
"""

from __future__ import annotations

import hashlib
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from agents.policy import Policy, sample_many
from agents.solver import solver_messages
from arena.config import ConfigError, SessionConfig
from arena.extract import extract_answer
from arena.graph import EpisodeSettings, Roles, build_episode_graph, retrieve_for_task
from arena.stats import mean_pass_at_k, wilson_interval
from arena.tasks import Task, TaskSplits, score
from lessons.store import LessonStore, StoreError

EVAL_NAMES = ("heldout_before", "heldout_after", "heldout_after_no_lessons")
CURATE_NODE = "curate"  # the graph node that writes an episode; run in task order after the round's sampling


def run_bounded(fn: Callable[[Any], None], items: Sequence[Any], concurrency: int) -> None:
    """Call ``fn(item)`` for every item, at most ``concurrency`` at a time, in daemon threads.

    ``concurrency`` 1 runs in the calling thread. Otherwise workers take items in order; after
    the first failure no new item is started, the running ones finish, and the first error
    (KeyboardInterrupt included) is re-raised in the caller. A KeyboardInterrupt in the caller
    (Ctrl-C) stops handing out items and propagates at once; running workers are daemon
    threads, so they end with the process, and whatever they checkpointed is resumable.

    Raises:
        BaseException: the first exception raised by ``fn``.
    """
    if concurrency <= 1 or len(items) <= 1:
        for item in items:
            fn(item)
        return
    queue = list(items)
    lock = threading.Lock()
    errors: list[BaseException] = []
    stop = threading.Event()

    def worker() -> None:
        while not stop.is_set():
            with lock:
                if not queue or errors:
                    return
                item = queue.pop(0)
            try:
                fn(item)
            except BaseException as e:  # noqa: BLE001 - re-raised in the caller
                with lock:
                    errors.append(e)
                return

    workers = [threading.Thread(target=worker, daemon=True, name=f"episode-{i}") for i in range(min(concurrency, len(items)))]
    for w in workers:
        w.start()
    try:
        for w in workers:
            while w.is_alive():
                w.join(timeout=0.2)
    except BaseException:
        stop.set()
        raise
    if errors:
        raise errors[0]


def make_roles(cfg: SessionConfig, adapter: Path | None = None) -> Roles:
    """Policies for the roles named in ``cfg``; roles that say ``local`` share one loaded model.

    Raises:
        agents.policy.PolicyError: an endpoint is unreachable or a model does not exist
            (checked here, before any work is done).
    """
    cache: dict[str, Policy] = {}

    def policy(spec: str) -> Policy:
        if spec not in cache:
            if spec == "local":
                from agents.local import LocalPolicy

                cache[spec] = LocalPolicy(adapter=adapter)
            else:
                from agents.openai_backend import OpenAIPolicy

                p = OpenAIPolicy(spec.split(":", 1)[1])
                p.check()
                cache[spec] = p
        return cache[spec]

    return Roles(
        solver=policy(cfg.solver),
        teacher=policy(cfg.teacher),
        critic=None if cfg.critic == "verifier" else policy(cfg.critic),
    )


def check_prompt_lengths(solver: Policy, tasks: Sequence[Task], cfg: SessionConfig) -> None:
    """Fail before any work when a task cannot fit the solver's context window.

    A prompt needs room for the solver's instructions, the lessons budget, the question and
    ``max_tokens`` of completion (guided re-attempts add a hint on top, cut by the model if
    needed). Backends without a known window (remote models) are not checked.

    Raises:
        ConfigError: naming the first task that does not fit and how to fix it.
    """
    window = getattr(solver, "context_window", None)
    if not window:
        return
    overhead = solver.count_tokens(solver_messages("")[0]["content"]) + 16  # chat-template tokens
    for t in tasks:
        if len(t.question) > 16 * window:  # far too long to be worth tokenising (a token is > 1 character)
            raise ConfigError(
                f"task {t.task_key} is too long for the solver: {len(t.question)} characters exceed its "
                f"context of {window} tokens; shorten the question"
            )
        need = overhead + cfg.lesson_tokens + solver.count_tokens(t.question) + cfg.max_tokens
        if need > window:
            raise ConfigError(
                f"task {t.task_key} is too long for the solver: {need} tokens with --lesson-tokens "
                f"{cfg.lesson_tokens} and --max-tokens {cfg.max_tokens} exceed its context of {window}; "
                "shorten the question or lower those budgets"
            )


def checkpoint_path(store: LessonStore) -> Path:
    """The LangGraph checkpoint file: ``<db stem>.checkpoints.sqlite`` beside a SQLite library, else in the cwd."""
    if store.sqlite_path is not None:
        p = store.sqlite_path
        return p.with_name(p.stem + ".checkpoints.sqlite")
    return Path("arena.checkpoints.sqlite")


def episode_seed(seed: int, episode_key: str) -> int:
    """A stable per-episode sampling seed derived from the session seed and the episode key."""
    return int.from_bytes(hashlib.sha256(f"{seed}:{episode_key}".encode()).digest()[:4], "little")


def evaluate_heldout(
    store: LessonStore,
    solver: Policy,
    tasks: Sequence[Task],
    with_lessons: bool,
    lesson_tokens: int,
    max_tokens: int,
) -> tuple[list[float], dict[str, Any]]:
    """Greedy pass@1 on held-out tasks, with or without each task's retrieved lessons.

    Returns:
        ``(rewards, details)``: one reward per task (input order) and per-task records
        (task key, extracted answer, reward, lesson ids in context) for the evaluations table.
    """
    chats, shown = [], []
    for t in tasks:
        section, ids = retrieve_for_task(store, t, lesson_tokens, solver.count_tokens) if with_lessons else ("", [])
        chats.append(solver_messages(t.question, section))
        shown.append([i for i, _ in ids])
    outs = sample_many(solver, chats, temperature=0.0, max_tokens=max_tokens)
    rewards, rows = [], []
    for t, c, ids in zip(tasks, outs, shown):
        ans = extract_answer(c.text)
        r = score(t, ans)
        rewards.append(r)
        rows.append({"task_key": t.task_key, "extracted_answer": ans, "reward": r, "lessons": ids})
    return rewards, {"tasks": rows}


def _eval_summary(rewards: Sequence[float]) -> dict[str, Any]:
    n = len(rewards)
    passes = sum(r >= 1.0 - 1e-9 for r in rewards)
    lo, hi = wilson_interval(passes, n)
    return {"pass_at_1": passes / n if n else 0.0, "n": n, "ci95": [round(lo, 4), round(hi, 4)]}


def run_session(
    cfg: SessionConfig,
    store: LessonStore,
    roles: Roles,
    splits: TaskSplits,
    session_name: str,
    resume: bool = False,
    console: Console | None = None,
    checkpointer: Any = None,
    on_episode: Callable[[dict], None] | None = None,
) -> dict[str, Any]:
    """Run (or resume) one session and return its summary (the ``--json`` object).

    Args:
        cfg: the session's settings.
        store: the lesson store.
        roles: the policies.
        splits: train and held-out tasks (deterministic from ``cfg``, so a resume rebuilds the same).
        session_name: name of a new session, or of the one to resume.
        resume: continue ``session_name``: finished episodes and evaluations are skipped,
            an episode interrupted mid-graph continues from its last checkpoint (one that
            was waiting for curate is curated without re-running anything).
        console: rich console for progress bars (stderr in the CLI); None runs silently.
        checkpointer: a LangGraph checkpointer; default a ``SqliteSaver`` beside the database.
        on_episode: called with each finished episode's final state (tests use it).

    Returns:
        The summary dict: session, episodes, rollouts, mean_reward, lessons_added,
        lessons_active, heldout_before / heldout_after / heldout_after_no_lessons
        (``{"pass_at_1", "n", "ci95"}``), per-round statistics and wall time.

    Raises:
        lessons.store.StoreError: the session exists (new) or does not (resume).
        KeyboardInterrupt: propagated after marking the session ``interrupted``.
    """
    t_start = time.perf_counter()
    if resume:
        info = store.get_session(session_name)
        if info is None:
            raise StoreError(f"no session named {session_name!r} in {store.url}; see `arena run --help`")
        session_id = info.id
        current = {(x.task_key, x.question) for x in [*splits.train, *splits.heldout]}
        changed = [t.task_key for t in store.stored_tasks(session_name) if (t.task_key, t.question) not in current]
        if changed:
            raise StoreError(
                f"the tasks of session {session_name!r} changed since it started ({changed[0]} and "
                f"{len(changed) - 1} more differ; was the task file edited?); restore them or start a new session"
            )
        store.set_session_status(session_id, "running")
    else:
        session_id = store.create_session(session_name, cfg.model_dump(mode="json"), cfg.seed)
    store.upsert_tasks(session_id, [*splits.train, *splits.heldout])
    # Checkpoint threads are bound to this session row (id and creation time), so a checkpoint
    # file left from a deleted database or another library is never resumed by mistake.
    created = store.get_session(session_name).created_at.isoformat()
    thread_prefix = f"{session_name}#{session_id}@{created}"
    task_by_key = {t.task_key: t for t in [*splits.train, *splits.heldout]}

    own_conn = None
    if checkpointer is None:
        from langgraph.checkpoint.sqlite import SqliteSaver

        own_conn = sqlite3.connect(str(checkpoint_path(store)), check_same_thread=False)
        checkpointer = SqliteSaver(own_conn)
    settings = EpisodeSettings(
        rollouts=cfg.rollouts,
        temperature=cfg.temperature,
        max_tokens=cfg.max_tokens,
        lesson_tokens=cfg.lesson_tokens,
        teacher_max_tokens=cfg.teacher_max_tokens,
        success_threshold=cfg.success_threshold,
        hint_modes=tuple(cfg.hint_modes),
    )
    graph = build_episode_graph(roles, store, task_by_key, settings, checkpointer)
    progress = (
        Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.fields[status]}"),
            console=console,
            transient=False,
        )
        if console is not None
        else None
    )
    try:
        if progress:
            progress.start()
        done_evals = store.evaluations(session_id)

        def run_eval(name: str, with_lessons: bool) -> None:
            if name in done_evals:
                return
            bar = progress.add_task(f"eval {name}", total=len(splits.heldout), status="") if progress else None
            rewards, details = evaluate_heldout(
                store, roles.solver, splits.heldout, with_lessons, cfg.lesson_tokens, cfg.max_tokens
            )
            s = _eval_summary(rewards)
            store.record_evaluation(session_id, name, "heldout", with_lessons, rewards, tuple(s["ci95"]), details)
            if progress:
                progress.update(bar, completed=len(rewards), status=f"pass@1 {s['pass_at_1']:.3f}")

        run_eval("heldout_before", True)
        finished = store.finished_episode_keys(session_id)
        for rnd in range(1, cfg.rounds + 1):
            bar = (
                progress.add_task(f"round {rnd}/{cfg.rounds}", total=len(splits.train), status="")
                if progress
                else None
            )
            rewards_so_far: list[float] = []

            def sampled(state: dict) -> None:  # an episode reached curate (called from worker threads)
                rewards_so_far.extend(g["reward"] for g in state.get("grades", []))
                if progress:
                    mean = sum(rewards_so_far) / len(rewards_so_far) if rewards_so_far else float("nan")
                    progress.update(bar, advance=1, status=f"mean reward {mean:.3f}")

            todo = [(f"r{rnd:03d}-{t.task_key}", t) for t in splits.train]
            if progress:
                progress.update(bar, advance=sum(key in finished for key, _ in todo))
            todo = [(key, t) for key, t in todo if key not in finished]
            threads = {key: {"configurable": {"thread_id": f"{thread_prefix}/{key}"}} for key, _ in todo}

            def to_curate(item: tuple[str, Task]) -> None:
                key, task = item
                thread = threads[key]
                snapshot = graph.get_state(thread)
                if tuple(snapshot.next) == (CURATE_NODE,):  # resumed: this episode already waits for curate
                    pass
                elif snapshot.next:  # interrupted mid-episode: continue from the checkpoint
                    graph.invoke(None, thread, interrupt_before=[CURATE_NODE])
                else:
                    graph.invoke(
                        {
                            "session_id": session_id,
                            "episode_key": key,
                            "round": rnd,
                            "task_key": task.task_key,
                            "seed": episode_seed(cfg.seed, key),
                            "started_at": datetime.now(timezone.utc).isoformat(),
                        },
                        thread,
                        interrupt_before=[CURATE_NODE],
                    )
                sampled(graph.get_state(thread).values)

            # Phase 1: every episode of the round runs up to curate, `concurrency` at a time; they all
            # see the library as it stood at the end of the previous round (nothing is curated yet).
            run_bounded(to_curate, todo, cfg.concurrency)
            # Phase 2: curate in task order, so the stored library does not depend on concurrency.
            for key, _ in todo:
                thread = threads[key]
                final = graph.invoke(None, thread)
                checkpointer.delete_thread(thread["configurable"]["thread_id"])
                if on_episode:
                    on_episode(final)
        run_eval("heldout_after", True)
        run_eval("heldout_after_no_lessons", False)
    except KeyboardInterrupt:
        store.set_session_status(session_id, "interrupted")
        raise
    except BaseException:
        store.set_session_status(session_id, "failed")
        raise
    finally:
        if progress:
            progress.stop()
        if own_conn is not None:
            own_conn.close()

    summary = build_summary(store, session_id, session_name, cfg)
    summary["wall_time_s"] = round(time.perf_counter() - t_start, 1)
    store.set_session_status(session_id, "finished", summary)
    return summary


def build_summary(store: LessonStore, session_id: int, session_name: str, cfg: SessionConfig) -> dict[str, Any]:
    """The session summary from stored rows (so a resumed session reports every episode)."""
    stats = store.session_stats(session_id)
    evals = store.evaluations(session_id)
    summary: dict[str, Any] = {
        "session": session_name,
        "episodes": stats["episodes"],
        "rollouts": stats["rollouts"],
        "mean_reward": round(stats["mean_reward"], 4),
        "lessons_added": stats["lessons_added"],
        "lessons_active": stats["lessons_active"],
        "reflections_failed": stats.get("reflections_failed", 0),
    }
    for name in EVAL_NAMES:
        e = evals.get(name)
        summary[name] = (
            {"pass_at_1": round(e.pass_at_1, 4), "n": e.n, "ci95": [round(e.ci_lo, 4), round(e.ci_hi, 4)]}
            if e is not None
            else None
        )
    rounds = []
    for rnd, groups in sorted(store.round_rewards(session_id).items()):
        flat = [r for g in groups for r in g]
        rounds.append(
            {
                "round": rnd,
                "episodes": len(groups),
                "mean_reward": round(sum(flat) / len(flat), 4) if flat else 0.0,
                "pass_at_1": round(mean_pass_at_k(groups, 1), 4),
                f"pass_at_{cfg.rollouts}": round(mean_pass_at_k(groups, cfg.rollouts), 4),
            }
        )
    summary["rounds"] = rounds
    summary.update(hint_summary(store.group_outcomes(session_id), cfg.success_threshold))
    return summary


def hint_summary(groups: Sequence[Any], threshold: float) -> dict[str, Any]:
    """How often guidance rescues a task (Guide / Agent-RLVR measures).

    Returns:
        ``all_fail_groups`` (groups whose best unguided reward < ``threshold``),
        ``guided_groups`` (groups re-attempted with a hint), ``guided_success_rate`` (share
        of guided groups with at least one guided success; 0.0 when there are none),
        ``pass_at_k_unguided`` (share of groups with an unguided success: pass@k at n = k)
        and ``pass_at_k_with_hints`` (share solved unguided or, after all failed, guided).
    """

    def ok(rewards: Sequence[float]) -> bool:
        return any(r >= threshold - 1e-9 for r in rewards)

    n = len(groups)
    guided = [g for g in groups if g.guided]
    rescued = sum(ok(g.guided) for g in guided)
    return {
        "all_fail_groups": sum(not ok(g.unguided) for g in groups),
        "guided_groups": len(guided),
        "guided_success_rate": round(rescued / len(guided), 4) if guided else 0.0,
        "pass_at_k_unguided": round(sum(ok(g.unguided) for g in groups) / n, 4) if n else 0.0,
        "pass_at_k_with_hints": round(sum(ok(g.unguided) or ok(g.guided) for g in groups) / n, 4) if n else 0.0,
    }
