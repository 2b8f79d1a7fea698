"""The :class:`Objective` interface every training objective implements, and the batch form its loss sees.

:func:`arena.distill.trainer.fit` calls, per run, ``encode`` once; per optimizer step,
``step_batches`` (which collated micro-batches the step has, and its completion-token count
``N_step``); per micro-batch, ``micro_batch_loss``, whose summed per-token loss the loop divides
by ``N_step`` before back-propagating (the token mean over the optimizer step, as Guide's and
DAPO's code do). The data side — ``build_dataset``, ``require``, ``needs_pi_old`` — runs before
any model loads (``arena distill``) or before a sleep trains.

Examples are encoded as :class:`EncodedExample` and collated by :func:`collate` into the tensors
every objective shares (``input_ids``, ``target_mask``, π_old, the importance-weighted targets,
advantages), so an objective that trains on stored completions writes only its loss.
"""

from __future__ import annotations

import abc
import math
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from arena.distill.data import DistillDataset
from arena.objectives import ObjectiveSpec

Message = dict[str, str]


# --------------------------------------------------------------------------- encoded examples and batches


@dataclass
class EncodedExample:
    """An example as token ids: ``input_ids = prompt + completion (+ end-of-turn)``.

    ``old_logprobs`` has one entry per target token (completion, then end-of-turn as NaN unless
    π_old was rescored over it); NaN means "not importance-weighted".
    """

    input_ids: list[int]
    n_prompt: int  # tokens of the rendered chat (the first target is input_ids[n_prompt])
    old_logprobs: list[float]  # (n_target,) π_old per target token, NaN where unweighted
    weighted: bool  # its targets carry an importance ratio (Guide's guided tokens)
    advantage: float = 0.0  # policy-gradient objectives: Â of the rollout in its group


def prompt_ids(tokenizer: Any, messages: Sequence[Message]) -> list[int]:
    """The chat rendered with the model's chat template and a generation prompt, as ids.

    The same rendering as :meth:`agents.backends.local.LocalPolicy.prompt_text` (template text, then
    tokenised without special tokens), so training contexts match sampling contexts.
    """
    text = tokenizer.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=True)
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def encode_completion(tokenizer: Any, messages: Sequence[Message], completion_ids: Sequence[int], add_eos: bool,
                      max_seq_len: int, eos_id: int) -> tuple[list[int], list[int]] | None:
    """``(prompt ids, completion ids + end-of-turn)`` of one example, or None when it is longer than ``max_seq_len``."""
    p = prompt_ids(tokenizer, messages)
    comp = list(completion_ids) + ([eos_id] if add_eos else [])
    if len(p) + len(comp) > max_seq_len:
        return None
    return p, comp


def encode_each(tokenizer: Any, examples: Sequence[Any], max_seq_len: int, eos_id: int,
                build: Callable[[Any, list[int], list[int]], EncodedExample]) -> tuple[list[EncodedExample], int]:
    """Encode stored-completion examples (``messages``, ``completion_ids``, ``add_eos``) with ``build``; drop the too long.

    Args:
        build: ``(example, prompt ids, completion ids + end-of-turn) -> EncodedExample`` (its π_old,
            weight and advantage are the objective's); may raise for an example it cannot train.

    Returns:
        ``(encoded, dropped)``: encoded examples in input order and how many were longer than ``max_seq_len``.
    """
    out, dropped = [], 0
    for ex in examples:
        got = encode_completion(tokenizer, ex.messages, ex.completion_ids, ex.add_eos, max_seq_len, eos_id)
        if got is None:
            dropped += 1
        else:
            out.append(build(ex, *got))
    return out, dropped


def collate(batch: Sequence[EncodedExample], pad_id: int, device: torch.device | str = "cpu") -> dict[str, torch.Tensor]:
    """Right-pad a micro-batch.

    Returns:
        ``input_ids`` (B, L) long; ``attention_mask`` (B, L) long; ``target_mask`` (B, L-1)
        bool, True where position i predicts a completion token input_ids[:, i+1];
        ``old_logprobs`` (B, L-1) float32, π_old of that token (NaN where unweighted);
        ``hinted`` (B, L-1) bool, the importance-weighted targets (those of weighted examples
        with a π_old); ``advantages`` (B, L-1) float32, the rollout's Â on each of its targets.
    """
    L = max(len(e.input_ids) for e in batch)
    B = len(batch)
    ids = torch.full((B, L), pad_id, dtype=torch.long)
    attn = torch.zeros((B, L), dtype=torch.long)
    tmask = torch.zeros((B, L - 1), dtype=torch.bool)
    old = torch.full((B, L - 1), math.nan, dtype=torch.float32)
    hinted = torch.zeros((B, L - 1), dtype=torch.bool)
    adv = torch.zeros((B, L - 1), dtype=torch.float32)
    for b, e in enumerate(batch):
        n = len(e.input_ids)
        ids[b, :n] = torch.tensor(e.input_ids)
        attn[b, :n] = 1
        lo, hi = e.n_prompt - 1, n - 1  # positions predicting tokens n_prompt .. n-1
        tmask[b, lo:hi] = True
        old[b, lo:hi] = torch.tensor(e.old_logprobs, dtype=torch.float32)
        if e.weighted:
            hinted[b, lo:hi] = ~torch.isnan(old[b, lo:hi])
        adv[b, lo:hi] = e.advantage
    return {k: v.to(device) for k, v in dict(input_ids=ids, attention_mask=attn, target_mask=tmask, old_logprobs=old,
                                             hinted=hinted, advantages=adv).items()}


