"""Curation: every op on the lesson library, applied and logged in one place.

ADD, EDIT, MERGE, RETIRE, UPVOTE and DOWNVOTE come from the teacher's reflection (through
:meth:`lessons.library.store.LessonStore.record_episode`), from a person (``arena lessons ...``) or
from an import; all go through :class:`Curator`, inside the caller's transaction, and each
writes a ``lesson_events`` row with before/after, rationale, the episode and rollouts that
motivated it (or its ``origin``). Nothing is deleted: retired and merged lessons stay.

The op set and the counters follow ACE (incremental delta updates, helpful/harmful
counters; arXiv 2510.04618) and ExpeL (ADD/EDIT/UPVOTE/DOWNVOTE insights; arXiv 2308.10144);
MERGE and a hard token budget keep the library bounded, which an append-only playbook is not
(ACE #11, #26). Life cycle: a lesson proposed by the teacher starts as a ``candidate`` (it
is shown to the solver, so it can gather evidence), becomes ``active`` on evidence (net
helpful votes, or a utility A/B whose effect is positive), and is ``retired`` when its
harmful votes or its utility say it hurts. Hand-written lessons start active.

The budget: the live lessons (candidate + active) may hold at most
:attr:`CurationPolicy.library_tokens` tokens of the solver's tokenizer. An op that would
pass it first evicts candidates that were shown :attr:`CurationPolicy.evict_after_uses`
times without a net helpful vote (lowest rank first, each a RETIRE event with the reason);
if that does not make room the op is rejected with the reason, never silently applied.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from lessons.db.schema import (
    LIVE_STATUSES,
    LessonEventRow,
    LessonRow,
    LessonUtilityRow,
    utcnow,
)
from lessons.ops import GLOBAL_SCOPE, check_scope, clean_lesson_text
from lessons.similarity import similarity

TokenCounter = Callable[[str], int]


def approx_tokens(text: str) -> int:
    """``ceil(len(text) / 4)``: the usual estimate when no tokenizer is configured."""
    return math.ceil(len(text) / 4)


@dataclass(frozen=True)
class CurationPolicy:
    """Thresholds of curation; defaults are the ``arena run`` defaults.

    Attributes:
        library_tokens: budget of the live lessons (candidate + active), solver tokens.
        near_duplicate: an ADD whose :func:`lessons.similarity.similarity` to a live lesson
            of its scope (or a global one) is at least this upvotes that lesson instead.
        promote_votes: a candidate with helpful − harmful ≥ this becomes active, unless its scope
            is in ``measured_scopes``.
        retire_votes: a live lesson with harmful − helpful ≥ this is retired.
        evict_after_uses: a candidate shown this many times without helpful > harmful may
            be retired to make room under the budget.
        utility_weight: weight of the measured utility (effect on pass@1, in [-1, 1]) in the
            retrieval prior ``rank_score = helpful − harmful + utility_weight · utility``.
        measured_scopes: scopes (family names) whose candidates a session's utility A/B measures;
            global candidates count as measured when any scope is. A measured candidate becomes
            active on its measurement only, never on votes: the 1.5B teacher tags every lesson it
            was shown helpful, so two reflections promoted lessons the reply grammar had left
            broken (bench/RESULTS.md, session 24). Empty: votes promote everywhere (no A/B).
    """

    library_tokens: int = 4096
    near_duplicate: float = 0.55
    promote_votes: int = 2
    retire_votes: int = 3
    evict_after_uses: int = 3
    utility_weight: float = 10.0
    measured_scopes: frozenset[str] = frozenset()

    def votes_promote(self, scope: str) -> bool:
        """Whether net helpful votes may make a candidate of ``scope`` active (see ``measured_scopes``)."""
        return not self.measured_scopes or (scope != GLOBAL_SCOPE and scope not in self.measured_scopes)


@dataclass
class CurationResult:
    """What a batch of ops did: readable lesson ids per kind, and one line per rejected op."""

    added: list[str] = field(default_factory=list)
    edited: list[str] = field(default_factory=list)
    merged: list[str] = field(default_factory=list)  # the new lessons made by MERGE
    retired: list[str] = field(default_factory=list)  # by RETIRE, votes, utility, eviction or MERGE
    promoted: list[str] = field(default_factory=list)
    upvoted: list[str] = field(default_factory=list)  # helpful tags and near-duplicate ADDs
    downvoted: list[str] = field(default_factory=list)
    neutral: list[str] = field(default_factory=list)
    rejected: list[str] = field(default_factory=list)


class CurationError(ValueError):
    """An op that cannot be applied (unknown lesson, over budget, wrong status); one line."""


@dataclass
class Provenance:
    """Why an op happens: the episode and rollouts (teacher ops) or an origin (CLI, import)."""

    episode_id: int | None = None
    rollout_ids: Sequence[int] = ()
    origin: dict[str, Any] | None = None


_OWN_NUMBER = re.compile(r"^(?P<scope>.+)-(?P<n>\d{5,})$")


class Curator:
    """Applies curation ops inside an open SQLAlchemy session (the caller commits).

    Args:
        s: a session inside a write transaction.
        policy: thresholds and the token budget.
        count_tokens: the solver's tokenizer count (``Policy.count_tokens``); default
            :func:`approx_tokens`.
        now: the timestamp of every row written (default: now, UTC).

    Every public method raises :class:`CurationError` for an op it cannot apply; nothing of
    that op is written (the checks come before the writes).
    """

    def __init__(
        self,
        s: Session,
        policy: CurationPolicy | None = None,
        count_tokens: TokenCounter | None = None,
        now: datetime | None = None,
    ) -> None:
        self.s = s
        self.policy = policy or CurationPolicy()
        self.count_tokens = count_tokens or approx_tokens
        self.now = now or utcnow()
        self.result = CurationResult()

    # ------------------------------------------------------------------ lookups

    def lesson(self, lesson_id: str) -> LessonRow:
        """The row of a readable lesson id. Raises CurationError if there is none."""
        row = self.s.scalar(select(LessonRow).where(LessonRow.lesson_id == lesson_id))
        if row is None:
            raise CurationError(f"no lesson {lesson_id!r}")
        return row

    def tokens_of(self, row: LessonRow) -> int:
        """The lesson's size in solver tokens, counted (and stored) if it was not yet."""
        if row.tokens is None:
            row.tokens = self.count_tokens(row.text)
        return row.tokens

    def recount_live(self) -> int:
        """Recount the live lessons' tokens with this curator's tokenizer; returns the new total.

        Counts stored by another tokenizer (a CLI op with ``--solver openai:MODEL``, an older
        run with another solver) are replaced, so the budget is in one solver's tokens.
        """
        for row in self.s.scalars(select(LessonRow).where(LessonRow.status.in_(LIVE_STATUSES))):
            row.tokens = self.count_tokens(row.text)
        self.s.flush()
        return self.live_tokens()

    def live_tokens(self) -> int:
        """Tokens held by the live (candidate + active) lessons."""
        for row in self.s.scalars(select(LessonRow).where(LessonRow.status.in_(LIVE_STATUSES), LessonRow.tokens.is_(None))):
            self.tokens_of(row)
        self.s.flush()
        total = self.s.scalar(select(func.coalesce(func.sum(LessonRow.tokens), 0)).where(LessonRow.status.in_(LIVE_STATUSES)))
        return int(total or 0)

    def next_lesson_id(self, scope: str) -> str:
        """``f"{scope}-{n:05d}"`` with n one past the largest of the scope (ids are never reused)."""
        prefix = f"{scope}-"
        numbers = [
            int(lid[len(prefix):])
            for lid in self.s.scalars(select(LessonRow.lesson_id).where(LessonRow.lesson_id.startswith(prefix, autoescape=True)))
            if lid[len(prefix):].isdigit()
        ]
        return f"{scope}-{max(numbers, default=0) + 1:05d}"

    # ------------------------------------------------------------------ events

    def _event(
        self,
        row: LessonRow,
        op: str,
        prov: Provenance,
        rationale: str = "",
        before: str | None = None,
        after: str | None = None,
        target: LessonRow | None = None,
    ) -> None:
        self.s.add(
            LessonEventRow(
                lesson_id=row.id,
                op=op,
                before=before,
                after=after,
                rationale=" ".join(rationale.split()),
                episode_id=prov.episode_id,
                rollout_ids=list(prov.rollout_ids),
                target_lesson_id=target.id if target is not None else None,
                origin=dict(prov.origin) if prov.origin else None,
                created_at=self.now,
            )
        )

    def rerank(self, row: LessonRow) -> None:
        """Recompute the retrieval prior ``rank_score`` of ``row`` from its counters and utility."""
        utility = row.utility if row.utility is not None else 0.0
        row.rank_score = float(row.helpful - row.harmful) + self.policy.utility_weight * utility
        row.updated_at = self.now

    def _set_status(self, row: LessonRow, status: str, op: str, prov: Provenance, why: str, target: LessonRow | None = None) -> None:
        before = row.status
        row.status = status
        row.updated_at = self.now
        self._event(row, op, prov, why, before=before, after=status, target=target)

    # ------------------------------------------------------------------ budget

    def make_room(self, needed: int, prov: Provenance, spare: Sequence[int] = ()) -> None:
        """Evict stale candidates until ``needed`` more tokens fit; else raise CurationError."""
        if needed <= 0:  # an op that shrinks the library is always allowed, even over budget
            return
        budget = self.policy.library_tokens
        used = self.live_tokens()
        if used + needed <= budget:
            return
        stale = self.s.scalars(
            select(LessonRow)
            .where(
                LessonRow.status == "candidate",
                LessonRow.times_in_context >= self.policy.evict_after_uses,
                LessonRow.helpful <= LessonRow.harmful,
                LessonRow.id.not_in(list(spare)),
            )
            .order_by(LessonRow.rank_score, LessonRow.id)
        ).all()
        freed, evict = 0, []
        for row in stale:
            if used - freed + needed <= budget:
                break
            evict.append(row)
            freed += self.tokens_of(row)
        if used - freed + needed > budget:
            raise CurationError(
                f"library over budget: {used} + {needed} > {budget} tokens (--library-tokens); "
                "merge or retire lessons first"
            )
        for row in evict:
            why = (
                f"evicted to stay under the library budget ({budget} tokens): shown "
                f"{row.times_in_context} times, helpful {row.helpful} ≤ harmful {row.harmful}"
            )
            self._set_status(row, "retired", "RETIRE", prov, why)
            self.result.retired.append(row.lesson_id)

    def nearest(self, text: str, scope: str, skip: Sequence[int] = ()) -> tuple[LessonRow | None, float]:
        """The live lesson of ``scope`` (and global) most similar to ``text``, and the similarity."""
        scopes = [scope] if scope == GLOBAL_SCOPE else [scope, GLOBAL_SCOPE]
        best, best_sim = None, 0.0
        q = select(LessonRow).where(LessonRow.status.in_(LIVE_STATUSES), LessonRow.scope.in_(scopes))
        for row in self.s.scalars(q):
            if row.id in skip:
                continue
            sim = similarity(text, row.text)
            if sim > best_sim:
                best, best_sim = row, sim
        return best, best_sim

    def _refuse_duplicate(self, text: str, scope: str, skip: Sequence[int], what: str) -> None:
        row, sim = self.nearest(text, scope, skip)
        if row is not None and sim >= self.policy.near_duplicate:
            raise CurationError(
                f"{what} would duplicate {row.lesson_id} (similarity {sim:.2f}); merge with it instead"
            )

    # ------------------------------------------------------------------ ops

    def add(
        self,
        text: str,
        scope: str = GLOBAL_SCOPE,
        rationale: str = "",
        prov: Provenance | None = None,
        status: str = "candidate",
        source_episode_id: int | None = None,
    ) -> str:
        """ADD a lesson, or UPVOTE the live lesson it nearly duplicates.

        Args:
            text: the lesson (8–400 characters; whitespace collapsed).
            scope: a task family or ``"global"``.
            rationale: why (stored in the event).
            prov: the episode/rollouts or origin behind the op.
            status: ``"candidate"`` (teacher) or ``"active"`` (hand-written).
            source_episode_id: the episode the lesson is derived from.

        Returns:
            The new lesson's id, or the id of the near-duplicate that was upvoted instead.

        Raises:
            CurationError: bad text, or no room under the budget.
        """
        prov = prov or Provenance()
        try:
            text = clean_lesson_text(text)
            scope = check_scope(scope)
        except ValueError as e:
            raise CurationError(str(e)) from None
        best, best_sim = self.nearest(text, scope)
        if best is not None and best_sim >= self.policy.near_duplicate:
            self.vote(
                best.lesson_id,
                "helpful",
                prov,
                f"near-duplicate ADD (similarity {best_sim:.2f}) {text!r}. {rationale}",
            )
            return best.lesson_id
        tokens = self.count_tokens(text)
        self.make_room(tokens, prov)
        row = LessonRow(
            lesson_id=self.next_lesson_id(scope),
            text=text,
            scope=scope,
            status=status,
            helpful=0,
            harmful=0,
            neutral=0,
            times_in_context=0,
            tokens=tokens,
            utility_n=0,
            rank_score=0.0,
            source_episode_id=source_episode_id if source_episode_id is not None else prov.episode_id,
            created_at=self.now,
            updated_at=self.now,
        )
        self.s.add(row)
        self.s.flush()
        self._event(row, "ADD", prov, rationale, before=None, after=text)
        self.result.added.append(row.lesson_id)
        return row.lesson_id

    def edit(self, lesson_id: str, text: str, rationale: str = "", prov: Provenance | None = None) -> None:
        """EDIT a live lesson's text in place (same id; before/after in the history).

        Raises:
            CurationError: unknown or not live lesson, bad text, unchanged text, over budget.
        """
        prov = prov or Provenance()
        row = self.lesson(lesson_id)
        if row.status not in LIVE_STATUSES:
            raise CurationError(f"lesson {lesson_id} is {row.status}; only candidate or active lessons can be edited")
        try:
            text = clean_lesson_text(text)
        except ValueError as e:
            raise CurationError(str(e)) from None
        if text == row.text:
            raise CurationError(f"lesson {lesson_id} already has this text")
        self._refuse_duplicate(text, row.scope, [row.id], f"the new text of {lesson_id}")
        new_tokens = self.count_tokens(text)
        self.make_room(new_tokens - self.tokens_of(row), prov, spare=[row.id])
        before = row.text
        row.text, row.tokens, row.updated_at = text, new_tokens, self.now
        self._event(row, "EDIT", prov, rationale, before=before, after=text)
        self.result.edited.append(lesson_id)

    def merge(self, lesson_ids: Sequence[str], text: str, rationale: str = "", prov: Provenance | None = None) -> str:
        """MERGE live lessons into one new lesson; the sources are retired and point at it.

        The new lesson takes the sources' scope (``global`` when they differ), their summed
        counters, and status ``active`` if any source was active (else ``candidate``).

        Returns:
            The new lesson's id.

        Raises:
            CurationError: fewer than 2 distinct lessons, an unknown or not live one, bad
                text, or over budget.
        """
        prov = prov or Provenance()
        ids = list(dict.fromkeys(lesson_ids))
        if len(ids) < 2:
            raise CurationError("a merge needs at least 2 distinct lessons")
        rows = [self.lesson(i) for i in ids]
        for row in rows:
            if row.status not in LIVE_STATUSES:
                raise CurationError(f"lesson {row.lesson_id} is {row.status}; only candidate or active lessons can be merged")
        try:
            text = clean_lesson_text(text)
        except ValueError as e:
            raise CurationError(str(e)) from None
        scopes = {r.scope for r in rows}
        scope = scopes.pop() if len(scopes) == 1 else GLOBAL_SCOPE
        self._refuse_duplicate(text, scope, [r.id for r in rows], "the merged text")
        tokens = self.count_tokens(text)
        self.make_room(tokens - sum(self.tokens_of(r) for r in rows), prov, spare=[r.id for r in rows])
        merged = LessonRow(
            lesson_id=self.next_lesson_id(scope),
            text=text,
            scope=scope,
            status="active" if any(r.status == "active" for r in rows) else "candidate",
            helpful=sum(r.helpful for r in rows),
            harmful=sum(r.harmful for r in rows),
            neutral=sum(r.neutral for r in rows),
            times_in_context=sum(r.times_in_context for r in rows),
            tokens=tokens,
            utility_n=0,
            rank_score=0.0,
            source_episode_id=prov.episode_id,
            created_at=self.now,
            updated_at=self.now,
        )
        self.s.add(merged)
        self.s.flush()
        self.rerank(merged)
        sources = "\n".join(f"{r.lesson_id}: {r.text}" for r in rows)
        self._event(merged, "MERGE", prov, f"merged from {', '.join(ids)}. {rationale}", before=sources, after=text)
        for r in rows:
            r.status, r.updated_at = "retired", self.now
            self._event(r, "MERGE", prov, f"merged into {merged.lesson_id}. {rationale}", before=r.text, after=text, target=merged)
            self.result.retired.append(r.lesson_id)
        self.result.merged.append(merged.lesson_id)
        return merged.lesson_id

    def retire(self, lesson_id: str, why: str, prov: Provenance | None = None) -> None:
        """RETIRE a live or distilled lesson with a reason (it stays in the database and history).

        Raises:
            CurationError: unknown lesson, already retired, or an empty reason.
        """
        prov = prov or Provenance()
        why = " ".join((why or "").split())
        if not why:
            raise CurationError("a retirement needs a reason (--why)")
        row = self.lesson(lesson_id)
        if row.status == "retired":
            raise CurationError(f"lesson {lesson_id} is already retired")
        self._set_status(row, "retired", "RETIRE", prov, why)
        self.result.retired.append(lesson_id)

    def vote(self, lesson_id: str, tag: str, prov: Provenance | None = None, rationale: str = "") -> None:
        """UPVOTE (``helpful``), DOWNVOTE (``harmful``) or tag ``neutral``; then apply the life cycle.

        Raises:
            CurationError: unknown lesson, a retired one, or an unknown tag.
        """
        prov = prov or Provenance()
        effects = {"helpful": ("helpful", "UPVOTE"), "harmful": ("harmful", "DOWNVOTE"), "neutral": ("neutral", "TAG_NEUTRAL")}
        if tag not in effects:
            raise CurationError(f"tag must be one of {sorted(effects)}, not {tag!r}")
        row = self.lesson(lesson_id)
        if row.status == "retired":
            raise CurationError(f"lesson {lesson_id} is retired; votes apply to live lessons")
        counter, op = effects[tag]
        # counter += 1 in SQL (atomic under concurrent writers), then refresh the row
        self.s.execute(update(LessonRow).where(LessonRow.id == row.id).values({counter: getattr(LessonRow, counter) + 1}))
        self.s.refresh(row)
        self.rerank(row)
        self._event(row, op, prov, rationale)
        {"helpful": self.result.upvoted, "harmful": self.result.downvoted, "neutral": self.result.neutral}[tag].append(lesson_id)
        self._life_cycle(row, prov)

    def record_utility(
        self,
        lesson_id: str,
        *,
        n: int,
        pass_with: float,
        pass_without: float,
        ci: tuple[float, float],
        task_keys: Sequence[str],
        session_id: int | None,
        after_episodes: int,
        prov: Provenance | None = None,
    ) -> bool:
        """Store a utility A/B of a lesson (see :mod:`arena.session.utility`) and apply the life cycle.

        The check that this A/B is not stored yet, the row and the life-cycle move (PROMOTE / RETIRE)
        read and write in the caller's ONE transaction (a write transaction: serialised with every
        other writer), so an A/B recorded twice — two owners, or a check run again after a resume —
        stores one row and moves the lesson once.

        Args:
            n: paired samples; pass_with / pass_without: pass@1 in [0, 1] with / without it;
            ci: 95% CI of the effect ``pass_with − pass_without``.
            session_id, after_episodes: the check it belongs to; with a session, a second A/B of the same
                lesson for the same check is skipped.

        Returns:
            Whether it was stored (False: this check's A/B of the lesson was stored already).

        Raises:
            CurationError: unknown lesson.
        """
        prov = prov or Provenance()
        row = self.lesson(lesson_id)
        if session_id is not None and self.s.scalar(
            select(LessonUtilityRow.id).where(LessonUtilityRow.lesson_id == row.id,
                                              LessonUtilityRow.session_id == session_id,
                                              LessonUtilityRow.after_episodes == after_episodes)
        ) is not None:
            return False
        effect = pass_with - pass_without
        self.s.add(
            LessonUtilityRow(
                lesson_id=row.id,
                session_id=session_id,
                after_episodes=after_episodes,
                n=n,
                pass_with=pass_with,
                pass_without=pass_without,
                effect=effect,
                ci_lo=ci[0],
                ci_hi=ci[1],
                task_keys=list(task_keys),
                created_at=self.now,
            )
        )
        row.utility, row.utility_lo, row.utility_hi, row.utility_n = effect, ci[0], ci[1], n
        self.rerank(row)
        self._life_cycle(row, prov)
        return True

    # ------------------------------------------------------------------ life cycle

    def _life_cycle(self, row: LessonRow, prov: Provenance) -> None:
        """candidate → active on evidence; live → retired when votes or utility say it hurts."""
        if row.status not in LIVE_STATUSES:
            return
        p = self.policy
        net = row.helpful - row.harmful
        if row.harmful - row.helpful >= p.retire_votes:
            self._set_status(row, "retired", "RETIRE", prov, f"harmful {row.harmful} vs helpful {row.helpful} (≥ {p.retire_votes} net harmful votes)")
            self.result.retired.append(row.lesson_id)
        elif row.utility_hi is not None and row.utility_hi < 0:
            self._set_status(
                row, "retired", "RETIRE", prov,
                f"measured utility {row.utility:+.3f} on pass@1, 95% CI [{row.utility_lo:+.3f}, {row.utility_hi:+.3f}], n={row.utility_n}: it hurts",
            )
            self.result.retired.append(row.lesson_id)
        elif row.status == "candidate" and net >= p.promote_votes and row.utility is None and p.votes_promote(row.scope):  # a measurement outranks votes
            self._set_status(row, "active", "PROMOTE", prov, f"helpful {row.helpful} vs harmful {row.harmful} (≥ {p.promote_votes} net helpful votes)")
            self.result.promoted.append(row.lesson_id)
        elif row.status == "candidate" and row.utility_lo is not None and row.utility_lo > 0:
            self._set_status(
                row, "active", "PROMOTE", prov,
                f"measured utility {row.utility:+.3f} on pass@1, 95% CI [{row.utility_lo:+.3f}, {row.utility_hi:+.3f}], n={row.utility_n}",
            )
            self.result.promoted.append(row.lesson_id)


