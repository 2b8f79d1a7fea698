"""The critic role: turns verifier scores into rewards in [0, 1] and writes a one-line critique per rollout.

The verifier (reasoning-gym's ``score_answer`` or exact/numeric match) is injected by the
caller, so the critic never sees how a task family is checked, and a critic model never reads the
reference answer (it is used only to scrub a model critique that states it). With a critic model (``--critic local`` or
``openai:MODEL``), failed rollouts also get a short model-written critique; the reward is
always the verifier's.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from agents.policy import Completion, Policy
from lessons.outcomes import passes
from lessons.text import contains_token, neutralise_model_text

# Must make the critic name the first mistake in one sentence, without giving the answer.
CRITIC_SYSTEM = (
    "You review a student's answer that a checker marked wrong. In ONE short sentence, name the "
    "first mistake in the reasoning or format. Do not state the correct answer."
)


# Format notes appended to a critique (the teacher's failure summary reads them: agents.roles.teacher).
NOTE_CUT_OFF = "output was cut off at the token limit"
NOTE_NO_TAG = "no <answer> tag; answer taken from the text"


@dataclass
class Grade:
    """The critic's verdict on one rollout."""

    reward: float  # in [0, 1]
    extracted_answer: str | None
    critique: str  # one line


def _one_line(text: str, limit: int = 200) -> str:
    line = re.sub(r"\s+", " ", text).strip()
    return line[: limit - 1] + "…" if len(line) > limit else line


def grade_group(
    completions: Sequence[Completion],
    extract: Callable[[str], str | None],
    verify: Callable[[str | None], float],
    feedback: Callable[[str | None], str],
    question: str = "",
    critic: Policy | None = None,
    reference_answer: str | None = None,
) -> list[Grade]:
    """Grade a group of rollouts.

    Args:
        completions: the group's completions.
        extract: completion text → extracted answer (or None).
        verify: extracted answer → score in [0, 1] (the verifier).
        feedback: extracted answer → one-line verifier feedback that does not reveal the answer.
        question: the task text (shown to a critic model only).
        critic: optional model that adds a one-sentence critique to failed rollouts.
        reference_answer: used only to scrub a critic model's critique of the answer.

    Returns:
        One :class:`Grade` per completion, in order. Format notes (truncated output, missing
        answer tag) are appended to the critique.
    """
    grades: list[Grade] = []
    for c in completions:
        answer = extract(c.text)
        reward = min(1.0, max(0.0, float(verify(answer))))
        notes = [feedback(answer)]
        if c.finish_reason == "length":
            notes.append(NOTE_CUT_OFF)
        elif answer is not None and "<answer>" not in c.text.lower():
            notes.append(NOTE_NO_TAG)
        grades.append(Grade(reward, answer, _one_line("; ".join(notes))))
    if critic is not None:
        for c, g in zip(completions, grades):
            if passes(g.reward):
                continue
            out = critic.sample(
                [
                    {"role": "system", "content": CRITIC_SYSTEM},
                    {"role": "user", "content": f"Task: {question}\nStudent answer:\n{neutralise_model_text(c.text)}"},
                ],
                n=1,
                temperature=0.0,
                max_tokens=48,
            )[0].text
            note = _one_line(out, 160)
            if reference_answer and contains_token(note, reference_answer.strip()):
                note = "[critique withheld: it stated the answer]"
            if note:
                g.critique = _one_line(f"{g.critique}; {note}")
    return grades
