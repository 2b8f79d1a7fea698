"""The solver role: builds the solver's chat (system prompt with lessons, then the task) and samples a group.

Lessons are data in the prompt (Karpathy's "system prompt learning"): a numbered list inside
a clearly delimited ``<lessons>`` section, cut to a token budget counted with the solver's
own tokenizer, so the prompt never grows with the library.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from agents.policy import Completion, Message, Policy
from lessons.text import neutralise_lesson, neutralise_model_text

# Must make the model reason briefly and end with a machine-readable answer tag.
SOLVER_SYSTEM = (
    "You are a careful problem solver. Think step by step but briefly, "
    "then give the final answer on the last line as <answer>ANSWER</answer>."
)

# Introduces the lessons as advice (data), not as instructions that override the task.
LESSONS_HEADER = "Lessons learned from earlier attempts at similar tasks:"



def sanitise_lesson(text: str) -> str:
    """Lesson text as it may appear in a prompt: :func:`lessons.text.neutralise_lesson`."""
    return neutralise_lesson(text)


@dataclass(frozen=True)
class LessonView:
    """What the solver needs of a lesson: its id and text (a read-only view of the library row)."""

    lesson_id: str
    text: str


def render_lessons(
    lessons: Sequence[LessonView], budget_tokens: int, count_tokens: Callable[[str], int]
) -> tuple[str, list[str]]:
    """The ``<lessons>`` section holding as many of ``lessons`` (best first) as fit the budget.

    Args:
        lessons: candidate lessons, already ranked best first.
        budget_tokens: cap on the section's size in the solver's tokens (``--lesson-tokens``).
        count_tokens: the solver's tokenizer count.

    Returns:
        ``(section, ids)``: the section text ("" when nothing fits or nothing is given) and
        the ids of the lessons it includes, in prompt order. A lesson that does not fit is
        skipped and smaller ones after it may still fit.
    """
    if budget_tokens <= 0 or not lessons:
        return "", []

    def section(lines: Sequence[str]) -> str:
        body = "\n".join(f"{i}. {text}" for i, text in enumerate(lines, 1))
        return f"{LESSONS_HEADER}\n<lessons>\n{body}\n</lessons>"

    # Count each line once (O(n) tokenizer calls, not O(n^2)): the section's size is taken as
    # the empty section plus its lines; one exact count at the end drops lessons if the
    # sum was an underestimate (BPE merges across line breaks are rare but possible).
    used = count_tokens(section([]))
    chosen: list[tuple[str, str]] = []  # (lesson_id, neutralised text)
    for les in lessons:
        text = sanitise_lesson(les.text)
        cost = count_tokens(f"\n{len(chosen) + 1}. {text}")
        if used + cost <= budget_tokens:
            chosen.append((les.lesson_id, text))
            used += cost
        elif budget_tokens - used < 4:  # not even a short lesson fits any more
            break
    while chosen and count_tokens(section([t for _, t in chosen])) > budget_tokens:
        chosen.pop()
    if not chosen:
        return "", []
    return section([t for _, t in chosen]), [i for i, _ in chosen]


def solver_messages(question: str, lessons_section: str = "") -> list[Message]:
    """The solver's chat for one task: system prompt (+ lessons section), then the question."""
    system = SOLVER_SYSTEM if not lessons_section else f"{SOLVER_SYSTEM}\n\n{lessons_section}"
    return [{"role": "system", "content": system}, {"role": "user", "content": question}]


_LESSONS_BLOCK = re.compile(r"\n*" + re.escape(LESSONS_HEADER) + r"\n<lessons>\n.*?\n</lessons>", re.S)


def strip_lessons_section(messages: Sequence[Message]) -> list[Message]:
    """The same chat without the ``<lessons>`` section of its system prompt (a copy).

    Context distillation (Snell et al. 2022) trains a completion sampled with the lessons in
    context under the chat without them: ``strip_lessons_section(solver_messages(q, section))
    == solver_messages(q)``. Chats without a lessons section come back unchanged.
    """
    out = [dict(m) for m in messages]
    for m in out:
        if m.get("role") == "system":
            m["content"] = _LESSONS_BLOCK.sub("", m["content"])
    return out


def with_lessons_section(messages: Sequence[Message], lessons_section: str) -> list[Message]:
    """The same chat with ``lessons_section`` appended to its system prompt, as :func:`solver_messages` places it (a copy).

    The inverse of :func:`strip_lessons_section` on a chat without lessons:
    ``with_lessons_section(solver_messages(q), s) == solver_messages(q, s)``. An empty section
    leaves the chat unchanged.

    Raises:
        ValueError: the chat has no system message (the solver's chats always have one).
    """
    out = [dict(m) for m in messages]
    if not lessons_section:
        return out
    for m in out:
        if m.get("role") == "system":
            m["content"] = f"{m['content']}\n\n{lessons_section}"
            return out
    raise ValueError("the chat has no system message to hold the lessons section")


def guided_messages(messages: Sequence[Message], hint: str) -> list[Message]:
    """The same chat with the hint appended to the last user turn (Guide's guided context).

    The hint (a teacher's plan, the critic's feedback, the reference answer) is model-written
    text: it is neutralised (:func:`lessons.text.neutralise_model_text`, line breaks kept) so a
    literal ``<|im_start|>`` in a plan cannot open a turn in the rendered prompt. Everything
    else, lessons included, is unchanged, so dropping the hint gives back the unguided context
    exactly.

    Args:
        messages: the unguided chat (:func:`solver_messages`).
        hint: the hint text.

    Returns:
        A copy of the chat with ``Hint:`` and the neutralised hint after the last turn's text.
    """
    out = [dict(m) for m in messages]
    out[-1]["content"] = f"{out[-1]['content']}\n\nHint:\n{neutralise_model_text(hint)}"
    return out


def solve(
    policy: Policy, messages: Sequence[Message], k: int, temperature: float, max_tokens: int, seed: int | None
) -> list[Completion]:
    """Sample the group: ``k`` rollouts of one chat in one batched call (where the backend allows)."""
    return policy.sample(messages, n=k, temperature=temperature, max_tokens=max_tokens, seed=seed)
