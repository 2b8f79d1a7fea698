"""The session runner: held-out pass@1 before, rounds of episodes through the graph, held-out pass@1 after.

``run_session`` is what ``arena run`` calls. It owns the session's life cycle in the store
(``running`` → ``finished`` / ``interrupted`` / ``failed``), the checkpointer (LangGraph
``SqliteSaver`` in a file beside the database, one thread per episode), and the summary.

The steps: :func:`open_session` (new, or a checked resume), :class:`SessionRun` (the state the
steps share: set-up, the held-out evaluations, the wake–sleep cycle loop, each round's tasks
and what follows each curate), one round at a time through :func:`arena.session.rounds.run_round`
(sampling phase, then curate phase; see there for the concurrency), held-out pass@1 through
:mod:`arena.evaluation`, and the summary from :mod:`arena.session.summary`.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from agents.backends.registry import build_policy, parse_spec, preflight
from agents.policy import EndpointFault, Policy, PolicyError
from agents.roles.solver import solver_messages
from arena.config import ConfigError, SessionConfig
from arena.distill.data import NoTrainingData
from arena.episode.context import EpisodeSettings, Roles
from arena.episode.graph import build_episode_graph
from arena.episode.rewards import make_reward
from arena.evaluation import evaluate_heldout
from arena.session.curriculum import CurriculumSettings, SessionCurriculum
from arena.session.lease import SessionLease
from arena.session.cycles import HeldoutEvals, Solver, adapter_solver, cycle_adapters, cycle_rounds, sleep
from arena.session.rounds import Episode, RoundBar, run_round
from arena.session.summary import RoleSpeed, RunSummary, build_summary, online_rubrics_summary
from arena.session.online_rubrics import due_batch
from arena.session.utility import UtilitySettings, maybe_check_utility, validation_tasks
from arena.tasks.identity import task_identity
from arena.tasks.model import Task, TaskSplits
from arena.tasks.seeds import episode_seed
from lessons.db.engine import redact_credentials
from lessons.db.faults import classify, is_transient
from lessons.library.adapters import AdapterStore
from lessons.library.curation import CurationPolicy
from lessons.library.rubrics import RubricStore
from lessons.library.records import LeaseLost
from lessons.library.store import LessonStore, StoreError
from lessons.outcomes import (
    HELDOUT_AFTER,
    HELDOUT_AFTER_NO_LESSONS,
    HELDOUT_BEFORE,
    HELDOUT_FINAL_DIFFICULTY,
    HELDOUT_FINAL_DIFFICULTY_NO_LESSONS,
    eval_name,
)

log = logging.getLogger(__name__)


def make_roles(cfg: SessionConfig, adapter: Path | None = None) -> Roles:
    """Policies for the roles named in ``cfg``, built by the backend registry; roles that say ``local`` share one loaded model.

    Each spec is built once per :meth:`agents.backends.registry.RoleSpec.instance_key` (its text, its
    adapter where the kind loads one, its in-flight bound where it is an endpoint) by
    :func:`agents.backends.registry.build_policy`. ``adapter`` (default ``cfg.adapter``): a LoRA
    adapter applied to the local SOLVER only; a local teacher or critic then gets its own copy of
    the base model.

    Raises:
        agents.policy.PolicyError: an endpoint is unreachable or a model does not exist
            (checked here, before any work is done); a ``llamacpp:`` proposer is checked even
            where no task is proposed.
    """
    cache: dict[tuple[str, Path | None, int], Policy] = {}
    if adapter is None and cfg.adapter:
        adapter = Path(cfg.adapter)

    def policy(spec: str, lora: Path | None = None, in_flight: int = cfg.teacher_in_flight) -> Policy:
        key = parse_spec(spec).instance_key(lora, in_flight)
        if key not in cache:
            cache[key] = build_policy(spec, lora, cfg.request_timeout_s, in_flight)
        return cache[key]

    proposes = cfg.proposer != "teacher" and cfg.proposals_per_round > 0
    # every role's cheap checks (a GGUF's header and tensor index) before any model loads, each error naming its flag:
    # a mistyped --critic path was found only after the teacher's 1.1 GB had been prepared (~14 s). A proposer named
    # but unused (a fixed curriculum) is checked too, as the unused --sleep-* flags are.
    named = [("--teacher", cfg.teacher), ("--critic", cfg.critic), ("--proposer", cfg.proposer)]
    for flag, spec in named:
        if spec in ("verifier", "teacher"):
            continue
        try:
            preflight(spec)
        except PolicyError as e:
            raise PolicyError(f"{flag}: {e}") from None
    return Roles(
        solver=policy(cfg.solver, adapter, cfg.solver_in_flight),
        teacher=policy(cfg.teacher),
        critic=None if cfg.critic == "verifier" else policy(cfg.critic),
        proposer=policy(cfg.proposer) if proposes else None,
    )


def session_curation_policy(cfg: SessionConfig, train_tasks: Sequence[Task]) -> CurationPolicy:
    """The curation thresholds of a session: its library budget, and who may make a lesson active.

    With the utility A/B on (``utility_every > 0``) a candidate of a family the A/B measures (one
    whose train tasks have a verifier), or a global one, becomes active on its measurement only,
    never on the teacher's votes: the 1.5B teacher tags every lesson it was shown helpful, so two
    reflections promoted lessons the reply grammar had left broken (bench/RESULTS.md, session 24).
    Rubric-only families, and sessions without the A/B, keep promotion on votes.

    Args:
        cfg: the session's settings (``library_tokens``, ``utility_every``).
        train_tasks: its train tasks (their families and verifiers).
    """
    from arena.tasks.verify import has_verifier
    from lessons.ops import normalise_scope

    measured = frozenset(normalise_scope(t.family) for t in train_tasks if has_verifier(t)) if cfg.utility_every > 0 else frozenset()
    return CurationPolicy(library_tokens=cfg.library_tokens, measured_scopes=measured)


def role_speed(roles: Roles, wall_time_s: float) -> dict[str, RoleSpeed]:
    """Tokens/s of each role's model over this process's run, and its share of the wall time.

    Roles that share one model (``local`` solver and teacher) report the same figures. A model
    without counters (an endpoint) is left out.

    Args:
        roles: the session's policies.
        wall_time_s: the run's wall time, seconds (the denominator of ``share_of_wall``).

    Returns:
        role → :class:`arena.session.summary.RoleSpeed`, for solver, teacher, critic and proposer
        (in that order) where present.
    """
    out: dict[str, RoleSpeed] = {}
    for role, policy in (("solver", roles.solver), ("teacher", roles.teacher), ("critic", roles.critic),
                         ("proposer", roles.proposer)):
        stats = policy.stats if policy is not None else None
        if policy is None or stats is None or not stats.calls:
            continue
        share = round(stats.seconds / wall_time_s, 3) if wall_time_s > 0 else None
        out[role] = RoleSpeed(model=policy.name, **stats.as_dict(), share_of_wall=share)
    return out


def check_prompt_lengths(solver: Policy, tasks: Sequence[Task], cfg: SessionConfig) -> None:
    """Fail before any work when a task cannot fit the solver's context window.

    A prompt needs room for the solver's instructions, the lessons budget, the question and
    ``max_tokens`` of completion (guided re-attempts add a hint on top, cut by the model if
    needed). Backends without a known window (remote models) are not checked.

    Raises:
        ConfigError: naming the first task that does not fit and how to fix it.
    """
    window = solver.context_window
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
    """The LangGraph checkpoint file: ``<db stem>.checkpoints.sqlite`` beside a SQLite library; for a
    server's library (PostgreSQL) ``<host>-<port>-<database>.checkpoints.sqlite`` in the working directory."""
    if store.sqlite_path is not None:
        p = store.sqlite_path
        return p.with_name(p.stem + ".checkpoints.sqlite")
    return Path(f"{store.server_slug}.checkpoints.sqlite")


