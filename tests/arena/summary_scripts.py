"""Scripted `arena run --json` sessions that pin the summary's JSON (tests/arena/test_summary_json.py).

Each scenario runs the real ``arena run`` command in this process (typer's ``CliRunner``) with
scripted fake policies in place of the models (``make_roles`` patched) and a fixed wall clock
(``time.perf_counter`` of the runner patched), so its stdout is the same on every run and every
machine: no model is loaded, nothing is timed. Together the scenarios reach every key of the
summary, every optional one included:

- ``frontier``: a reasoning-gym family under ``--curriculum frontier`` with proposals, answer hints that
  rescue all-fail groups, a lesson and utility checks, an endpoint fault on one held-out task, and
  role speeds (fakes with fixed counters);
- ``rubric``: rubric rewards (``rubric-explicit``) with OnlineRubrics updates
  (:mod:`rubric_scripts`): grading counts, hack flags, critic calibration, held-out mean rewards, and
  the reason the utility A/B was skipped;
- ``cycles``: two wake–sleep cycles whose sleeps are refused (too few examples), plan hints that
  every attempt leaks (refused plans by reason), and a train task whose every rollout faults.

``tests/arena/data/summary/make_fixtures.py`` writes each scenario's stdout next to it, with
``--json`` and without (the table); the fixtures committed there were written by the code before
the summary became a typed model.
"""

from __future__ import annotations

import json
import re
import signal
import types
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from unittest import mock

from agents.backends.fake import FakePolicy
from agents.policy import EndpointFault, RoleStats
from agents.roles.hints import PLAN_SYSTEM
from agents.roles.proposer import PROPOSER_SYSTEM, chain_sum_reference
from arena.episode.context import Roles
from arena.tasks.sources import load_tasks

EASY = "chain_sum:min_terms=2,max_terms=2,min_digits=1,max_digits=2"
LESSON = "Add the ones digits first, then the tens, and carry when a column passes nine."
WALL_START, WALL_END = 1000.0, 1042.25  # the fixed clock: every scenario's wall_time_s is 42.2 s
SCENARIOS = ("frontier", "rubric", "cycles")


class TimedFake(FakePolicy):
    """A :class:`FakePolicy` with fixed speed counters (``stats``), so ``role_speed`` has figures to report.

    Args:
        responder: ``(messages, i) -> text``.
        name: the policy's name.
        calls, prompt_tokens, completion_tokens: the counters reported.
        seconds: busy seconds reported.
    """

    def __init__(self, responder, name: str, calls: int, prompt_tokens: int, completion_tokens: int,
                 seconds: float) -> None:
        super().__init__(responder, name)
        self.stats = RoleStats()
        self.stats.calls, self.stats.prompt_tokens = calls, prompt_tokens
        self.stats.completion_tokens = completion_tokens
        self.stats.seconds = seconds


def _clock() -> types.SimpleNamespace:
    """A stand-in for the runner's ``time`` module: the first ``perf_counter()`` is the start, every later the end."""
    ticks = iter([WALL_START])
    return types.SimpleNamespace(perf_counter=lambda: next(ticks, WALL_END))


@contextmanager
def _patched(roles: Roles) -> Iterator[None]:
    """``make_roles`` gives ``roles``, the runner's clock is fixed; the CLI's SIGTERM handler is undone after."""
    import arena.session.runner as runner

    handler = signal.getsignal(signal.SIGTERM)
    try:
        with mock.patch.object(runner, "make_roles", lambda cfg: roles), mock.patch.object(runner, "time", _clock()):
            yield
    finally:
        signal.signal(signal.SIGTERM, handler)


def run_cli(args: list[str], roles: Roles) -> str:
    """``arena ARGS`` in this process with ``roles`` for the models; its stdout (a 200-column terminal, no colour).

    Raises:
        AssertionError: the command did not exit 0 (its stderr in the message).
    """
    from typer.testing import CliRunner

    from arena.cli import app

    with _patched(roles):
        result = CliRunner().invoke(app, args, env={"COLUMNS": "200", "FORCE_COLOR": None, "TTY_COMPATIBLE": None})
    assert result.exit_code == 0, (result.exit_code, result.stderr[-3000:], result.exception)
    return result.stdout


# --------------------------------------------------------------------------- frontier


