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

import sqlite3
import threading
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from agents.policy import Policy, sample_many
from agents.roles.solver import solver_messages
from arena.config import ConfigError, SessionConfig
from arena.distill.data import NoTrainingData
from arena.episode.graph import EpisodeSettings, Roles, build_episode_graph, retrieve_for_task
from arena.episode.rewards import RewardStrategy, RubricReward, make_reward
from arena.session.curriculum import CurriculumSettings, SessionCurriculum, curriculum_summary
from arena.session.utility import UtilitySettings, maybe_check_utility
from arena.stats import mean_pass_at_k, wilson_interval
from arena.tasks.extract import extract_answer
from arena.tasks.model import Task, TaskSplits
from arena.tasks.seeds import episode_seed
from arena.tasks.verify import score
from lessons.library.adapters import AdapterStore
from lessons.library.curation import CurationPolicy
from lessons.library.rubrics import RubricStore
from lessons.library.store import LessonStore, StoreError
from lessons.outcomes import (
    EVAL_NAMES,
    HELDOUT_AFTER,
    HELDOUT_AFTER_NO_LESSONS,
    HELDOUT_BEFORE,
    HELDOUT_FINAL_DIFFICULTY,
    HELDOUT_FINAL_DIFFICULTY_NO_LESSONS,
    count_passes,
    eval_name,
)

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

    ``adapter`` (default ``cfg.adapter``): a LoRA adapter applied to the local SOLVER only; a
    local teacher or critic then gets its own copy of the base model.

    Raises:
        agents.policy.PolicyError: an endpoint is unreachable or a model does not exist
            (checked here, before any work is done).
    """
    cache: dict[tuple[str, Path | None], Policy] = {}
    if adapter is None and cfg.adapter:
        adapter = Path(cfg.adapter)

    def policy(spec: str, lora: Path | None = None) -> Policy:
        key = (spec, lora if spec == "local" else None)
        if key not in cache:
            if spec == "local":
                from agents.backends.local import LocalPolicy

                cache[key] = LocalPolicy(adapter=lora)
            else:
                from agents.backends.openai_backend import OpenAIPolicy

                p = OpenAIPolicy(spec.split(":", 1)[1])
                p.check()
                cache[key] = p
        return cache[key]

    return Roles(
        solver=policy(cfg.solver, adapter),
        teacher=policy(cfg.teacher),
        critic=None if cfg.critic == "verifier" else policy(cfg.critic),
        proposer=None if cfg.proposer == "teacher" or cfg.proposals_per_round == 0 else policy(cfg.proposer),
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


def evaluate_heldout(
    store: LessonStore,
    solver: Policy,
    tasks: Sequence[Task],
    with_lessons: bool,
    lesson_tokens: int,
    max_tokens: int,
    reward: RewardStrategy | None = None,
    session_id: int = 0,
    exclude: Collection[str] = (),
) -> tuple[list[float], dict[str, Any]]:
    """Greedy pass@1 on held-out tasks, with or without each task's retrieved lessons.

    With a rubric ``reward`` each completion is judged against the task's current rubric
    (RaR); rollouts the judge could not grade are left out of ``rewards`` and counted in
    ``details["ungraded"]``, and ``details["mean_reward"]`` is the mean judged reward.
    ``exclude``: lesson ids kept out of the prompt (those distilled into the solver's adapter).

    Returns:
        ``(rewards, details)``: one reward per (graded) task (input order) and per-task records
        (task key, extracted answer, reward, lesson ids in context) for the evaluations table.
    """
    chats, shown = [], []
    for t in tasks:
        section, ids = retrieve_for_task(store, t, lesson_tokens, solver.count_tokens, exclude) if with_lessons else ("", [])
        chats.append(solver_messages(t.question, section))
        shown.append([i for i, _ in ids])
    outs = sample_many(solver, chats, temperature=0.0, max_tokens=max_tokens)
    rewards, rows = [], []
    for t, c, ids in zip(tasks, outs, shown):
        if isinstance(reward, RubricReward):
            g = reward.grade(t, [c], session_id)[0]
            ans, r = g["extracted_answer"], g["reward"]
        else:
            ans = extract_answer(c.text)
            r = score(t, ans)
        if r is not None:
            rewards.append(r)
        rows.append({"task_key": t.task_key, "extracted_answer": ans, "reward": r, "lessons": ids})
    details: dict[str, Any] = {"tasks": rows}
    if isinstance(reward, RubricReward):
        details.update(ungraded=len(rows) - len(rewards), mean_reward=sum(rewards) / len(rewards) if rewards else None)
    return rewards, details


def _eval_summary(rewards: Sequence[float]) -> dict[str, Any]:
    n = len(rewards)
    k = count_passes(rewards)
    lo, hi = wilson_interval(k, n)
    return {"pass_at_1": k / n if n else 0.0, "n": n, "ci95": [round(lo, 4), round(hi, 4)]}


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
    base_model: Path | None = None,
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
        base_model: the base checkpoint the sleeps of ``--cycles`` train and load adapters on;
            default the embedded model (tests pass a tiny one).

    Returns:
        The summary dict: session, episodes, rollouts, mean_reward, lessons_added,
        lessons_active, heldout_before / heldout_after / heldout_after_no_lessons
        (``{"pass_at_1", "n", "ci95"}``), per-round statistics and wall time.

    Raises:
        lessons.library.store.StoreError: the session exists (new) or does not (resume).
        KeyboardInterrupt: propagated after marking the session ``interrupted``.
    """
    t_start = time.perf_counter()
    if resume:
        info = store.get_session(session_name)
        if info is None:
            raise StoreError(f"no session named {session_name!r} in {store.url}; see `arena run --help`")
        session_id = info.id
        current = {(x.task_key, x.question) for x in [*splits.train, *splits.heldout]}
        added = SessionCurriculum.added_task_keys(store, session_id)  # drawn or proposed during the session
        changed = [
            t.task_key for t in store.stored_tasks(session_name)
            if (t.task_key, t.question) not in current and t.task_key not in added
        ]
        if changed:
            raise StoreError(
                f"the tasks of session {session_name!r} changed since it started ({changed[0]} and "
                f"{len(changed) - 1} more differ; was the task file edited?); restore them or start a new session"
            )
        store.set_session_status(session_id, "running")
    else:
        session_id = store.create_session(session_name, cfg.model_dump(mode="json"), cfg.seed)
    store.upsert_tasks(session_id, [*splits.train, *splits.heldout])
    rubric_store = RubricStore(store)
    reward = make_reward(cfg, roles.critic, rubric_store, session_id, [*splits.train, *splits.heldout])
    # Checkpoint threads are bound to this session row (id and creation time), so a checkpoint
    # file left from a deleted database or another library is never resumed by mistake.
    created = store.get_session(session_name).created_at.isoformat()
    thread_prefix = f"{session_name}#{session_id}@{created}"
    task_by_key = {t.task_key: t for t in [*splits.train, *splits.heldout]}

    from arena.session.cycles import HeldoutEvals, Solver, adapter_solver, cycle_adapters, sleep

    exclude = adapter_distilled_lessons(store, cfg.adapter)
    solver = Solver(roles.solver, adapter_label(store, cfg.adapter), Path(cfg.adapter) if cfg.adapter else None, exclude)
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
        include_flagged=cfg.include_flagged,
        exclude_lessons=exclude,
        adapter_id=solver.adapter_id,
        reflect=cfg.reflect,
    )
    store.curation_policy = CurationPolicy(library_tokens=cfg.library_tokens)
    store.count_tokens = roles.solver.count_tokens
    with store.curate() as c:  # the budget counts this session's solver tokens
        c.recount_live()
    utility = UtilitySettings(
        every=cfg.utility_every,
        lessons=cfg.utility_lessons,
        tasks=cfg.utility_tasks,
        samples=cfg.utility_samples,
        lesson_tokens=cfg.lesson_tokens,
        temperature=cfg.temperature,
        max_tokens=cfg.max_tokens,
    )
    online_due: list[str] = []  # episode keys since the last online-rubric update
    online_log: list[Any] = []  # OnlineUpdate per task per update, for the summary
    curriculum = SessionCurriculum(
        CurriculumSettings(
            mode=cfg.curriculum, band=tuple(cfg.target_pass), proposals=cfg.proposals_per_round,
            samples=cfg.proposal_samples, agreement=cfg.proposal_agreement, train_tasks=cfg.train_tasks,
            heldout_tasks=cfg.heldout_tasks, seed=cfg.seed, success_threshold=cfg.success_threshold,
            teacher_max_tokens=cfg.teacher_max_tokens, max_tokens=cfg.max_tokens,
        ),
        store, session_id, splits, task_by_key,
        proposer=roles.proposer or roles.teacher, confirm=roles.critic or roles.teacher,
        fits=lambda tasks: check_prompt_lengths(roles.solver, tasks, cfg),
    )  # chooses each round's train tasks; held-out stays splits.heldout
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
        evals = HeldoutEvals(store, session_id, splits.heldout, cfg.lesson_tokens, cfg.max_tokens)

        def run_eval(name: str, with_lessons: bool, heldout: Sequence[Task] = splits.heldout) -> None:
            if name in done_evals:
                return
            bar = progress.add_task(f"eval {name}", total=len(heldout), status="") if progress else None
            rewards, details = evaluate_heldout(
                store, solver.policy, heldout, with_lessons, cfg.lesson_tokens, cfg.max_tokens, reward, session_id,
                solver.exclude,
            )
            s = _eval_summary(rewards)
            store.record_evaluation(session_id, name, "heldout", with_lessons, rewards, tuple(s["ci95"]), details)
            if progress:
                progress.update(bar, completed=len(rewards), status=f"pass@1 {s['pass_at_1']:.3f}")

        run_eval(HELDOUT_BEFORE, True)
        evals.adopt_plain(HELDOUT_BEFORE, solver.adapter_id)
        finished = store.finished_episode_keys(session_id)
        slept = cycle_adapters(store, session_name) if cfg.sleep else {}
        refused: dict[int, str] = {}  # cycle -> why its sleep was refused (too few examples)
        for cycle in range(1, cfg.cycles + 1):
            first, last = (cycle - 1) * cfg.rounds + 1, cycle * cfg.rounds
            if cycle > 1 and cycle - 1 in slept and solver.adapter_id != slept[cycle - 1].adapter_id:
                solver = swap_solver(solver, adapter_solver(slept[cycle - 1], solver.exclude, base_model), roles)  # resumed
            roles = replace(roles, solver=solver.policy)
            settings = replace(settings, adapter_id=solver.adapter_id, exclude_lessons=solver.exclude)
            graph = build_episode_graph(roles, store, task_by_key, settings, checkpointer, reward=reward,
                                        rubric_store=rubric_store)
            for rnd in range(first, last + 1):
                round_tasks = curriculum.tasks_for_round(rnd)
                bar = (
                    progress.add_task(f"round {rnd}/{cfg.rounds * cfg.cycles}", total=len(round_tasks), status="")
                    if progress
                    else None
                )
                rewards_so_far: list[float] = []

                def sampled(state: dict) -> None:  # an episode reached curate (called from worker threads)
                    rewards_so_far.extend(g["reward"] for g in state.get("grades", []) if g["reward"] is not None)
                    if progress:
                        mean = sum(rewards_so_far) / len(rewards_so_far) if rewards_so_far else float("nan")
                        progress.update(bar, advance=1, status=f"mean reward {mean:.3f}")

                todo = [(f"r{rnd:03d}-{t.task_key}", t) for t in round_tasks]
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
                    online_due.append(key)
                    if cfg.online_rubrics and len(online_due) >= cfg.online_rubrics:
                        online_log += _online_rubrics_update(cfg, rubric_store, session_id, roles, task_by_key, online_due)
                        online_due = []
                    maybe_check_utility(store, solver.policy, session_id, round_tasks, utility, cfg.seed)

                curriculum.end_round(rnd)  # band decision per family, then proposals
            if cfg.sleep is None:
                continue
            if cycle in slept:  # the sleep finished before an interruption: load its adapter
                if solver.adapter_id != slept[cycle].adapter_id:
                    solver = swap_solver(solver, adapter_solver(slept[cycle], solver.exclude, base_model), roles)
            else:
                bar = progress.add_task(f"sleep {cycle}/{cfg.cycles}", total=None, status=cfg.sleep) if progress else None
                try:
                    new, record = sleep(store, session_name, session_id, cycle, cfg, solver, evals, console, base_model)
                except NoTrainingData as e:  # too little data: no sleep this cycle, the same solver goes on
                    refused[cycle] = str(e)
                    if progress:
                        progress.update(bar, total=1, completed=1, status="refused")
                    if console is not None:
                        console.print(f"sleep {cycle} refused: {e}")
                else:
                    solver = swap_solver(solver, new, roles)
                    slept[cycle] = AdapterStore(store).get_adapter(record["adapter_id"])
                    if progress:
                        progress.update(bar, total=1, completed=1,
                                        status=f"{record['adapter_id']}: {record['data']['examples']} examples")
            for lessons in (True, False):  # a resumed cycle may lack them (kill after registration)
                evals.run(eval_name(cycle, lessons), solver, lessons)
        if cfg.sleep is not None:  # after the last sleep: the last cycle's figures, not measured again
            for name, lessons in ((HELDOUT_AFTER, True), (HELDOUT_AFTER_NO_LESSONS, False)):
                if name not in done_evals:
                    evals.record(name, evals.run(eval_name(cfg.cycles, lessons), solver, lessons), lessons, solver.adapter_id)
            done_evals = store.evaluations(session_id)
        run_eval(HELDOUT_AFTER, True)
        run_eval(HELDOUT_AFTER_NO_LESSONS, False)
        final_heldout = curriculum.final_heldout()  # None: every family ended at its starting difficulty
        if final_heldout is not None:
            run_eval(HELDOUT_FINAL_DIFFICULTY, True, final_heldout)
            run_eval(HELDOUT_FINAL_DIFFICULTY_NO_LESSONS, False, final_heldout)
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
    for c in summary["cycles"]:
        c["sleep_refused"] = refused.get(c["cycle"])
    if cfg.online_rubrics:
        summary["online_rubric_updates"] = {
            "tasks": len(online_log),
            "versions_added": sum(u.version is not None for u in online_log),
            "criteria_rejected": sum(len(u.rejected) for u in online_log),
            "failed": [f"{u.task_key}: {u.error}" for u in online_log if u.error][:10],
        }
    summary["wall_time_s"] = round(time.perf_counter() - t_start, 1)
    store.set_session_status(session_id, "finished", summary)
    return summary


