"""Online rubrics: grow a task's rubric as the policy changes (OnlineRubrics, arXiv 2510.07284).

Every N episodes (``--online-rubrics N``), for each task of those episodes: take the current
policy's rollouts (the stored group, sampled with the lessons in context), sample reference
rollouts on the same task (the base solver without lessons, or any other reference policy such
as an earlier adapter), and ask the teacher for criteria that separate the two sets and that the
rubric lacks. Proposals are validated as RaR criteria, deduplicated against the rubric and each
other (:func:`dedupe_criteria`), and stored as a new rubric version whose new criteria link to the
rollouts that motivated them (:meth:`lessons.library.rubrics.RubricStore.add_version`).

A version obeys the limit of the first one, :data:`lessons.criteria.MAX_CRITERIA` criteria
(inherited plus new): the inherited criteria are kept whole (the judge has graded against them,
and their verdicts stay comparable), so only new ones are dropped, the last in the teacher's
order first (it lists the criterion it finds most separating first, and :func:`propose_criteria`
keeps that order). Each dropped one is named in :attr:`OnlineUpdate.rejected` and counted in
:attr:`OnlineUpdate.over_limit`; a rubric already at the limit is not offered to the teacher.

Which episodes make a batch comes from the database (:func:`due_batch`): the k-th batch is the
session's recorded episodes k·N+1 … (k+1)·N in recording order, so a resumed session keeps the
same batches as an uninterrupted one, and the batch that was due when a run was killed is
updated after the resume (a batch whose update had already run before the kill is proposed
again once; its criteria are then near-duplicates of the version it added and are dropped).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agents.parsing import parse_with_retry, reply_constraints
from agents.policy import Message, Policy
from agents.roles.solver import solver_messages
from arena.tasks.model import Task
from lessons.criteria import MAX_CRITERIA, Criterion, criterion_body
from lessons.library.rubrics import RubricInfo, RubricStore
from lessons.text import neutralise_model_text

MAX_NEW_CRITERIA = 2  # per task per update
SIMILARITY_THRESHOLD = 0.6  # a proposal this similar to an existing criterion is a duplicate

# Must make the teacher contrast the two sets and return only criteria the rubric lacks, as JSON.
ONLINE_SYSTEM = """You improve a grading rubric. You see a question, the current rubric, and responses from two students: A (current) and B (reference).
Write at most 2 NEW criteria that separate the A responses from the B responses (a quality one set shows and the other lacks, or a mistake one set makes) and that the rubric does not already cover.
Each criterion has a short title, a description that starts with 'Essential Criteria:', 'Important Criteria:', 'Optional Criteria:' or 'Pitfall Criteria:' (a pitfall names a mistake), and a weight from 1 to 5 (-1 to -5 for a pitfall).
Reply with ONE JSON object and nothing else:
{"analysis": "<one sentence>", "criteria": [{"title": "<title>", "description": "Important Criteria: <what a good response does>", "weight": 3}]}"""

ONLINE_RETRY = "Your reply could not be used: {error}. Reply again with ONLY the JSON object described above."
ONLINE_PREFILL = '{"analysis": "'

_STOP = frozenset(
    "a an the of to in on for and or with by is are be it its that this as at from response responses answer "
    "criteria criterion essential important optional pitfall does do not says say mentions mention names name "
    "explains explain gives give states state uses use includes include".split()
)


class Proposal(BaseModel):
    """The teacher's reply: an analysis and candidate criteria (each validated separately)."""

    model_config = ConfigDict(extra="ignore")
    analysis: str = Field(default="", description="one sentence: what separates A from B")
    criteria: list[dict[str, Any]] = Field(description="new criteria {title, description, weight}")


def _content_words(text: str) -> set[str]:
    """Lower-cased words minus stop words and rubric verbs, a plural "s" stripped ("colours" → "colour")."""
    words = re.findall(r"[a-z0-9]+", text.lower())
    return {w[:-1] if len(w) > 3 and w.endswith("s") and not w.endswith("ss") else w for w in words if w not in _STOP}


