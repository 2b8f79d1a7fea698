"""Wake–sleep cycles of ``arena run --cycles C``: rounds of episodes ("wake"), then a distillation ("sleep").

A cycle is ``--rounds`` rounds of episodes sampled by the current solver, then a sleep through
the same steps as ``arena distill`` (:func:`arena.distill.pipeline.collect_data`, :func:`~arena.distill.pipeline.screen_data`,
:func:`~arena.distill.pipeline.train_and_save`), then the new adapter becomes the solver of the next cycle in
the same process; lessons it distilled leave the prompt, as with ``--adapter``. Rounds are numbered
on across cycles (cycle c holds rounds ``(c-1)·R+1 … c·R``), so episode keys stay unique and a
resume finds its place from the stored episodes and adapters alone.

``--sleep-from base`` (default, STaR's choice, Zelikman et al. 2022): each sleep trains a fresh
LoRA from the base model on the successes of every cycle so far. ``--sleep-from previous``
continues the last adapter on this cycle's rollouts. Each adapter records its parent (the
adapter that sampled the cycle's rollouts) and its cycle; each rollout records the adapter that
sampled it, so its stored log-probs are π_old of that policy.

Held-out greedy pass@1 (:class:`HeldoutEvals`: :func:`arena.evaluation.evaluate_heldout`, cached and
recorded by name) is measured before the sleep (the wake's solver,
with and without lessons: the figures that decide which lessons the adapter distilled) and after
it (``heldout_cycle{c}`` / ``heldout_cycle{c}_no_lessons``). A sleep is registered only after its
adapter was saved and evaluated; a kill before that leaves no adapter row, and the resumed
session redoes the sleep (an unregistered adapter directory of ours is removed first).
"""

from __future__ import annotations

import gc
import shutil
from collections.abc import Collection, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from agents.policy import Policy
from arena.config import SessionConfig
from arena.evaluation import EvalResult, evaluate_heldout, shows_lessons
from arena.tasks.model import Task
from lessons.library.adapters import AdapterInfo, AdapterRecord, AdapterStore
from lessons.library.store import LessonStore
from lessons.outcomes import eval_name


def cycle_rounds(cfg: SessionConfig, cycle: int) -> range:
    """The session rounds of ``cycle`` (1-based): ``(cycle-1)·rounds+1 … cycle·rounds``."""
    return range((cycle - 1) * cfg.rounds + 1, cycle * cfg.rounds + 1)


@dataclass
class Solver:
    """The solver of the current cycle: its policy, the adapter it runs (None: base) and the lessons kept out of its prompt."""

    policy: Policy
    adapter_id: str | None = None  # readable id recorded on rollouts (a registered adapter, or --adapter's)
    path: Path | None = None  # the adapter directory
    exclude: tuple[str, ...] = ()  # lessons distilled into the adapter chain: they leave the prompt


class HeldoutEvals:
    """Held-out greedy pass@1 of a session's solvers, recorded by name and never measured twice.

    A name already stored (e.g. before a resume) is read back. A with-lessons evaluation where
    no task's prompt would show a lesson reuses the same solver's no-lessons result: the prompts,
    hence the greedy completions, are identical.
    """

    def __init__(self, store: LessonStore, session_id: int, tasks: Sequence[Task], lesson_tokens: int,
                 max_tokens: int, reward: Any | None = None) -> None:
        self.store, self.session_id, self.tasks = store, session_id, list(tasks)
        self.lesson_tokens, self.max_tokens = lesson_tokens, max_tokens
        self.reward = reward  # the session's reward strategy (a rubric judge grades held-out tasks too); None: verifier
        self._plain: dict[str | None, EvalResult] = {}  # adapter id -> its no-lessons result

    def stored(self, name: str) -> EvalResult | None:
        """The evaluation ``name`` as recorded, or None."""
        e = self.store.evaluations(self.session_id).get(name)
        if e is None:
            return None
        rows = list(e.details.get("tasks") or [])
        rewards = [row.get("reward") for row in rows] if rows else list(e.details.get("rewards") or [])
        return EvalResult(rewards, [list(row.get("lessons") or []) for row in rows] or [[] for _ in rewards], rows,
                          judged="ungraded" in e.details)  # a rubric judge's evaluation stays one when copied

    def compute(self, solver: Solver, with_lessons: bool, exclude: Collection[str] | None = None) -> EvalResult:
        """Evaluate without recording (``exclude`` default: the solver's)."""
        exclude = tuple(solver.exclude if exclude is None else exclude)
        if with_lessons:
            if not shows_lessons(self.store, solver.policy, self.tasks, self.lesson_tokens, exclude):
                return self.compute(solver, False)
        elif solver.adapter_id in self._plain:
            return self._plain[solver.adapter_id]
        out = evaluate_heldout(self.store, solver.policy, self.tasks, with_lessons, self.lesson_tokens,
                               self.max_tokens, self.reward, self.session_id, exclude=exclude)
        if not with_lessons:
            self._plain[solver.adapter_id] = out
        return out

    def adopt_plain(self, name: str, adapter_id: str | None) -> None:
        """Reuse the stored evaluation ``name`` as the no-lessons result of ``adapter_id`` when it showed no lesson."""
        got = self.stored(name)
        if got is not None and got.rows and not any(got.lessons) and all(r is not None for r in got.rewards):
            self._plain.setdefault(adapter_id, got)

    def record(self, name: str, result: EvalResult, with_lessons: bool, adapter_id: str | None) -> None:
        """Store ``result`` under ``name``: its graded rewards and their interval (as the runner records), its details."""
        s = result.graded_summary()
        self.store.record_evaluation(
            self.session_id, name, "heldout", with_lessons, result.graded,
            tuple(s["ci95"]), {**result.details(), "adapter": adapter_id},
        )

    def run(self, name: str, solver: Solver, with_lessons: bool) -> EvalResult:
        """The evaluation ``name`` of ``solver``: read back when stored, else computed and recorded."""
        got = self.stored(name)
        if got is None:
            got = self.compute(solver, with_lessons)
            self.record(name, got, with_lessons, solver.adapter_id)
        return got


