"""Rubric rewards: rubric versions, criteria with lineage, per-criterion verdicts; grading status and hack flags on rollouts.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision: str = '0004'
down_revision: str | None = '0003'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# lessons.db.schema.UTCDateTime's storage type; revisions do not import the models.
UTCDateTime = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table('rubrics',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('task_id', sa.Integer(), nullable=False),
    sa.Column('version', sa.Integer(), nullable=False),
    sa.Column('parent_id', sa.Integer(), nullable=True),
    sa.Column('source', sa.String(length=20), nullable=False),
    sa.Column('note', sa.Text(), nullable=True),
    sa.Column('created_at', UTCDateTime, nullable=False),
    sa.ForeignKeyConstraint(['parent_id'], ['rubrics.id'], name=op.f('fk_rubrics_parent_id_rubrics'), ondelete='SET NULL'),
    sa.ForeignKeyConstraint(['task_id'], ['tasks.id'], name=op.f('fk_rubrics_task_id_tasks'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_rubrics')),
    sa.UniqueConstraint('task_id', 'version', name=op.f('uq_rubrics_task_id_version'))
    )
    op.create_table('rubric_criteria',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('rubric_id', sa.Integer(), nullable=False),
    sa.Column('position', sa.Integer(), nullable=False),
    sa.Column('title', sa.String(length=200), nullable=False),
    sa.Column('description', sa.Text(), nullable=False),
    sa.Column('weight', sa.Float(), nullable=False),
    sa.Column('category', sa.String(length=20), nullable=False),
    sa.Column('source', sa.String(length=20), nullable=False),
    sa.Column('inherited_from_id', sa.Integer(), nullable=True),
    sa.Column('motivating_rollout_ids', sa.JSON(), nullable=False),
    sa.Column('motivation', sa.JSON(), nullable=True),
    sa.ForeignKeyConstraint(['inherited_from_id'], ['rubric_criteria.id'], name=op.f('fk_rubric_criteria_inherited_from_id_rubric_criteria'), ondelete='SET NULL'),
    sa.ForeignKeyConstraint(['rubric_id'], ['rubrics.id'], name=op.f('fk_rubric_criteria_rubric_id_rubrics'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_rubric_criteria'))
    )
    with op.batch_alter_table('rubric_criteria', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_rubric_criteria_rubric_id'), ['rubric_id'], unique=False)

    op.create_table('criterion_verdicts',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('rollout_id', sa.Integer(), nullable=False),
    sa.Column('criterion_id', sa.Integer(), nullable=False),
    sa.Column('met', sa.Boolean(), nullable=False),
    sa.Column('reason', sa.Text(), nullable=False),
    sa.ForeignKeyConstraint(['criterion_id'], ['rubric_criteria.id'], name=op.f('fk_criterion_verdicts_criterion_id_rubric_criteria'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['rollout_id'], ['rollouts.id'], name=op.f('fk_criterion_verdicts_rollout_id_rollouts'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_criterion_verdicts')),
    sa.UniqueConstraint('rollout_id', 'criterion_id', name=op.f('uq_criterion_verdicts_rollout_id_criterion_id'))
    )
    with op.batch_alter_table('criterion_verdicts', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_criterion_verdicts_criterion_id'), ['criterion_id'], unique=False)

    with op.batch_alter_table('rollouts', schema=None) as batch_op:
        batch_op.add_column(sa.Column('grading_status', sa.String(length=20), nullable=True))
        batch_op.add_column(sa.Column('reward_kind', sa.String(length=30), nullable=True))
        batch_op.add_column(sa.Column('rubric_id', sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column('judge_rating', sa.Float(), nullable=True))
        batch_op.add_column(sa.Column('verifier_reward', sa.Float(), nullable=True))
        batch_op.add_column(sa.Column('hack_flags', sa.JSON(), nullable=True))
        batch_op.alter_column('reward',
               existing_type=sa.FLOAT(),
               nullable=True)
        batch_op.create_index(batch_op.f('ix_rollouts_rubric_id'), ['rubric_id'], unique=False)
        batch_op.create_foreign_key(batch_op.f('fk_rollouts_rubric_id_rubrics'), 'rubrics', ['rubric_id'], ['id'], ondelete='SET NULL')



def downgrade() -> None:
    # Ungraded rollouts (reward NULL) cannot keep a NULL under the old NOT NULL column: they get 0.
    op.execute("UPDATE rollouts SET reward = 0 WHERE reward IS NULL")
    with op.batch_alter_table('rollouts', schema=None) as batch_op:
        batch_op.drop_constraint(batch_op.f('fk_rollouts_rubric_id_rubrics'), type_='foreignkey')
        batch_op.drop_index(batch_op.f('ix_rollouts_rubric_id'))
        batch_op.alter_column('reward',
               existing_type=sa.FLOAT(),
               nullable=False)
        batch_op.drop_column('hack_flags')
        batch_op.drop_column('verifier_reward')
        batch_op.drop_column('judge_rating')
        batch_op.drop_column('rubric_id')
        batch_op.drop_column('reward_kind')
        batch_op.drop_column('grading_status')

    with op.batch_alter_table('criterion_verdicts', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_criterion_verdicts_criterion_id'))

    op.drop_table('criterion_verdicts')
    with op.batch_alter_table('rubric_criteria', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_rubric_criteria_rubric_id'))

    op.drop_table('rubric_criteria')
    op.drop_table('rubrics')
