"""``opcd``: on-policy context distillation — the adapter learns to act without the context as the base acts with it.

On-policy context distillation (arXiv 2602.12275; Snell et al. 2022, arXiv 2209.15189, for the
off-policy form; the on-policy reverse-KL setting of GKD, Agarwal et al. 2024, arXiv 2306.13649):

- the **student** is the LoRA adapter with neither lessons nor hint in its context; it samples
  its own completions for the session's train tasks during training (every optimizer step
  samples afresh from the current weights, so the data stay on-policy);
- the **teacher** is the frozen policy training starts from — the base model (the adapter
  disabled), or with ``--sleep-from previous`` the previous adapter — given the context to
  distil: the lessons section a held-out prompt of the task gets at sleep time (the library's
  active lessons not yet distilled) and, for a task whose group all failed, the plan part of its
  hint, in the user turn as the guided re-attempt saw it (:func:`build_opcd_dataset` says why
  both differ from the episode's own context);
- the loss is the per-token reverse KL(π_student ‖ π_teacher) over the full vocabulary on the
  completion tokens of the student's samples (:func:`arena.distill.losses.reverse_kl`),
  token-mean over the optimizer step.

It needs no verifier and no stored log-probs — rewards play no part, so rubric sessions can sleep
with it and `arena distill` can train it on an OpenAI-backend session's contexts — and every
task teaches, failures included. After
an ``opcd`` sleep the adapter without a lesson should do what the base model does with it: the
``distilled`` rule of :func:`arena.distill.pipeline.distilled_lessons` checks that per lesson.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from agents.roles.hints import hint_parts
from agents.roles.solver import guided_messages, strip_lessons_section, with_lessons_section
from arena.distill.data import DistillDataset, NoTrainingData
from arena.distill.losses import reverse_kl
from arena.distill.objectives.base import (
    DataContext,
    Encoded,
    EncodedExample,
    LossParts,
    Objective,
    TrainRun,
    collate,
    prompt_ids,
)
from arena.distill.trainer import completion_logits
from lessons.library.adapters import TrainingRollout

Message = dict[str, str]


@dataclass(frozen=True)
class OPCDExample:
    """One train task's pair of contexts: the student's (bare) and the teacher's (with the context to distil).

    Attributes:
        kind: ``"lessons"`` (the teacher sees a lessons section) or ``"hint"`` (the teacher sees
            the plan part of an all-fail group's hint, plus lessons if any).
        rollout_id: the stored rollout whose chat gives the teacher's context (provenance).
        task_key: its task.
        messages: the student's chat: the solver's chat without lessons and hint.
        teacher_messages: the teacher's chat.
        lessons, hint_id: provenance (lessons in the teacher's context; the hint).
    """

    kind: str
    rollout_id: int
    task_key: str
    messages: list[Message]
    teacher_messages: list[Message]
    lessons: tuple[str, ...] = ()
    hint_id: int | None = None

    @property
    def completion_ids(self) -> list[int]:
        """None stored: the student samples its own completions while it trains."""
        return []

    @property
    def weighted(self) -> bool:
        return False


OPCD_HINT_PARTS = ("plan",)  # the parts of a hint that carry over to other tasks (build_opcd_dataset says why)
LessonsNow = Callable[[str, str], tuple[str, list[str]]]  # (family, question) -> (lessons section, lesson ids)


def build_opcd_dataset(rollouts: Sequence[TrainingRollout], strip_lessons: Callable[[list[Message]], list[Message]],
                       lessons_now: LessonsNow | None = None) -> DistillDataset:
    """One example per episode: the student's bare chat and the teacher's chat with the context to distil.

    The teacher's context is made of two parts:

    - **lessons**: with ``lessons_now``, the lessons section the solver would get for the task
      now, at sleep time (:func:`library_lessons`: the library's ``active`` lessons, those
      already distilled left out), so what is distilled is the library the adapter replaces;
      without it, the lessons section the episode's solver had. The episodes of a session's
      first round never have lessons in context (reflection writes lessons at the end of a
      round), so without ``lessons_now`` a one-round wake distils hints only.
    - **hint**, for an episode whose group all failed and was re-attempted with one: only its
      ``plan`` part (:data:`OPCD_HINT_PARTS`, :func:`agents.roles.hints.hint_parts`). An
      ``answer`` part makes the teacher an oracle for that one task, and a ``feedback`` part names
      that task's wrong answers; no prompt without the hint can know either, so matching such a
      teacher teaches the student to guess, not to reason. Measured on one session-12 wake (seed 0,
      bench/RESULTS.md): opcd adapters scored 0.109 with answer hints, 0.188 with feedback hints
      and 0.313 with lessons alone (base 0.266, base + lessons 0.344).

    An episode left with neither is skipped: ``no_context``, or ``hint_not_distilled`` when its
    only context was a hint without a plan part (the teacher would be the base model on the
    student's own chat, which only pulls the adapter back to the base).

    Args:
        rollouts: the session's train rollouts (any order); rewards and log-probs are not read.
        strip_lessons: removes the lessons section of a chat
            (:func:`agents.roles.solver.strip_lessons_section`).
        lessons_now: ``(family, question) -> (section, lesson ids)``; None: the episode's own.

    Returns:
        A :class:`~arena.distill.data.DistillDataset` of :class:`OPCDExample` in episode order,
        ``kind`` ``"hint"`` where a hint is in the teacher's context, ``"lessons"`` otherwise.
    """
    out = DistillDataset(objective="opcd", examples=[], rollouts_seen=len(rollouts))
    episodes: dict[int, list[TrainingRollout]] = {}
    for r in rollouts:
        episodes.setdefault(r.episode_id, []).append(r)
    for eid in sorted(episodes):
        group = sorted(episodes[eid], key=lambda r: r.rollout_id)
        guided = [r for r in group if r.guided and r.unguided_messages]
        r = guided[0] if guided else group[0]
        sampled = [dict(m) for m in (r.unguided_messages if guided else r.messages) or []]  # with the episode's lessons
        student = strip_lessons(sampled)
        if lessons_now is None:
            teacher, lessons = sampled, tuple(r.lessons_in_context)
        else:
            section, ids = lessons_now(r.family, student[-1]["content"])
            teacher, lessons = with_lessons_section(student, section), tuple(ids)
        hint = hint_parts(r.hint_mode, r.hint_text or "", OPCD_HINT_PARTS) if guided else ""
        if hint:
            teacher = guided_messages(teacher, hint)
        if teacher == student:
            out.skipped["hint_not_distilled" if guided and r.hint_text else "no_context"] += 1
            continue
        out.examples.append(OPCDExample("hint" if hint else "lessons", r.rollout_id, r.task_key, student, teacher,
                                        lessons, r.hint_id if hint else None))
    return out


def library_lessons(store: Any, budget_tokens: int, count_tokens: Callable[[str], int],
                    exclude: Collection[str] = ()) -> LessonsNow:
    """``lessons_now`` for :func:`build_opcd_dataset`: the section a held-out prompt of the task would get now.

    Only ``active`` lessons (those that passed their utility check, as held-out evaluation
    shows them: :func:`arena.episode.prompt.retrieve`), ranked for the question and cut to
    ``budget_tokens`` of the solver's tokenizer; ``exclude`` leaves out lessons an adapter
    already holds (they left the prompt). The ``distilled`` rule then compares the adapter with
    the base model given this same section.

    Args:
        store: the library (:class:`lessons.library.store.LessonStore`).
        budget_tokens: the lessons budget (``--lesson-tokens``), solver tokens.
        count_tokens: the solver's token count (called only when there are lessons to render).
        exclude: lesson ids to leave out.
    """
    from arena.episode.prompt import retrieve

    def lessons_now(family: str, question: str) -> tuple[str, list[str]]:
        section, pairs = retrieve(store, family, question, budget_tokens, count_tokens, exclude, active_only=True)
        return section, [lid for lid, _ in pairs]

    return lessons_now


def require_opcd_examples(data: DistillDataset, session: str) -> None:
    """Raise :class:`~arena.distill.data.NoTrainingData` with the reason when ``data`` has no example."""
    if data.examples:
        return
    data.require_rollouts(session)
    raise NoTrainingData(
        f"no eligible training data in session {session!r} for objective opcd: no train task has an active lesson "
        f"(within the lessons budget) or a hint with a plan part ({data.skip_reasons()}); activate lessons "
        "(`arena lessons add`, or more rounds with --utility-every so candidates pass their A/B) or run with "
        "--hint-mode plan"
    )


# --------------------------------------------------------------------------- sampling and training


@dataclass
class EncodedPair:
    """An OPCD example as token ids: the student's and the teacher's rendered chats."""

    student: list[int]
    teacher: list[int]


@torch.no_grad()
def sample_completions(model: Any, prompts: Sequence[Sequence[int]], max_new_tokens: int, temperature: float,
                       eos_ids: Sequence[int], pad_id: int, seed: int) -> list[list[int]]:
    """Sample one completion per prompt from ``model`` as it is now (left-padded batch, ``model.generate``).

    Args:
        model: a transformers causal LM or peft model (put in eval mode for sampling, restored after).
        prompts: B token-id prompts (rendered chats with the generation prompt).
        max_new_tokens: completion cap, tokens.
        temperature: softmax temperature of sampling (no top-k / top-p).
        eos_ids: end-of-turn ids; a completion ends at its first one, which it keeps.
        pad_id: padding id.
        seed: torch seed of this draw.

    Returns:
        B completions as token ids (the end-of-turn token included where one was sampled).
    """
    device = next(model.parameters()).device
    L, B = max(len(p) for p in prompts), len(prompts)
    ids = torch.full((B, L), pad_id, dtype=torch.long)
    attn = torch.zeros((B, L), dtype=torch.long)
    for b, p in enumerate(prompts):
        ids[b, L - len(p):] = torch.tensor(list(p))
        attn[b, L - len(p):] = 1
    was_training = model.training
    model.eval()
    torch.manual_seed(seed)
    try:
        out = model.generate(input_ids=ids.to(device), attention_mask=attn.to(device), do_sample=True,
                             temperature=temperature, top_k=0, top_p=1.0, max_new_tokens=max_new_tokens,
                             eos_token_id=list(eos_ids), pad_token_id=pad_id)
    finally:
        model.train(was_training)
    comps = []
    stops = set(eos_ids)
    for row in out[:, L:].tolist():
        end = next((i + 1 for i, t in enumerate(row) if t in stops), len(row))
        comps.append(row[:end])
    return comps


def encode_pairs(tokenizer: Any, examples: Sequence[OPCDExample], max_seq_len: int, max_new_tokens: int
                 ) -> tuple[list[EncodedPair], int]:
    """Render both chats of every example; drop those whose teacher chat plus a full completion exceeds ``max_seq_len``."""
    out, dropped = [], 0
    for ex in examples:
        s, t = prompt_ids(tokenizer, ex.messages), prompt_ids(tokenizer, ex.teacher_messages)
        if max(len(s), len(t)) + max_new_tokens > max_seq_len:
            dropped += 1
            continue
        out.append(EncodedPair(s, t))
    return out, dropped


def as_example(prompt: list[int], completion: list[int]) -> EncodedExample:
    """A prompt and a sampled completion in the supervised collate's form (every token weight 1)."""
    return EncodedExample(prompt + completion, len(prompt), [math.nan] * len(completion), False)


class OnPolicyContextDistillation(Objective):
    """``opcd`` (see the module docstring): each optimizer step samples from the student, then matches the teacher.

    Each step samples one completion per example of its micro-batches from the current student
    (``cfg.temperature``, at most ``cfg.sample_tokens`` tokens); the loss of a micro-batch is
    ``Σ_t KL(π_s(· | x, y_<t) ‖ π_t(· | c, x, y_<t))`` over the sampled tokens t, with x the bare
    chat, c the lessons / hint and π_t the frozen starting policy (the base model with the adapter
    disabled, or the run's ``teacher``). ``tokens`` counts the student's and the teacher's forward
    tokens, ``completion_tokens`` the sampled tokens that carried loss.
    """

    def build_dataset(self, rollouts: Sequence[Any], ctx: DataContext) -> DistillDataset:
        if ctx.count_tokens is None:
            raise ValueError("opcd's data needs the solver's token count (DataContext.count_tokens)")
        lessons_now = library_lessons(ctx.store, ctx.lesson_tokens, ctx.count_tokens, ctx.exclude)
        return build_opcd_dataset(rollouts, strip_lessons_section, lessons_now)

    def require(self, data: DistillDataset, ctx: DataContext) -> None:
        require_opcd_examples(data, ctx.session)

    def encode(self, tokenizer: Any, examples: Sequence[Any], cfg: Any, eos_id: int) -> Encoded:
        items, dropped = encode_pairs(tokenizer, examples, cfg.max_seq_len, cfg.sample_tokens)
        return Encoded(items, dropped, f" with {cfg.sample_tokens} sampled tokens")

    def step_batches(self, run: TrainRun, items: Sequence[Any], micro: Sequence[Sequence[int]],
                     step: int) -> tuple[int, Iterable[Any]]:
        """Sample the step's completions from the student as it is now; micro-batches of (student, teacher) chats."""
        cfg = run.cfg
        flat = [i for mb in micro for i in mb]
        comps = sample_completions(run.model, [items[i].student for i in flat], cfg.sample_tokens, cfg.temperature,
                                   run.eos_ids, run.pad_id, (cfg.seed * 1_000_003 + step) % 2**32)
        drawn = iter(comps)
        batches = []
        for mb in micro:
            keep = [(i, c) for i, c in ((i, next(drawn)) for i in mb) if c]
            if keep:
                batches.append((collate([as_example(items[i].student, c) for i, c in keep], run.pad_id, run.device),
                                collate([as_example(items[i].teacher, c) for i, c in keep], run.pad_id, run.device)))
        return sum(len(c) for c in comps), batches

    def micro_batch_loss(self, run: TrainRun, batch: tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]) -> LossParts:
        student, with_context = batch
        s_logits = completion_logits(run.model, student)  # (N, V), with gradient
        with torch.no_grad(), (run.model.disable_adapter() if run.teacher is None else contextlib.nullcontext()):
            # (N, V): the frozen starting policy with the context
            t_logits = completion_logits(run.model if run.teacher is None else run.teacher, with_context)
        tokens = int(student["attention_mask"].sum()) + int(with_context["attention_mask"].sum())
        return LossParts(reverse_kl(s_logits, t_logits).sum(), tokens, int(student["target_mask"].sum()))
