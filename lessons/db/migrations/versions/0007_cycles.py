"""Wake–sleep cycles: the adapter that sampled each rollout, and each adapter's parent and cycle.

``rollouts.adapter_id`` is the readable id of the LoRA adapter the solver sampled with (NULL:
the base model), so the stored sampling log-probs (π_old) are known to belong to that policy
across cycles. ``adapters.parent_adapter`` and ``adapters.cycle`` record the chain of adapters a
session's sleeps produced (``arena run --cycles``); both are NULL for ``arena distill``.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("rollouts", schema=None) as batch_op:
        batch_op.add_column(sa.Column("adapter_id", sa.String(length=50), nullable=True))
    with op.batch_alter_table("adapters", schema=None) as batch_op:
        batch_op.add_column(sa.Column("parent_adapter", sa.String(length=50), nullable=True))
        batch_op.add_column(sa.Column("cycle", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("adapters", schema=None) as batch_op:
        batch_op.drop_column("cycle")
        batch_op.drop_column("parent_adapter")
    with op.batch_alter_table("rollouts", schema=None) as batch_op:
        batch_op.drop_column("adapter_id")