def _jaccard(a: set[str], b: set[str]) -> float:
    return len(a & b) / len(a | b) if a | b else 1.0


def criterion_similarity(a: Criterion, b: Criterion) -> float:
    """Similarity in [0, 1] of two criteria: the larger of the Jaccard overlaps of their content words
    (:func:`_content_words`) over the titles alone and over title plus description (category prefix removed)."""
    full = _jaccard(_content_words(f"{a.title} {criterion_body(a.description)}"), _content_words(f"{b.title} {criterion_body(b.description)}"))
    return max(full, _jaccard(_content_words(a.title), _content_words(b.title)))


def dedupe_criteria(
    proposed: Sequence[Criterion], existing: Sequence[Criterion], threshold: float = SIMILARITY_THRESHOLD
) -> tuple[list[Criterion], list[str]]:
    """Keep the proposals that are not near-duplicates of the rubric or of an earlier kept proposal.

    Args:
        proposed: candidate criteria, in the teacher's order.
        existing: the current rubric.
        threshold: a candidate whose :func:`criterion_similarity` to any existing or kept
            criterion is at least this is dropped.

    Returns:
        ``(kept, rejected)``: kept criteria in order, and one line per dropped candidate
        naming the criterion it duplicates.
    """
    kept: list[Criterion] = []
    rejected: list[str] = []
    for c in proposed:
        scored = [(o, criterion_similarity(c, o)) for o in [*existing, *kept]]
        match = max(scored, key=lambda x: x[1], default=None)
        if match is not None and match[1] >= threshold:
            rejected.append(f"criterion {c.title!r} duplicates {match[0].title!r} (similarity {match[1]:.2f})")
        else:
            kept.append(c)
    return kept, rejected


def proposal_messages(question: str, rubric: Sequence[Criterion], current: Sequence[str], reference: Sequence[str]) -> list[Message]:
    """The teacher's chat for one task: rubric, A (current policy) and B (reference) responses.

    The responses and the rubric are model-written (the solver's, the reference policy's, earlier
    proposals): neutralised (:func:`lessons.text.neutralise_model_text`) before they enter the chat.

    Args:
        question: the task text.
        rubric: the task's current criteria.
        current: completions of the current policy.
        reference: completions of the reference policy.

    Returns:
        The system and user turns.
    """

    def clip(t: str) -> str:
        t = neutralise_model_text(t, one_line=True)
        return t if len(t) <= 400 else t[:399] + "…"

    lines = [f"Question: {clip(question)}", "Current rubric:"]
    lines += [f"- {neutralise_model_text(c.title, one_line=True)} ({c.weight:g}): "
              f"{neutralise_model_text(c.description, one_line=True)}" for c in rubric]
    lines.append("Responses A (current student):")
    lines += [f"A{i}. {json.dumps(clip(t))}" for i, t in enumerate(current, 1)]
    lines.append("Responses B (reference student):")
    lines += [f"B{i}. {json.dumps(clip(t))}" for i, t in enumerate(reference, 1)]
    lines.append("Write the JSON object now.")
    return [{"role": "system", "content": ONLINE_SYSTEM}, {"role": "user", "content": "\n".join(lines)}]


@dataclass
class ProposalResult:
    """New criteria for one task (validated, deduplicated), the analysis, and every rejection with why."""

    criteria: list[Criterion]
    analysis: str
    rejected: list[str] = field(default_factory=list)
    raw: list[str] = field(default_factory=list)
    error: str | None = None


