"""Endpoint faults per rollout: ``rollouts.fault``.

The kind of endpoint fault a rollout met (``agents.policy.FAULT_KINDS``): ``empty_choices``,
``not_json``, ``timeout``, … on a rollout the endpoint never delivered (empty completion,
finish reason ``fault``, reward NULL, ``grading_status`` ``ungraded``), or ``oversized`` on one
cut to what ``max_tokens`` allows (kept and graded). NULL: none. The session summary counts them
by kind.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("rollouts", schema=None) as batch_op:
        batch_op.add_column(sa.Column("fault", sa.String(length=30), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("rollouts", schema=None) as batch_op:
        batch_op.drop_column("fault")
