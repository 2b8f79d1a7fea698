"""Session leases: one owner per session (``arena run`` and ``--resume``), with a heartbeat and an expiry.

``session_leases`` holds one row per session while a process runs it: the owner's random id,
host and pid, when it took the lease, its last heartbeat and when the lease expires.
:class:`lessons.library.leases.LeaseRepository` takes it in a write transaction (``BEGIN IMMEDIATE``
on SQLite, the writers' advisory lock on PostgreSQL), so two processes can never both hold it.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-03
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# lessons.db.schema.UTCDateTime's storage type; revisions do not import the models.
UTCDateTime = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "session_leases",
        sa.Column("session_id", sa.Integer(), nullable=False),
        sa.Column("owner", sa.String(length=100), nullable=False),
        sa.Column("host", sa.String(length=255), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("acquired_at", UTCDateTime, nullable=False),
        sa.Column("renewed_at", UTCDateTime, nullable=False),
        sa.Column("expires_at", UTCDateTime, nullable=False),
        sa.ForeignKeyConstraint(["session_id"], ["sessions.id"], name=op.f("fk_session_leases_session_id_sessions"),
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("session_id", name=op.f("pk_session_leases")),
    )


def downgrade() -> None:
    op.drop_table("session_leases")