def propose_criteria(
    teacher: Policy,
    question: str,
    rubric: Sequence[Criterion],
    current: Sequence[str],
    reference: Sequence[str],
    max_tokens: int = 256,
    seed: int | None = None,
) -> ProposalResult:
    """Ask the teacher for criteria that separate current-policy from reference responses (OnlineRubrics).

    Args:
        teacher: the teacher's policy.
        question: the task text.
        rubric: the task's current criteria.
        current: completions of the current policy.
        reference: completions of the reference policy on the same task.
        max_tokens: reply cap, tokens.
        seed: sampling seed (a retry uses seed + 1).

    Returns:
        A :class:`ProposalResult` with at most :data:`MAX_NEW_CRITERIA` new, valid, non-duplicate
        criteria, in the teacher's order, their titles and descriptions neutralised
        (:func:`lessons.text.neutralise_model_text`). Never raises on bad model output (an unusable
        reply gives no criteria and ``error``).
    """
    base = proposal_messages(question, rubric, current, reference)
    prefill, _ = reply_constraints(teacher, ONLINE_PREFILL, None)
    replies: list[str] = []

    def ask(error: str | None) -> str:
        msgs = list(base)
        if error is not None and replies:
            msgs += [{"role": "assistant", "content": neutralise_model_text(replies[-1])},
                     {"role": "user", "content": ONLINE_RETRY.format(error=error)}]
        kwargs = {"prefill": prefill} if prefill else {}
        out = teacher.sample(msgs, n=1, temperature=0.3, max_tokens=max_tokens,
                             seed=None if seed is None else seed + len(replies), **kwargs)[0]
        replies.append(prefill + out.text)
        return replies[-1]

    outcome = parse_with_retry(ask, Proposal, retries=1)
    if outcome.value is None:
        return ProposalResult([], "", raw=outcome.raw, error=outcome.error)
    valid: list[Criterion] = []
    rejected: list[str] = []
    for item in outcome.value.criteria:
        # a criterion the judge will read: its title and description are neutralised before validation
        item = {k: neutralise_model_text(v, one_line=True) if k in ("title", "description") and isinstance(v, str) else v
                for k, v in item.items()}
        try:
            valid.append(Criterion.model_validate(item))
        except ValidationError as e:
            msg = str(e.errors()[0]["msg"]).removeprefix("Value error, ")
            rejected.append(f"criterion {str(item.get('title', '?'))!r} invalid: {msg}")
    kept, dups = dedupe_criteria(valid, rubric)
    rejected += dups
    if len(kept) > MAX_NEW_CRITERIA:
        rejected += [f"criterion {c.title!r} dropped (more than {MAX_NEW_CRITERIA} per update)" for c in kept[MAX_NEW_CRITERIA:]]
        kept = kept[:MAX_NEW_CRITERIA]
    return ProposalResult(kept, " ".join(outcome.value.analysis.split())[:300], rejected, outcome.raw)


@dataclass
class OnlineUpdate:
    """What one online-rubric update did to one task."""

    task_key: str
    version: RubricInfo | None  # the new version, or None when nothing was added
    rejected: list[str]  # one line per proposal not added, with why (the over-limit ones included)
    error: str | None
    over_limit: int = 0  # valid new criteria dropped because the version would exceed MAX_CRITERIA


def due_batch(recorded: Sequence[str], every: int, catch_up: bool = False) -> list[str]:
    """The episode keys of the online-rubric batch due now, or [] when none is.

    Args:
        recorded: the session's recorded episode keys in recording order
            (:meth:`lessons.library.episodes.EpisodeRepository.recorded_episode_keys`).
        every: ``--online-rubrics N`` (0: off).
        catch_up: the first call of a process (a resume): the latest complete batch is due even
            when episodes have been recorded after it (its update may have been lost in a kill).

    Returns:
        The ``every`` keys of the batch that ends at the latest multiple of ``every`` — when the
        count is exactly that multiple, or with ``catch_up`` — else [].
    """
    if every <= 0:
        return []
    end = len(recorded) - len(recorded) % every
    if end == 0 or (end != len(recorded) and not catch_up):
        return []
    return list(recorded[end - every:end])


