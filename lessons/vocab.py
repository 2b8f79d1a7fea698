"""The library's vocabularies: the values of its enumerated string columns.

Plain tuples with no ORM behind them, so the CLI, the TUI and the roles can validate a flag
or fill a menu without importing :mod:`lessons.db.schema` (whose row classes only
:mod:`lessons` itself touches). The schema documents each column against these tuples and
the repositories in :mod:`lessons.library` validate writes with them; the database has no
CHECK constraints for them, so a new value needs no table rebuild on SQLite.
"""

from __future__ import annotations

SESSION_STATUSES = ("running", "finished", "failed", "interrupted")
# Shown, never stored: a "running" session without a live lease (its process crashed or was killed; --resume continues it).
STOPPED = "stopped"
SPLITS = ("train", "heldout")
TASK_SOURCES = ("reasoning_gym", "jsonl", "proposed")  # "proposed": exact/numeric match on an agreed reference
# Where a task came from (arena.session.curriculum): a generator draw, a task file, or the proposer role.
TASK_ORIGINS = ("generator", "file", "proposer")
PROPOSAL_STATUSES = ("accepted", "rejected")
LESSON_STATUSES = ("candidate", "active", "retired", "distilled")
# ADD/EDIT/MERGE/RETIRE/UPVOTE/DOWNVOTE are curation ops (ACE, ExpeL); TAG_NEUTRAL records a
# neutral tag; PROMOTE a candidate becoming active on evidence; IMPORT a lesson read from a
# JSONL export; DISTILL a lesson whose effect an adapter keeps.
LESSON_OPS = ("ADD", "EDIT", "MERGE", "RETIRE", "UPVOTE", "DOWNVOTE", "TAG_NEUTRAL", "PROMOTE", "IMPORT", "DISTILL")
# Statuses whose lessons may be retrieved into a solver prompt and count against the library budget.
LIVE_STATUSES = ("candidate", "active")
# Statuses retrieval may show: live ones, and distilled ones unless the adapter that distilled them is in use.
RETRIEVABLE_STATUSES = ("candidate", "active", "distilled")
HINT_MODES = ("plan", "feedback", "answer")
GRADING_STATUSES = ("graded", "ungraded")  # rollouts.grading_status; NULL (older rows) means graded
RUBRIC_SOURCES = ("task", "online")  # where a rubric version / criterion came from
# adapters.objective: a training objective of arena's registry (arena/objectives.py: distill, sft, …, names of lower-case
# words and hyphens), or "imported" (trained elsewhere: arena adapters import). The library checks the form only; the
# registry, above this layer, is what names an objective.
IMPORTED_OBJECTIVE = "imported"
ADAPTER_OBJECTIVE_MAX_LEN = 30  # the column's width (lessons.db.schema.AdapterRow.objective)
ADAPTER_LESSON_RELATIONS = ("in_context", "distilled")
