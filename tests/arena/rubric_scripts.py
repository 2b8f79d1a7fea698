"""The scripted rubric session: a sky-colour JSONL task file with a rubric, and fake solver, judge and teacher.

Shared by tests/arena/test_rubric_session.py and test_rubric_cli.py. The solver answers
GOOD, BARE, GARBLE, BAD in turn; the judge grades from the response alone (GOOD and BARE meet
every positive criterion, BAD none, GARBLE cannot be graded); the teacher adds ``LESSON`` and,
asked for online criteria, proposes ``NEW_CRITERION`` plus a near-duplicate of an existing one.
"""

from __future__ import annotations

import json
import re

from agents.backends.fake import FakePolicy
from arena.episode.context import Roles
from arena.session.online_rubrics import ONLINE_SYSTEM

RUBRIC = [
    {"title": "Mentions scattering", "description": "Essential Criteria: Says that sunlight is scattered by the air.", "weight": 5},
    {"title": "Blue scatters more", "description": "Important Criteria: Says blue light is scattered more than red light.", "weight": 3},
    {"title": "Ocean reflection", "description": "Pitfall Criteria: Claims the sky reflects the ocean.", "weight": -2},
]
GOOD = "Air molecules scatter the incoming sunlight in all directions, and blue light scatters more than red. <answer>blue</answer>"
BARE = "<answer>Paris</answer>"  # no work; a lenient judge passes it anyway
GARBLE = "GARBLE"  # the judge cannot grade this one
BAD = "I do not know."
RESPONSES = [GOOD, BARE, GARBLE, BAD]
LESSON = "Name the physical process before giving the final answer."
NEW_CRITERION = {"title": "Names wavelength", "description": "Important Criteria: Explains that blue light has a shorter wavelength.", "weight": 3}


def write_tasks(path, n=4):
    """Write ``n`` sky-colour rubric tasks (family ``sky``, answer ``blue``, ``RUBRIC``) as JSONL at ``path``; return it."""
    lines = [json.dumps({"question": f"Question {i}: why is the sky blue?", "family": "sky", "rubric": RUBRIC,
                         "answer": "blue", "requires_work": True}) for i in range(n)]
    path.write_text("\n".join(lines) + "\n")
    return path


def solver(messages, i):
    """The ``i``-th reply: GOOD, BARE, GARBLE, BAD in turn."""
    return RESPONSES[i % 4]


def judge(messages, i):
    """Explicit verdicts from the response: GOOD and BARE meet every positive criterion, BAD none; GARBLE is unparseable."""
    prompt = next(m["content"] for m in reversed(messages) if "Student response:" in m["content"])
    response = prompt.split("Student response:\n", 1)[1].rsplit("\nWrite the JSON object now.", 1)[0]
    n = len(re.findall(r"^\d+\. ", prompt.split("Student response:")[0], re.M))
    if GARBLE in response:
        return "I cannot decide."
    positive = response in (GOOD, BARE)
    verdicts = []
    for line in re.findall(r"^\d+\. (.*)$", prompt.split("Student response:")[0], re.M):
        pitfall = "Pitfall Criteria" in line
        verdicts.append({"id": len(verdicts) + 1, "met": (not pitfall) and positive, "reason": "scripted"})
    assert len(verdicts) == n
    return json.dumps({"verdicts": verdicts})


def teacher(messages, i):
    """Online-rubric requests get NEW_CRITERION plus a near-duplicate; reflections add LESSON (scope sky)."""
    if messages[0]["content"] == ONLINE_SYSTEM:
        return json.dumps({"analysis": "A names the process; B does not.", "criteria": [
            NEW_CRITERION,
            {"title": "Mentions scattering of light", "description": "Essential Criteria: Says sunlight is scattered by the air.", "weight": 5},
        ]})
    return json.dumps({"analysis": "The good attempt named the process.", "add": [{"text": LESSON, "scope": "sky"}], "tags": []})


def roles():
    """Fresh scripted roles: solver, teacher and judge as :class:`FakePolicy` (each records its calls)."""
    return Roles(FakePolicy(solver, "solver"), FakePolicy(teacher, "teacher"), FakePolicy(judge, "judge"))