def sampling_dtype(solver: Policy) -> str | None:
    """The dtype a local solver samples in (``fp32`` / ``bf16``, :func:`agents.backends.local.dtype_name`); None for an API solver."""
    dtype = solver.dtype
    if dtype is None:
        return None
    from agents.backends.local import dtype_name

    return dtype_name(dtype)


def check_sampling_dtype(cfg: SessionConfig, session_name: str, current: str | None) -> None:
    """Refuse to resume a session in another sampling dtype than it started in.

    A session's rollouts, held-out evaluations and sleeps' π_old are all scored in the dtype the
    solver sampled in (``$ARENA_CPU_DTYPE``); a resume under another one would mix them silently,
    and bf16 against fp32 moves greedy pass@1 by a few points (bench/RESULTS.md).

    Raises:
        lessons.library.store.StoreError: the stored and the current dtype are both known and differ.
    """
    stored = cfg.sampling_dtype
    if stored is not None and current is not None and stored != current:
        from agents.backends.local import CPU_DTYPE_ENV

        raise StoreError(f"session {session_name!r} sampled in {stored}, this process samples in {current}; "
                         f"resume it with {CPU_DTYPE_ENV}={stored}")


def open_session(store: LessonStore, cfg: SessionConfig, splits: TaskSplits, session_name: str, resume: bool,
                 dtype: str | None = None, lease: SessionLease | None = None) -> int:
    """Take the session's lease, create the session row or check and reopen it for a resume; its tasks are (re)stored.

    The lease comes first (:class:`arena.session.lease.SessionLease`; a new session's row and lease
    are written in one transaction), so a second owner is refused before it writes anything. A new
    session stores ``dtype`` (the solver's sampling dtype, :func:`sampling_dtype`) with its
    settings. A resume is refused when a stored task's question differs from the rebuilt one (the
    task file was edited), tasks drawn or proposed during the session aside, or when ``dtype``
    differs from the stored one (:func:`check_sampling_dtype`).

    Args:
        lease: this process's lease; None: one of this process with the default TTL, released by
            nobody (tests and callers that run one session in a process pass their own).

    Returns:
        The session's id.

    Raises:
        lessons.library.records.LeaseHeld: another live process runs the session.
        lessons.library.store.StoreError: the session exists (new), does not (resume), its tasks
            changed, or it sampled in another dtype.
    """
    lease = lease or SessionLease(store)
    if resume:
        info = store.get_session(session_name)
        if info is None:
            raise StoreError(f"no session named {session_name!r} in {store.location}; see `arena run --help`")
        lease.acquire(info.id)
        check_sampling_dtype(cfg, session_name, dtype)
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
        stored = {**cfg.model_dump(mode="json"), "db": redact_credentials(cfg.db), "sampling_dtype": dtype}  # a shared library holds no password
        session_id = lease.create_session(session_name, stored, cfg.seed)
    store.upsert_tasks(session_id, [*splits.train, *splits.heldout])
    return session_id