def adapter_label(store: LessonStore, adapter: str | None) -> str | None:
    """The readable id of the solver's ``--adapter``: its registered id, else its directory's name (50 characters at most)."""
    if not adapter:
        return None
    info = AdapterStore(store).find_by_path(adapter)
    return info.adapter_id if info is not None else Path(adapter).name[:50]


def swap_solver(old: Any, new: Any, roles: Roles) -> Any:
    """Make ``new`` the solver; close ``old``'s model unless another role shares it (its decoder thread holds it)."""
    if old.policy is not new.policy and all(old.policy is not p for p in (roles.teacher, roles.critic, roles.proposer)):
        close = getattr(old.policy, "close", None)
        if close is not None:
            close()
    return new


def adapter_distilled_lessons(store: LessonStore, adapter: str | None) -> tuple[str, ...]:
    """The lessons distilled into the solver's adapter (they leave its prompt); () without one or unregistered."""
    if not adapter:
        return ()
    from lessons.library.adapters import AdapterStore

    info = AdapterStore(store).find_by_path(adapter)
    return tuple(info.distilled) if info is not None else ()


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
        "lessons_candidate": stats["lessons_candidate"],
        "lessons_retired": stats["lessons_retired"],
        "library_tokens_used": store.library_tokens_used(),
        "library_tokens": cfg.library_tokens,
        "utility_checks": len(store.utility_checks(session_id)),
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
    from arena.session.cycles import HeldoutEvals, cycles_summary, paired

    stored = HeldoutEvals(store, session_id, [], cfg.lesson_tokens, cfg.max_tokens).stored
    after = stored(HELDOUT_AFTER)
    summary["heldout_after_vs_before"] = paired(after, stored(HELDOUT_BEFORE))
    summary["lessons_vs_no_lessons"] = paired(after, stored(HELDOUT_AFTER_NO_LESSONS))
    summary["cycles"] = cycles_summary(store, session_name, session_id, cfg)
    summary.update(hint_summary(store.group_outcomes(session_id), cfg.success_threshold))
    if cfg.reward != "verifier":
        summary.update(rubric_summary(RubricStore(store), session_id, evals))
    summary.update(curriculum_summary(store, session_id))
    for name, same in ((HELDOUT_FINAL_DIFFICULTY, HELDOUT_AFTER),
                       (HELDOUT_FINAL_DIFFICULTY_NO_LESSONS, HELDOUT_AFTER_NO_LESSONS)):
        e = evals.get(name)  # absent when no family moved: the final difficulty is the starting one
        summary[name] = (
            {"pass_at_1": round(e.pass_at_1, 4), "n": e.n, "ci95": [round(e.ci_lo, 4), round(e.ci_hi, 4)]}
            if e is not None else summary[same]
        )
    return summary