def sleep_config(cfg: SessionConfig, cycle: int) -> Any:
    """The :class:`arena.distill.config.DistillConfig` of one sleep (seed moves with the cycle)."""
    from arena.distill.config import DistillConfig, TrainConfig, default_dropout
    from arena.objectives import get_objective

    # room for the system prompt, a full lessons section, the question and the completion
    max_seq_len = max(512, cfg.lesson_tokens + cfg.max_tokens + 512)
    return DistillConfig(
        objective=cfg.sleep, success_threshold=cfg.success_threshold, lesson_tokens=cfg.lesson_tokens,
        eval_max_tokens=cfg.max_tokens, min_guided_log_ratio=cfg.sleep_min_guided_log_ratio,
        min_examples=cfg.sleep_min_examples,
        train=TrainConfig(lr=cfg.sleep_lr, epochs=cfg.sleep_epochs, max_steps=cfg.sleep_steps,
                          max_seq_len=max_seq_len, seed=(cfg.seed + cycle) % 2**32,
                          # grpo / guide-grpo / distill's guided weights: ratios at the rollouts' sampling temperature
                          temperature=cfg.temperature if get_objective(cfg.sleep).sampling_temperature else 1.0,
                          kl_coef=cfg.sleep_kl_coef, sample_tokens=cfg.max_tokens,
                          # importance ratios: π_θ without dropout, as π_old was scored
                          dropout=default_dropout(cfg.sleep)),
    )


def sleep_dir(store: LessonStore, adapter_id: str) -> Path:
    """Where a sleep writes its adapter: ``adapters/<database stem>/<adapter id>`` beside a SQLite library,
    ``adapters/<host>-<port>-<database>/<adapter id>`` in the working directory for a server's library.

    Adapter ids are numbered per library, so libraries that share a folder get a folder each.
    """
    if store.sqlite_path is None:
        return Path.cwd() / "adapters" / store.server_slug / adapter_id
    p = store.sqlite_path.absolute()
    return p.parent / "adapters" / p.stem / adapter_id


def clear_unregistered(astore: AdapterStore, out_dir: Path, session: str, cycle: int) -> None:
    """Remove the directory a killed sleep of this session and cycle left behind; refuse anything else.

    Raises:
        arena.distill.pipeline.DistillError: the directory is registered, or is not this sleep's (its
            sidecar names another session or cycle, or it has none).
    """
    from arena.distill.pipeline import DistillError
    from arena.distill.weights import read_sidecar

    try:
        sc = read_sidecar(out_dir)
    except Exception:  # noqa: BLE001 - unreadable: not ours to delete
        sc = None
    if astore.find_by_path(out_dir) is None and sc is not None and sc.session == session and sc.data.get("cycle") == cycle:
        shutil.rmtree(out_dir, ignore_errors=True)
        return
    raise DistillError(f"adapter directory {out_dir} exists and is not an unfinished sleep of session {session!r} "
                       f"cycle {cycle}; move it away and resume")


def cycle_adapters(store: LessonStore, session: str) -> dict[int, AdapterInfo]:
    """The adapters the session's sleeps registered, by cycle."""
    return {a.cycle: a for a in AdapterStore(store).list_adapters() if a.session == session and a.cycle is not None}


def adapter_solver(info: AdapterInfo, exclude: Collection[str], base_dir: Path | None = None) -> Solver:
    """A local solver running a registered adapter; its distilled lessons join ``exclude``."""
    from agents.backends.local import LocalPolicy

    policy = LocalPolicy(model_dir=base_dir, adapter=Path(info.path))
    policy.load()
    return Solver(policy, info.adapter_id, Path(info.path), tuple(dict.fromkeys([*exclude, *info.distilled])))


