"""Initial schema: sessions, tasks, episodes, rollouts, lessons, lesson_events, evaluations.

Revision ID: 0001
Revises:
Create Date: 2026-11-29
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# lessons.db.schema.UTCDateTime's storage type; revisions do not import the models.
UTCDateTime = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "sessions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("config", sa.JSON(), nullable=False),
        sa.Column("seed", sa.BigInteger(), nullable=False),
        sa.Column("status", sa.String(length=20), nullable=False),
        sa.Column("created_at", UTCDateTime, nullable=False),
        sa.Column("finished_at", UTCDateTime, nullable=True),
        sa.Column("summary", sa.JSON(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_sessions")),
        sa.UniqueConstraint("name", name=op.f("uq_sessions_name")),
    )
    op.create_table(
        "evaluations",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("session_id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("split", sa.String(length=20), nullable=False),
        sa.Column("with_lessons", sa.Boolean(), nullable=False),
        sa.Column("n", sa.Integer(), nullable=False),
        sa.Column("passes", sa.Integer(), nullable=False),
        sa.Column("pass_at_1", sa.Float(), nullable=False),
        sa.Column("ci_lo", sa.Float(), nullable=False),
        sa.Column("ci_hi", sa.Float(), nullable=False),
        sa.Column("details", sa.JSON(), nullable=False),
        sa.Column("created_at", UTCDateTime, nullable=False),
        sa.ForeignKeyConstraint(
            ["session_id"], ["sessions.id"],
            name=op.f("fk_evaluations_session_id_sessions"), ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_evaluations")),
        sa.UniqueConstraint("session_id", "name", name=op.f("uq_evaluations_session_id_name")),
    )
    op.create_table(
        "tasks",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("session_id", sa.Integer(), nullable=False),
        sa.Column("task_key", sa.String(length=300), nullable=False),
        sa.Column("family", sa.String(length=100), nullable=False),
        sa.Column("split", sa.String(length=20), nullable=False),
        sa.Column("question", sa.Text(), nullable=False),
        sa.Column("answer", sa.Text(), nullable=False),
        sa.Column("source", sa.String(length=50), nullable=False),
        sa.Column("metadata", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(
            ["session_id"], ["sessions.id"],
            name=op.f("fk_tasks_session_id_sessions"), ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_tasks")),
        sa.UniqueConstraint("session_id", "task_key", name=op.f("uq_tasks_session_id_task_key")),
    )
    op.create_table(
        "episodes",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("session_id", sa.Integer(), nullable=False),
        sa.Column("episode_key", sa.String(length=300), nullable=False),
        sa.Column("round", sa.Integer(), nullable=False),
        sa.Column("task_id", sa.Integer(), nullable=False),
        sa.Column("system_prompt", sa.Text(), nullable=False),
        sa.Column("lessons_in_context", sa.JSON(), nullable=False),
        sa.Column("reflection", sa.JSON(), nullable=True),
        sa.Column("reflection_error", sa.Text(), nullable=True),
        sa.Column("mean_reward", sa.Float(), nullable=False),
        sa.Column("started_at", UTCDateTime, nullable=False),
        sa.Column("finished_at", UTCDateTime, nullable=False),
        sa.ForeignKeyConstraint(
            ["session_id"], ["sessions.id"],
            name=op.f("fk_episodes_session_id_sessions"), ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["task_id"], ["tasks.id"], name=op.f("fk_episodes_task_id_tasks"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_episodes")),
        sa.UniqueConstraint(
            "session_id", "episode_key", name=op.f("uq_episodes_session_id_episode_key")
        ),
    )
    op.create_index(op.f("ix_episodes_task_id"), "episodes", ["task_id"])
    op.create_table(
        "lessons",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("lesson_id", sa.String(length=150), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("scope", sa.String(length=100), nullable=False),
        sa.Column("status", sa.String(length=20), nullable=False),
        sa.Column("helpful", sa.Integer(), server_default="0", nullable=False),
        sa.Column("harmful", sa.Integer(), server_default="0", nullable=False),
        sa.Column("neutral", sa.Integer(), server_default="0", nullable=False),
        sa.Column("times_in_context", sa.Integer(), server_default="0", nullable=False),
        sa.Column("source_episode_id", sa.Integer(), nullable=True),
        sa.Column("created_at", UTCDateTime, nullable=False),
        sa.Column("updated_at", UTCDateTime, nullable=False),
        sa.ForeignKeyConstraint(
            ["source_episode_id"], ["episodes.id"],
            name=op.f("fk_lessons_source_episode_id_episodes"), ondelete="SET NULL",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_lessons")),
        sa.UniqueConstraint("lesson_id", name=op.f("uq_lessons_lesson_id")),
    )
    op.create_index("ix_lessons_status_scope", "lessons", ["status", "scope"])
    op.create_table(
        "rollouts",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("episode_id", sa.Integer(), nullable=False),
        sa.Column("idx", sa.Integer(), nullable=False),
        sa.Column("guided", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.Column("messages", sa.JSON(), nullable=False),
        sa.Column("completion", sa.Text(), nullable=False),
        sa.Column("extracted_answer", sa.Text(), nullable=True),
        sa.Column("reward", sa.Float(), nullable=False),
        sa.Column("critique", sa.Text(), nullable=False),
        sa.Column("prompt_tokens", sa.Integer(), nullable=False),
        sa.Column("completion_tokens", sa.Integer(), nullable=False),
        sa.Column("finish_reason", sa.String(length=50), nullable=False),
        sa.Column("latency_s", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(
            ["episode_id"], ["episodes.id"],
            name=op.f("fk_rollouts_episode_id_episodes"), ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_rollouts")),
    )
    op.create_index(op.f("ix_rollouts_episode_id"), "rollouts", ["episode_id"])
    op.create_table(
        "lesson_events",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("lesson_id", sa.Integer(), nullable=False),
        sa.Column("op", sa.String(length=20), nullable=False),
        sa.Column("before", sa.Text(), nullable=True),
        sa.Column("after", sa.Text(), nullable=True),
        sa.Column("rationale", sa.Text(), nullable=False),
        sa.Column("episode_id", sa.Integer(), nullable=True),
        sa.Column("rollout_ids", sa.JSON(), nullable=False),
        sa.Column("created_at", UTCDateTime, nullable=False),
        sa.ForeignKeyConstraint(
            ["episode_id"], ["episodes.id"],
            name=op.f("fk_lesson_events_episode_id_episodes"), ondelete="SET NULL",
        ),
        sa.ForeignKeyConstraint(
            ["lesson_id"], ["lessons.id"],
            name=op.f("fk_lesson_events_lesson_id_lessons"), ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_lesson_events")),
    )
    op.create_index(op.f("ix_lesson_events_episode_id"), "lesson_events", ["episode_id"])
    op.create_index(op.f("ix_lesson_events_lesson_id"), "lesson_events", ["lesson_id"])


def downgrade() -> None:
    op.drop_index(op.f("ix_lesson_events_lesson_id"), table_name="lesson_events")
    op.drop_index(op.f("ix_lesson_events_episode_id"), table_name="lesson_events")
    op.drop_table("lesson_events")
    op.drop_index(op.f("ix_rollouts_episode_id"), table_name="rollouts")
    op.drop_table("rollouts")
    op.drop_index("ix_lessons_status_scope", table_name="lessons")
    op.drop_table("lessons")
    op.drop_index(op.f("ix_episodes_task_id"), table_name="episodes")
    op.drop_table("episodes")
    op.drop_table("tasks")
    op.drop_table("evaluations")
    op.drop_table("sessions")
