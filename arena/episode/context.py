"""What the episode graph's nodes need beyond the state: the run's context (LangGraph ``context_schema``).

The context holds the roles' policies, the lesson store, the task table, the sampling settings
and the reward strategy. It is passed to every run of the graph (``graph.invoke(..., context=ctx)``
or through :class:`arena.episode.graph.EpisodeGraph`) and never enters a checkpoint: a resumed
session rebuilds it from its config and continues from the checkpointed state.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from agents.policy import Policy
from arena.episode.rewards import RewardStrategy, VerifierReward
from arena.tasks.model import Task
from lessons.library.store import LessonStore


@dataclass
class Roles:
    """The policies behind the roles. ``critic`` None: the verifier alone writes critiques; ``proposer`` None: the teacher's."""

    solver: Policy
    teacher: Policy
    critic: Policy | None = None
    proposer: Policy | None = None  # writes proposed tasks (arena.session.curriculum); None: the teacher proposes


@dataclass(frozen=True)
class EpisodeSettings:
    """Sampling settings of an episode (a slice of the session config)."""

    rollouts: int = 8  # group size k
    temperature: float = 0.8  # solver sampling temperature
    max_tokens: int = 96  # solver completion cap, tokens
    lesson_tokens: int = 512  # budget of the lessons section in the solver prompt, solver tokens
    teacher_temperature: float = 0.3  # teacher sampling temperature
    teacher_max_tokens: int = 192  # teacher reply cap, tokens
    success_threshold: float = 1.0  # a rollout succeeds when its reward >= this; a group whose best is below is all-fail
    hint_modes: tuple[str, ...] = ("feedback", "answer")  # hint parts for all-fail groups; () disables hints
    hint_max_tokens: int = 96  # cap on a teacher-written plan, tokens
    include_flagged: bool = False  # show reward-hack-flagged rollouts to the teacher's reflection
    exclude_lessons: tuple[str, ...] = ()  # lessons distilled into the solver's adapter: kept out of its prompt
    adapter_id: str | None = None  # readable id of the solver's adapter (recorded on every rollout); None: base model
    reflect: bool = True  # the teacher reflects on each group; False: no lessons are written (weight-only learning)
    reflect_on: str = "all"  # "all" groups, or only "mixed" ones (a success and a failure among the usable rollouts, guided included)
    reflections_per_round: int = 0  # the teacher's budget: reflections per round, spent in task order; 0: no limit


class ReflectionBudget:
    """Reflections the teacher may still write in the current round (spent in task order, phase 2).

    Args:
        limit: reflections per round; 0: no limit.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0

    def reset(self, already_used: int = 0) -> None:
        """A new round starts; ``already_used`` reflections of it were stored before a resume."""
        self.used = already_used

    def take(self) -> bool:
        """Spend one reflection; False when the round's budget is spent."""
        if self.limit and self.used >= self.limit:
            return False
        self.used += 1
        return True


@dataclass(frozen=True)
class EpisodeContext:
    """The run context of the episode graph (``StateGraph(EpisodeState, context_schema=EpisodeContext)``).

    Attributes:
        roles: solver, teacher and optional critic policies.
        store: the lesson store (read by ``retrieve_lessons`` and ``reflect``, written by ``curate``).
        tasks: task_key → :class:`Task`; the verifier and reference answer stay here, out of the
            state. The session's curriculum adds proposed tasks to the same mapping.
        settings: sampling settings.
        reward: the reward strategy of the grade nodes (:mod:`arena.episode.rewards`).
    """

    roles: Roles
    store: LessonStore
    tasks: Mapping[str, Task]
    settings: EpisodeSettings
    reward: RewardStrategy
    reflection_budget: ReflectionBudget | None = None  # the round's reflections left (reset by the runner each round)

    @classmethod
    def create(
        cls,
        roles: Roles,
        store: LessonStore,
        tasks: Mapping[str, Task],
        settings: EpisodeSettings,
        reward: RewardStrategy | None = None,
    ) -> EpisodeContext:
        """The context of a session's episodes.

        Args:
            roles, store, tasks, settings: as the attributes.
            reward: the reward strategy; None: the verifier, with ``roles.critic``'s critiques.

        Returns:
            The context to pass to every run of the graph.
        """
        strategy = reward if reward is not None else VerifierReward(roles.critic)
        return cls(roles, store, tasks, settings, strategy, ReflectionBudget(settings.reflections_per_round))

    def task(self, task_key: str) -> Task:
        """The task of an episode (``state["task_key"]``).

        Raises:
            KeyError: the key is not in :attr:`tasks`.
        """
        return self.tasks[task_key]
