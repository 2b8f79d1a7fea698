"""The frozen records the TUI's read models return (never ORM rows)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from lessons.library.store import EventInfo, LessonInfo


@dataclass(frozen=True)
class SessionSummary:
    """One row of the sessions table."""

    id: int
    name: str
    started: datetime  # UTC
    status: str  # running | finished | failed | interrupted, or stopped: running without a live owner (crashed; resumable)
    rounds: int  # highest round with a recorded episode (0: none yet)
    episodes: int
    rollouts: int  # guided included
    mean_reward: float | None  # over unguided rollouts; None without rollouts
    pass_before: float | None  # held-out pass@1 before the session (evaluation "heldout_before")
    pass_after: float | None  # held-out pass@1 after, with lessons ("heldout_after")


@dataclass(frozen=True)
class EpisodeSummary:
    """One row of a session's episodes table."""

    id: int
    round: int
    episode_key: str
    task_key: str
    family: str
    rewards: list[float | None]  # the group's unguided rollouts, by idx; None: ungraded (rubric judge failed)
    guided_rewards: list[float | None]  # the guided rollouts (empty: no hint)
    lessons_in_context: list[str]  # readable lesson ids, in prompt order
    mean_reward: float  # of the unguided group


@dataclass(frozen=True)
class LearningCurve:
    """Per-round figures of one session (input of the learning-curve plot).

    ``rounds[i]`` is a round number; ``mean_reward[i]`` the mean reward of its unguided
    rollouts; ``active_lessons[i]`` the number of ``active`` lessons in the library at the
    end of that round (replayed from the audit log). Held-out pass@1 is measured before the
    first round (plotted at round 0) and after the last (plotted at the last round).
    """

    rounds: list[int]
    mean_reward: list[float]
    active_lessons: list[int]
    heldout: list[tuple[int, float]]  # (round, held-out pass@1 with lessons)
    heldout_ci: list[tuple[float, float]] = field(default_factory=list)  # the stored 95% interval of each heldout point
    heldout_n: list[int] = field(default_factory=list)  # held-out tasks behind each heldout point
    pass_at_1: list[float] = field(default_factory=list)  # sampled pass@1 per round (mean over its groups)
    pass_at_k: list[float] = field(default_factory=list)  # unbiased pass@k per round, k = the session's group size
    k: int = 0  # the session's group size (--rollouts); 0: unknown


@dataclass(frozen=True)
class LibraryTimeline:
    """The library while a session ran: live lessons by status and their tokens, with the curation events.

    ``times[i]`` is the session's start, then every moment inside the session's window
    (start → finish, or → the latest event while it runs) when a lesson was created or changed
    status; ``counts[status][i]`` is the number of lessons with that status just after
    ``times[i]`` (replayed from the audit log) and ``live_tokens[i]`` the solver tokens of
    the candidate and active ones (each lesson counted at its current text's size). The
    library is shared: events by other sessions or by hand inside the window count too.
    """

    start: datetime  # UTC
    end: datetime  # UTC
    times: list[datetime]
    counts: dict[str, list[int]]  # every status of lessons.vocab.LESSON_STATUSES
    live_tokens: list[int]
    events: list[tuple[datetime, str, str]]  # (when, op, lesson id) of the window's ADD/EDIT/MERGE/RETIRE/DISTILL


@dataclass(frozen=True)
class RolloutView:
    """One rollout as the episode screen shows it."""

    id: int
    idx: int
    guided: bool
    completion: str
    extracted_answer: str | None
    reward: float | None  # None: ungraded (the rubric judge could not grade it)
    critique: str
    completion_tokens: int
    finish_reason: str
    fault: str | None = None  # an endpoint fault or a verifier crash (agents.policy.FAULT_KINDS); None: none


@dataclass(frozen=True)
class EpisodeDetail:
    """Everything the episode screen shows."""

    id: int
    session: str
    episode_key: str
    round: int
    task_key: str
    family: str
    question: str
    answer: str  # the reference answer
    rollouts: list[RolloutView]  # unguided then guided, each by idx
    hint: tuple[str, str] | None  # (mode, text) of the hint the guided rollouts used
    lessons_in_context: list[tuple[str, str | None, str | None]]  # (lesson id, current text, status); None: gone
    events: list[EventInfo]  # curation ops this episode caused, in order
    reflection_error: str | None
    curation_rejected: list[str] = field(default_factory=list)  # the teacher's ops the curator refused, with why
    hint_rejected: list[str] = field(default_factory=list)  # hint parts / plan attempts refused (they leaked), with why


@dataclass(frozen=True)
class LessonPage:
    """One page of the lessons table, or the results of a search."""

    rows: list[LessonInfo]
    total: int  # lessons matching the filter (all pages), or search results shown
    page: int  # 0-based
    pages: int  # at least 1
    query: str = ""  # the search text ("" when browsing)


@dataclass(frozen=True)
class LessonDetail:
    """The lessons screen's detail pane."""

    lesson: LessonInfo
    events: list[EventInfo]  # full audit log, oldest first
    utility_history: list[dict[str, Any]]
    source_episodes: list[tuple[int, str]]  # (episode id, "session/episode_key") of ADD/EDIT/MERGE events
    merged_into: list[str]  # lessons this one was merged into
    merged_from: list[str]  # lessons merged into this one
    adapters: list[tuple[str, str]]  # (adapter id, relation "in_context" | "distilled")


@dataclass(frozen=True)
class AdapterView:
    """One adapter of ``arena distill`` (tables ``adapters`` / ``adapter_lessons``)."""

    adapter_id: str
    path: str
    objective: str
    created_at: str
    config: dict[str, Any]
    metrics: dict[str, Any]
    evaluation: dict[str, Any]
    lessons: list[tuple[str, str, str]] = field(default_factory=list)  # (lesson id, relation, current status)
    parent_adapter: str | None = None  # the adapter it followed in a session's wake–sleep cycles
    cycle: int | None = None  # the cycle of `arena run --cycles` that trained it (None: arena distill)
