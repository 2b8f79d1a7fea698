"""`arena distill` and `arena eval`: a session's successes into a LoRA adapter, and held-out pass@1 with it.

The pipeline (:func:`run_distill`):

1. data: the session's train rollouts → examples of the chosen objective
   (its ``build_dataset``, :mod:`arena.objectives`); none eligible → :class:`DistillError`, nothing written;
2. held-out pass@1 (greedy) of the base model without and with the lessons;
3. training (:func:`arena.distill.trainer.train`) on the base model;
4. the adapter directory (peft files + sidecar), written atomically, then loaded back from
   disk as the solver would load it (``LocalPolicy(adapter=...)``) and evaluated without
   lessons;
5. lessons that helped (base + lessons above base on the tasks that showed them) and whose
   effect the adapter keeps — its pass@1 without any lesson, on the held-out
   tasks whose prompt showed the lesson, is at least the lower end of the 95% CI of base +
   lessons on those tasks — become ``distilled``; the adapter is evaluated again with the
   remaining lessons;
6. one transaction registers the adapter, its lineage edges and the lesson status changes.

A failure or Ctrl-C before step 6 removes the adapter directory: no half-written adapter is
ever registered.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import shutil
import sys
from collections.abc import Callable, Collection, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from arena.config import ADAPTER_NEEDS, SessionConfig, solver_capability_gap
from arena.distill.config import DistillConfig
from arena.distill.data import (
    BadTrainingData,
    DistillDataset,
    NoTrainingData,
    data_report,
    rescore_old_logprobs,
    screen_implausible,
)
from arena.objectives import get_objective
from arena.distill.objectives.base import DataContext
from arena.distill.weights import (
    SIDECAR,
    AdapterSidecar,
    base_fingerprint,
    check_adapter_dir,
    save_adapter,
)
from arena.evaluation import EvalResult, evaluate_heldout, shows_lessons
from arena.stats import wilson_interval
from arena.tasks.model import Task
from arena.tasks.sources import load_tasks
from lessons.library.adapters import AdapterInfo, AdapterRecord, AdapterStore, TrainingRollout
from lessons.library.store import LessonStore
from lessons.outcomes import count_passes

if TYPE_CHECKING:
    from agents.backends.local import LocalPolicy

CONDITIONS = ("base", "base_lessons", "adapter", "adapter_lessons")
CONDITION_LABELS = {
    "base": "base",
    "base_lessons": "base + lessons",
    "adapter": "adapter",
    "adapter_lessons": "adapter + remaining lessons",
}


class DistillError(ValueError):
    """A user-fixable problem with a distillation or evaluation request; one line for stderr."""


# --------------------------------------------------------------------------- tasks and adapters


def session_heldout(store: LessonStore, db: str, session: str) -> tuple[SessionConfig, list[Task]]:
    """The session's settings and held-out tasks, rebuilt from its stored config and checked against the stored tasks.

    Raises:
        DistillError: no such session, or its tasks cannot be rebuilt identically.
    """
    info = store.get_session(session)
    if info is None:
        raise DistillError(f"no session named {session!r} in {db}")
    try:
        cfg = SessionConfig.model_validate({**info.config, "db": db})
        with contextlib.redirect_stdout(sys.stderr):
            splits = load_tasks(cfg.families, cfg.tasks_file, cfg.train_tasks, cfg.heldout_tasks, cfg.seed)
    except Exception as e:  # noqa: BLE001 - a stored config that no longer loads (e.g. a moved task file)
        raise DistillError(f"cannot rebuild the tasks of session {session!r}: {' '.join(str(e).split())}") from None
    stored = {(t.task_key, t.question) for t in store.stored_tasks(session, split="heldout")}
    rebuilt = {(t.task_key, t.question) for t in splits.heldout}
    if stored and stored != rebuilt:
        raise DistillError(f"the held-out tasks of session {session!r} changed since it ran (was the task file edited?)")
    return cfg, list(splits.heldout)


def latest_session(store: LessonStore, db: str) -> str:
    """The newest session that has rollouts; DistillError when there is none."""
    name = store.latest_session_with_episodes()
    if name is None:
        raise DistillError(f"no session with rollouts in {db}; run `arena run --db {db}` first")
    return name


def resolve_adapter(store: LessonStore, spec: str) -> tuple[Path, AdapterInfo | None]:
    """An adapter given as a registered id (``adapter-0001``) or a directory.

    Returns:
        ``(path, info)``: the directory and its registry entry (None for an unregistered
        directory, e.g. a peft adapter trained elsewhere: nothing is distilled into it).

    Raises:
        DistillError: neither a registered id nor an existing directory.
    """
    info = AdapterStore(store).get_adapter(spec)
    if info is not None:
        return Path(info.path), info
    p = Path(spec).expanduser()
    if p.exists():
        return p.resolve(), AdapterStore(store).find_by_path(p)
    raise DistillError(f"no adapter {spec!r}: not a registered adapter id (see the adapters table) nor a directory")


def check_adapter_for_base(path: Path, base_dir: Path) -> AdapterSidecar | None:
    """:func:`arena.distill.weights.check_adapter_dir` against the fingerprint of the base model in ``base_dir``."""
    return check_adapter_dir(path, base_fingerprint(base_dir))


def adapter_for_run(db: str, spec: str, solver: str) -> Path:
    """The checked adapter directory for ``arena run --adapter ID|PATH`` (before anything is written).

    An id is looked up in an existing library; a directory is used as is. The directory must
    hold a LoRA adapter for the embedded base model.

    Raises:
        DistillError / AdapterError: not the local solver, unknown id, missing or corrupt
            directory, or an adapter for another base model.
    """
    from agents.backends.local import ensure_converted

    if gap := solver_capability_gap(solver, ADAPTER_NEEDS, "--adapter"):
        raise DistillError(gap)
    exists = "://" in db or Path(db).exists()
    if exists:
        with LessonStore(db) as store:
            path, _ = resolve_adapter(store, spec)
    else:
        path = Path(spec).expanduser()
        if not path.exists():
            raise DistillError(f"no adapter {spec!r}: not a directory, and there is no library at {db} to look it up in")
        path = path.resolve()
    check_adapter_for_base(path, ensure_converted())
    return path


# --------------------------------------------------------------------------- evaluation


def evaluate(
    store: LessonStore,
    policy: Any,
    tasks: Sequence[Task],
    with_lessons: bool,
    exclude: Collection[str],
    lesson_tokens: int,
    max_tokens: int,
    reuse: EvalResult | None = None,
) -> EvalResult:
    """Greedy pass@1 of ``policy`` on ``tasks`` with or without lessons (minus ``exclude``).

    :func:`arena.evaluation.evaluate_heldout` with the verifier's rewards. ``reuse``: the
    no-lessons result of the same policy; returned as is when no task would be shown any lesson
    (the prompts, hence the greedy completions, are the same).
    """
    if with_lessons and reuse is not None and not shows_lessons(store, policy, tasks, lesson_tokens, exclude):
        return reuse
    return evaluate_heldout(store, policy, tasks, with_lessons, lesson_tokens, max_tokens, exclude=exclude)


def distilled_lessons(
    candidates: Sequence[str], base: EvalResult, base_lessons: EvalResult, adapter: EvalResult
) -> dict[str, str]:
    """Lessons whose effect the adapter keeps, each with a rationale holding the figures.

    For lesson L: the held-out tasks whose base + lessons prompt showed L; p_b the base
    model's pass@1 there without lessons, p_bl its pass@1 with them (95% Wilson CI [lo, hi]);
    p_a the adapter's pass@1 without any lesson on the same tasks. L is distilled when the
    lessons had an effect to keep there (p_bl > p_b) and p_a >= lo ("within the CI of base +
    lesson or better"). A lesson that did not help is not marked distilled even when the
    adapter beats it: there was nothing to distill, and it should stay visible to curation.
    Lessons shown on no task are not judged.
    """
    out: dict[str, str] = {}
    for lid in candidates:
        idx = [i for i, shown in enumerate(base_lessons.lessons) if lid in shown]
        if not idx:
            continue
        n = len(idx)
        b = count_passes(base.rewards[i] for i in idx)
        bl = count_passes(base_lessons.rewards[i] for i in idx)
        ad = count_passes(adapter.rewards[i] for i in idx)
        lo, hi = wilson_interval(bl, n)
        if bl > b and ad / n >= lo - 1e-12:
            out[lid] = (
                f"held-out pass@1 without the lesson {ad}/{n} = {ad / n:.3f} with the adapter; base + lessons "
                f"{bl}/{n} = {bl / n:.3f}, 95% CI [{lo:.3f}, {hi:.3f}], base alone {b}/{n}, on the {n} tasks that showed it"
            )
    return out


# --------------------------------------------------------------------------- the pipeline, step by step
# (shared by `arena distill` and the sleeps of `arena run --cycles`)


def collect_data(
    store: LessonStore, session: str, cfg: DistillConfig, rounds: Collection[int] | None = None,
    count_tokens: Callable[[str], int] | None = None, exclude: Collection[str] = (),
) -> tuple[list[TrainingRollout], DistillDataset]:
    """The session's train rollouts and the examples of ``cfg.objective`` (no model needed: fails fast).

    ``rounds``: only rollouts of episodes in these session rounds (a cycle's, for
    ``--sleep-from previous``); None: every round.

    The objective's implementation builds the examples (``build_dataset`` and ``require`` of
    :class:`arena.distill.objectives.base.Objective`). ``opcd``'s teachers see the library's active
    lessons as a held-out prompt would now (:func:`arena.distill.objectives.opcd.library_lessons`,
    ``cfg.lesson_tokens`` of budget), counted with ``count_tokens`` (default: the base model's
    tokenizer, loaded only when there are lessons), ``exclude`` left out (lessons the adapter
    training starts from already holds).

    Raises:
        NoTrainingData: no eligible example (the message lists what was skipped and why).
        lessons.library.store.StoreError: no such session.
    """
    astore = AdapterStore(store)
    rollouts = astore.training_rollouts(session)  # eligible ones only: never ungraded, never reward-hack flagged
    excluded = astore.training_exclusions(session, rounds)
    if rounds is not None:
        rollouts = [r for r in rollouts if r.episode_round in rounds]
    objective = get_objective(cfg.objective).load()
    ctx = DataContext(store, session, cfg.success_threshold, cfg.lesson_tokens, count_tokens or base_token_count(), exclude)
    data = objective.build_dataset(rollouts, ctx)
    data.skipped.update(excluded)
    objective.require(data, ctx)
    return rollouts, data


def base_token_count(model_dir: Path | None = None) -> Callable[[str], int]:
    """Token count in the base model's tokenizer (no special tokens), the tokenizer loaded on the first call.

    Args:
        model_dir: a transformers checkpoint directory; default the embedded SmolLM2 (converted once).

    Raises (on the first call):
        agents.policy.PolicyError: the tokenizer cannot be loaded.
    """
    tok: list[Any] = []

    def count(text: str) -> int:
        if not tok:
            from transformers import AutoTokenizer

            from agents.backends.local import ensure_converted
            from agents.policy import PolicyError

            path = model_dir or ensure_converted()
            try:
                tok.append(AutoTokenizer.from_pretrained(path))
            except Exception as e:  # a missing or corrupt checkpoint: one line
                raise PolicyError(f"cannot load the tokenizer from {path}: {e}") from e
        return len(tok[0](text, add_special_tokens=False)["input_ids"])

    return count


def with_train_settings(cfg: DistillConfig, **train: Any) -> DistillConfig:
    """``cfg`` with trainer settings replaced (validated)."""
    return DistillConfig.model_validate({**cfg.model_dump(), "train": {**cfg.train.model_dump(), **train}})


def with_sampling_temperature(cfg: DistillConfig, temperature: float) -> DistillConfig:
    """``cfg`` with the trainer's temperature set to the session's sampling temperature (validated)."""
    return with_train_settings(cfg, temperature=temperature)


def sampling_adapter_path(store: LessonStore, session: str, adapter_id: str) -> Path:
    """The directory of the adapter that sampled a session's rollouts (``rollouts.adapter_id``).

    A registered id is looked up in the library; otherwise the session's own ``--adapter``
    directory, when its name is that id (an unregistered directory passed to ``arena run``).

    Raises:
        BadTrainingData: neither (the sampling policy, hence π_old, cannot be rebuilt).
    """
    info = AdapterStore(store).get_adapter(adapter_id)
    if info is not None:
        return Path(info.path)
    sinfo = store.get_session(session)
    given = (sinfo.config or {}).get("adapter") if sinfo is not None else None
    if given and Path(given).name[:50] == adapter_id and Path(given).is_dir():
        return Path(given)
    raise BadTrainingData(f"rollouts of session {session!r} were sampled by adapter {adapter_id!r}, which is neither "
                          "registered nor the session's --adapter directory: their sampling log-probs cannot be rescored")


def rescore_pi_old(store: LessonStore, session: str, data: DistillDataset, policy: LocalPolicy, temperature: float) -> dict[str, Any]:
    """π_old of every RL example: its tokens scored by the policy that sampled it, at the sampling temperature.

    ``policy`` (the one training starts from) scores the rollouts it sampled itself; the base
    model or another adapter is loaded for the others (and dropped afterwards). See
    :func:`arena.distill.data.rescore_old_logprobs`.

    Returns:
        ``{"temperature", "examples", "stored_vs_rescored_mean_abs", "sampled_by"}`` for the data report.

    Raises:
        BadTrainingData: an adapter that sampled cannot be found, or a non-finite log-prob.
    """
    from agents.backends.local import LocalPolicy

    own = Path(policy.adapter).resolve() if policy.adapter is not None else None
    scorers: dict[str | None, Any] = {}

    def scorer(adapter_id: str | None) -> Any:
        if adapter_id not in scorers:
            path = sampling_adapter_path(store, session, adapter_id) if adapter_id is not None else None
            if (path.resolve() if path is not None else None) == own:
                scorers[adapter_id] = policy
            else:
                other = LocalPolicy(model_dir=policy.model_dir, device=policy.device, dtype=policy.dtype, adapter=path)
                other.load()
                scorers[adapter_id] = other
        return scorers[adapter_id]

    try:
        summary = rescore_old_logprobs(
            data, lambda aid, msgs, ids: scorer(aid).token_logprobs(msgs, ids, temperature=temperature), policy.eos_token_id
        )
    finally:
        for p in scorers.values():
            if p is not policy:
                p.close()
        scorers.clear()
        gc.collect()
    sampled_by = sorted({e.adapter_id or "base" for e in data.examples if e.old_logprobs is not None})
    return {"temperature": temperature, **summary, "sampled_by": sampled_by}


def screen_data(
    store: LessonStore, session: str, rollouts: Sequence[TrainingRollout], data: DistillDataset, policy: Any,
    cfg: DistillConfig,
) -> dict[str, Any]:
    """Screen guided successes with the policy training starts from, check the size, report the data.

    Guided examples (kind ``guided``) implausible without their hint are dropped
    (:func:`arena.distill.data.screen_implausible`, threshold ``cfg.min_guided_log_ratio``,
    scored by ``policy.token_logprobs``); π_old is rescored at the sampling temperature where the
    objective :meth:`~arena.distill.objectives.base.Objective.needs_pi_old` (:func:`rescore_pi_old`:
    every example of ``grpo`` / ``guide-grpo``, whose ratios replace the screen; the weighted ones
    of ``distill``); then the data must hold ``cfg.min_examples``.

    Returns:
        :func:`arena.distill.data.data_report` (examples by kind, tokens, distinct tasks, coverage
        of the session's train tasks, skip reasons, guided log-ratio quantiles).

    Raises:
        NoTrainingData: nothing left, or fewer than ``cfg.min_examples`` examples (saying how
            many it has and needs).
    """
    ratios: list[float] = []
    pi_old: dict[str, Any] | None = None
    objective = get_objective(cfg.objective).load()
    if any(e.kind == "guided" for e in data.examples) and cfg.min_guided_log_ratio > float("-inf"):
        ratios = screen_implausible(data, rollouts, policy.token_logprobs, cfg.min_guided_log_ratio)
        objective.require(data, DataContext(store, session, cfg.success_threshold))
    if objective.needs_pi_old(data):
        # the ratios are over the distribution that sampled: π_old at the sampling temperature, under its adapter
        pi_old = rescore_pi_old(store, session, data, policy, cfg.train.temperature)
    if len(data.examples) < cfg.min_examples:
        raise NoTrainingData(
            f"session {session!r} has {len(data.examples)} training examples for objective {data.objective} "
            f"(skipped: {', '.join(f'{n} {k}' for k, n in sorted(data.skipped.items())) or 'none'}); a sleep needs "
            f"at least {cfg.min_examples} to train meaningfully: run more train tasks or rounds, or lower the minimum "
            "(arena run --sleep-min-examples, arena distill --min-examples)"
        )
    train_keys = [t.task_key for t in store.stored_tasks(session, split="train")]
    report = data_report(data, train_keys, ratios)
    if pi_old is not None:
        report["pi_old"] = pi_old
    return report


def train_and_save(
    policy: Any, data: DistillDataset, cfg: DistillConfig, out_dir: Path, sidecar: AdapterSidecar,
    console: Any | None = None,
) -> tuple[Path, dict[str, Any]]:
    """Train a LoRA on ``policy``'s model (a fresh base, or a loaded adapter to continue) and save it atomically.

    Returns:
        ``(path, metrics)``: the adapter directory (peft files + sidecar with ``metrics``) and
        the trainer's metrics.

    Raises:
        arena.distill.trainer.TrainingError / arena.distill.weights.AdapterError.
    """
    from arena.distill.trainer import fit

    teacher = None
    if get_objective(cfg.objective).teacher_is_start and policy.adapter is not None:
        # continuing an adapter: it, frozen, is the teacher
        from agents.backends.local import LocalPolicy

        teacher = LocalPolicy(model_dir=policy.model_dir, device=policy.device, dtype=policy.dtype, adapter=policy.adapter)
        teacher.load()
    try:
        peft_model, result = fit(policy.model, policy.tokenizer, data.examples, cfg.train, cfg.objective,
                                 eos_id=policy.eos_token_id, console=console,
                                 teacher=teacher.model if teacher is not None else None)
    finally:
        if teacher is not None:
            teacher.close()
    sidecar.metrics = result.metrics()
    path = save_adapter(peft_model, out_dir, sidecar)
    del peft_model
    gc.collect()
    return path, result.metrics()


def fresh_out_dir(store: LessonStore, out_dir: Path | None, name: str) -> Path:
    """The adapter directory: ``out_dir``, or ``adapters/<name>`` beside a SQLite database, or
    ``adapters/<host>-<port>-<database>/<name>`` in the working directory for a server's library.

    Raises:
        DistillError: it exists and is not empty.
    """
    if out_dir is None:
        if store.sqlite_path is not None:
            out_dir = store.sqlite_path.absolute().parent / "adapters" / name
        else:
            out_dir = Path.cwd() / "adapters" / store.server_slug / name
    out_dir = out_dir.expanduser().absolute()
    if out_dir.exists() and (not out_dir.is_dir() or any(out_dir.iterdir())):
        raise DistillError(f"adapter directory {out_dir} already exists; pass another --out or remove it")
    return out_dir


# --------------------------------------------------------------------------- the pipeline


def run_distill(
    store: LessonStore,
    db: str,
    session: str,
    cfg: DistillConfig,
    out_dir: Path | None = None,
    base_model: Path | None = None,
    console: Any | None = None,
) -> dict[str, Any]:
    """Distill one session into a LoRA adapter, evaluate it, register it (see the module docstring).

    Args:
        store: the open library.
        db: its path / URL as the user gave it (for messages and the session config).
        session: the session whose train rollouts are the data.
        cfg: objective, data threshold, evaluation budgets and the trainer's settings.
        out_dir: the adapter directory; default ``adapters/<adapter id>`` beside a SQLite
            database (the working directory otherwise).
        base_model: a transformers checkpoint directory; default the embedded SmolLM2.
        console: rich console for progress (stderr in the CLI); None: silent.

    Returns:
        The summary: ``adapter_id``, ``adapter_path``, ``session``, ``objective``, ``data``
        (counts), ``train`` (steps, tokens, final_loss, tokens_per_s, ...), ``eval`` (the four
        conditions, each ``{"pass_at_1", "n", "passes", "ci95"}``), ``in_context`` and
        ``distilled`` lesson ids.

    Raises:
        DistillError / NoTrainingData: bad session, no eligible data, output directory taken.
        arena.distill.weights.AdapterError: the output directory cannot be written.
        arena.distill.trainer.TrainingError: the loss became NaN / no example fits.
        agents.policy.PolicyError: the base model cannot be loaded.
    """
    from agents.backends.local import LocalPolicy, training_dtype

    astore = AdapterStore(store)
    # ---- data (before any model is loaded: bad input fails fast and writes nothing)
    rollouts, data = collect_data(store, session, cfg, count_tokens=base_token_count(base_model))
    session_cfg, tasks = session_heldout(store, db, session)
    spec = get_objective(cfg.objective)
    if spec.sampling_temperature:  # ratios at the rollouts' sampling temperature
        cfg = with_sampling_temperature(cfg, session_cfg.temperature)
    if spec.family == "on-policy":  # the student's samples as long as the session's completions
        # room for the teacher's chat (system prompt, the session's lessons section, hint) and a full sample
        cfg = with_train_settings(cfg, sample_tokens=session_cfg.max_tokens, max_seq_len=max(
            cfg.train.max_seq_len, session_cfg.lesson_tokens + session_cfg.max_tokens + 512))
    adapter_id = astore.next_adapter_id()
    out_dir = fresh_out_dir(store, out_dir, adapter_id)

    # ---- base model: its held-out pass@1 without / with lessons, sampled as the solver samples (and as the
    # adapter is evaluated below); then the trainee, in the training dtype, screens the guided data
    policy = LocalPolicy(model_dir=base_model)
    policy.load()
    base_dir = policy.model_dir
    fingerprint = base_fingerprint(base_dir)
    ev: dict[str, EvalResult] = {}
    ev["base"] = evaluate(store, policy, tasks, False, (), cfg.lesson_tokens, cfg.eval_max_tokens)
    ev["base_lessons"] = evaluate(store, policy, tasks, True, (), cfg.lesson_tokens, cfg.eval_max_tokens, ev["base"])
    if policy.dtype != training_dtype(policy.device):
        policy.close()
        policy = LocalPolicy(model_dir=base_dir, device=policy.device, dtype=training_dtype(policy.device))
        policy.load()
    report = screen_data(store, session, rollouts, data, policy, cfg)

    # ---- train
    provenance = {**data.provenance(), "session": session, "report": report}
    sidecar = AdapterSidecar(
        adapter_id=adapter_id, base_model=fingerprint, objective=cfg.objective, session=session,
        config=cfg.model_dump(mode="json"), data=provenance, metrics={},
        created_at=datetime.now(UTC).isoformat(),
    )
    path, metrics = train_and_save(policy, data, cfg, out_dir, sidecar, console)
    del policy
    gc.collect()
    registered = False
    try:
        # ---- the adapter as the solver loads it, without lessons, then with the remaining ones
        apolicy = LocalPolicy(model_dir=base_dir, adapter=path)
        apolicy.load()
        ev["adapter"] = evaluate(store, apolicy, tasks, False, (), cfg.lesson_tokens, cfg.eval_max_tokens)
        in_context = data.lessons_in_context
        distilled = distilled_lessons(in_context, ev["base"], ev["base_lessons"], ev["adapter"])
        ev["adapter_lessons"] = evaluate(store, apolicy, tasks, True, set(distilled), cfg.lesson_tokens,
                                         cfg.eval_max_tokens, ev["adapter"])
        eval_json = {name: ev[name].summary() for name in CONDITIONS}
        eval_json["heldout_tasks"] = len(tasks)
        sidecar.eval = {**eval_json, "distilled": sorted(distilled)}
        rewrite_sidecar(path, sidecar)
        info = astore.register_adapter(
            AdapterRecord(
                adapter_id=adapter_id, path=str(path), base_model=fingerprint, objective=cfg.objective,
                session_id=store.get_session(session).id, config=cfg.model_dump(mode="json"), data=provenance,
                metrics=metrics, eval=sidecar.eval, in_context=in_context, distilled=distilled,
            )
        )
        registered = True
    finally:
        if not registered:
            shutil.rmtree(path, ignore_errors=True)
    # per task, beside the adapter's record, so that runs on one session's data pair (bench/paired_heldout.py --within)
    evaluations = [*record_heldout(store, session, "base", ev["base"], ev["base_lessons"], cfg.eval_max_tokens,
                                   cfg.lesson_tokens, None),
                   *record_heldout(store, session, info.adapter_id, ev["adapter"], ev["adapter_lessons"],
                                   cfg.eval_max_tokens, cfg.lesson_tokens, Path(info.path))]
    return {
        "adapter_id": info.adapter_id,
        "adapter_path": info.path,
        "session": session,
        "objective": cfg.objective,
        "base_model": fingerprint,
        "data": {k: v for k, v in provenance.items() if k not in ("rollout_ids",)},
        "train": {k: v for k, v in metrics.items() if k != "loss_curve"},
        "eval": {name: ev[name].summary() for name in CONDITIONS},
        "evaluations": evaluations,
        "in_context": info.in_context,
        "distilled": info.distilled,
        "session_families": session_cfg.families,
    }


def rewrite_sidecar(path: Path, sidecar: AdapterSidecar) -> None:
    """Replace the adapter's sidecar atomically (after its evaluation)."""
    tmp = path / (SIDECAR + ".tmp")
    tmp.write_text(json.dumps(sidecar.model_dump(mode="json"), indent=2) + "\n")
    os.replace(tmp, path / SIDECAR)


def record_heldout(store: LessonStore, session: str, label: str, plain: EvalResult, with_lessons: EvalResult,
                   max_tokens: int, lesson_tokens: int, adapter_path: Path | None) -> list[str]:
    """Store a held-out evaluation pair as ``eval:<label>`` and ``eval:<label>+lessons``, per task.

    The rows are those of a session's own held-out evaluations (reward, question, lessons shown), with
    the budgets used, so ``bench/paired_heldout.py --within`` pairs them; a name recorded before is
    replaced. Returns the two names.
    """
    sid = store.get_session(session).id
    names = [f"eval:{label}", f"eval:{label}+lessons"]
    for name, res, wl in ((names[0], plain, False), (names[1], with_lessons, True)):
        s = res.summary()
        store.record_evaluation(sid, name, "heldout", wl, res.rewards, tuple(s["ci95"]),
                                {**res.details(), "lessons": res.lessons, "max_tokens": max_tokens,
                                 "lesson_tokens": lesson_tokens, "adapter": str(adapter_path) if adapter_path else None})
    return names


def run_eval(
    store: LessonStore,
    db: str,
    session: str,
    adapter: str | None,
    lesson_tokens: int | None = None,
    max_tokens: int | None = None,
    base_model: Path | None = None,
) -> dict[str, Any]:
    """Held-out pass@1 of the base model or an adapter, without and with lessons; stored as evaluations.

    With ``adapter``: conditions ``adapter`` and ``adapter_lessons`` (the lessons it distilled
    are left out); without: ``base`` and ``base_lessons``. Each is recorded in the session's
    evaluations under ``eval:<adapter id or base>[+lessons]``, with the per-task rows a session's
    held-out evaluations hold (so ``bench/paired_heldout.py`` can pair them) and the budgets used.
    ``lesson_tokens`` / ``max_tokens``: None takes the session's (``--lesson-tokens``, ``--max-tokens``),
    as its own held-out evaluations used; recording the same name again replaces the earlier row.

    Raises:
        DistillError / AdapterError / agents.policy.PolicyError: bad session, adapter or model.
    """
    from agents.backends.local import LocalPolicy

    session_cfg, tasks = session_heldout(store, db, session)
    lesson_tokens = session_cfg.lesson_tokens if lesson_tokens is None else lesson_tokens
    max_tokens = session_cfg.max_tokens if max_tokens is None else max_tokens
    path, info, exclude, label = None, None, set(), "base"
    if adapter is not None:
        path, info = resolve_adapter(store, adapter)
        probe = LocalPolicy(model_dir=base_model)
        check_adapter_for_base(path, probe.model_dir)
        exclude = set(info.distilled) if info else set()
        label = info.adapter_id if info else path.name[:80]  # the name fits evaluations.name (100); details keep the path
    policy = LocalPolicy(model_dir=base_model, adapter=path)
    policy.load()
    plain = evaluate(store, policy, tasks, False, (), lesson_tokens, max_tokens)
    withl = evaluate(store, policy, tasks, True, exclude, lesson_tokens, max_tokens, plain)
    names = ("adapter", "adapter_lessons") if adapter is not None else ("base", "base_lessons")
    evaluations = record_heldout(store, session, label, plain, withl, max_tokens, lesson_tokens, path)
    return {
        "session": session,
        "adapter_id": info.adapter_id if info else None,
        "adapter_path": str(path) if path else None,
        "excluded_lessons": sorted(exclude),
        "evaluations": evaluations,  # their names in the library
        "max_tokens": max_tokens,
        "lesson_tokens": lesson_tokens,
        "eval": {names[0]: plain.summary(), names[1]: withl.summary()},
    }

