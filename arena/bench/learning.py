"""`arena bench learning`: does the loop make the solver better? Nine conditions at one rollout budget.

Every condition runs on the same train tasks, seeds and held-out tasks, each in its own library
(``<out>/<condition>.db``), in this process one after the other:

- ``base``: no learning — the base model's held-out greedy pass@1 (the baseline of every test);
- ``lessons``: lessons only (ACE-like): the same wake rounds, no hints, no sleep;
- ``sft``: STaR — rejection-sampling SFT on unguided successes, no lessons, no hints, iterated per cycle;
- ``distill``: today's objective in cycles — hints, no lessons in context, sleep objective ``distill``
  (``sft`` and ``distill`` learn in weights only: no teacher reflection, ``--no-reflect``);
- ``grpo``: GRPO on every unguided rollout (failures too), no hints, no lessons: Guide's ablation;
- ``guide-grpo``: Guide (Nath et al. 2025): GRPO plus hint-guided re-attempts of all-fail groups,
  trained under the unguided context with the shaped importance ratio; no lessons;
- ``opcd``: on-policy context distillation: the wake writes lessons and hints, the sleep trains the
  adapter, sampling without them, toward the base model with the active lessons (and hints' plan
  parts) in context (reverse KL; :func:`arena.distill.objectives.opcd.build_opcd_dataset`);
  the three on-policy objectives continue the previous cycle's adapter (``--sleep-from previous``);
- ``loop``: the full loop — lessons (utility-gated), hints, cycles, the default sleep objective;
  ``loop`` against ``distill`` is what lessons add on top of the weights;
- ``oracle``: a LoRA trained on reference answers of the same train tasks with the same
  optimizer steps as one sleep: the ceiling, reported only as a ceiling.

The hinted conditions (``distill``, ``guide-grpo``, ``opcd``, ``loop``) take the session's hint modes
(``feedback,answer``) unless ``hint_modes`` says otherwise: ``plan`` or ``feedback`` alone give
guidance without the answer, as Guide's hints do; ``answer`` is STaR's rationalization.

Each reports held-out greedy pass@1 (Wilson 95% CI) with the exact McNemar test and the paired
difference against ``base``; sampled pass@1 and pass@k on a subset of the held-out tasks; the
rollouts, training tokens and wall time it spent; and its curve of held-out pass@1 against
rollouts consumed (one point per cycle). ``<out>/learning.png`` draws the curves with their CI
bands, ``<out>/learning.json`` holds every figure.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from arena.config import (DEFAULT_FAMILY, DEFAULT_SLEEP_OBJECTIVE, RUN_UTILITY_EVERY, RUN_UTILITY_SAMPLES,
                          RUN_UTILITY_TASKS, SessionConfig)
from arena.objectives import get_objective
from lessons.outcomes import HELDOUT_AFTER, HELDOUT_BEFORE, eval_name



@dataclass(frozen=True)
class SleepCondition:
    """A condition that learns by one objective's sleeps (its name is the objective's).

    The rest of its session follows from the objective's registry spec: its all-fail groups get hints
    when the objective uses them (``uses_hints``), and a policy-gradient or on-policy objective's sleeps
    continue the adapter that sampled the cycle's rollouts (``--sleep-from previous``).

    Attributes:
        objective: a registered objective.
        lessons: the wake writes lessons (teacher reflection, utility A/B) and shows them; False: the
            condition learns in weights only (``--no-reflect``, no lessons in context).
    """

    objective: str
    lessons: bool = False

    @property
    def hints(self) -> bool:
        return get_objective(self.objective).uses_hints

    @property
    def on_policy(self) -> bool:
        return get_objective(self.objective).family != "supervised"


# The objectives the bench compares, in report order (the design of the experiment; each one's settings come from
# its registry spec): STaR, today's default, Guide's ablation and Guide, on-policy context distillation.
SLEEP_CONDITIONS: tuple[SleepCondition, ...] = (
    SleepCondition("sft"), SleepCondition("distill"), SleepCondition("grpo"), SleepCondition("guide-grpo"),
    SleepCondition("opcd", lessons=True),
)
_SLEEPS = {c.objective: c for c in SLEEP_CONDITIONS}
CONDITIONS = ("base", "lessons", *_SLEEPS, "loop", "oracle")
# conditions whose all-fail groups get hints (--hint-mode chooses which)
HINTED = (*(c.objective for c in SLEEP_CONDITIONS if c.hints), "loop")


class LearningBenchError(ValueError):
    """The benchmark cannot run as asked; one line for stderr."""


@dataclass
class LearningBenchConfig:
    """Settings shared by every condition of ``arena bench learning``."""

    family: str = DEFAULT_FAMILY  # reasoning-gym spec of the train and held-out tasks
    train_tasks: int = 32  # train tasks (one episode each per round)
    heldout_tasks: int = 128  # held-out tasks of greedy pass@1
    rollouts: int = 8  # group size k
    rounds: int = 1  # wake rounds per cycle
    cycles: int = 2  # wake–sleep cycles of sft / distill / loop (lessons gets rounds × cycles wake rounds)
    sleep_steps: int = 40  # optimizer steps per sleep (and of the oracle), batch 8
    sleep_lr: float = 5e-4  # peak learning rate of a sleep
    sleep_min_examples: int = 16  # a sleep with fewer examples is refused
    # the utility A/B of lessons and loop: `arena run`'s (every 16 episodes, 96 greedy pairs per lesson)
    utility_every: int = RUN_UTILITY_EVERY
    utility_tasks: int = RUN_UTILITY_TASKS
    utility_samples: int = RUN_UTILITY_SAMPLES
    concurrency: int = 8  # episodes in flight per round (their rollouts share decoding batches)
    max_tokens: int = 96  # solver completion cap, tokens
    # teacher reflection cap, tokens: the session's default (the 1.5B teacher's replies run ~60–250 tokens)
    teacher_max_tokens: int = SessionConfig.model_fields["teacher_max_tokens"].default
    temperature: float = 0.8  # rollout sampling temperature
    pass_k: int = 8  # k of the sampled held-out pass@k
    pass_k_tasks: int = 32  # held-out tasks (the first ones) of the sampled pass@1 / pass@k
    seed: int = 0  # task draws and sampling
    # hints of the hinted conditions (distill, guide-grpo, opcd, loop); None: the session default (feedback,
    # answer); [] turns them off. sft, grpo and lessons never get hints: that is what they ablate.
    hint_modes: list[str] | None = None
    conditions: list[str] = field(default_factory=lambda: list(CONDITIONS))

    def __post_init__(self) -> None:
        unknown = [c for c in self.conditions if c not in CONDITIONS]
        if unknown:
            raise LearningBenchError(f"unknown condition {unknown[0]!r}; choose from {', '.join(CONDITIONS)}")
        if not self.conditions:
            raise LearningBenchError("no condition to run; pass --condition NAME (repeatable) or none for all")
        for name in ("train_tasks", "heldout_tasks", "rounds", "cycles", "sleep_steps", "sleep_min_examples"):
            if getattr(self, name) < 1:
                raise LearningBenchError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(self, name)}")
        if not 2 <= self.rollouts <= 256:
            raise LearningBenchError(f"--rollouts must be in [2, 256], got {self.rollouts}")
        if not 1 <= self.pass_k <= 64 or not 1 <= self.pass_k_tasks:
            raise LearningBenchError("--pass-k must be in [1, 64] and --pass-k-tasks >= 1")
        for name, top in (("train_tasks", 4096), ("heldout_tasks", 4096), ("cycles", 20), ("rounds", 20),
                          ("sleep_steps", 10_000)):
            if getattr(self, name) > top:
                raise LearningBenchError(f"--{name.replace('_', '-')} must be <= {top}, got {getattr(self, name)}")
        if not 0.0 < self.sleep_lr <= 1.0:
            raise LearningBenchError(f"--sleep-lr must be in (0, 1], got {self.sleep_lr}")
        if self.utility_every < 0:
            raise LearningBenchError(f"--utility-every must be >= 0 (0: off), got {self.utility_every}")
        if self.hint_modes is not None:
            from agents.roles.hints import HintModeError, parse_hint_modes

            try:
                self.hint_modes = list(parse_hint_modes(self.hint_modes))
            except HintModeError as e:
                raise LearningBenchError(str(e)) from None

    @classmethod
    def quick(cls, **overrides: Any) -> LearningBenchConfig:
        """The tiny version the test suite runs (minutes on 2 cores): every condition, one short cycle."""
        base = dict(train_tasks=4, heldout_tasks=4, rollouts=4, rounds=1, cycles=1, sleep_steps=1,
                    sleep_min_examples=1, utility_every=0, max_tokens=24, teacher_max_tokens=32, pass_k=2,
                    pass_k_tasks=2)
        return cls(**{**base, **overrides})


def session_config(name: str, bcfg: LearningBenchConfig, db: Path) -> SessionConfig:
    """The ``arena run`` settings of one learning condition (every condition but base and oracle)."""
    common = dict(
        db=str(db), families=[bcfg.family], train_tasks=bcfg.train_tasks, heldout_tasks=bcfg.heldout_tasks,
        rollouts=bcfg.rollouts, temperature=bcfg.temperature, max_tokens=bcfg.max_tokens, seed=bcfg.seed,
        teacher_max_tokens=bcfg.teacher_max_tokens, concurrency=bcfg.concurrency,
        session=name, utility_tasks=bcfg.utility_tasks, utility_samples=bcfg.utility_samples,
        sleep_steps=bcfg.sleep_steps, sleep_lr=bcfg.sleep_lr, sleep_min_examples=bcfg.sleep_min_examples,
    )
    hints = {"hint_modes": bcfg.hint_modes} if bcfg.hint_modes is not None and name in HINTED else {}
    if name == "lessons":
        return SessionConfig(**common, rounds=bcfg.rounds * bcfg.cycles, cycles=1, hint_modes=[],
                             utility_every=bcfg.utility_every)
    sleep = _SLEEPS.get(name)
    if sleep is not None:
        # with one cycle the previous policy is the base: --sleep-from base trains the same thing
        on_policy = {"sleep_from": "previous"} if sleep.on_policy and bcfg.cycles > 1 else {}
        learning = ({"utility_every": bcfg.utility_every} if sleep.lessons
                    else {"lesson_tokens": 0, "utility_every": 0, "reflect": False})  # in weights only
        return SessionConfig(**common, rounds=bcfg.rounds, cycles=bcfg.cycles, sleep_objective=name, **learning,
                             **on_policy, **(hints if sleep.hints else {"hint_modes": []}))
    if name == "loop":
        return SessionConfig(**common, rounds=bcfg.rounds, cycles=bcfg.cycles, utility_every=bcfg.utility_every,
                             **({"sleep_objective": DEFAULT_SLEEP_OBJECTIVE} if bcfg.cycles == 1 else {}), **hints)
    raise ValueError(f"{name} is not a session condition")


def heldout_passes(store: Any, session_id: int, name: str) -> list[bool]:
    """Per-task passes of a stored evaluation (task order)."""
    from arena.session.cycles import HeldoutEvals

    got = HeldoutEvals(store, session_id, [], 0, 0).stored(name)
    return got.passes if got is not None else []


def sampled_pass(policy: Any, chats: Sequence[Sequence[dict[str, str]]], tasks: Sequence[Any], k: int,
                 temperature: float, max_tokens: int, seed: int) -> dict[str, Any]:
    """Sampled pass@1 and pass@k (unbiased estimator, Chen et al. 2021) over ``k`` samples per task.

    The tasks' requests are issued from 4 threads so the local backend decodes them in shared batches
    (each task keeps its own seed, so the figures do not depend on the batching).
    """
    from concurrent.futures import ThreadPoolExecutor

    from arena.stats import pass_at_k
    from arena.tasks.extract import extract_answer
    from arena.tasks.model import VerifierError
    from arena.tasks.verify import score
    from lessons.outcomes import passes

    def ok(task: Any, text: str) -> bool:
        try:
            return passes(score(task, extract_answer(text)))
        except VerifierError:  # a sample that crashes the verifier does not pass
            return False

    def correct(i: int) -> int:
        outs = policy.sample(chats[i], n=k, temperature=temperature, max_tokens=max_tokens, seed=seed + i)
        return sum(ok(tasks[i], o.text) for o in outs)

    with ThreadPoolExecutor(max_workers=4) as pool:
        counts = list(pool.map(correct, range(len(tasks))))
    p1 = [pass_at_k(k, c, 1) for c in counts]
    pk = [pass_at_k(k, c, k) for c in counts]
    n = len(tasks)
    return {"pass_at_1": round(sum(p1) / n, 4), f"pass_at_{k}": round(sum(pk) / n, 4), "n": n, "k": k}


def _heldout(passes: Sequence[bool]) -> dict[str, Any]:
    """``{"pass_at_1", "n", "ci95"}`` of per-task passes (:func:`arena.evaluation.wilson_summary`)."""
    from arena.evaluation import wilson_summary

    return wilson_summary(sum(passes), len(passes), with_passes=False)


def oracle_examples(tasks: Sequence[Any], encode: Callable[[str], list[int]]) -> list[Any]:
    """Reference-answer targets (a worked sum, then the answer tag) as SFT examples: the ceiling's data."""
    from agents.roles.solver import solver_messages
    from arena.distill.data import DistillExample

    out = []
    for i, t in enumerate(tasks):
        expr = " ".join(re.findall(r"\d+|[-+]", t.question.split("?")[0])) or "the terms"
        text = f"We add the terms in order: {expr} = {t.answer}. So the result is {t.answer}.\n<answer>{t.answer}</answer>"
        out.append(DistillExample("sft", -(i + 1), t.task_key, solver_messages(t.question), encode(text), None, True))
    return out