def episode_settings(cfg: SessionConfig, solver: Solver) -> EpisodeSettings:
    """The graph's sampling settings for ``solver`` (its adapter id and the lessons kept out of its prompt)."""
    return EpisodeSettings(
        rollouts=cfg.rollouts,
        temperature=cfg.temperature,
        max_tokens=cfg.max_tokens,
        lesson_tokens=cfg.lesson_tokens,
        teacher_max_tokens=cfg.teacher_max_tokens,
        success_threshold=cfg.success_threshold,
        hint_modes=tuple(cfg.hint_modes),
        include_flagged=cfg.include_flagged,
        exclude_lessons=solver.exclude,
        adapter_id=solver.adapter_id,
        reflect=cfg.reflect,
        reflect_on=cfg.reflect_on,
        reflections_per_round=cfg.reflections_per_round,
    )


def utility_settings(cfg: SessionConfig) -> UtilitySettings:
    """The utility A/B settings of a session (``--utility-*``)."""
    return UtilitySettings(
        every=cfg.utility_every,
        lessons=cfg.utility_lessons,
        tasks=cfg.utility_tasks,
        samples=cfg.utility_samples,
        lesson_tokens=cfg.lesson_tokens,
        temperature=cfg.temperature,
        max_tokens=cfg.max_tokens,
    )


def session_progress(console: Console | None) -> Progress | None:
    """The session's progress display (one bar per round, evaluation and sleep); None without a console."""
    if console is None:
        return None
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[status]}"),
        console=console,
        transient=False,
    )


