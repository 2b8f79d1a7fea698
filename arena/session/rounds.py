"""One round of a session: every episode sampled up to ``reflect`` (bounded concurrency), then reflected and curated in task order.

Concurrency: first every episode of the round runs the graph up to ``reflect`` (LangGraph
``interrupt_before``), ``concurrency`` episodes at a time in threads (:func:`run_bounded`) —
their model calls overlap, so the local backend decodes them in shared batches and an
OpenAI-compatible endpoint sees concurrent requests. Then the episodes are reflected on by the
teacher and curated (written to the store) one by one in task order. So every episode of a round sees the lesson library as the
previous round left it, and what is stored does not depend on ``--concurrency``: the library is
updated between rounds, as in batch-wise experience updates (Training-Free GRPO).

What a round is made of (its tasks, the episode keys and seeds, what happens after each curate)
is the session runner's (:mod:`arena.session.runner`); this module only runs it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from arena.tasks.model import Task

CURATE_NODE = "curate"  # the graph node that writes an episode; run in task order after the round's sampling
# Phase 2 starts here: the teacher's reflection and the write run one episode at a time in task order, so the
# teacher never competes with the solver's batched sampling for the cores, and a per-round reflection budget is
# spent in the same order whatever --concurrency is.
PHASE2_NODE = "reflect"


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


@dataclass(frozen=True)
class Episode:
    """One episode of a round: its key, task, sampling seed and LangGraph checkpoint thread."""

    key: str  # "r{round:03d}-{task_key}", unique in the session
    task: Task
    round: int  # session round, from 1
    seed: int  # the episode's sampling seed
    thread: dict[str, Any]  # LangGraph config: {"configurable": {"thread_id": "<session thread prefix>/<key>"}}


class RoundBar:
    """A round's progress bar: episodes sampled so far and their running mean reward.

    ``progress`` None (no console) makes every method a no-op. :meth:`sampled` is called from
    worker threads (rich's ``Progress.update`` is thread-safe).
    """

    def __init__(self, progress: Any | None, label: str, total: int) -> None:
        self.progress = progress
        self.bar = progress.add_task(label, total=total, status="") if progress else None
        self.rewards: list[float] = []

    def skip(self, n: int) -> None:
        """Advance by ``n`` episodes finished before a resume."""
        if self.progress:
            self.progress.update(self.bar, advance=n)

    def sampled(self, state: dict[str, Any]) -> None:
        """An episode reached curate: add its graded rewards and advance by one."""
        self.rewards.extend(g["reward"] for g in state.get("grades", []) if g["reward"] is not None)
        if self.progress:
            mean = sum(self.rewards) / len(self.rewards) if self.rewards else float("nan")
            self.progress.update(self.bar, advance=1, status=f"mean reward {mean:.3f}")


def sample_episode(graph: Any, episode: Episode, session_id: int) -> dict[str, Any]:
    """Run one episode up to reflect (phase 1), or continue it from its checkpoint; return its state.

    A resumed episode that already waits for reflect or curate runs nothing; one interrupted mid-graph
    continues from its last checkpoint; a new one starts from its inputs.

    Returns:
        The graph state values at the phase-1 interrupt (graded, guided if it had to be).
    """
    thread = episode.thread
    snapshot = graph.get_state(thread)
    if tuple(snapshot.next) in ((PHASE2_NODE,), (CURATE_NODE,)):  # resumed: this episode already waits for phase 2
        pass
    elif snapshot.next:  # interrupted mid-episode: continue from the checkpoint
        graph.invoke(None, thread, interrupt_before=[PHASE2_NODE])
    else:
        graph.invoke(
            {
                "session_id": session_id,
                "episode_key": episode.key,
                "round": episode.round,
                "task_key": episode.task.task_key,
                "seed": episode.seed,
                "started_at": datetime.now(timezone.utc).isoformat(),
            },
            thread,
            interrupt_before=[PHASE2_NODE],
        )
    return graph.get_state(thread).values


def curate_episode(graph: Any, checkpointer: Any, episode: Episode) -> dict[str, Any]:
    """Run an episode's reflect and curate nodes (phase 2), then drop its checkpoint thread; return its final state."""
    thread = episode.thread
    final = graph.invoke(None, thread)
    checkpointer.delete_thread(thread["configurable"]["thread_id"])
    return final


def run_round(
    graph: Any,
    checkpointer: Any,
    episodes: Sequence[Episode],
    session_id: int,
    concurrency: int,
    on_sampled: Callable[[dict[str, Any]], None],
    on_curated: Callable[[Episode, dict[str, Any]], None],
) -> None:
    """Sample every episode up to curate, ``concurrency`` at a time, then curate them in order.

    Args:
        graph: the compiled episode graph (:func:`arena.episode.graph.build_episode_graph`).
        checkpointer: its checkpointer (finished threads are deleted).
        episodes: the round's unfinished episodes, in task order.
        session_id: the session's id (an input of new episodes).
        concurrency: episodes sampled at once (``--concurrency``).
        on_sampled: called with each episode's state when it reaches curate (from worker threads).
        on_curated: called in task order with each episode and its final state, after it was curated.

    Raises:
        BaseException: the first error of an episode (:func:`run_bounded`), or of ``on_curated``.
    """
    # Phase 1: every episode of the round runs up to curate, `concurrency` at a time; they all
    # see the library as it stood at the end of the previous round (nothing is curated yet).
    run_bounded(lambda ep: on_sampled(sample_episode(graph, ep, session_id)), episodes, concurrency)
    # Phase 2: curate in task order, so the stored library does not depend on concurrency.
    for ep in episodes:
        on_curated(ep, curate_episode(graph, checkpointer, ep))
