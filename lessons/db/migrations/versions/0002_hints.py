"""Hints table; distillation fields of rollouts (token ids, log-probs, hint, unguided context).

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# lessons.db.schema.UTCDateTime's storage type; revisions do not import the models.
UTCDateTime = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table('hints',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('task_id', sa.Integer(), nullable=False),
    sa.Column('episode_id', sa.Integer(), nullable=True),
    sa.Column('mode', sa.String(length=100), nullable=False),
    sa.Column('text', sa.Text(), nullable=False),
    sa.Column('source_rollout_ids', sa.JSON(), nullable=False),
    sa.Column('times_used', sa.Integer(), server_default='0', nullable=False),
    sa.Column('successes', sa.Integer(), server_default='0', nullable=False),
    sa.Column('created_at', UTCDateTime, nullable=False),
    sa.ForeignKeyConstraint(['episode_id'], ['episodes.id'], name=op.f('fk_hints_episode_id_episodes'), ondelete='SET NULL'),
    sa.ForeignKeyConstraint(['task_id'], ['tasks.id'], name=op.f('fk_hints_task_id_tasks'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_hints'))
    )
    with op.batch_alter_table('hints', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_hints_task_id'), ['task_id'], unique=False)

    with op.batch_alter_table('rollouts', schema=None) as batch_op:
        batch_op.add_column(sa.Column('token_ids', sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column('logprobs', sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column('hint_id', sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column('unguided_messages', sa.JSON(), nullable=True))
        batch_op.create_index(batch_op.f('ix_rollouts_hint_id'), ['hint_id'], unique=False)
        batch_op.create_foreign_key(batch_op.f('fk_rollouts_hint_id_hints'), 'hints', ['hint_id'], ['id'], ondelete='SET NULL')



def downgrade() -> None:
    with op.batch_alter_table('rollouts', schema=None) as batch_op:
        batch_op.drop_constraint(batch_op.f('fk_rollouts_hint_id_hints'), type_='foreignkey')
        batch_op.drop_index(batch_op.f('ix_rollouts_hint_id'))
        batch_op.drop_column('unguided_messages')
        batch_op.drop_column('hint_id')
        batch_op.drop_column('logprobs')
        batch_op.drop_column('token_ids')

    with op.batch_alter_table('hints', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_hints_task_id'))

    op.drop_table('hints')