class SessionRun:
    """One run of :func:`run_session`: the state its steps share, and the steps.

    Built after :func:`open_session`; :meth:`run` does the work (held-out before, the cycles of
    rounds and sleeps, held-out after), :meth:`close` releases the progress display and an own
    checkpoint connection, :meth:`finish` writes the summary.
    """

    def __init__(
        self, cfg: SessionConfig, store: LessonStore, roles: Roles, splits: TaskSplits, session_name: str,
        session_id: int, console: Console | None, checkpointer: Any, on_episode: Callable[[dict], None] | None,
        base_model: Path | None, lease: SessionLease | None = None,
    ) -> None:
        self.lease = lease  # checked before each step's writes: a run whose lease was taken over stops
        self.cfg, self.store, self.roles, self.splits = cfg, store, roles, splits
        self.session_name, self.session_id, self.console = session_name, session_id, console
        self.on_episode, self.base_model = on_episode, base_model
        tasks = [*splits.train, *splits.heldout]
        self.rubric_store = RubricStore(store)
        self.reward = make_reward(cfg, roles.critic, self.rubric_store, session_id, tasks)
        # Checkpoint threads are bound to this session row (id and creation time), so a checkpoint
        # file left from a deleted database or another library is never resumed by mistake.
        created = store.get_session(session_name).created_at.isoformat()
        self.thread_prefix = f"{session_name}#{session_id}@{created}"
        self.task_by_key = {t.task_key: t for t in tasks}
        exclude = adapter_distilled_lessons(store, cfg.adapter)
        adapter = Path(cfg.adapter) if cfg.adapter else None
        self.solver = Solver(roles.solver, adapter_label(store, cfg.adapter), adapter, exclude)
        self.own_conn = None
        if checkpointer is None:
            from langgraph.checkpoint.sqlite import SqliteSaver

            self.own_conn = sqlite3.connect(str(checkpoint_path(store)), check_same_thread=False)
            checkpointer = SqliteSaver(self.own_conn)
        self.checkpointer = checkpointer
        self.settings = episode_settings(cfg, self.solver)
        store.curation_policy = session_curation_policy(cfg, tasks)
        store.count_tokens = roles.solver.count_tokens
        with store.curate() as c:  # the budget counts this session's solver tokens
            c.recount_live()
        self.utility = utility_settings(cfg)
        # tasks beyond the train tasks that the utility A/B needs (--utility-tasks), never trained on
        top_up = cfg.utility_tasks - cfg.train_tasks if cfg.utility_every > 0 else 0
        self.validation = validation_tasks(cfg.families, top_up, cfg.seed, {task_identity(t) for t in tasks})
        self.caught_up = False  # the first curated episode of this process also runs work due before a kill
        self.online_log: list[Any] = []  # OnlineUpdate per task per update, for the summary
        self.curriculum = SessionCurriculum(
            CurriculumSettings(
                mode=cfg.curriculum, band=tuple(cfg.target_pass), proposals=cfg.proposals_per_round,
                samples=cfg.proposal_samples, agreement=cfg.proposal_agreement, train_tasks=cfg.train_tasks,
                heldout_tasks=cfg.heldout_tasks, seed=cfg.seed, success_threshold=cfg.success_threshold,
                teacher_max_tokens=cfg.teacher_max_tokens, max_tokens=cfg.max_tokens,
            ),
            store, session_id, splits, self.task_by_key,
            proposer=roles.proposer or roles.teacher, confirm=roles.critic or roles.teacher,
            fits=self.fits,
        )  # chooses each round's train tasks; held-out stays splits.heldout
        self.progress = session_progress(console)
        self.evals = HeldoutEvals(store, session_id, splits.heldout, cfg.lesson_tokens, cfg.max_tokens, self.reward)
        self.done_evals: dict[str, Any] = {}  # evaluations stored when the run began (re-read after the cycles)
        self.finished: set[str] = set()  # episode keys finished before a resume
        self.slept: dict[int, Any] = {}  # cycle -> the adapter its sleep registered
        self.refused: dict[int, str] = {}  # cycle -> why its sleep was refused (too few examples)

    def check_lease(self) -> None:
        """Stop when this process lost the session's lease (:meth:`arena.session.lease.SessionLease.check`).

        Raises:
            lessons.library.records.LeaseLost: another owner took the session over.
        """
        if self.lease is not None:
            self.lease.check()

    def fits(self, tasks: Sequence[Task]) -> None:
        """:func:`check_prompt_lengths` of new tasks against the current solver (the curriculum's check)."""
        check_prompt_lengths(self.roles.solver, tasks, self.cfg)

    def run(self) -> None:
        """Held-out pass@1 before, the cycles (rounds, then a sleep with ``--sleep``), held-out pass@1 after."""
        if self.progress:
            self.progress.start()
        self.done_evals = self.store.evaluations(self.session_id)
        self.eval_once(HELDOUT_BEFORE, True)
        self.evals.adopt_plain(HELDOUT_BEFORE, self.solver.adapter_id)
        self.finished = self.store.finished_episode_keys(self.session_id)
        self.drop_stored_threads(self.finished)  # a resume after a kill between an episode's write and its deletion
        self.slept = cycle_adapters(self.store, self.session_name) if self.cfg.sleep else {}
        for cycle in range(1, self.cfg.cycles + 1):
            self.run_cycle(cycle)
        self.final_evals()
        self.drop_stored_threads(self.store.finished_episode_keys(self.session_id))

    def drop_stored_threads(self, episode_keys: set[str]) -> None:
        """Delete the checkpoint threads of episodes already stored.

        :func:`arena.session.rounds.curate_episode` deletes a thread right after its episode is
        written; a process killed between the two leaves the thread behind, and a resume skips the
        stored episode, so nothing else would remove it. Deleting a thread that is gone is a no-op.
        """
        for key in sorted(episode_keys):
            self.checkpointer.delete_thread(f"{self.thread_prefix}/{key}")

    def eval_once(self, name: str, with_lessons: bool, heldout: Sequence[Task] | None = None) -> None:
        """Measure and record the held-out evaluation ``name`` of the current solver unless it was stored already.

        Args:
            name: the evaluation's name (:mod:`lessons.outcomes`).
            with_lessons: retrieved lessons in the prompt.
            heldout: the tasks; default the session's held-out split.
        """
        if name in self.done_evals:
            return
        self.check_lease()
        heldout = self.splits.heldout if heldout is None else heldout
        bar = self.progress.add_task(f"eval {name}", total=len(heldout), status="") if self.progress else None
        result = evaluate_heldout(
            self.store, self.solver.policy, heldout, with_lessons, self.cfg.lesson_tokens, self.cfg.max_tokens,
            self.reward, self.session_id, self.solver.exclude,
        )
        rewards = result.graded  # ungraded (rubric) tasks are counted in details["ungraded"]
        s = result.graded_summary()
        self.check_lease()
        self.store.record_evaluation(self.session_id, name, "heldout", with_lessons, rewards, tuple(s["ci95"]),
                                     result.details())
        if self.progress:
            pass_at_1 = result.pass_count / len(rewards) if rewards else 0.0
            self.progress.update(bar, completed=len(rewards), status=f"pass@1 {pass_at_1:.3f}")

    def swap(self, new: Solver) -> None:
        """Make ``new`` the solver (:func:`swap_solver`)."""
        self.solver = swap_solver(self.solver, new, self.roles)

    def run_cycle(self, cycle: int) -> None:
        """One wake–sleep cycle: its rounds through the graph, then (with ``--sleep``) a sleep and its evaluations."""
        slept = self.slept
        if cycle > 1 and cycle - 1 in slept and self.solver.adapter_id != slept[cycle - 1].adapter_id:
            self.swap(adapter_solver(slept[cycle - 1], self.solver.exclude, self.base_model))  # resumed
        self.roles = replace(self.roles, solver=self.solver.policy)
        self.settings = replace(self.settings, adapter_id=self.solver.adapter_id, exclude_lessons=self.solver.exclude)
        graph = build_episode_graph(self.roles, self.store, self.task_by_key, self.settings, self.checkpointer,
                                    reward=self.reward)
        for rnd in cycle_rounds(self.cfg, cycle):
            self.run_one_round(graph, rnd)
        if self.cfg.sleep is None:
            return
        if cycle in slept:  # the sleep finished before an interruption: load its adapter
            if self.solver.adapter_id != slept[cycle].adapter_id:
                self.swap(adapter_solver(slept[cycle], self.solver.exclude, self.base_model))
        else:
            self.sleep(cycle)
        for lessons in (True, False):  # a resumed cycle may lack them (kill after registration)
            self.evals.run(eval_name(cycle, lessons), self.solver, lessons)

    def run_one_round(self, graph: Any, rnd: int) -> None:
        """Round ``rnd``: its tasks (the curriculum's), its unfinished episodes through the graph, the band decision."""
        cfg = self.cfg
        round_tasks = self.curriculum.tasks_for_round(rnd)
        bar = RoundBar(self.progress, f"round {rnd}/{cfg.rounds * cfg.cycles}", len(round_tasks))
        episodes = []
        for t in round_tasks:
            key = f"r{rnd:03d}-{t.task_key}"
            thread = {"configurable": {"thread_id": f"{self.thread_prefix}/{key}"}}
            episodes.append(Episode(key, t, rnd, episode_seed(cfg.seed, key), thread))
        bar.skip(sum(ep.key in self.finished for ep in episodes))
        todo = [ep for ep in episodes if ep.key not in self.finished]
        if graph.context.reflection_budget is not None:  # a resumed round already spent what its stored episodes used
            graph.context.reflection_budget.reset(self.store.reflected_episodes(self.session_id, rnd))
        run_round(graph, self.checkpointer, todo, self.session_id, cfg.concurrency, bar.sampled,
                  lambda ep, final: self.curated(ep, final, round_tasks))
        self.curriculum.end_round(rnd)  # band decision per family, then proposals

    def curated(self, episode: Episode, final: dict[str, Any], round_tasks: Sequence[Task]) -> None:
        """After an episode was curated: the ``on_episode`` hook, a due OnlineRubrics update, a due utility check."""
        cfg = self.cfg
        self.check_lease()
        if self.on_episode:
            self.on_episode(final)
        catch_up, self.caught_up = not self.caught_up, True  # a resume's first episode: work due at the kill too
        batch = due_batch(self.store.recorded_episode_keys(self.session_id), cfg.online_rubrics, catch_up)
        if batch:
            self.online_log += _online_rubrics_update(cfg, self.rubric_store, self.session_id, self.roles,
                                                      self.task_by_key, batch)
        maybe_check_utility(self.store, self.solver.policy, self.session_id, [*round_tasks, *self.validation],
                            self.utility, cfg.seed, catch_up)

    def sleep(self, cycle: int) -> None:
        """The sleep of ``cycle`` (:func:`arena.session.cycles.sleep`); with too little data it is refused."""
        progress, cfg = self.progress, self.cfg
        self.check_lease()  # a sleep takes the next adapter id: never two owners at once
        bar = progress.add_task(f"sleep {cycle}/{cfg.cycles}", total=None, status=cfg.sleep) if progress else None
        try:
            new, record = sleep(self.store, self.session_name, self.session_id, cycle, cfg, self.solver, self.evals,
                                self.console, self.base_model)
        except NoTrainingData as e:  # too little data: no sleep this cycle, the same solver goes on
            self.refused[cycle] = str(e)
            if progress:
                progress.update(bar, total=1, completed=1, status="refused")
            if self.console is not None:
                self.console.print(f"sleep {cycle} refused: {e}")
        else:
            self.swap(new)
            self.slept[cycle] = AdapterStore(self.store).get_adapter(record["adapter_id"])
            if progress:
                progress.update(bar, total=1, completed=1,
                                status=f"{record['adapter_id']}: {record['data']['examples']} examples")

    def final_evals(self) -> None:
        """Held-out pass@1 after the session (and at the curriculum's final difficulty when a family moved)."""
        cfg, evals = self.cfg, self.evals
        if cfg.sleep is not None:  # after the last sleep: the last cycle's figures, not measured again
            for name, lessons in ((HELDOUT_AFTER, True), (HELDOUT_AFTER_NO_LESSONS, False)):
                if name not in self.done_evals:
                    evals.record(name, evals.run(eval_name(cfg.cycles, lessons), self.solver, lessons), lessons,
                                 self.solver.adapter_id)
            self.done_evals = self.store.evaluations(self.session_id)
        self.eval_once(HELDOUT_AFTER, True)
        self.eval_once(HELDOUT_AFTER_NO_LESSONS, False)
        final_heldout = self.curriculum.final_heldout()  # None: every family ended at its starting difficulty
        if final_heldout is not None:
            self.eval_once(HELDOUT_FINAL_DIFFICULTY, True, final_heldout)
            self.eval_once(HELDOUT_FINAL_DIFFICULTY_NO_LESSONS, False, final_heldout)

    def close(self) -> None:
        """Stop the progress display and close the checkpoint connection this run opened."""
        if self.progress:
            self.progress.stop()
        if self.own_conn is not None:
            self.own_conn.close()

    def finish(self, t_start: float) -> RunSummary:
        """The summary (:func:`arena.session.summary.build_summary` plus this run's parts); the session is ``finished``.

        Args:
            t_start: ``time.perf_counter()`` when the run began (for ``wall_time_s``).

        Returns:
            The :class:`arena.session.summary.RunSummary`, also stored with the session (as its JSON object).
        """
        figures = build_summary(self.store, self.session_id, self.session_name, self.cfg, self.refused)
        online = online_rubrics_summary(self.online_log) if self.cfg.online_rubrics else None
        wall_time_s = round(time.perf_counter() - t_start, 1)
        summary = RunSummary(**dict(figures), online_rubric_updates=online, wall_time_s=wall_time_s,
                             role_speed=role_speed(self.roles, wall_time_s))
        self.check_lease()
        self.store.set_session_status(self.session_id, "finished", summary.model_dump())
        return summary


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
    lease: SessionLease | None = None,
) -> RunSummary:
    """Run (or resume) one session and return its summary (the ``--json`` object).

    The session's lease is taken before any work (:func:`open_session`) and held by a heartbeat
    until the end, so a second owner is refused. A lost database connection (a server restart, a
    reset: :func:`lessons.db.faults.is_transient`) does not end the run: it is retried up to
    :data:`DB_RETRY_ATTEMPTS` times with exponential backoff (tenacity), each retry a resume in
    this process — the session is reopened and what was committed is skipped, exactly as
    ``--resume`` does. The unit retried is thus "the step since the last commit", not one write:
    a write whose COMMIT reached the server but whose acknowledgement was lost would be written
    twice by a blind retry of the write; the resume re-reads what is stored first.

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
        lease: this process's lease of the session (the CLI takes it before loading models); None: one
            is taken here and released at the end.

    Returns:
        The :class:`arena.session.summary.RunSummary` (its :meth:`~arena.session.summary.SessionSummary.to_json`
        is what ``arena run --json`` prints): counts, held-out pass@1 before / after, per-round
        statistics, cycles, hint and rubric figures, the curriculum's part, wall time and role speeds.

    Raises:
        lessons.library.records.LeaseHeld: another live process runs the session (nothing written).
        lessons.library.records.LeaseLost: another owner took the session over during the run.
        lessons.db.faults.StoreFault: a persistent database or disk fault (full disk, read-only file,
            permission), or a connection still lost after the retries; the session is marked
            ``failed`` where the database still takes that write, else its lease expires.
        lessons.library.store.StoreError: the session exists (new), does not (resume), or sampled in
            another dtype than ``roles.solver`` (resume).
        KeyboardInterrupt: propagated after marking the session ``interrupted``.
    """
    from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_exponential

    t_start = time.perf_counter()
    own_lease = lease is None
    lease = lease or SessionLease(store)
    retrying = Retrying(
        retry=retry_if_exception(is_transient), stop=stop_after_attempt(DB_RETRY_ATTEMPTS),
        wait=wait_exponential(multiplier=DB_RETRY_FIRST_WAIT_S, max=DB_RETRY_MAX_WAIT_S),
        before_sleep=_log_retry, reraise=True,
    )
    try:
        for attempt in retrying:
            with attempt:
                again = attempt.retry_state.attempt_number > 1
                if again and not resume:  # the first try may have created the session before the connection went
                    resume = store.get_session(session_name) is not None
                return _run_once(cfg, store, roles, splits, session_name, resume, console, checkpointer,
                                 on_episode, base_model, lease, t_start)
    except BaseException as e:
        fault = classify(e)
        if fault is None:
            raise
        if lease.session_id is not None:  # the session exists: mark it where the database still lets us
            _mark_stopped(store, session_name, lease.session_id, "failed")
        raise fault from None
    finally:
        if own_lease:
            lease.release()
    raise AssertionError("unreachable: tenacity returns or re-raises")  # pragma: no cover


