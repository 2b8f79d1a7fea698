"""Scripted replies for sessions against the fault-injecting server (tests/agents/fault_server.py): a task file of
sums, and a normal reply for each role (the solver answers right, the teacher adds one lesson)."""

from __future__ import annotations

import json
import re

from agents.roles.solver import SOLVER_SYSTEM

LESSON = "Add the ones digits first, then the tens, and carry when a column passes nine."
CHAT = [{"role": "user", "content": "Compute 1 plus 2."}]


def write_tasks(path, n=8):
    lines = [json.dumps({"question": f"Compute {10 + i} plus {20 + 2 * i}.", "answer": str(30 + 3 * i),
                         "family": "adding"}) for i in range(n)]
    path.write_text("\n".join(lines) + "\n")
    return path


def is_solver(body: dict) -> bool:
    return (body.get("messages") or [{}])[0].get("content", "").startswith(SOLVER_SYSTEM)


def last_user(body: dict) -> str:
    return next((m["content"] for m in reversed(body.get("messages") or []) if m["role"] == "user"), "")


def content(body: dict) -> str:
    """A normal reply: the solver answers the sum right, the teacher adds one lesson."""
    if is_solver(body):
        a, b = map(int, re.findall(r"Compute (\d+) plus (\d+)", last_user(body))[-1])
        return f"{a} + {b} = {a + b}. <answer>{a + b}</answer>"
    return "```json\n" + json.dumps({"analysis": "Column by column.", "add": [{"text": LESSON, "scope": "adding"}]}) + "\n```"