def rubric_summary(rubric_store: RubricStore, session_id: int, evals: dict[str, Any]) -> dict[str, Any]:
    """Rubric-reward figures of a session: grading counts, hack flags, critic calibration, held-out mean rewards.

    Returns:
        ``reward_kind``-independent keys: ``graded_rollouts``, ``ungraded_rollouts``, ``flagged_rollouts``,
        ``hack_flags`` (flag → count), ``rubric_versions_added``, ``critic_calibration``
        (:func:`arena.episode.calibration.calibration_report` on tasks with a verifier; ``{}`` if none) and
        ``heldout_mean_reward`` (evaluation name → mean judged reward).
    """
    from arena.episode.calibration import calibration_report

    out = rubric_store.grading_stats(session_id)
    out["critic_calibration"] = calibration_report(rubric_store.calibration_pairs(session_id))
    out["heldout_mean_reward"] = {
        name: (round(e.details["mean_reward"], 4) if e.details.get("mean_reward") is not None else None)
        for name, e in evals.items()
    }
    return out


def _online_rubrics_update(
    cfg: SessionConfig, rubric_store: RubricStore, session_id: int, roles: Roles, task_by_key: dict[str, Task],
    episode_keys: list[str],
) -> list[Any]:
    """One OnlineRubrics update over the train tasks of ``episode_keys`` (reference: the solver without lessons)."""
    from arena.session.online_rubrics import update_rubrics

    keys = list(dict.fromkeys(k.split("-", 1)[1] for k in episode_keys))  # "r001-<task_key>" -> task_key
    tasks = [task_by_key[k] for k in keys if k in task_by_key and task_by_key[k].split == "train"]
    return update_rubrics(
        rubric_store, session_id, tasks, episode_keys, roles.teacher, roles.solver,
        n_reference=min(4, cfg.rollouts), temperature=cfg.temperature, max_tokens=cfg.max_tokens,
        teacher_max_tokens=cfg.teacher_max_tokens, seed=episode_seed(cfg.seed, episode_keys[-1]),
    )


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