DB_RETRY_ATTEMPTS = 8  # tries of a session step that lost its database connection (the first included)
DB_RETRY_FIRST_WAIT_S = 0.5  # first backoff, seconds; doubled each time (0.5, 1, 2, 4, 8, 15, 15: ~46 s in all)
DB_RETRY_MAX_WAIT_S = 15.0  # longest backoff, seconds


def _log_retry(state: Any) -> None:
    """tenacity's ``before_sleep``: say on the log what failed and when the step is tried again."""
    err = state.outcome.exception() if state.outcome is not None else None
    wait = state.next_action.sleep if state.next_action is not None else 0.0
    log.warning("database connection lost (%s); resuming the session in %.1f s (try %d of %d)",
                classify(err) if err is not None else "?", wait, state.attempt_number + 1, DB_RETRY_ATTEMPTS)


def _run_once(
    cfg: SessionConfig, store: LessonStore, roles: Roles, splits: TaskSplits, session_name: str, resume: bool,
    console: Console | None, checkpointer: Any, on_episode: Callable[[dict], None] | None, base_model: Path | None,
    lease: SessionLease, t_start: float,
) -> RunSummary:
    """One try of :func:`run_session`: open (or reopen) the session, run it, write its summary.

    A database fault propagates unmarked (the caller resumes, or marks it once it gives up); any
    other error marks the session ``failed`` (``interrupted`` for Ctrl-C) before it propagates.
    """
    session_id = open_session(store, cfg, splits, session_name, resume, sampling_dtype(roles.solver), lease)
    run = SessionRun(cfg, store, roles, splits, session_name, session_id, console, checkpointer, on_episode,
                     base_model, lease)
    try:
        run.run()
        return run.finish(t_start)  # inside: a Ctrl-C while the summary is built must not leave the session "running"
    except KeyboardInterrupt:
        _mark_stopped(store, session_name, session_id, "interrupted")
        raise
    except LeaseLost:  # another owner runs the session now: its status is that owner's to write, not ours
        raise
    except BaseException as e:
        if classify(e) is None:  # a database fault is marked by run_session, once its retries are spent
            _mark_stopped(store, session_name, session_id, "failed")
        raise
    finally:
        run.close()


