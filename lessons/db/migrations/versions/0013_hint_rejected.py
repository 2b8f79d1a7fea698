"""Refused hint parts per episode: ``episodes.hint_rejected``.

What was refused while the episode's hint was written — a ``plan`` attempt that stated the
answer or a worked-out number, a ``feedback`` line that would reveal it, an ``answer`` part a
rubric-only task cannot have — one line each, with the reason, as a JSON list; kept whether or
not a hint was written in the end (a group whose every part was refused goes unguided). NULL
(older rows) and ``[]``: none. The session summary counts the groups left without a hint
(``hints_refused``) and the plan attempts by reason (``plan_rejections``); the TUI's episode
screen lists them. Before this revision they were joined into ``reflection_error``, where they
counted as failed reflections.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-07
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("episodes", schema=None) as batch_op:
        batch_op.add_column(sa.Column("hint_rejected", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("episodes", schema=None) as batch_op:
        batch_op.drop_column("hint_rejected")
