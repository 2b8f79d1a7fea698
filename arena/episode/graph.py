"""The episode graph (LangGraph ``StateGraph``).

```
START → retrieve_lessons → solve → grade ─┬─ some rollout succeeded ─────────────────→ reflect → curate → END
                                           └─ all failed → hint → solve_guided → grade_guided ┘
```

One episode is one pass over one task. State is a ``TypedDict`` of JSON-friendly values so the
``SqliteSaver`` checkpointer can persist it after every node: an interrupted session resumes
mid-episode (e.g. after ``solve``, without re-sampling the group) and a finished episode is
never recorded twice (``curate`` writes it in one idempotent transaction).

The graph is built by :func:`build_episode_graph`, which takes the roles' policies, the store
and the checkpointer, so tests inject :class:`agents.backends.fake.FakePolicy` and ``InMemorySaver``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from types import SimpleNamespace
from typing import Any, TypedDict

from langgraph.graph import END, START, StateGraph

from agents.policy import Completion, Policy
from agents.roles.hints import FailedAttempt, write_hint
from agents.roles.solver import guided_messages, solver_messages
from agents.roles.teacher import LIBRARY_FULL_NOTE, RolloutView, reflect
from arena.episode.prompt import retrieve
from arena.episode.rewards import RewardStrategy, VerifierReward
from arena.tasks.model import Task
from arena.tasks.verify import has_verifier
from lessons.library.rubrics import RubricStore, eligible_for_training
from lessons.library.store import EpisodeRecord, HintRecord, LessonStore, RolloutRecord
from lessons.ops import Reflection
from lessons.outcomes import passes

LIBRARY_FULL_FRACTION = 0.8  # the teacher is asked to merge/retire once the library holds this share of its budget


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


class EpisodeState(TypedDict, total=False):
    """The state of one episode; every key has a single writer, so none needs a reducer."""

    # input
    session_id: int
    episode_key: str
    round: int
    task_key: str
    seed: int
    started_at: str  # ISO-8601 UTC
    # retrieve_lessons
    lessons_shown: list[list[str]]  # [[lesson_id, text], ...] in prompt order
    messages: list[dict[str, str]]
    # solve
    completions: list[dict[str, Any]]  # Completion fields + latency_s
    # grade
    grades: list[dict[str, Any]]  # {"reward", "extracted_answer", "critique"} + rubric keys (arena.episode.rewards)
    # hint → solve_guided → grade_guided (all-fail train groups only)
    hint: dict[str, Any] | None  # {"mode", "text", "hint_id" (reused) or None, "rejected": [...]}
    guided_messages: list[dict[str, str]]
    guided_completions: list[dict[str, Any]]
    guided_grades: list[dict[str, Any]]
    # reflect
    reflection: dict[str, Any] | None  # a validated lessons.ops.Reflection, as a dict
    reflection_raw: list[str]
    reflection_error: str | None
    rejected_ops: list[str]
    # curate
    episode_id: int | None
    lessons_added: list[str]


def retrieve_for_task(
    store: LessonStore,
    task: Task,
    budget_tokens: int,
    count_tokens: Callable[[str], int],
    exclude: Collection[str] = (),
) -> tuple[str, list[list[str]]]:
    """The lessons section for ``task`` and the ``[id, text]`` pairs it holds.

    Live lessons of the task's family and global ones, ranked by BM25 relevance to the
    question and by their curation prior (:mod:`lessons.library.retrieval`), cut to
    ``budget_tokens`` of the solver's tokenizer; ``exclude`` leaves lesson ids out. Shared
    by the graph, evaluation and utility A/Bs.

    Visibility: a train task sees candidates and active lessons (candidates gather their
    evidence there); any other task (held-out evaluation) sees ``active`` lessons only, so an
    untested lesson never reaches a held-out prompt.
    """
    return retrieve(store, task.family, task.question, budget_tokens, count_tokens, exclude,
                    active_only=task.split != "train")


def build_episode_graph(
    roles: Roles,
    store: LessonStore,
    tasks: Mapping[str, Task],
    settings: EpisodeSettings,
    checkpointer: Any = None,
    reward: RewardStrategy | None = None,
    rubric_store: RubricStore | None = None,
):
    """Compile the episode graph.

    Args:
        roles: solver, teacher and optional critic policies.
        store: the lesson store (read by ``retrieve_lessons``, written by ``curate``).
        tasks: task_key → :class:`Task` (the verifier and reference answer stay here, out of the state).
        settings: sampling settings.
        checkpointer: a LangGraph checkpointer (``SqliteSaver`` in the app, ``InMemorySaver`` in tests).
        reward: the reward strategy of the grade nodes (:mod:`arena.episode.rewards`); default the
            verifier with ``roles.critic``'s critiques.
        rubric_store: where ``curate`` stores rubric grading (verdicts, status, hack flags);
            needed with a rubric reward.

    Returns:
        A compiled graph; invoke it with an :class:`EpisodeState` input and
        ``{"configurable": {"thread_id": ...}}``.
    """

    def retrieve_lessons(state: EpisodeState) -> dict:
        task = tasks[state["task_key"]]
        section, shown = retrieve_for_task(
            store, task, settings.lesson_tokens, roles.solver.count_tokens, settings.exclude_lessons
        )
        return {"lessons_shown": shown, "messages": solver_messages(task.question, section)}

    def sample_group(messages: list[dict[str, str]], seed: int | None) -> list[dict[str, Any]]:
        t0 = time.perf_counter()
        outs = roles.solver.sample(
            messages, n=settings.rollouts, temperature=settings.temperature, max_tokens=settings.max_tokens, seed=seed
        )
        latency = (time.perf_counter() - t0) / max(1, len(outs))
        return [{**_completion_dict(c), "latency_s": latency} for c in outs]

    strategy: RewardStrategy = reward if reward is not None else VerifierReward(roles.critic)

    def grade_completions(state: EpisodeState, completions: list[dict[str, Any]], seed: int | None) -> list[dict[str, Any]]:
        comps = [Completion(**{k: v for k, v in c.items() if k != "latency_s"}) for c in completions]
        return strategy.grade(tasks[state["task_key"]], comps, state["session_id"], seed)

    def solve(state: EpisodeState) -> dict:
        return {"completions": sample_group(state["messages"], state.get("seed"))}

    def grade(state: EpisodeState) -> dict:
        return {"grades": grade_completions(state, state["completions"], state.get("seed"))}

    def route_after_grade(state: EpisodeState) -> str:
        """``hint`` for an all-fail group of a train task when hints are on, else ``reflect``.

        Held-out tasks never get hints (they are not run through this graph at all, and the
        router refuses them anyway).
        """
        task = tasks[state["task_key"]]
        best = max((g["reward"] for g in state["grades"] if g["reward"] is not None), default=0.0)
        hintable = has_verifier(task) or bool(task.answer)  # a rubric task needs a reference for hints
        if settings.hint_modes and hintable and task.split == "train" and not passes(best, settings.success_threshold):
            return "hint"
        return "reflect"

    def hint(state: EpisodeState) -> dict:
        task = tasks[state["task_key"]]
        mode = "+".join(settings.hint_modes)
        stored = store.find_hint(state["session_id"], task.task_key, mode)
        if stored is not None:
            h = {"mode": stored.mode, "text": stored.text, "hint_id": stored.id, "rejected": []}
        else:
            failed = [
                FailedAttempt(c["text"], g["extracted_answer"], g["critique"])
                for c, g in zip(state["completions"], state["grades"])
            ]
            written = write_hint(
                roles.teacher, settings.hint_modes, task.question, failed, task.answer,
                max_tokens=settings.hint_max_tokens, seed=state.get("seed"),
            )
            if written is None:
                return {"hint": None, "guided_messages": [], "guided_completions": [], "guided_grades": []}
            h = {"mode": written.mode, "text": written.text, "hint_id": None, "rejected": written.rejected}
        return {"hint": h, "guided_messages": guided_messages(state["messages"], h["text"])}

    def route_after_hint(state: EpisodeState) -> str:
        return "solve_guided" if state.get("hint") else "reflect"

    def solve_guided(state: EpisodeState) -> dict:
        seed = state.get("seed")
        return {"guided_completions": sample_group(state["guided_messages"], None if seed is None else seed + 1)}

    def grade_guided(state: EpisodeState) -> dict:
        seed = state.get("seed")
        return {"guided_grades": grade_completions(state, state["guided_completions"], None if seed is None else seed + 1)}

    def usable(g: dict[str, Any]) -> bool:
        """Ungraded rollouts and (by default) reward-hack-flagged ones are not reflected on."""
        return eligible_for_training(_grade_view(g), include_flagged=settings.include_flagged)

    def reflect_node(state: EpisodeState) -> dict:
        if not settings.reflect:  # weight-only learning: nothing to reflect for
            return {"reflection": None, "reflection_raw": [], "rejected_ops": [], "reflection_error": None}
        task = tasks[state["task_key"]]
        views = [
            RolloutView(c["text"], g["reward"], g["critique"], failed_criteria=g.get("failed_criteria"))
            for c, g in zip(state["completions"], state["grades"]) if usable(g)
        ]
        views += [
            RolloutView(c["text"], g["reward"], g["critique"], guided=True, failed_criteria=g.get("failed_criteria"))
            for c, g in zip(state.get("guided_completions") or [], state.get("guided_grades") or []) if usable(g)
        ]
        if not views:
            return {"reflection": None, "reflection_raw": [], "rejected_ops": [],
                    "reflection_error": "no graded, unflagged rollout to reflect on"}
        h = state.get("hint")
        used, budget = store.library_tokens_used(), store.curation_policy.library_tokens
        note = LIBRARY_FULL_NOTE.format(used=used, budget=budget) if used >= LIBRARY_FULL_FRACTION * budget else None
        result = reflect(
            roles.teacher,
            task.family,
            task.question,
            views,
            [(i, t) for i, t in state["lessons_shown"]],
            reference_answer=task.answer,
            temperature=settings.teacher_temperature,
            max_tokens=settings.teacher_max_tokens,
            seed=state.get("seed"),
            hint=h["text"] if h else None,
            library_note=note,
        )
        return {
            "reflection": result.reflection.model_dump() if result.reflection else None,
            "reflection_raw": result.raw,
            "reflection_error": result.error,
            "rejected_ops": result.rejected,
        }

    def curate(state: EpisodeState) -> dict:
        task = tasks[state["task_key"]]
        def records(completions, grades, messages, guided: bool, start: int) -> list[RolloutRecord]:
            return [
                RolloutRecord(
                    idx=start + i,
                    messages=messages,
                    completion=c["text"],
                    extracted_answer=g["extracted_answer"],
                    reward=g["reward"],
                    critique=g["critique"],
                    prompt_tokens=c["prompt_tokens"],
                    completion_tokens=len(c["token_ids"]) or max(1, len(c["text"].split())),
                    finish_reason=c["finish_reason"],
                    latency_s=c["latency_s"],
                    guided=guided,
                    token_ids=c["token_ids"] or None,
                    logprobs=c["logprobs"],
                    unguided_messages=state["messages"] if guided else None,
                )
                for i, (c, g) in enumerate(zip(completions, grades))
            ]

        rollouts = records(state["completions"], state["grades"], state["messages"], False, 0)
        h = state.get("hint")
        if h:
            rollouts += records(
                state["guided_completions"], state["guided_grades"], state["guided_messages"], True, len(rollouts)
            )
        reflection = Reflection.model_validate(state["reflection"]) if state.get("reflection") else None
        error = state.get("reflection_error")
        if state.get("rejected_ops"):
            error = "; ".join(filter(None, [error, *state["rejected_ops"]]))
        if h and h.get("rejected"):
            error = "; ".join(filter(None, [error, *h["rejected"]]))
        result = store.record_episode(
            EpisodeRecord(
                session_id=state["session_id"],
                episode_key=state["episode_key"],
                round=state["round"],
                task_key=task.task_key,
                system_prompt=state["messages"][0]["content"],
                lessons_in_context=[i for i, _ in state["lessons_shown"]],
                rollouts=rollouts,
                reflection=reflection,
                reflection_raw="\n---\n".join(state.get("reflection_raw", [])),
                reflection_error=error,
                hint=HintRecord(h["mode"], h["text"], h["hint_id"]) if h else None,
                started_at=datetime.fromisoformat(state["started_at"]) if state.get("started_at") else None,
                finished_at=datetime.now(timezone.utc),
                adapter_id=settings.adapter_id,
            )
        )
        if rubric_store is not None and strategy.kind != "verifier":  # idempotent: runs again on a resumed curate
            all_grades = list(state["grades"]) + (list(state.get("guided_grades") or []) if h else [])
            rubric_store.record_grading(state["session_id"], state["episode_key"], dict(enumerate(all_grades)))
        if result is None:  # already recorded (resumed after the write, before the checkpoint)
            return {"episode_id": None, "lessons_added": []}
        return {"episode_id": result.episode_id, "lessons_added": list(result.lessons_added)}

    g = StateGraph(EpisodeState)
    g.add_node("retrieve_lessons", retrieve_lessons)
    g.add_node("solve", solve)
    g.add_node("grade", grade)
    g.add_node("hint", hint)
    g.add_node("solve_guided", solve_guided)
    g.add_node("grade_guided", grade_guided)
    g.add_node("reflect", reflect_node)
    g.add_node("curate", curate)
    g.add_edge(START, "retrieve_lessons")
    g.add_edge("retrieve_lessons", "solve")
    g.add_edge("solve", "grade")
    g.add_conditional_edges("grade", route_after_grade, ["hint", "reflect"])
    g.add_conditional_edges("hint", route_after_hint, ["solve_guided", "reflect"])
    g.add_edge("solve_guided", "grade_guided")
    g.add_edge("grade_guided", "reflect")
    g.add_edge("reflect", "curate")
    g.add_edge("curate", END)
    return g.compile(checkpointer=checkpointer)


def _grade_view(g: dict[str, Any]) -> SimpleNamespace:
    """A grade dict seen through the attributes :func:`lessons.library.rubrics.eligible_for_training` reads."""
    return SimpleNamespace(
        reward=g.get("reward"),
        grading_status="graded" if g.get("graded", True) else "ungraded",
        hack_flags=list(g.get("hack_flags") or []),
    )


def _completion_dict(c: Completion) -> dict[str, Any]:
    return {
        "text": c.text,
        "token_ids": list(c.token_ids),
        "logprobs": list(c.logprobs) if c.logprobs is not None else None,
        "finish_reason": c.finish_reason,
        "prompt_tokens": c.prompt_tokens,
    }