def _frontier(tmp: Path, json_out: bool) -> str:
    args = ["run", "--db", str(tmp / "arena.db"), "--family", EASY, "--train-tasks", "3", "--heldout-tasks", "4",
            "--rounds", "3", "--rollouts", "4", "--seed", "0", "--curriculum", "frontier", "--proposals", "1",
            "--utility-every", "3", "--utility-tasks", "2", "--session", "frontier", *(["--json"] if json_out else [])]
    faulty = load_tasks([EASY], None, 3, 4, 0).heldout[0].question  # the endpoint never answers this held-out task

    def solver(messages, i):
        q = messages[-1]["content"]
        if q == faulty:
            raise EndpointFault("scripted: no choices", "empty_choices")
        ref, _ = chain_sum_reference(q.split("\n")[0])
        digits = max(len(n) for n in re.findall(r"\d+", q.split("\n")[0].split(":", 1)[1]))
        right = "Hint" in q or (int(ref) % 3 != 0 and i < {1: 4, 2: 3, 3: 2}.get(digits, 0))
        return f"<answer>{ref if right else int(ref) + 1}</answer>"

    def teacher(messages, i):
        if messages[0]["content"] == PROPOSER_SYSTEM:
            parent = re.search(r"^Task: (.*)$", messages[-1]["content"], re.MULTILINE).group(1)
            ref, _ = chain_sum_reference(parent)
            return json.dumps({"question": parent.replace(" =", " + 1 ="), "justification": f"{ref} + 1",
                               "answer": str(int(ref) + 1)})
        return json.dumps({"analysis": "Carry matters.", "add": [{"text": LESSON, "scope": "chain_sum"}], "tags": []})

    roles = Roles(TimedFake(solver, "local:solver", 57, 9120, 1433, 3.87),
                  TimedFake(teacher, "qwen2.5-coder-1.5b", 12, 8800, 950, 20.5))
    return run_cli(args, roles)


# --------------------------------------------------------------------------- rubric


def _rubric(tmp: Path, json_out: bool) -> str:
    import rubric_scripts

    path = rubric_scripts.write_tasks(tmp / "sky.jsonl")
    with path.open("a") as f:  # a family with a rubric and no verifiable answer: its lessons get no utility A/B
        f.writelines(json.dumps({"question": f"Poem {i}: describe the sky.", "family": "poem",
                                 "rubric": rubric_scripts.RUBRIC}) + "\n" for i in range(4))
    args = ["run", "--db", str(tmp / "arena.db"), "--tasks-file", str(path), "--reward", "rubric-explicit",
            "--critic", "local", "--train-tasks", "2", "--heldout-tasks", "2", "--rounds", "2", "--rollouts", "4",
            "--seed", "1", "--online-rubrics", "2", "--utility-every", "2", "--session", "rubric",
            *(["--json"] if json_out else [])]
    return run_cli(args, rubric_scripts.roles())


# --------------------------------------------------------------------------- cycles


def _cycles(tmp: Path, json_out: bool) -> str:
    path = tmp / "adding.jsonl"
    path.write_text("".join(json.dumps({"question": f"What is {i} + {i + 1}?", "answer": str(2 * i + 1)}) + "\n"
                            for i in range(8)))
    args = ["run", "--db", str(tmp / "arena.db"), "--tasks-file", str(path), "--train-tasks", "3",
            "--heldout-tasks", "2", "--rounds", "1", "--rollouts", "4", "--cycles", "2", "--sleep-objective", "sft",
            "--sleep-min-examples", "8", "--hint-mode", "plan", "--utility-every", "0", "--max-tokens", "16",
            "--session", "cycles", *(["--json"] if json_out else [])]
    train = load_tasks([], path, 3, 2, 0).train
    hopeless, faulty = train[1].question, train[2].question  # every rollout wrong; every rollout an endpoint fault

    def solver(messages, i):
        q = messages[-1]["content"]
        if q == faulty:
            raise EndpointFault("scripted: body is not JSON", "not_json")
        a, b = map(int, re.findall(r"\d+", q.split("\n")[0])[:2])
        return f"<answer>{a + b if (q != hopeless and i < 2) else a + b + 7}</answer>"

    plans = iter(range(10_000))

    def teacher(messages, i):
        if messages[0]["content"] == PLAN_SYSTEM:  # a plan that states the result, or a number the task lacks
            a, b = map(int, re.findall(r"\d+", messages[-1]["content"].split("\n")[0])[:2])
            return f"Add {a} and {b} to get {a + b}." if next(plans) % 3 != 1 else f"Add {a} and {b}, then add 1000."
        return json.dumps({"analysis": "x", "add": [], "tags": []})

    return run_cli(args, Roles(FakePolicy(solver, "solver"), FakePolicy(teacher, "teacher")))


def run_scenario(name: str, tmp: Path, json_out: bool = True) -> str:
    """The stdout of scenario ``name`` (one of :data:`SCENARIOS`), run in the empty folder ``tmp``.

    Args:
        name: the scenario.
        tmp: an empty folder for its library and task file.
        json_out: ``--json`` (the summary object); False: the end-of-session table.

    Raises:
        KeyError: an unknown scenario.
    """
    return {"frontier": _frontier, "rubric": _rubric, "cycles": _cycles}[name](tmp, json_out)