@dataclass
class Encoded:
    """An objective's encoded examples and how many were longer than ``max_seq_len`` (left out)."""

    items: list[Any]
    dropped: int
    too_long_note: str = ""  # added to the "no example fits" error, e.g. " with 96 sampled tokens"


@dataclass
class LossParts:
    """One micro-batch's loss and the counts the run reports.

    Attributes:
        loss_sum: scalar tensor, Σ_t ℓ_t over the micro-batch's loss tokens, with gradient (not yet
            divided by the step's tokens).
        tokens: non-pad tokens processed (every forward pass: the tokens/s numerator).
        completion_tokens: tokens that carried loss.
        gamma: Guide's γ of the micro-batch, when it had importance-weighted tokens.
        clipped: policy-gradient objectives: tokens whose ratio was outside [1 − ε, 1 + ε].
        kl_sum: Σ_t of the k3 KL to the base model when a KL term is on, nats.
    """

    loss_sum: torch.Tensor
    tokens: int
    completion_tokens: int
    gamma: float | None = None
    clipped: int = 0
    kl_sum: float | None = None


@dataclass
class TrainRun:
    """What an objective's step hooks see of the run :func:`arena.distill.trainer.fit` is training."""

    model: Any  # the peft model being trained
    tokenizer: Any
    cfg: Any  # arena.distill.config.TrainConfig
    device: torch.device
    pad_id: int
    eos_ids: list[int]  # end-of-turn ids (sampling stops at the first)
    teacher: Any | None = None  # a frozen model the loss compares with (teacher_is_start objectives); None: the base


@dataclass
class DataContext:
    """What an objective's dataset builder may read besides the rollouts.

    Attributes:
        store: the lesson library (:class:`lessons.library.store.LessonStore`).
        session: the session whose rollouts are the data.
        success_threshold: a rollout is a success when its reward is at least this.
        lesson_tokens: the lessons budget of a held-out prompt, solver tokens.
        count_tokens: the solver's token count (loaded lazily by the caller's function).
        exclude: lesson ids an adapter training starts from already holds.
    """

    store: Any
    session: str
    success_threshold: float
    lesson_tokens: int = 512
    count_tokens: Callable[[str], int] | None = None
    exclude: Collection[str] = field(default_factory=tuple)

    def verifier_session(self) -> bool:
        """Whether the session's rewards are a verifier's (its stored config's ``reward``; no session: True)."""
        info = self.store.get_session(self.session)
        return info is None or info.config.get("reward", "verifier") == "verifier"


# --------------------------------------------------------------------------- the interface


class Objective(abc.ABC):
    """A training objective: its data, its encoding and the loss of one micro-batch (see the module docstring).

    Instances are made by :meth:`arena.objectives.ObjectiveSpec.load` with their spec.
    """

    def __init__(self, spec: ObjectiveSpec) -> None:
        self.spec = spec

    @property
    def name(self) -> str:
        return self.spec.name

    # ---- data (no model)

    @abc.abstractmethod
    def build_dataset(self, rollouts: Sequence[Any], ctx: DataContext) -> DistillDataset:
        """The examples of this objective from a session's eligible train rollouts, skipped ones counted by reason.

        Raises:
            arena.distill.data.BadTrainingData: the rollouts cannot give what it needs.
        """

    @abc.abstractmethod
    def require(self, data: DistillDataset, ctx: DataContext) -> None:
        """Raise :class:`~arena.distill.data.NoTrainingData` saying why when ``data`` has nothing to train on."""

    def needs_pi_old(self, data: DistillDataset) -> bool:
        """Whether π_old must be rescored at the sampling temperature before training (default: no)."""
        return False

    # ---- training

    @abc.abstractmethod
    def encode(self, tokenizer: Any, examples: Sequence[Any], cfg: Any, eos_id: int) -> Encoded:
        """Tokenise ``examples``; drop (and count) those longer than ``cfg.max_seq_len``.

        Raises:
            arena.distill.errors.TrainingError: an example cannot be trained as it is.
        """

    def step_batches(self, run: TrainRun, items: Sequence[Any], micro: Sequence[Sequence[int]],
                     step: int) -> tuple[int, Iterable[Any]]:
        """``(N_step, micro-batches)`` of optimizer step ``step``: its completion tokens and collated micro-batches.

        Args:
            run: the run being trained.
            items: the encoded examples (:meth:`encode`).
            micro: example indices per micro-batch of the step.
            step: 0-based optimizer step.

        The default collates stored completions (:class:`EncodedExample`); an objective that samples
        while it trains overrides it.
        """
        n_step = sum(len(items[i].input_ids) - items[i].n_prompt for mb in micro for i in mb)
        return n_step, (collate([items[i] for i in mb], run.pad_id, run.device) for mb in micro)

    @abc.abstractmethod
    def micro_batch_loss(self, run: TrainRun, batch: Any) -> LossParts:
        """The summed per-token loss of one micro-batch (from :meth:`step_batches`) and its counts."""
