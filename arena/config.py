"""`SessionConfig`: every setting of an `arena run` session, with defaults, units and cross-field checks."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from agents.backends.registry import UnknownSpec, kinds, normalise_spec, parse_spec, spec_capabilities, spec_choices
from agents.backends.teacher_files import EMBEDDED_TEACHER  # stdlib only: no model is imported here
from agents.capabilities import Capability, describe_capabilities, missing_capabilities
from arena.objectives import get_objective, objective_names, specs  # the objective registry: no torch either
from lessons.library.records import DEFAULT_LEASE_TTL_S

# chain_sum with 2 terms of 1–2 digits: the embedded 135M model's pass@8 is well above 0 here
# (and pass@1 far below 1), so a group mixes successes and failures and reflection has signal.
DEFAULT_FAMILY = "chain_sum:min_terms=2,max_terms=2,min_digits=1,max_digits=2"

# The sleep objective of `arena run --cycles C` (C > 1) when --sleep-objective is not given: context
# distillation of lessons-in-context successes plus Guide's importance-weighted guided successes.
# Kept on `arena bench learning` over two seeds (bench/RESULTS.md, session 12): no objective above it
# (level with grpo at seed 0, above it at seed 1, gaps within the spread between trainings), above sft,
# and the highest sampled pass@1 at both seeds.
DEFAULT_SLEEP_OBJECTIVE = "distill"
AUTO_SLEEP_MIN_EPISODES = 32  # `--sleep-objective auto` sleeps only after a wake of at least this many episodes

# A role's model is a role spec of agents.backends.registry: the embedded 135M model in torch (local), an
# OpenAI-compatible endpoint (openai:MODEL), a GGUF run in process by llama.cpp (llamacpp:PATH), or the embedded
# 1.5B teacher (generation-only roles). What each role needs of its backend, as capabilities:
SOLVER_NEEDS = (Capability.SAMPLE, Capability.SAMPLE_LOGPROBS)  # every session: its rollouts carry π_old
ADAPTER_NEEDS = (Capability.TRAIN_ADAPTER,)  # --adapter loads a LoRA into the solver's weights
ROLE_CHOICES = spec_choices()  # "'local', 'openai:MODEL', 'llamacpp:PATH' or 'qwen2.5-coder-1.5b'"
DEFAULT_TEACHER = EMBEDDED_TEACHER  # teacher, rubric judge and proposer: Qwen2.5-Coder-1.5B-Instruct in llama.cpp
REWARDS = ("verifier", "rubric-explicit", "rubric-implicit")
# The utility A/B of `arena run` (and of `arena bench learning`, which must measure what a run does): every 16
# episodes, each lesson on 96 tasks of its family, greedy, against the active set (bench/RESULTS.md, session 16:
# its interval is about ±0.07, the size of a helpful lesson's effect). SessionConfig's own defaults stay small
# for tests that build one directly.
RUN_UTILITY_EVERY, RUN_UTILITY_TASKS, RUN_UTILITY_SAMPLES = 16, 96, 1
MIN_LEASE_TTL_S = 2.0  # the shortest `--lease-ttl`: a heartbeat every 0.5 s, so a renewal has 1.5 s before the lease lapses
# The longest lease `--lease-ttl` takes (a week): after a crash, --resume waits this long at most; beyond it a
# datetime overflows (inf, 1e12).
MAX_LEASE_TTL_S = 7 * 24 * 3600.0


class ConfigError(ValueError):
    """An invalid combination of settings; the message says how to fix it (one line)."""


def check_db(db: str) -> str:
    """Refuse an in-memory database, which would silently lose the session; return ``db`` otherwise."""
    if db.strip() in {"", ":memory:", "sqlite://", "sqlite:///:memory:"}:
        raise ValueError("an in-memory database would lose the session; give a file path or a server URL")
    return db


def check_role_spec(spec: str, others: str = "") -> str:
    """A teacher, critic or proposer spec, normalised as stored (a ``llamacpp:`` PATH made absolute: a resume may run
    from another directory).

    Args:
        spec: the role spec.
        others: the role's own words that are no spec, quoted and followed by ", " (``"'verifier', "``), for the message.

    Raises:
        ValueError: ``must be 'local', 'openai:MODEL', 'llamacpp:PATH' or 'qwen2.5-coder-1.5b', got 'gpt4'``.
    """
    try:
        return normalise_spec(spec)
    except UnknownSpec:
        raise ValueError(f"must be {others}{ROLE_CHOICES}, got {spec!r}") from None


def check_solver_spec(spec: str) -> str:
    """A solver spec of a kind with :data:`SOLVER_NEEDS` (``local`` or ``openai:MODEL``), returned unchanged.

    Raises:
        ValueError: an unknown spec (``must be 'local' or 'openai:MODEL' (the solver is scored and trained), got
            'gpt4'``), or one whose backend lacks a capability, named (``a session (its rollouts are scored and
            trained on) needs a solver that returns the log-probs of the tokens it samples: `llamacpp:x` cannot; …``).
    """
    try:
        parsed = parse_spec(spec)
    except UnknownSpec:
        raise ValueError(f"must be {spec_choices(SOLVER_NEEDS)} (the solver is scored and trained), got {spec!r}") from None
    gap = missing_capabilities(parsed.capabilities, SOLVER_NEEDS)
    if gap:
        raise ValueError(f"a session (its rollouts are scored and trained on) needs a solver that {describe_capabilities(gap)}: "
                         f"`{spec}` cannot; use {spec_choices(SOLVER_NEEDS)}")
    return spec


def sleep_needs(objective: str) -> list[Capability]:
    """What a sleep with ``objective`` needs of the solver's backend (its registry spec's ``needs``), in enum order.

    Raises:
        ValueError: an unknown objective.
    """
    needs = get_objective(objective).needs
    return [c for c in Capability if c in needs]


def solver_capability_gap(solver: str, needed: Sequence[Capability], subject: str) -> str | None:
    """Why ``solver`` cannot serve ``subject`` (one line naming the spec and the missing capabilities), or None.

    Args:
        solver: a valid solver spec (:func:`check_solver_spec`).
        needed: what ``subject`` needs of the solver's backend (:func:`sleep_needs`, :data:`ADAPTER_NEEDS`).
        subject: the start of the message: ``"--adapter"`` gives ``--adapter needs the local solver, one that has
            local weights a LoRA adapter trains on (got --solver openai:m)``.
    """
    gap = missing_capabilities(spec_capabilities(solver), needed)
    if not gap:
        return None
    able = " or ".join(k.form for k in kinds(needed))
    return f"{subject} needs the {able} solver, one that {describe_capabilities(gap)} (got --solver {solver})"


def check_lease_ttl(ttl_s: float) -> None:
    """Refuse a lease TTL outside [:data:`MIN_LEASE_TTL_S`, :data:`MAX_LEASE_TTL_S`] seconds, NaN and infinity included.

    The floor: the heartbeat renews every quarter of the TTL, each renewal a database write; with a
    TTL of a millisecond (a new user's trial) the lease lapsed between beats and a second
    ``--resume`` took a live session over.

    Raises:
        ConfigError: with the one line the CLI prints.
    """
    if not MIN_LEASE_TTL_S <= ttl_s <= MAX_LEASE_TTL_S:  # NaN fails both comparisons
        raise ConfigError(f"--lease-ttl must be at least {MIN_LEASE_TTL_S:g} and at most {MAX_LEASE_TTL_S:g} seconds, "
                          f"got {ttl_s:.12g}")


class SessionConfig(BaseModel):
    """Settings of one self-play session (stored with the session, so a resume reuses them)."""

    model_config = ConfigDict(extra="forbid")

    db: str = "arena.db"  # SQLAlchemy URL or SQLite file path of the lesson library
    families: list[str] = Field(default_factory=lambda: [DEFAULT_FAMILY])  # reasoning-gym specs "name:key=value,..."
    tasks_file: Path | None = None  # JSONL task file ({"question", "answer"} per line)
    train_tasks: int = 4  # train tasks per family (one episode each per round)
    heldout_tasks: int = 32  # held-out tasks per family (pass@1 before/after)
    rounds: int = 2  # passes over the train tasks
    rollouts: int = 8  # group size k per episode
    temperature: float = 0.8  # solver sampling temperature for rollouts
    max_tokens: int = 96  # solver completion cap, tokens
    teacher_max_tokens: int = 320  # teacher reflection cap, tokens (the 1.5B teacher's replies under the schema: ~60–250)
    lesson_tokens: int = 512  # budget of the lessons section in the solver prompt, solver tokens
    library_tokens: int = 4096  # budget of all live (candidate + active) lessons, solver tokens; enforced per op
    utility_every: int = 4  # utility A/B of lessons after every N episodes (candidates become active on it); 0: never
    utility_lessons: int = 2  # lessons measured per utility check
    utility_tasks: int = 4  # tasks per lesson in a utility A/B: train tasks, topped up with validation tasks (arena.session.utility)
    utility_samples: int = 4  # completions per task and arm in a utility A/B: 1 greedy, more sampled at temperature
    success_threshold: float = 1.0  # reward at which a rollout counts as a success; all-fail groups get hints
    hint_modes: list[str] = Field(default_factory=lambda: ["feedback", "answer"])  # plan / feedback / answer; [] disables hints
    seed: int = 0  # seeds task draws and sampling
    session: str | None = None  # session name; default run-YYYYMMDD-HHMMSS
    solver: str = "local"  # "local" or "openai:MODEL"
    critic: str = "verifier"  # "verifier" (no model) or a model: "qwen2.5-coder-1.5b", "local", "openai:MODEL", "llamacpp:PATH"
    teacher: str = DEFAULT_TEACHER  # "qwen2.5-coder-1.5b" (embedded), "local", "openai:MODEL" or "llamacpp:PATH"
    request_timeout_s: float = 600.0  # per-request timeout of OpenAI-compatible endpoints, seconds (a one-slot CPU server is slow)
    teacher_in_flight: int = 1  # teacher / judge / proposer requests in flight at once per endpoint (a local server has one slot)
    solver_in_flight: int = 8  # solver requests in flight at once per endpoint
    lease_ttl_s: float = DEFAULT_LEASE_TTL_S  # seconds the session's lease lasts without a heartbeat (a resume keeps it)
    reward: str = "verifier"  # one of REWARDS: the task's verifier, or a rubric graded by the --critic judge (RaR)
    judge_max_tokens: int = 256  # rubric judge reply cap, tokens
    online_rubrics: int = 0  # every N episodes, add criteria that separate current from reference rollouts; 0: off
    include_flagged: bool = False  # let reward-hack-flagged rollouts reach reflection (excluded by default)
    adapter: str | None = None  # LoRA adapter directory of the local solver (arena distill); its distilled lessons leave the prompt
    sampling_dtype: str | None = None  # what the local solver samples in (fp32, bf16); set when the session starts, a resume must match; None: API solver or older session
    # self-play curriculum (arena.session.curriculum)
    curriculum: Literal["fixed", "frontier"] = "fixed"  # fixed: train difficulty never moves; frontier: band control per family
    target_pass: tuple[float, float] = (0.3, 0.7)  # band of train pass@1 per family and round that frontier keeps
    proposer: str = "teacher"  # who writes proposed tasks: "teacher" (the teacher's policy) or any teacher spec
    proposals: int | None = None  # proposed tasks per family per round; None: 2 with frontier, 0 with fixed
    proposal_samples: int = 4  # independent samples that confirm a proposal's answer where no verifier exists
    proposal_agreement: float = 0.75  # share of those samples that must agree with the proposed answer
    concurrency: int = 8  # episodes of a round in flight at once (their model calls are batched together)
    reflect: bool = True  # the teacher reflects on groups and writes lessons; False: weight-only learning (no lessons)
    reflect_on: Literal["mixed", "all"] = "mixed"  # mixed: only groups with a success and a failure, guided rollouts included (a contrast); all: every group
    reflections_per_round: int = 4  # the teacher's budget per round, spent in task order (~10–20 s each for the 1.5B teacher on 2 cores); 0: no limit
    # wake–sleep cycles (arena.session.cycles): each cycle is `rounds` rounds of episodes, then a sleep (distillation)
    cycles: int = 1  # wake–sleep cycles; 1 without a sleep objective is a plain session
    sleep_objective: str | None = None  # arena distill objective of each sleep; None: no sleep with 1 cycle, DEFAULT_SLEEP_OBJECTIVE with more
    sleep_from: Literal["base", "previous"] = "base"  # base: a fresh LoRA on every cycle's data so far (STaR); previous: continue the last adapter on this cycle's data
    sleep_epochs: float = 4.0  # passes over the sleep's examples (when sleep_steps is 0)
    sleep_steps: int = 28  # optimizer steps per sleep (batch 8), measured on the default run's wakes (bench/RESULTS.md); 0: from sleep_epochs
    sleep_lr: float = 5e-4  # peak learning rate of a sleep (AdamW, warm-up then cosine)
    sleep_min_examples: int = 16  # a sleep with fewer training examples is refused (it could only move style)
    sleep_min_guided_log_ratio: float = -1.0  # guided successes below this mean log-ratio (nats/token) are not trained
    sleep_kl_coef: float = 0.0  # grpo / guide-grpo sleeps: β of the per-token KL to the base model (0: none, as Guide)

    @field_validator("tasks_file")
    @classmethod
    def _absolute(cls, v: Path | None) -> Path | None:
        return v.expanduser().absolute() if v is not None else None  # a resume may run from another directory

    @field_validator("db")
    @classmethod
    def _db(cls, v: str) -> str:
        return check_db(v)

    @field_validator("solver")
    @classmethod
    def _solver(cls, v: str) -> str:
        return check_solver_spec(v)

    @field_validator("teacher")
    @classmethod
    def _role(cls, v: str) -> str:
        return check_role_spec(v)

    @field_validator("critic")
    @classmethod
    def _critic(cls, v: str) -> str:
        return v if v == "verifier" else check_role_spec(v, "'verifier', ")

    @field_validator("reward")
    @classmethod
    def _reward(cls, v: str) -> str:
        if v not in REWARDS:
            raise ValueError(f"must be one of {', '.join(REWARDS)}, got {v!r}")
        return v

    @field_validator("proposer")
    @classmethod
    def _proposer(cls, v: str) -> str:
        return v if v == "teacher" else check_role_spec(v, "'teacher', ")

    @field_validator("target_pass", mode="before")
    @classmethod
    def _band(cls, v: object) -> object:
        if isinstance(v, str):
            lo, sep, hi = v.partition(":")
            try:
                if not sep:
                    raise ValueError
                return (float(lo), float(hi))
            except ValueError:
                raise ValueError(f"must be LO:HI, two numbers such as 0.3:0.7, got {v!r}") from None
        return v

    @field_validator("hint_modes", mode="before")
    @classmethod
    def _hint_modes(cls, v: object) -> list[str]:
        from agents.roles.hints import parse_hint_modes

        values = [v] if isinstance(v, str) else list(v or [])  # type: ignore[arg-type]
        return list(parse_hint_modes(values))

    @model_validator(mode="after")
    def _check(self) -> "SessionConfig":
        if self.rollouts < 2:
            raise ValueError(f"rollouts must be >= 2 for group reflection; pass --rollouts 4 (got {self.rollouts})")
        if self.rounds < 1:
            raise ValueError(f"rounds must be >= 1; pass --rounds 1 (got {self.rounds})")
        if self.train_tasks < 1 or self.heldout_tasks < 1:
            raise ValueError("--train-tasks and --heldout-tasks must be >= 1")
        if self.rollouts > 256:
            raise ValueError(f"rollouts must be <= 256 (one batch of k completions is sampled at once), got {self.rollouts}")
        if not 0.0 < self.temperature <= 5.0:
            raise ValueError(f"temperature must be in (0, 5]: the k rollouts of a group must be able to differ (got {self.temperature})")
        if not 0 <= self.seed < 2**32:
            raise ValueError(f"seed must be in [0, 2^32), got {self.seed}")
        if not 1 <= self.max_tokens <= 4096:
            raise ValueError(f"max tokens must be in [1, 4096], got {self.max_tokens}")
        if self.teacher_max_tokens < 16:
            raise ValueError(f"teacher_max_tokens must be >= 16, got {self.teacher_max_tokens}")
        if not 0.0 < self.success_threshold <= 1.0:
            raise ValueError(f"success threshold must be in (0, 1] (rewards are in [0, 1]), got {self.success_threshold}")
        if self.lesson_tokens < 0:
            raise ValueError(f"--lesson-tokens must be >= 0 (0 disables lessons in context), got {self.lesson_tokens}")
        if self.library_tokens < 1:
            raise ValueError(f"--library-tokens must be >= 1, got {self.library_tokens}")
        if self.utility_every < 0:
            raise ValueError(f"--utility-every must be >= 0 (0 disables the utility A/B), got {self.utility_every}")
        for name in ("utility_lessons", "utility_tasks", "utility_samples"):
            if not 1 <= getattr(self, name) <= 256:
                raise ValueError(f"--{name.replace('_', '-')} must be in [1, 256], got {getattr(self, name)}")
        if self.reward != "verifier" and self.critic == "verifier":
            raise ValueError(f"--reward {self.reward} needs a judge model; pass --critic local or --critic openai:MODEL")
        if self.online_rubrics < 0:
            raise ValueError(f"--online-rubrics must be >= 0 (episodes between rubric updates; 0: off), got {self.online_rubrics}")
        if self.online_rubrics and self.reward == "verifier":
            raise ValueError("--online-rubrics needs rubric rewards; pass --reward rubric-explicit or rubric-implicit")
        if not (math.isfinite(self.request_timeout_s) and 1.0 <= self.request_timeout_s <= 86400.0):
            raise ValueError(f"--request-timeout must be in [1, 86400] seconds, got {self.request_timeout_s}")
        check_lease_ttl(self.lease_ttl_s)
        for flag, v in (("--teacher-in-flight", self.teacher_in_flight), ("--solver-in-flight", self.solver_in_flight)):
            if not 1 <= v <= 64:
                raise ValueError(f"{flag} must be in [1, 64] requests, got {v}")
        if self.judge_max_tokens < 16:
            raise ValueError(f"judge_max_tokens must be >= 16, got {self.judge_max_tokens}")
        if self.adapter is not None and (gap := solver_capability_gap(self.solver, ADAPTER_NEEDS, "--adapter")):
            raise ValueError(gap)
        lo, hi = self.target_pass
        if not 0.0 <= lo < hi <= 1.0:
            raise ValueError(f"--target-pass must be LO:HI with 0 <= LO < HI <= 1, e.g. 0.3:0.7 (got {lo:g}:{hi:g})")
        if self.proposals is not None:
            if not 0 <= self.proposals <= 64:
                raise ValueError(f"--proposals must be in [0, 64] per family and round, got {self.proposals}")
            if self.proposals > 0 and self.curriculum != "frontier":
                raise ValueError("proposed tasks need the frontier curriculum; pass --curriculum frontier or --proposals 0")
        if not 1 <= self.proposal_samples <= 64:
            raise ValueError(f"--proposal-samples must be in [1, 64], got {self.proposal_samples}")
        if not 0.0 < self.proposal_agreement <= 1.0:
            raise ValueError(f"--proposal-agreement must be in (0, 1], got {self.proposal_agreement}")
        if not 0 <= self.reflections_per_round <= 10_000:
            raise ValueError(f"--reflections-per-round must be in [0, 10000] (0: no limit), got {self.reflections_per_round}")
        if not 1 <= self.concurrency <= 64:
            raise ValueError(f"concurrency must be in [1, 64] episodes in flight, got {self.concurrency}")
        if not self.families and self.tasks_file is None:
            raise ValueError("no tasks: pass --family NAME or --tasks-file F")
        self._check_cycles()
        return self

    def _check_cycles(self) -> None:
        if not 1 <= self.cycles <= 100:
            raise ValueError(f"--cycles must be in [1, 100] wake–sleep cycles, got {self.cycles}")
        if self.sleep_objective is not None and self.sleep_objective not in objective_names():
            raise ValueError(f"--sleep-objective must be one of {', '.join(objective_names())}, got {self.sleep_objective!r}")
        if not math.isfinite(self.sleep_epochs) or not 0 < self.sleep_epochs <= 1000:
            raise ValueError(f"--sleep-epochs must be in (0, 1000], got {self.sleep_epochs}")
        if self.sleep_steps < 0:
            raise ValueError(f"--sleep-steps must be >= 0 (0: from --sleep-epochs), got {self.sleep_steps}")
        if not 0.0 < self.sleep_lr <= 1.0:
            raise ValueError(f"--sleep-lr must be in (0, 1], got {self.sleep_lr}")
        if self.sleep_min_examples < 1:
            raise ValueError(f"--sleep-min-examples must be >= 1, got {self.sleep_min_examples}")
        if math.isnan(self.sleep_min_guided_log_ratio) or self.sleep_min_guided_log_ratio > 0:
            raise ValueError(f"--sleep-min-guided-log-ratio must be <= 0 nats per token, got {self.sleep_min_guided_log_ratio}")
        if not (math.isfinite(self.sleep_kl_coef) and self.sleep_kl_coef >= 0.0):
            raise ValueError(f"--sleep-kl-coef must be a finite number >= 0, got {self.sleep_kl_coef}")
        if self.sleep_kl_coef > 0 and (self.sleep is None or not get_objective(self.sleep).policy_gradient):
            raise ValueError(f"--sleep-kl-coef applies to the sleep objectives {' and '.join(objective_names('policy-gradient'))}, "
                             f"not {self.sleep}; drop it or pass --sleep-objective grpo")
        if self.sleep is None:
            if self.sleep_from == "previous":
                raise ValueError("--sleep-from previous needs a sleep: pass --sleep-objective OBJ or --cycles 2 or more")
            return
        needs = sleep_needs(self.sleep)
        if gap := solver_capability_gap(self.solver, needs, f"a sleep ({self.sleep}) trains the solver's weights, which"):
            raise ValueError(f"{gap}; pass --solver {kinds(needs)[0].form} or --cycles 1 without --sleep-objective")
        if self.reward != "verifier" and get_objective(self.sleep).reads_rewards:
            free = [s.name for s in specs() if not s.reads_rewards]
            raise ValueError(f"a {self.sleep} sleep trains on verifier rewards; a --reward {self.reward} session can sleep "
                             f"only with --sleep-objective {' or '.join(free)} (it reads no reward)")
        if self.sleep_from == "previous" and self.cycles == 1 and self.adapter is None:
            raise ValueError("--sleep-from previous needs a previous adapter: pass --adapter ID, or --cycles 2 or more")

    @property
    def sleep(self) -> str | None:
        """The objective of each cycle's sleep: ``sleep_objective``, else DEFAULT_SLEEP_OBJECTIVE with 2+ cycles, else None."""
        if self.sleep_objective is not None:
            return self.sleep_objective
        return DEFAULT_SLEEP_OBJECTIVE if self.cycles > 1 else None

    def with_auto_sleep(self, n_train: int) -> "SessionConfig":
        """``arena run``'s default ``--sleep-objective auto``: a one-cycle session sleeps when it can.

        A session of one cycle with no sleep objective gets :data:`DEFAULT_SLEEP_OBJECTIVE` when a
        sleep can run and has enough to learn from: the local solver, verifier rewards, at least
        :data:`AUTO_SLEEP_MIN_EPISODES` episodes (a sleep on a handful of tasks moved held-out pass@1
        down, not up: 16 tasks gave 0.281 → 0.234 in bench/RESULTS.md) and at least
        ``sleep_min_examples`` rollouts. Otherwise (an endpoint solver, a rubric reward, a small
        session) it stays a plain session.

        Returns:
            This config, or a validated copy with the sleep objective set.
        """
        if self.sleep is not None or self.cycles != 1:
            return self
        if missing_capabilities(spec_capabilities(self.solver), sleep_needs(DEFAULT_SLEEP_OBJECTIVE)) or self.reward != "verifier" or self.sleep_from != "base":
            return self
        if n_train * self.rounds < AUTO_SLEEP_MIN_EPISODES or n_train * self.rounds * self.rollouts < self.sleep_min_examples:
            return self
        return SessionConfig.model_validate({**self.model_dump(), "sleep_objective": DEFAULT_SLEEP_OBJECTIVE})

    def check_cycle_budget(self, n_train: int) -> None:
        """Refuse cycles whose wake cannot yield a sleep's minimum of examples (before anything is written).

        A cycle samples ``n_train × rounds × rollouts`` unguided rollouts (plus guided ones for
        all-fail groups, which may be screened out); if even that is below
        ``sleep_min_examples`` no sleep can ever train. An objective with one example per episode
        (``opcd``: its student samples the completions itself) has ``n_train × rounds``.

        Raises:
            ConfigError: saying how many rollouts a cycle has and how many examples a sleep needs.
        """
        if self.sleep is None:
            return
        if get_objective(self.sleep).examples_per == "episode":
            episodes = n_train * self.rounds
            if episodes < self.sleep_min_examples:
                raise ConfigError(
                    f"an {self.sleep} sleep trains on one example per episode and a cycle has {episodes} ({n_train} train tasks "
                    f"x {self.rounds} rounds), fewer than the {self.sleep_min_examples} a sleep needs; raise "
                    "--train-tasks or --rounds, or lower --sleep-min-examples"
                )
            return
        per_cycle = n_train * self.rounds * self.rollouts
        if per_cycle < self.sleep_min_examples:
            raise ConfigError(
                f"a cycle samples {per_cycle} rollouts ({n_train} train tasks x {self.rounds} rounds x {self.rollouts} "
                f"rollouts), fewer than the {self.sleep_min_examples} examples a sleep needs; raise --train-tasks, "
                "--rounds or --rollouts, or lower --sleep-min-examples"
            )

    @property
    def proposals_per_round(self) -> int:
        """Proposed tasks per family per round: ``proposals``, or 2 with frontier and 0 with fixed when unset."""
        if self.proposals is not None:
            return self.proposals
        return 2 if self.curriculum == "frontier" else 0