def _mark_stopped(store: LessonStore, session_name: str, session_id: int, status: str) -> None:
    """Mark a session that stopped ``interrupted`` / ``failed`` — unless its ``finished`` was already committed.

    When the database refuses this write too (a full disk, a lost server) it is logged and left: the
    session stays ``running`` in the database, and its lease, no longer renewed, expires — from then
    on it shows as ``stopped`` and ``--resume`` continues it.
    """
    try:
        info = store.get_session(session_name)
        if info is None or info.status != "finished":
            store.set_session_status(session_id, status)
    except Exception as e:  # noqa: BLE001 - the fault that stopped the run may stop this write too
        if classify(e) is None:
            raise
        log.info("could not mark session %r %s: %s", session_name, status, classify(e))  # info: stderr keeps one line


def adapter_label(store: LessonStore, adapter: str | None) -> str | None:
    """The readable id of the solver's ``--adapter``: its registered id, else its directory's name (50 characters at most)."""
    if not adapter:
        return None
    info = AdapterStore(store).find_by_path(adapter)
    return info.adapter_id if info is not None else Path(adapter).name[:50]


def swap_solver(old: Solver, new: Solver, roles: Roles) -> Solver:
    """Make ``new`` the solver; close ``old``'s model unless another role shares it (its decoder thread holds it).

    The solver's counters (``stats``, tokens/s in the summary) carry over to the new model where both keep them."""
    if old.policy.stats is not None and new.policy.stats is not None and old.policy is not new.policy:
        new.policy.stats = old.policy.stats
    if old.policy is not new.policy and all(old.policy is not p for p in (roles.teacher, roles.critic, roles.proposer)):
        old.policy.close()
    return new