def update_rubrics(
    rubric_store: RubricStore,
    session_id: int,
    tasks: Sequence[Task],
    episode_keys: Sequence[str],
    teacher: Policy,
    reference: Policy,
    n_reference: int = 4,
    temperature: float = 0.8,
    max_tokens: int = 96,
    teacher_max_tokens: int = 256,
    seed: int | None = None,
) -> list[OnlineUpdate]:
    """One online-rubric update over the tasks of some finished episodes.

    For each task: the current policy's graded, unguided rollouts of those episodes (at most 4),
    ``n_reference`` reference rollouts from ``reference`` with no lessons in context, the teacher's
    proposals (:func:`propose_criteria`), and a new rubric version when at least one survives. The
    new criteria record the current rollouts' ids and the reference completions they came from.
    A version holds at most :data:`lessons.criteria.MAX_CRITERIA` criteria, inherited plus new:
    the new ones that do not fit are dropped, the last in the teacher's order first, and counted
    (:attr:`OnlineUpdate.over_limit`); a task whose rubric is already full is skipped before any
    model is asked.

    Args:
        rubric_store: where rubric versions live.
        session_id: the session.
        tasks: the tasks to update (each must have a stored rubric).
        episode_keys: the finished episodes whose rollouts are the current policy's.
        teacher: proposes criteria.
        reference: the reference policy (the base solver, or e.g. an earlier adapter).
        n_reference: reference rollouts per task.
        temperature, max_tokens: reference sampling settings.
        teacher_max_tokens: the teacher's reply cap.
        seed: sampling seed.

    Returns:
        One :class:`OnlineUpdate` per task.
    """
    rows = rubric_store.episode_rollouts(session_id, episode_keys)
    updates = []
    for i, task in enumerate(tasks):
        rubric = rubric_store.current_rubric(session_id, task.task_key)
        if rubric is None:
            updates.append(OnlineUpdate(task.task_key, None, [], "task has no rubric"))
            continue
        room = MAX_CRITERIA - len(rubric.criteria)
        if room <= 0:
            updates.append(OnlineUpdate(task.task_key, None, [], f"the rubric holds {len(rubric.criteria)} criteria, "
                                        f"the limit of {MAX_CRITERIA}: no new criteria"))
            continue
        current = [r for r in rows if r.task_key == task.task_key and not r.guided and r.reward is not None][:4]
        if not current:
            updates.append(OnlineUpdate(task.task_key, None, [], "no graded rollout of the current policy"))
            continue
        s = None if seed is None else seed + 7919 * i
        ref = reference.sample(solver_messages(task.question, ""), n=n_reference, temperature=temperature,
                               max_tokens=max_tokens, seed=s)
        criteria = [Criterion.model_validate(c.as_dict()) for c in rubric.criteria]
        res = propose_criteria(teacher, task.question, criteria, [r.completion for r in current],
                               [c.text for c in ref], max_tokens=teacher_max_tokens, seed=s)
        fits, over = res.criteria[:room], res.criteria[room:]
        rejected = res.rejected + [f"criterion {c.title!r} dropped (a rubric version holds at most {MAX_CRITERIA} "
                                   f"criteria; {len(criteria)} are inherited)" for c in over]
        if not fits:
            updates.append(OnlineUpdate(task.task_key, None, rejected, res.error, len(over)))
            continue
        motivation = {"analysis": res.analysis, "reference_completions": [c.text for c in ref],
                      "current_rollout_ids": [r.id for r in current]}
        new = [
            {**c.model_dump(), "motivating_rollout_ids": [r.id for r in current], "motivation": motivation}
            for c in fits
        ]
        version = rubric_store.add_version(session_id, task.task_key, new, parent_id=rubric.id, note=res.analysis or None)
        updates.append(OnlineUpdate(task.task_key, version, rejected, None, len(over)))
    return updates
