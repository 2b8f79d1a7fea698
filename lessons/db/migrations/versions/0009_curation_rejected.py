"""Curator rejections per episode: ``episodes.curation_rejected``.

The teacher's lesson ops the curator refused when the episode was recorded (over the library
budget, a lesson not in context, an op on a retired lesson, a tag given twice): one line each,
with the reason, as a JSON list. NULL (older rows) and ``[]``: none. The session summary counts
them (``curation_rejected``) and the TUI's episode screen lists them.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("episodes", schema=None) as batch_op:
        batch_op.add_column(sa.Column("curation_rejected", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("episodes", schema=None) as batch_op:
        batch_op.drop_column("curation_rejected")