def apply_reflection(curator: Curator, refl: Any, context_ids: Sequence[str], prov: Provenance) -> None:
    """Apply a teacher's :class:`lessons.ops.Reflection` with ``curator``.

    Order: tags (votes on the lessons that were in context), RETIRE, MERGE, EDIT, then ADD
    (a near-duplicate ADD upvotes). Tags, edits, merges and retirements may only name
    lessons that were in context (``context_ids``); each lesson is tagged at most once. An
    op that cannot be applied is recorded in ``curator.result.rejected`` with the reason and
    the others go on.
    """
    shown = set(context_ids)
    rationale = refl.analysis or ""

    def attempt(label: str, ids: Sequence[str], fn: Callable[[], Any]) -> None:
        missing = [i for i in ids if i not in shown]
        if missing:
            curator.result.rejected.append(f"{label}: lesson {', '.join(missing)} was not in context")
            return
        try:
            with curator.s.begin_nested():
                fn()
        except CurationError as e:
            curator.result.rejected.append(f"{label}: {e}")

    tagged: set[str] = set()
    for tag in refl.tags:
        label = f"TAG {tag.lesson_id} {tag.tag}"
        if tag.lesson_id in tagged:
            curator.result.rejected.append(f"{label}: lesson already tagged in this reflection")
            continue
        tagged.add(tag.lesson_id)
        attempt(label, [tag.lesson_id], lambda t=tag: curator.vote(t.lesson_id, t.tag, prov, rationale))
    for op in refl.retire:
        attempt(f"RETIRE {op.lesson_id}", [op.lesson_id], lambda o=op: curator.retire(o.lesson_id, o.why, prov))
    for op in refl.merge:
        attempt(
            f"MERGE {'+'.join(op.lesson_ids)}",
            op.lesson_ids,
            lambda o=op: curator.merge(o.lesson_ids, o.text, o.rationale or rationale, prov),
        )
    for op in refl.edit:
        attempt(f"EDIT {op.lesson_id}", [op.lesson_id], lambda o=op: curator.edit(o.lesson_id, o.text, o.rationale or rationale, prov))
    for op in refl.add:
        attempt(f"ADD {op.text!r}", [], lambda o=op: curator.add(o.text, o.scope, o.rationale, prov))
