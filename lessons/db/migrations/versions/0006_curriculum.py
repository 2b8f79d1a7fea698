"""Self-play curriculum: task origin and parent, difficulty trajectory, task proposals.

``tasks`` gains ``origin`` (generator / file / proposer; existing JSONL tasks become "file")
and ``parent_task_id``; ``curriculum_steps`` records the difficulty each family trained at per
round and the band decision after it; ``task_proposals`` keeps every proposed task, accepted or
rejected with the reason. Only ``tasks`` is altered (``lessons`` and its FTS5 triggers are not touched).

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# lessons.db.schema.UTCDateTime's storage type; revisions do not import the models.
UTCDateTime = sa.DateTime(timezone=True)


def upgrade() -> None:
    with op.batch_alter_table("tasks", schema=None) as batch_op:
        batch_op.add_column(sa.Column("origin", sa.String(length=20), server_default="generator", nullable=False))
        batch_op.add_column(sa.Column("parent_task_id", sa.Integer(), nullable=True))
        batch_op.create_index(batch_op.f("ix_tasks_parent_task_id"), ["parent_task_id"], unique=False)
        batch_op.create_foreign_key(
            batch_op.f("fk_tasks_parent_task_id_tasks"), "tasks", ["parent_task_id"], ["id"], ondelete="SET NULL"
        )
    op.execute("UPDATE tasks SET origin = 'file' WHERE source = 'jsonl'")

    op.create_table(
        "curriculum_steps",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("session_id", sa.Integer(), nullable=False),
        sa.Column("round", sa.Integer(), nullable=False),
        sa.Column("family", sa.String(length=150), nullable=False),
        sa.Column("step", sa.Integer(), nullable=False),
        sa.Column("levels", sa.JSON(), nullable=False),
        sa.Column("config", sa.JSON(), nullable=False),
        sa.Column("groups", sa.Integer(), nullable=True),
        sa.Column("pass_rate", sa.Float(), nullable=True),
        sa.Column("action", sa.String(length=20), nullable=True),
        sa.Column("next_step", sa.Integer(), nullable=True),
        sa.Column("proposals_done", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.Column("created_at", UTCDateTime, nullable=False),
        sa.ForeignKeyConstraint(
            ["session_id"], ["sessions.id"], name=op.f("fk_curriculum_steps_session_id_sessions"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_curriculum_steps")),
        sa.UniqueConstraint("session_id", "round", "family", name=op.f("uq_curriculum_steps_session_id_round_family")),
    )
    op.create_table(
        "task_proposals",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("session_id", sa.Integer(), nullable=False),
        sa.Column("round", sa.Integer(), nullable=False),
        sa.Column("parent_task_id", sa.Integer(), nullable=False),
        sa.Column("proposer", sa.String(length=200), nullable=False),
        sa.Column("question", sa.Text(), nullable=True),
        sa.Column("answer", sa.Text(), nullable=True),
        sa.Column("justification", sa.Text(), nullable=True),
        sa.Column("status", sa.String(length=20), nullable=False),
        sa.Column("reason_code", sa.String(length=40), nullable=True),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("check", sa.String(length=20), nullable=True),
        sa.Column("check_detail", sa.JSON(), nullable=False),
        sa.Column("task_id", sa.Integer(), nullable=True),
        sa.Column("raw", sa.JSON(), nullable=False),
        sa.Column("created_at", UTCDateTime, nullable=False),
        sa.ForeignKeyConstraint(
            ["parent_task_id"], ["tasks.id"], name=op.f("fk_task_proposals_parent_task_id_tasks"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["session_id"], ["sessions.id"], name=op.f("fk_task_proposals_session_id_sessions"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["task_id"], ["tasks.id"], name=op.f("fk_task_proposals_task_id_tasks"), ondelete="SET NULL"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_task_proposals")),
    )
    with op.batch_alter_table("task_proposals", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_task_proposals_parent_task_id"), ["parent_task_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("task_proposals", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_task_proposals_parent_task_id"))
    op.drop_table("task_proposals")
    op.drop_table("curriculum_steps")
    with op.batch_alter_table("tasks", schema=None) as batch_op:
        batch_op.drop_constraint(batch_op.f("fk_tasks_parent_task_id_tasks"), type_="foreignkey")
        batch_op.drop_index(batch_op.f("ix_tasks_parent_task_id"))
        batch_op.drop_column("parent_task_id")
        batch_op.drop_column("origin")
