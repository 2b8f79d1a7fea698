"""`arena bench judge`: how often the rubric judge agrees with hand-labelled completions.

``arena critic calibrate`` checks the judge against verifiers, which exist only for the fact and
word-problem tasks, and only on whatever the solver happened to write. This benchmark checks it
against completions a person wrote and labelled (``data/judge_fixtures.jsonl``): 48 answers to
the shipped rubric tasks (:data:`arena.tasks.jsonl.BUILTIN_RUBRIC_TASKS`), half ``pass`` (the
Essential criteria met, no pitfall made, and where the task has an answer, the right one), half
``fail`` (a pitfall claim, a missing Essential criterion, an off-topic answer, a wrong number
behind plausible working, a correct-looking answer with a wrong final answer), over all five
families. Every label also holds under the RaR explicit formula at reward 0.5 when each
criterion is decided as its author meant, so a judge that decides every criterion right scores 1.0.

Each completion is graded by the project's :class:`arena.episode.rewards.RubricReward` (explicit
or implicit, the task's own rubric and reference, as a session grades a rollout); the judge passes
it when its reward is at least ``threshold`` (0.5, as ``arena critic calibrate``). Per judge:
accuracy with its 95% Wilson interval (:func:`arena.stats.wilson_interval`) counting ungraded
completions (the judge's reply stayed unusable) as wrong, and among the graded ones; the expected
calibration error of the judge's reward against the labels (:func:`arena.episode.calibration.expected_calibration_error`);
per-family accuracy; wall time and the judge's completion tokens/s. The judges are role specs
(:func:`agents.backends.registry.build_policy`), loaded one at a time and closed after; ``local`` (SmolLM2-135M)
is the named baseline, measured in the same run, and every other judge is compared with it on the
same fixtures (paired difference, exact McNemar p: :func:`arena.stats.paired_comparison`).
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from agents.capabilities import Capability
from agents.policy import BasePolicy, Completion, EndpointFault, Message, Policy, PolicyError, RoleStats
from arena.episode.calibration import expected_calibration_error
from arena.episode.rewards import RubricReward
from arena.stats import paired_comparison, wilson_interval
from arena.tasks.jsonl import BUILTIN_RUBRIC_TASKS, load_tasks_file
from arena.tasks.model import Task
from lessons.jsonl import InvalidJson, NotAnObject, UnreadableFile, read_json_objects

FIXTURES = Path(__file__).resolve().parent / "data" / "judge_fixtures.jsonl"
BASELINE_JUDGE = "local"  # SmolLM2-135M: the judge `arena run --reward rubric-*` uses by default
DEFAULT_JUDGES = (BASELINE_JUDGE, "qwen2.5-coder-1.5b")  # the baseline and the embedded teacher
JUDGE_MODES = ("explicit", "implicit")


class JudgeBenchError(ValueError):
    """Bad input of the judge benchmark (a fixtures line, a threshold); one line for stderr."""


class FixtureLine(BaseModel):
    """One line of a fixtures file: a hand-written completion of a rubric task and its label."""

    model_config = ConfigDict(extra="forbid")
    question: str = Field(description="exactly the question of a task in the rubric tasks file")
    completion: str = Field(description="the student answer judged (ends with <answer>…</answer> where the task has an answer)")
    label: Literal["pass", "fail"] = Field(description="pass: Essential criteria met, no pitfall, the right answer")
    why: str = Field(default="", description="one phrase: why that label")

    @field_validator("question", "completion")
    @classmethod
    def _not_empty(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("must not be empty")
        return v


@dataclass(frozen=True)
class Fixture:
    """A labelled completion with its task (the task's rubric and reference are in ``task.metadata``)."""

    line: int  # line number in the fixtures file, from 1
    task: Task
    completion: str
    passes: bool  # the label: True for "pass"
    why: str


def rubric_tasks(tasks_file: str | Path = BUILTIN_RUBRIC_TASKS) -> dict[str, Task]:
    """Every task of a rubric tasks file, by question (each with its rubric in ``metadata``).

    Raises:
        TaskError: the file cannot be read or has a bad line (from :func:`arena.tasks.jsonl.load_tasks_file`).
    """
    train, heldout = load_tasks_file(tasks_file, n_train=1_000_000, n_heldout=1, seed=0)  # the split is irrelevant here
    return {t.question: t for t in [*train, *heldout] if t.metadata.get("rubric")}


def load_fixtures(path: str | Path = FIXTURES, tasks_file: str | Path = BUILTIN_RUBRIC_TASKS) -> list[Fixture]:
    """Read and validate a fixtures file: one :class:`FixtureLine` per non-blank line.

    Args:
        path: the JSONL fixtures.
        tasks_file: the rubric tasks the questions must come from.

    Returns:
        The fixtures in file order.

    Raises:
        JudgeBenchError: an unreadable or empty file, or a bad line — not JSON, an unknown or
            missing field, a label other than pass / fail, a question that is no task of
            ``tasks_file`` — as one line ``PATH:LINE: what is wrong``.
        TaskError: ``tasks_file`` itself is bad.
    """
    tasks = rubric_tasks(tasks_file)
    out: list[Fixture] = []
    try:
        for lineno, obj in read_json_objects(path):
            try:
                row = FixtureLine.model_validate(obj)
            except ValidationError as e:
                err = e.errors()[0]
                loc = ".".join(str(p) for p in err["loc"])
                msg = str(err["msg"]).removeprefix("Value error, ")
                raise JudgeBenchError(f"{path}:{lineno}: field {loc!r}: {msg}" if loc else f"{path}:{lineno}: {msg}") from None
            task = tasks.get(row.question)
            if task is None:
                raise JudgeBenchError(f"{path}:{lineno}: question {row.question[:60]!r} is not a task of {tasks_file}")
            out.append(Fixture(lineno, task, row.completion, row.label == "pass", row.why))
    except UnreadableFile as e:
        raise JudgeBenchError(f"cannot read fixtures file {path}: {getattr(e.cause, 'strerror', None) or e.cause}") from None
    except InvalidJson as e:
        raise JudgeBenchError(f"{path}:{e.lineno}: invalid JSON: {e.cause.msg} (column {e.cause.colno})") from None
    except NotAnObject as e:
        raise JudgeBenchError(f"{path}:{e.lineno}: expected a JSON object, got {type(e.value).__name__}") from None
    if not out:
        raise JudgeBenchError(f"fixtures file {path} is empty: expected one {{\"question\", \"completion\", \"label\"}} object per line")
    return out


class _CountingJudge(BasePolicy):
    """A judge policy that adds up the completion tokens it sampled; every declared member is the wrapped policy's."""

    def __init__(self, inner: Policy) -> None:
        self.inner = inner
        self.completion_tokens = 0

    @property
    def name(self) -> str:  # type: ignore[override]
        return self.inner.name

    @property
    def capabilities(self) -> frozenset[Capability]:  # type: ignore[override]
        return self.inner.capabilities

    @property
    def context_window(self) -> int | None:  # type: ignore[override]
        return self.inner.context_window

    @property
    def stats(self) -> RoleStats | None:  # type: ignore[override]
        return self.inner.stats

    @property
    def adapter(self) -> Path | None:  # type: ignore[override]
        return self.inner.adapter

    @property
    def dtype(self) -> Any:  # type: ignore[override]
        return self.inner.dtype

    def sample(self, messages: Sequence[Message], n: int = 1, **kwargs: Any) -> list[Completion]:
        """The wrapped policy's :meth:`~agents.policy.Policy.sample` (prefill / json_schema passed on), its tokens counted."""
        out = self.inner.sample(messages, n=n, **kwargs)
        self.completion_tokens += sum(c.completion_tokens for c in out)
        return out

    def logprobs(self, messages: Sequence[Message], completion: str) -> list[float]:
        return self.inner.logprobs(messages, completion)

    def count_tokens(self, text: str) -> int:
        return self.inner.count_tokens(text)

    def load(self) -> None:
        self.inner.load()

    def close(self) -> None:
        self.inner.close()


def check_judge_args(mode: str, threshold: float) -> None:
    """Refuse a mode other than explicit / implicit and a threshold outside [0, 1] (JudgeBenchError, one line)."""
    if mode not in JUDGE_MODES:
        raise JudgeBenchError(f"--mode must be explicit or implicit, not {mode!r}")
    if not 0.0 <= threshold <= 1.0:
        raise JudgeBenchError(f"--threshold must be in [0, 1], got {threshold}")


def _rate(k: int, n: int) -> dict[str, Any]:
    lo, hi = wilson_interval(k, n)
    return {"value": round(k / n, 4) if n else None, "n": n, "ci95": [round(lo, 4), round(hi, 4)]}


def judge_accuracy(
    fixtures: Sequence[Fixture],
    judge: Policy,
    mode: str = "explicit",
    threshold: float = 0.5,
    bins: int = 10,
    max_tokens: int = 256,
    seed: int = 0,
) -> dict[str, Any]:
    """Grade every fixture with ``judge`` through :class:`RubricReward` and score it against the labels.

    Args:
        fixtures: the labelled completions (:func:`load_fixtures`).
        judge: the judge's policy (already built; it is not closed here).
        mode: ``"explicit"`` (per-criterion verdicts) or ``"implicit"`` (one 1–10 rating), RaR §3.
        threshold: the judge passes a completion when its reward in [0, 1] is at least this.
        bins: equal-width bins of the expected calibration error.
        max_tokens: the judge's reply cap, tokens (a session's ``--judge-max-tokens``).
        seed: seed of the judge's retry sampling (fixture i uses ``seed + i``; first attempts are greedy).

    Returns:
        ``{"n", "graded", "ungraded", "accuracy": {"value", "n", "ci95"}`` (ungraded counted wrong),
        ``"accuracy_graded"`` (the same over graded fixtures), ``"ece"`` (over graded; None with none),
        ``"judge_pass_rate"`` and ``"label_pass_rate"`` (over graded), ``"confusion": {"tp", "fp", "tn", "fn"}``
        (positive = pass), ``"families": {family: {"n", "graded", "accuracy", "accuracy_graded"}}``,
        ``"wall_s"``, ``"judge_completion_tokens"``, ``"judge_tokens_per_s"``, ``"rows"``}`` — one row per
        fixture: ``line``, ``family``, ``label``, ``reward`` (None: ungraded), ``judge_pass``, ``correct``, ``error``.

    Raises:
        JudgeBenchError: an unknown mode, a threshold outside [0, 1], or no fixtures.
    """
    check_judge_args(mode, threshold)
    if not fixtures:
        raise JudgeBenchError("no fixtures to judge")
    counting = _CountingJudge(judge)
    reward = RubricReward(mode, counting, max_tokens=max_tokens)  # the task's own rubric (task_rubric)
    rows: list[dict[str, Any]] = []
    t0 = time.perf_counter()
    for i, f in enumerate(fixtures):
        r, error = None, None
        try:
            g = reward.grade(f.task, [Completion(text=f.completion)], session_id=0, seed=seed + i)[0]
            r = g["reward"] if g.get("graded", True) else None
            error = g.get("judge_error") if r is None else None
        except EndpointFault as e:  # an endpoint judge's fault: this fixture is ungraded
            error = f"{e.kind}: {e}"
        judge_pass = None if r is None else r >= threshold
        rows.append({"line": f.line, "family": f.task.family, "label": "pass" if f.passes else "fail",
                     "reward": None if r is None else round(r, 4), "judge_pass": judge_pass,
                     "correct": judge_pass is not None and judge_pass == f.passes, "error": error})
    wall = time.perf_counter() - t0

    graded = [(row, f) for row, f in zip(rows, fixtures) if row["reward"] is not None]
    n_correct = sum(row["correct"] for row in rows)
    conf = {"tp": 0, "fp": 0, "tn": 0, "fn": 0}
    for row, f in graded:
        conf[("t" if row["judge_pass"] == f.passes else "f") + ("p" if row["judge_pass"] else "n")] += 1
    families: dict[str, dict[str, Any]] = {}
    for fam in sorted({f.task.family for f in fixtures}):
        fam_rows = [row for row in rows if row["family"] == fam]
        fam_graded = [row for row in fam_rows if row["reward"] is not None]
        k = sum(row["correct"] for row in fam_rows)
        families[fam] = {"n": len(fam_rows), "graded": len(fam_graded), "accuracy": round(k / len(fam_rows), 4),
                         "accuracy_graded": round(k / len(fam_graded), 4) if fam_graded else None}
    tokens = counting.completion_tokens
    return {
        "n": len(rows),
        "graded": len(graded),
        "ungraded": len(rows) - len(graded),
        "accuracy": _rate(n_correct, len(rows)),
        "accuracy_graded": _rate(n_correct, len(graded)),
        "ece": round(expected_calibration_error([row["reward"] for row, _ in graded], [f.passes for _, f in graded], bins), 4)
        if graded else None,
        "judge_pass_rate": round(sum(row["judge_pass"] for row, _ in graded) / len(graded), 4) if graded else None,
        "label_pass_rate": round(sum(f.passes for _, f in graded) / len(graded), 4) if graded else None,
        "confusion": conf,
        "families": families,
        "wall_s": round(wall, 2),
        "judge_completion_tokens": tokens,
        "judge_tokens_per_s": round(tokens / wall, 2) if wall > 0 and tokens else None,
        "rows": rows,
    }


def bench_judges(
    specs: Sequence[str],
    fixtures: Sequence[Fixture],
    mode: str = "explicit",
    threshold: float = 0.5,
    make: Callable[[str], Policy] | None = None,
    log: Callable[[str], None] | None = None,
    **kwargs: Any,
) -> dict[str, Any]:
    """:func:`judge_accuracy` of each judge spec, one model in memory at a time, and each against the baseline.

    Args:
        specs: role specs (``local``, ``qwen2.5-coder-1.5b``, ``openai:MODEL``, ``llamacpp:PATH``), in order.
        fixtures: the labelled completions.
        mode, threshold: as :func:`judge_accuracy` (``kwargs`` go there too).
        make: spec → policy (default :func:`agents.backends.registry.build_policy`); tests pass fakes.
        log: progress lines (one per judge), or None.

    Returns:
        ``{"n", "mode", "threshold", "baseline", "judges": {spec: result}, "vs_baseline": {spec: paired}}``:
        a judge that could not be built or failed has ``{"error": one line}`` instead of figures;
        ``vs_baseline`` holds :func:`arena.stats.paired_comparison` of each other judge's correct
        fixtures (A) against the baseline's (B), present when both were measured.

    Raises:
        JudgeBenchError: as :func:`judge_accuracy` (before any model is loaded).
    """
    check_judge_args(mode, threshold)
    if make is None:
        from agents.backends.registry import build_policy as make
    results: dict[str, dict[str, Any]] = {}
    for spec in dict.fromkeys(specs):  # a spec given twice is measured once
        if log:
            log(f"judge {spec}: loading")
        policy = None
        try:
            t0 = time.perf_counter()
            policy = make(spec)
            policy.load()  # outside the timed judging
            load_s = time.perf_counter() - t0
            results[spec] = {**judge_accuracy(fixtures, policy, mode, threshold, **kwargs), "load_s": round(load_s, 2)}
        except (PolicyError, EndpointFault, RuntimeError, OSError) as e:  # recorded; the other judges still run
            results[spec] = {"error": " ".join(str(e).split()) or type(e).__name__}
        finally:
            if policy is not None:
                policy.close()
            del policy
            gc.collect()
        if log:
            r = results[spec]
            log(f"judge {spec}: " + (f"error: {r['error']}" if "error" in r else
                                      f"accuracy {r['accuracy']['value']:.3f}, {r['ungraded']} ungraded, {r['wall_s']:.0f} s"))
    vs: dict[str, Any] = {}
    base = results.get(BASELINE_JUDGE)
    if base is not None and "error" not in base:
        for spec, r in results.items():
            if spec != BASELINE_JUDGE and "error" not in r:
                vs[spec] = paired_comparison([row["correct"] for row in r["rows"]], [row["correct"] for row in base["rows"]])
    return {"n": len(fixtures), "mode": mode, "threshold": threshold, "baseline": BASELINE_JUDGE,
            "judges": results, "vs_baseline": vs}


__all__ = ["BASELINE_JUDGE", "DEFAULT_JUDGES", "FIXTURES", "Fixture", "FixtureLine", "JudgeBenchError",
           "bench_judges", "check_judge_args", "judge_accuracy", "load_fixtures", "rubric_tasks"]
