"""The episode graph (LangGraph ``StateGraph``): wiring only.

```
START → retrieve_lessons → solve → grade ─┬─ some rollout succeeded ─────────────────→ reflect → curate → END
                                           └─ all failed → hint → solve_guided → grade_guided ┘
```

One episode is one pass over one task. The pieces live beside this module:

- :mod:`arena.episode.state`: :class:`EpisodeState`, a ``TypedDict`` of JSON-friendly typed
  entries, so the ``SqliteSaver`` checkpointer can persist it after every node: an interrupted
  session resumes mid-episode (e.g. after ``solve``, without re-sampling the group) and a
  finished episode is never recorded twice (``curate`` writes it in one idempotent transaction);
- :mod:`arena.episode.nodes`: the nodes and routers, module-level functions
  ``node(state, runtime) -> dict``;
- :mod:`arena.episode.context`: :class:`EpisodeContext`, what the nodes take from
  ``runtime.context`` (roles, store, tasks, settings, reward), never checkpointed.

:func:`compile_episode_graph` compiles the graph alone (pass ``context=`` to every run);
:func:`build_episode_graph` binds it to one context, so tests inject
:class:`agents.backends.fake.FakePolicy` and ``InMemorySaver`` and the session runner its
policies and ``SqliteSaver``, and both call ``invoke(input, config)`` as on a compiled graph.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import StateSnapshot

from arena.episode import nodes
from arena.episode.context import EpisodeContext, EpisodeSettings, Roles
from arena.episode.rewards import RewardStrategy
from arena.episode.state import EpisodeState
from arena.tasks.model import Task
from lessons.library.store import LessonStore


def compile_episode_graph(checkpointer: BaseCheckpointSaver | None = None) -> CompiledStateGraph:
    """Compile the episode graph, without a context.

    Args:
        checkpointer: a LangGraph checkpointer (``SqliteSaver`` in the app, ``InMemorySaver`` in
            tests), or None (no persistence).

    Returns:
        A compiled ``StateGraph(EpisodeState, context_schema=EpisodeContext)``; run it with
        ``graph.invoke(input, {"configurable": {"thread_id": ...}}, context=ctx)``.
    """
    g = StateGraph(EpisodeState, context_schema=EpisodeContext)
    g.add_node("retrieve_lessons", nodes.retrieve_lessons)
    g.add_node("solve", nodes.solve)
    g.add_node("grade", nodes.grade)
    g.add_node("hint", nodes.hint)
    g.add_node("solve_guided", nodes.solve_guided)
    g.add_node("grade_guided", nodes.grade_guided)
    g.add_node("reflect", nodes.reflect)
    g.add_node("curate", nodes.curate)
    g.add_edge(START, "retrieve_lessons")
    g.add_edge("retrieve_lessons", "solve")
    g.add_edge("solve", "grade")
    g.add_conditional_edges("grade", nodes.route_after_grade, ["hint", "reflect"])
    g.add_conditional_edges("hint", nodes.route_after_hint, ["solve_guided", "reflect"])
    g.add_edge("solve_guided", "grade_guided")
    g.add_edge("grade_guided", "reflect")
    g.add_edge("reflect", "curate")
    g.add_edge("curate", END)
    return g.compile(checkpointer=checkpointer)


@dataclass(frozen=True)
class EpisodeGraph:
    """The compiled episode graph bound to one :class:`EpisodeContext`.

    Every run gets ``context=self.context``; the checkpoints hold only the state, so a graph
    built again with a new context (a resumed session) continues any checkpointed episode.
    """

    compiled: CompiledStateGraph
    context: EpisodeContext

    def invoke(self, input: EpisodeState | None, config: RunnableConfig | None = None, **kwargs: Any) -> dict[str, Any]:
        """Run (or, with ``input`` None, resume) one episode's thread: ``CompiledStateGraph.invoke`` with the context.

        Args:
            input: the episode's input keys, or None to continue from the thread's checkpoint.
            config: ``{"configurable": {"thread_id": ...}}``.
            kwargs: passed on (e.g. ``interrupt_before=["curate"]``).

        Returns:
            The thread's state values when the run stops.
        """
        return self.compiled.invoke(input, config, context=self.context, **kwargs)

    def get_state(self, config: RunnableConfig) -> StateSnapshot:
        """The thread's latest checkpointed state (``snapshot.next``: the nodes still to run)."""
        return self.compiled.get_state(config)

    def get_state_history(self, config: RunnableConfig) -> Iterator[StateSnapshot]:
        """The thread's checkpoints, newest first."""
        return self.compiled.get_state_history(config)


def build_episode_graph(
    roles: Roles,
    store: LessonStore,
    tasks: Mapping[str, Task],
    settings: EpisodeSettings,
    checkpointer: BaseCheckpointSaver | None = None,
    reward: RewardStrategy | None = None,
) -> EpisodeGraph:
    """Compile the episode graph and bind it to its context.

    Args:
        roles: solver, teacher and optional critic policies.
        store: the lesson store (read by ``retrieve_lessons``, written by ``curate``).
        tasks: task_key → :class:`Task` (the verifier and reference answer stay here, out of the state).
        settings: sampling settings.
        checkpointer: a LangGraph checkpointer (``SqliteSaver`` in the app, ``InMemorySaver`` in tests).
        reward: the reward strategy of the grade nodes (:mod:`arena.episode.rewards`); default the
            verifier with ``roles.critic``'s critiques.

    Returns:
        An :class:`EpisodeGraph`; invoke it with an :class:`EpisodeState` input and
        ``{"configurable": {"thread_id": ...}}``.
    """
    context = EpisodeContext.create(roles, store, tasks, settings, reward)
    return EpisodeGraph(compile_episode_graph(checkpointer), context)