def run_learning_bench(
    bcfg: LearningBenchConfig, out: Path, console: Any | None = None, log: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Run the conditions of ``bcfg`` and write ``learning.json`` and ``learning.png`` under ``out``.

    Returns:
        ``{"config", "conditions": {name: {...}}, "loadavg_before", "loadavg_after", "wall_s", "files"}``;
        each condition holds ``heldout`` (``{"pass_at_1", "n", "ci95"}``), ``vs_base`` (paired:
        diff, ci95, McNemar p), ``sampled`` (pass@1 and pass@k on ``pass_k_tasks`` tasks),
        ``rollouts``, ``train_tokens``, ``wall_s``, ``curve`` ([rollouts, pass@1, lo, hi] per
        point), ``utility_samples`` (solver samples of the utility A/Bs, not in ``rollouts``), ``sleeps_refused``,
        ``lessons`` (per sleep: lessons trained in, lessons distilled, and the wake's pass@1 without / with
        lessons beside the adapter's without them) and ``error`` (None, or why the condition failed; the other conditions go on). ``learning.json``
        is rewritten after every condition.

    Raises:
        LearningBenchError: ``out`` holds the libraries of an earlier run, or cannot be written.
    """
    from arena.stats import paired_comparison
    from arena.tasks.sources import load_tasks

    say = log or (lambda _msg: None)
    out = out.expanduser().absolute()
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise LearningBenchError(f"cannot write --out {out}: {e.strerror or e}") from None
    if not os.access(out, os.W_OK):
        raise LearningBenchError(f"cannot write --out {out}: permission denied")
    taken = [out / f"{c}.db" for c in CONDITIONS if (out / f"{c}.db").exists()]
    taken += [out / f for f in ("learning.json", "learning.png", "oracle-adapter") if (out / f).exists()]
    if taken:
        raise LearningBenchError(f"{taken[0]} exists from an earlier run; pass another --out or remove it")
    load_before = os.getloadavg()[0]
    t_all = time.perf_counter()
    with contextlib.redirect_stdout(sys.stderr):
        splits = load_tasks([bcfg.family], None, bcfg.train_tasks, bcfg.heldout_tasks, bcfg.seed)
    heldout = list(splits.heldout)
    k_tasks = heldout[: bcfg.pass_k_tasks]
    results: dict[str, dict[str, Any]] = {}
    base_passes: list[bool] = []

    def finish(name: str, passes: list[bool], **extra: Any) -> None:
        rec = {"heldout": _heldout(passes), "vs_base": None, **extra}
        if name != "base" and base_passes and len(passes) == len(base_passes):
            rec["vs_base"] = paired_comparison(passes, base_passes)
        results[name] = rec
        say(f"{name}: held-out pass@1 {rec['heldout']['pass_at_1']} {rec['heldout']['ci95']} "
            f"({rec.get('rollouts', 0)} rollouts, {rec.get('wall_s', 0):.0f} s)")

    def record(**extra: Any) -> dict[str, Any]:
        result = {
            "config": asdict(bcfg),
            "conditions": {c: results[c] for c in CONDITIONS if c in results},
            "loadavg_before": round(load_before, 2),
            "loadavg_after": round(os.getloadavg()[0], 2),
            "wall_s": round(time.perf_counter() - t_all, 1),
            "files": {"json": str(out / "learning.json"), "png": str(out / "learning.png")},
            **extra,
        }
        oracle, loop = results.get("oracle"), results.get("loop")
        if oracle and loop and loop["heldout"]["pass_at_1"] is not None and (oracle["heldout"]["pass_at_1"] or 0) > 0:
            result["loop_over_oracle"] = round(loop["heldout"]["pass_at_1"] / oracle["heldout"]["pass_at_1"], 4)
        tmp = out / "learning.json.tmp"  # after every condition: a crash later loses nothing measured
        tmp.write_text(json.dumps(result, indent=2) + "\n")
        os.replace(tmp, out / "learning.json")
        return result

    order = ["base"] + [c for c in CONDITIONS if c != "base" and c in bcfg.conditions]
    for name in order:
        t0 = time.perf_counter()
        try:
            if name == "base":  # the base model, no lessons: every condition's heldout_before on its empty library
                base_passes, rec = _base(bcfg, heldout, k_tasks, out / "base.db")
                if "base" in bcfg.conditions:
                    finish("base", base_passes, **rec, wall_s=round(time.perf_counter() - t0, 1))
            elif name == "oracle":
                results["oracle"] = _oracle(bcfg, splits, heldout, k_tasks, base_passes, t0, out)
                say(f"oracle: held-out pass@1 {results['oracle']['heldout']['pass_at_1']} (ceiling)")
            else:
                passes, rec = _session_condition(name, bcfg, splits, k_tasks, out, console)
                finish(name, passes, **rec, wall_s=round(time.perf_counter() - t0, 1))
        except KeyboardInterrupt:
            raise
        except Exception as e:  # noqa: BLE001 - one condition's failure must not lose the others' figures
            results[name] = {"heldout": _heldout([]), "vs_base": None, "sampled": None, "rollouts": 0,
                             "train_tokens": 0, "wall_s": round(time.perf_counter() - t0, 1), "curve": [],
                             "error": f"{type(e).__name__}: {' '.join(str(e).split())[:300]}"}
            say(f"{name} failed: {results[name]['error']}")
        record()
    result = record()
    try:
        plot_learning(result, out / "learning.png")
    except Exception as e:  # noqa: BLE001 - the figures are in learning.json already
        result = record(plot_error=f"{type(e).__name__}: {e}")
    return result


def _base(bcfg: LearningBenchConfig, heldout: list[Any], k_tasks: list[Any], db: Path) -> tuple[list[bool], dict[str, Any]]:
    """The base model without lessons: held-out greedy passes and the condition's record."""
    from agents.backends.local import LocalPolicy
    from agents.roles.solver import solver_messages
    from arena.evaluation import evaluate_heldout
    from lessons.library.store import LessonStore

    policy = LocalPolicy()
    try:
        with LessonStore(str(db)) as store:
            passes = evaluate_heldout(store, policy, heldout, False, 0, bcfg.max_tokens).passes
        sampled = sampled_pass(policy, [solver_messages(t.question) for t in k_tasks], k_tasks, bcfg.pass_k,
                               bcfg.temperature, bcfg.max_tokens, bcfg.seed)
    finally:
        policy.close()
    h = _heldout(passes)
    return passes, dict(sampled=sampled, rollouts=0, train_tokens=0, curve=[[0, h["pass_at_1"], *h["ci95"]]], error=None)


def _session_condition(
    name: str, bcfg: LearningBenchConfig, splits: Any, k_tasks: list[Any], out: Path, console: Any | None,
) -> tuple[list[bool], dict[str, Any]]:
    """Run one learning condition as an `arena run` session in its own library; its passes and record."""
    from agents.backends.local import LocalPolicy
    from agents.roles.solver import solver_messages
    from arena.episode.prompt import retrieve_for_task
    from arena.session.cycles import cycle_adapters
    from arena.session.runner import make_roles, run_session
    from lessons.library.store import LessonStore

    cfg = session_config(name, bcfg, out / f"{name}.db")
    with LessonStore(cfg.db) as store:
        roles = make_roles(cfg)
        with contextlib.redirect_stdout(sys.stderr):
            summary = run_session(cfg, store, roles, splits, name, console=console)
        sid = store.get_session(name).id
        per_round = store.rollouts_by_round(sid)
        passes = heldout_passes(store, sid, HELDOUT_AFTER)
        adapters = cycle_adapters(store, name)
        last = adapters[max(adapters)] if adapters else None
        solver = LocalPolicy(adapter=Path(last.path)) if last is not None else roles.solver
        exclude = tuple(d for a in adapters.values() for d in a.distilled)
        chats = [solver_messages(t.question, retrieve_for_task(store, t, cfg.lesson_tokens, solver.count_tokens,
                                                                exclude)[0]) for t in k_tasks]
        sampled = sampled_pass(solver, chats, k_tasks, bcfg.pass_k, bcfg.temperature, bcfg.max_tokens, bcfg.seed)
        utility = store.utility_samples(sid)
        rec = dict(
            sampled=sampled, rollouts=sum(per_round.values()), utility_samples=utility,
            train_tokens=sum(int(a.metrics.get("tokens", 0)) for a in adapters.values()),
            curve=_curve(store, sid, cfg, per_round), error=None, adapters=[a.adapter_id for a in adapters.values()],
            cycles=[c.model_dump(mode="json") for c in summary.cycles], lessons_added=summary.lessons_added,
            lessons_active=summary.lessons_active, reflections_failed=summary.reflections_failed,
            all_fail_rescued=summary.hints.all_fail_rescued,
            role_speed={role: r.model_dump(mode="json") for role, r in summary.role_speed.items()},
            guided_success_rate=summary.hints.guided_success_rate,
            sleeps_refused=[c.sleep_refused for c in summary.cycles if c.sleep_refused],
            lessons=[_lesson_record(a) for _, a in sorted(adapters.items())],
        )
    for p in {id(x): x for x in (solver, roles.solver, roles.teacher)}.values():
        p.close()
    return passes, rec


def _lesson_record(a: Any) -> dict[str, Any]:
    """Per sleep, which lessons it trained in and which it distilled (the ``distilled`` rule of
    :func:`arena.distill.pipeline.distilled_lessons`: the adapter without them matches the wake's solver with them),
    with the three held-out pass@1 figures the rule compares."""
    ev = a.eval or {}
    return {"cycle": a.cycle, "adapter": a.adapter_id, "in_context": list(a.in_context), "distilled": list(a.distilled),
            **{k: (ev.get(k) or {}).get("pass_at_1") for k in ("wake", "wake_lessons", "adapter")}}


def _curve(store: Any, session_id: int, cfg: SessionConfig, per_round: dict[int, int]) -> list[list[float]]:
    """``[rollouts consumed, pass@1, ci lo, ci hi]``: before, then after each cycle (or after the wake without sleep)."""
    from arena.session.cycles import HeldoutEvals, cycle_rounds

    evals = HeldoutEvals(store, session_id, [], 0, 0)
    points = []
    before = evals.stored(HELDOUT_BEFORE)
    if before is not None:
        points.append([0, *_point(before)])
    for c in range(1, cfg.cycles + 1):
        got = evals.stored(eval_name(c, True)) or (evals.stored(HELDOUT_AFTER) if c == cfg.cycles else None)
        if got is None:
            break
        spent = sum(n for r, n in per_round.items() if r <= cycle_rounds(cfg, c)[-1])
        points.append([spent, *_point(got)])
    return points


def _point(e: Any) -> list[float]:
    s = e.summary()
    return [s["pass_at_1"], *s["ci95"]]


def _oracle(bcfg: LearningBenchConfig, splits: Any, heldout: list[Any], k_tasks: list[Any], base_passes: list[bool],
            t0: float, out: Path) -> dict[str, Any]:
    """LoRA on reference answers of the train tasks, ``sleep_steps`` steps, loaded back as a solver: the ceiling."""
    import gc

    from agents.backends.local import LocalPolicy, default_device, training_dtype
    from agents.roles.solver import solver_messages
    from arena.distill.config import TrainConfig
    from arena.distill.trainer import fit
    from arena.evaluation import evaluate_heldout
    from arena.stats import paired_comparison
    from lessons.library.store import LessonStore

    policy = LocalPolicy(dtype=training_dtype(default_device()))
    policy.load()
    examples = oracle_examples(splits.train, policy.encode)
    cfg = TrainConfig(max_steps=bcfg.sleep_steps, lr=bcfg.sleep_lr, seed=bcfg.seed)
    model, res = fit(policy.model, policy.tokenizer, examples, cfg, "sft", eos_id=policy.eos_token_id)  # weight 1 everywhere
    adapter_dir = out / "oracle-adapter"
    model.save_pretrained(str(adapter_dir))
    del model, policy
    gc.collect()
    policy = LocalPolicy(adapter=adapter_dir)  # as `arena run --adapter` loads it
    with LessonStore(str(out / "oracle.db")) as store:  # no lessons: the library stays empty
        passes = evaluate_heldout(store, policy, heldout, False, 0, bcfg.max_tokens).passes
    sampled = sampled_pass(policy, [solver_messages(t.question) for t in k_tasks], k_tasks, bcfg.pass_k,
                           bcfg.temperature, bcfg.max_tokens, bcfg.seed)
    policy.close()
    del policy
    gc.collect()
    h = _heldout(passes)
    return {"heldout": h, "vs_base": paired_comparison(passes, base_passes) if base_passes else None,
            "sampled": sampled, "rollouts": 0, "train_tokens": res.tokens, "wall_s": round(time.perf_counter() - t0, 1),
            "curve": [[0, h["pass_at_1"], *h["ci95"]]], "error": None, "examples": len(examples), "steps": res.steps,
            "ceiling": True}


def plot_learning(result: dict[str, Any], path: Path) -> None:
    """Held-out greedy pass@1 against rollouts consumed, one line per condition with its 95% CI band (matplotlib).

    ``base`` and ``oracle`` (no rollouts) are drawn as horizontal reference lines with their bands.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 4.5), dpi=120)
    conds = result["conditions"]
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    xmax = max([p[0] for c in conds.values() for p in c.get("curve") or []] + [1])
    for i, (name, rec) in enumerate(conds.items()):
        curve, color = [p for p in rec.get("curve") or [] if p[1] is not None], colors[i % len(colors)]  # n = 0: no point
        if not curve:
            continue
        if name in ("base", "oracle"):  # no rollouts: a reference line across the plot
            _, y, lo, hi = curve[0]
            label = f"{name} ({y:.2f})" + (", ceiling" if name == "oracle" else "")
            ax.hlines(y, 0, xmax, linestyles="--" if name == "oracle" else ":", color=color, label=label)
            ax.axhspan(lo, hi, alpha=0.08, color=color)
            continue
        xs, ys, los, his = zip(*curve)
        ax.plot(xs, ys, marker="o", color=color, label=f"{name} ({ys[-1]:.2f})")
        ax.fill_between(xs, los, his, alpha=0.15, color=color)
    n = next((c["heldout"]["n"] for c in conds.values()), 0)
    ax.set_xlabel("rollouts consumed (unguided + guided)")
    ax.set_ylabel("held-out greedy pass@1")
    ax.set_ylim(0, 1)
    ax.set_title(f"arena bench learning: held-out pass@1 (n = {n}), bands: Wilson 95% CI")
    ax.legend(loc="upper left", fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
