"""Adapters (LoRA adapters from `arena distill`) and adapter_lessons (lineage edges lesson → adapter).

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-30
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# lessons.db.schema.UTCDateTime's storage type; revisions do not import the models.
UTCDateTime = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table('adapters',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('adapter_id', sa.String(length=50), nullable=False),
    sa.Column('path', sa.Text(), nullable=False),
    sa.Column('base_model', sa.String(length=100), nullable=False),
    sa.Column('objective', sa.String(length=30), nullable=False),
    sa.Column('session_id', sa.Integer(), nullable=True),
    sa.Column('config', sa.JSON(), nullable=False),
    sa.Column('data', sa.JSON(), nullable=False),
    sa.Column('metrics', sa.JSON(), nullable=False),
    sa.Column('eval', sa.JSON(), nullable=False),
    sa.Column('created_at', UTCDateTime, nullable=False),
    sa.ForeignKeyConstraint(['session_id'], ['sessions.id'], name=op.f('fk_adapters_session_id_sessions'), ondelete='SET NULL'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_adapters')),
    sa.UniqueConstraint('adapter_id', name=op.f('uq_adapters_adapter_id'))
    )
    op.create_table('adapter_lessons',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('adapter_id', sa.Integer(), nullable=False),
    sa.Column('lesson_id', sa.Integer(), nullable=False),
    sa.Column('relation', sa.String(length=20), nullable=False),
    sa.ForeignKeyConstraint(['adapter_id'], ['adapters.id'], name=op.f('fk_adapter_lessons_adapter_id_adapters'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['lesson_id'], ['lessons.id'], name=op.f('fk_adapter_lessons_lesson_id_lessons'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_adapter_lessons')),
    sa.UniqueConstraint('adapter_id', 'lesson_id', 'relation', name=op.f('uq_adapter_lessons_adapter_id_lesson_id_relation'))
    )
    with op.batch_alter_table('adapter_lessons', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_adapter_lessons_lesson_id'), ['lesson_id'], unique=False)



def downgrade() -> None:
    with op.batch_alter_table('adapter_lessons', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_adapter_lessons_lesson_id'))

    op.drop_table('adapter_lessons')
    op.drop_table('adapters')