def adapter_distilled_lessons(store: LessonStore, adapter: str | None) -> tuple[str, ...]:
    """The lessons distilled into the solver's adapter (they leave its prompt); () without one or unregistered."""
    if not adapter:
        return ()
    from lessons.library.adapters import AdapterStore

    info = AdapterStore(store).find_by_path(adapter)
    return tuple(info.distilled) if info is not None else ()


def _online_rubrics_update(
    cfg: SessionConfig, rubric_store: RubricStore, session_id: int, roles: Roles, task_by_key: dict[str, Task],
    episode_keys: list[str],
) -> list[Any]:
    """One OnlineRubrics update over the train tasks of ``episode_keys`` (reference: the solver without lessons)."""
    from arena.session.online_rubrics import update_rubrics

    keys = list(dict.fromkeys(k.split("-", 1)[1] for k in episode_keys))  # "r001-<task_key>" -> task_key
    tasks = [task_by_key[k] for k in keys if k in task_by_key and task_by_key[k].split == "train"]
    try:
        return update_rubrics(
            rubric_store, session_id, tasks, episode_keys, roles.teacher, roles.solver,
            n_reference=min(4, cfg.rollouts), temperature=cfg.temperature, max_tokens=cfg.max_tokens,
            teacher_max_tokens=cfg.teacher_max_tokens, seed=episode_seed(cfg.seed, episode_keys[-1]),
        )
    except EndpointFault:  # an endpoint failed mid-update: no update this time, the session goes on
        return []
