"""The training objectives of `arena distill` and of a sleep: one registry, every list of names derived from it.

An objective turns a session's stored train rollouts into training examples and says what loss
one micro-batch of them carries; :func:`arena.distill.trainer.fit` — the one training loop —
runs any of them (peft LoRA, AdamW, warm-up then cosine, global-norm clipping, the loss of an
optimizer step normalised by its completion tokens).

Adding an objective (docs/architecture.md walks through a whole one):

1. Write a module, ``arena/distill/objectives/<name>.py``, with a subclass of
   :class:`arena.distill.objectives.base.Objective`:

   - ``build_dataset(rollouts, ctx)``: stored rollouts → a
     :class:`~arena.distill.data.DistillDataset` of examples (``messages``, ``completion_ids``,
     ``add_eos``, ``kind`` and provenance fields), skipped rollouts counted by reason;
   - ``require(data, ctx)``: raise :class:`~arena.distill.data.NoTrainingData` saying why when
     there is nothing to train on;
   - ``encode(tokenizer, examples, cfg, eos_id)``: examples → token ids (:func:`base.encode_completion`);
   - ``micro_batch_loss(run, batch)``: the *summed* per-token loss of one collated micro-batch
     and its token counts (:class:`base.LossParts`); the loop divides by the step's tokens;
   - optionally ``step_batches`` (an objective that samples while it trains, as ``opcd`` does)
     and ``needs_pi_old`` (examples whose sampling log-probs must be rescored first).

2. Add one :func:`register` call at the end of this file with its :class:`ObjectiveSpec`.

Everything else follows from the registry: the choices and help text of ``arena distill
--objective`` and ``arena run --sleep-objective``, the config checks (``--kl-coef`` only for
policy-gradient objectives, LoRA dropout 0 where the loss holds an importance ratio, a rubric
session sleeps only with an objective that reads no reward), the rows of ``arena bench
distill`` (objectives with a TRL baseline) and the objective table of the docs
(:func:`objective_table`).

This module imports neither torch nor transformers — the CLI checks flags with it before any
model loads; an implementation is imported when :meth:`ObjectiveSpec.load` is called. After
prime-rl's loss registry (the registry's docstring is its extension guide) and TRL's split of
settings from trainers.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from agents.capabilities import Capability
from lessons.vocab import ADAPTER_OBJECTIVE_MAX_LEN, IMPORTED_OBJECTIVE

Family = Literal["supervised", "policy-gradient", "on-policy"]
FAMILIES: tuple[str, ...] = ("supervised", "policy-gradient", "on-policy")
# LoRA dropout of the objectives whose loss holds no importance ratio (sft, opcd). The others train without: their
# loss holds a ratio of π_θ against π_old as it was scored (no dropout) — PPO's and Guide's ratios, the Guide weights
# of distill's guided successes — or, for guided-unweighted, the ablation of those weights, which trains as distill
# does but for them. Dropout noise in π_θ moves every ratio before any update; on the CPU its random masks for the
# input of every adapted projection cost time too (one sleep's data: 219 s with dropout, 191 s without;
# bench/RESULTS.md, "The sleep without LoRA dropout and with 28 steps").
LORA_DROPOUT = 0.05


@dataclass(frozen=True)
class ObjectiveSpec:
    """What the rest of the project knows about an objective without importing torch.

    Attributes:
        name: the ``--objective`` / ``--sleep-objective`` value.
        help: one line for ``--help`` and the docs: what it trains on and with which loss.
        family: ``supervised`` (weighted NLL of stored completions), ``policy-gradient``
            (group-relative advantages on every rollout of a group, π_old the sampling policy) or
            ``on-policy`` (the student samples its own completions while it trains).
        implementation: ``"module:Class"`` of its :class:`~arena.distill.objectives.base.Objective`.
        source: the paper or library the method comes from.
        kinds: the example kinds its data report counts (``by_kind``), in report order.
        dropout: its default LoRA dropout: 0 where the loss holds an importance ratio of π_θ over
            π_old as π_old was scored (without dropout), :data:`LORA_DROPOUT` otherwise.
        sampling_temperature: its ratios are over the rollouts' sampling distribution, so the
            trainer's ``temperature`` is the session's sampling temperature (else 1).
        reads_rewards: it learns from rewards (a verifier's pass / fail or a rubric's grades);
            False: it reads only the contexts the solver had, so a rubric session can sleep with it.
        examples_per: ``"rollout"`` (one example per stored rollout at most) or ``"episode"``
            (one per episode: what a cycle's budget check counts).
        uses_hints: its data includes the guided re-attempts of all-fail groups (or their hints),
            so the sessions it sleeps on give hints (``arena bench learning``); False: guided
            rollouts are counted ``guided_not_used``.
        needs: capabilities the solver must have for a sleep with it (weights to train; scoring
            by teacher forcing to rescore π_old).
        trl_baseline: the TRL trainer ``arena bench distill`` compares its tokens/s with; None: no row.
        teacher_is_start: its loss compares the student with the frozen policy training starts
            from (the previous adapter when a sleep continues one), which must be loaded beside it.
    """

    name: str
    help: str
    family: Family
    implementation: str
    source: str
    kinds: tuple[str, ...]
    dropout: float = LORA_DROPOUT
    sampling_temperature: bool = False
    reads_rewards: bool = True
    examples_per: Literal["rollout", "episode"] = "rollout"
    uses_hints: bool = True
    needs: frozenset[Capability] = field(default_factory=lambda: frozenset({Capability.TRAIN_ADAPTER}))
    trl_baseline: str | None = None
    teacher_is_start: bool = False

    @property
    def policy_gradient(self) -> bool:
        """Whether it is a policy-gradient objective (``--kl-coef`` applies; clip fraction and KL are reported)."""
        return self.family == "policy-gradient"

    def load(self) -> Any:
        """Import and instantiate the implementation, an :class:`arena.distill.objectives.base.Objective` (imports torch).

        Raises:
            ImportError / AttributeError: ``implementation`` names no importable class.
        """
        module, _, cls = self.implementation.partition(":")
        return getattr(importlib.import_module(module), cls)(self)


_REGISTRY: dict[str, ObjectiveSpec] = {}


def register(spec: ObjectiveSpec, replace: bool = False) -> ObjectiveSpec:
    """Add ``spec`` to the registry and return it.

    Raises:
        ValueError: the name is taken (unless ``replace``), empty, not lower-case words and
            hyphens, longer than the library's column (30 characters) or ``imported``; the family
            is unknown, ``implementation`` is not ``module:Class``, or the dropout is outside [0, 1).
    """
    if not spec.name or not all(part.isalnum() and part.islower() for part in spec.name.split("-")):
        raise ValueError(f"objective name {spec.name!r} must be lower-case words joined by hyphens, e.g. my-objective")
    if len(spec.name) > ADAPTER_OBJECTIVE_MAX_LEN or spec.name == IMPORTED_OBJECTIVE:
        raise ValueError(f"objective name {spec.name!r} must be at most {ADAPTER_OBJECTIVE_MAX_LEN} characters and not "
                         f"{IMPORTED_OBJECTIVE!r} (the library's name for adapters trained elsewhere)")
    if spec.name in _REGISTRY and not replace:
        raise ValueError(f"objective {spec.name!r} is registered already")
    if spec.family not in FAMILIES:
        raise ValueError(f"objective {spec.name!r}: family must be one of {', '.join(FAMILIES)}, got {spec.family!r}")
    if spec.implementation.count(":") != 1 or not all(spec.implementation.split(":")):
        raise ValueError(f"objective {spec.name!r}: implementation must be 'module:Class', got {spec.implementation!r}")
    if not 0.0 <= spec.dropout < 1.0:
        raise ValueError(f"objective {spec.name!r}: dropout must be in [0, 1), got {spec.dropout}")
    _REGISTRY[spec.name] = spec
    return spec


def unregister(name: str) -> None:
    """Remove an objective (tests that register a toy one); unknown names are ignored."""
    _REGISTRY.pop(name, None)


def objective_names(family: Family | None = None) -> tuple[str, ...]:
    """The registered names in registration order; with ``family``, that family's only."""
    return tuple(n for n, s in _REGISTRY.items() if family is None or s.family == family)


def get_objective(name: str) -> ObjectiveSpec:
    """The spec of ``name``.

    Raises:
        ValueError: no such objective (the message lists the registered ones).
    """
    spec = _REGISTRY.get(name)
    if spec is None:
        raise ValueError(f"unknown objective {name!r}; choose one of {', '.join(_REGISTRY)}")
    return spec


def specs() -> tuple[ObjectiveSpec, ...]:
    """Every registered spec, in registration order."""
    return tuple(_REGISTRY.values())


def choices_help(names: Iterable[str] | None = None) -> str:
    """``name (help); …`` for ``--help`` text: every objective, or those of ``names``."""
    chosen = [get_objective(n) for n in names] if names is not None else list(_REGISTRY.values())
    return "; ".join(f"{s.name} ({s.help})" for s in chosen)


def objective_table() -> str:
    """The docs' objective table (Markdown): name, family, what it trains on, defaults, source."""
    rows = ["| objective | family | what it trains | LoRA dropout | temperature | needs | source |",
            "|---|---|---|---|---|---|---|"]
    for s in _REGISTRY.values():
        needs = ", ".join(sorted(c.value for c in s.needs))
        temp = "sampling" if s.sampling_temperature else "1"
        rows.append(f"| `{s.name}` | {s.family} | {s.help} | {s.dropout:g} | {temp} | {needs} | {s.source} |")
    return "\n".join(rows) + "\n"


# --------------------------------------------------------------------------- the built-in objectives

_TRAIN = frozenset({Capability.TRAIN_ADAPTER})
_TRAIN_SCORE = frozenset({Capability.TRAIN_ADAPTER, Capability.SCORE})
_SUPERVISED = "arena.distill.objectives.supervised:"
_PG = "arena.distill.objectives.policy_gradient:PolicyGradient"

register(ObjectiveSpec(
    "distill", "lessons-free context distillation of successes, plus guided successes weighted by Guide's "
    "importance ratio", "supervised", _SUPERVISED + "ContextDistillation",
    "Snell et al. 2022 (arXiv 2209.15189); Guide, Nath et al. 2025 (arXiv 2506.13923)",
    kinds=("context", "guided", "sft"), dropout=0.0, sampling_temperature=True, needs=_TRAIN_SCORE))
register(ObjectiveSpec(
    "sft", "rejection-sampling SFT on unguided successes in their sampling context", "supervised", _SUPERVISED + "SFT",
    "STaR, Zelikman et al. 2022 (arXiv 2203.14465)",
    kinds=("context", "guided", "sft"), uses_hints=False, trl_baseline="SFTTrainer"))
register(ObjectiveSpec(
    "guided-unweighted", "distill without Guide's importance weights (the ablation)", "supervised",
    _SUPERVISED + "GuidedUnweighted",
    "Guide's ablation (arXiv 2506.13923)", kinds=("context", "guided", "sft"), dropout=0.0))
register(ObjectiveSpec(
    "grpo", "group-relative policy gradient on every unguided rollout, PPO's clipped ratio", "policy-gradient", _PG,
    "GRPO, Shao et al. 2024 (arXiv 2402.03300); PPO, Schulman et al. 2017 (arXiv 1707.06347)",
    kinds=("grpo", "guided-grpo"), dropout=0.0, sampling_temperature=True, uses_hints=False, needs=_TRAIN_SCORE,
    trl_baseline="GRPOTrainer"))
register(ObjectiveSpec(
    "guide-grpo", "grpo plus the guided groups under their unhinted context, Guide's shaped ratio",
    "policy-gradient", _PG, "Guide, Nath et al. 2025 (arXiv 2506.13923)",
    kinds=("grpo", "guided-grpo"), dropout=0.0, sampling_temperature=True, needs=_TRAIN_SCORE,
    trl_baseline="GRPOTrainer"))
register(ObjectiveSpec(
    "opcd", "on-policy context distillation: the adapter samples without lessons or hint and is trained toward "
    "the starting policy with them, by reverse KL", "on-policy", "arena.distill.objectives.opcd:OnPolicyContextDistillation",
    "on-policy context distillation (arXiv 2602.12275); GKD, Agarwal et al. 2024 (arXiv 2306.13649)",
    kinds=("lessons", "hint"), reads_rewards=False, examples_per="episode", needs=_TRAIN, teacher_is_start=True))