def sleep(
    store: LessonStore,
    session: str,
    session_id: int,
    cycle: int,
    cfg: SessionConfig,
    solver: Solver,
    evals: HeldoutEvals,
    console: Any | None = None,
    base_model: Path | None = None,
) -> tuple[Solver, dict[str, Any]]:
    """One sleep: train, save, evaluate and register the cycle's adapter; return the next cycle's solver.

    Args:
        store, session, session_id: the session.
        cycle: 1-based cycle number.
        cfg: the session's settings (objective, schedule, data screens).
        solver: the solver that sampled this cycle (its adapter is the parent, and the start
            of training with ``--sleep-from previous``).
        evals: the session's held-out evaluations.
        console: rich console for the trainer's progress bar; None: silent.
        base_model: the base checkpoint directory; default the embedded model.

    Returns:
        ``(solver, record)``: the new solver (the adapter loaded as ``arena run --adapter`` loads
        it) and the sleep's record for the summary (adapter id, data report, training figures).

    Raises:
        arena.distill.data.NoTrainingData: fewer than ``--sleep-min-examples`` examples (one line).
        arena.distill.trainer.TrainingError / arena.distill.weights.AdapterError: training or saving failed.
    """
    from agents.backends.local import LocalPolicy, default_device, ensure_converted, training_dtype
    from arena.distill.pipeline import collect_data, distilled_lessons, rewrite_sidecar, screen_data, train_and_save
    from arena.distill.weights import AdapterSidecar, base_fingerprint

    astore = AdapterStore(store)
    dcfg = sleep_config(cfg, cycle)
    rounds = set(cycle_rounds(cfg, cycle)) if cfg.sleep_from == "previous" else None
    # opcd's teachers see the library's lessons as the solver's held-out prompts would, those its adapter holds left out
    rollouts, data = collect_data(store, session, dcfg, rounds, solver.policy.count_tokens, solver.exclude)
    # the wake's solver with and without lessons: what the adapter has to keep
    wake_plain = evals.run(eval_name(cycle, False, wake=True), solver, False)
    wake_lessons = evals.run(eval_name(cycle, True, wake=True), solver, True)

    adapter_id = astore.next_adapter_id()
    out_dir = sleep_dir(store, adapter_id)
    if out_dir.exists():
        clear_unregistered(astore, out_dir, session, cycle)
    base_dir = base_model or ensure_converted()
    start = solver.path if cfg.sleep_from == "previous" else None
    trainee = LocalPolicy(model_dir=base_dir, adapter=start, dtype=training_dtype(default_device()))
    trainee.load()
    report = screen_data(store, session, rollouts, data, trainee, dcfg)
    provenance = {**data.provenance(), "session": session, "report": report, "cycle": cycle,
                  "sleep_from": cfg.sleep_from, "parent_adapter": solver.adapter_id}
    fingerprint = base_fingerprint(base_dir)
    sidecar = AdapterSidecar(
        adapter_id=adapter_id, base_model=fingerprint, objective=dcfg.objective, session=session,
        config=dcfg.model_dump(mode="json"), data=provenance, metrics={}, created_at=datetime.now(UTC).isoformat(),
    )
    path, metrics = train_and_save(trainee, data, dcfg, out_dir, sidecar)  # its own bar would nest in the session's
    del trainee
    gc.collect()
    registered = False
    try:
        policy = LocalPolicy(model_dir=base_dir, adapter=path)
        policy.load()
        new = Solver(policy, adapter_id, path, solver.exclude)
        plain = evals.compute(new, False)
        distilled = distilled_lessons(data.lessons_in_context, wake_plain, wake_lessons, plain)
        new = replace(new, exclude=tuple(dict.fromkeys([*solver.exclude, *distilled])))
        with_lessons = evals.compute(new, True)
        conditions = {"adapter": plain, "adapter_lessons": with_lessons,
                      "wake": wake_plain, "wake_lessons": wake_lessons}
        evaluation = {**{k: e.graded_summary() for k, e in conditions.items()},
                      "heldout_tasks": len(evals.tasks), "distilled": sorted(distilled)}
        sidecar.metrics, sidecar.eval = metrics, evaluation
        rewrite_sidecar(path, sidecar)
        info = astore.register_adapter(AdapterRecord(
            adapter_id=adapter_id, path=str(path), base_model=fingerprint, objective=dcfg.objective,
            session_id=session_id, config=dcfg.model_dump(mode="json"), data=provenance, metrics=metrics,
            eval=evaluation, in_context=data.lessons_in_context, distilled=distilled,
            parent_adapter=solver.adapter_id, cycle=cycle,
        ))
        registered = True
    finally:
        if not registered:
            shutil.rmtree(path, ignore_errors=True)
    evals.record(eval_name(cycle, False), plain, False, info.adapter_id)
    evals.record(eval_name(cycle, True), with_lessons, True, info.adapter_id)
    return new, {"adapter_id": info.adapter_id, "data": report,
                 "train": {k: v for k, v in metrics.items() if k != "loss_curve"}}
