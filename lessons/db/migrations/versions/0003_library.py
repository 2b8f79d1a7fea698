"""Lesson library: token counts, utility A/B results, retrieval prior, MERGE targets, FTS5 index.

On SQLite, ``lessons_fts`` is an external-content FTS5 table over ``lessons.text`` (porter
stemmer), kept in sync by triggers; :mod:`lessons.library.retrieval` ranks with its ``bm25()``, and
``lessons_fts_vocab`` (fts5vocab) gives per-term document frequencies.
Other backends get no FTS table (PostgreSQL gets its own index in revision 0011).

A later revision that rebuilds ``lessons`` in batch mode drops these triggers with the old
table: it must re-create them (call :func:`create_fts` again).

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision: str = '0003'
down_revision: str | None = '0002'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# lessons.db.schema.UTCDateTime's storage type; revisions do not import the models.
UTCDateTime = sa.DateTime(timezone=True)

FTS_TABLE = "lessons_fts"


def create_fts() -> None:
    """The FTS5 index over lessons.text and the triggers that keep it in sync (SQLite only)."""
    if op.get_bind().dialect.name != "sqlite":
        return
    op.execute(
        f"CREATE VIRTUAL TABLE IF NOT EXISTS {FTS_TABLE} USING fts5("
        "text, content='lessons', content_rowid='id', tokenize='porter unicode61')"
    )
    op.execute(f"INSERT INTO {FTS_TABLE}({FTS_TABLE}) VALUES ('rebuild')")
    # per-term document frequencies, read by retrieval to skip terms that cannot score
    op.execute(f"CREATE VIRTUAL TABLE IF NOT EXISTS {FTS_TABLE}_vocab USING fts5vocab({FTS_TABLE}, 'row')")
    op.execute(
        f"CREATE TRIGGER IF NOT EXISTS lessons_fts_ai AFTER INSERT ON lessons BEGIN "
        f"INSERT INTO {FTS_TABLE}(rowid, text) VALUES (new.id, new.text); END"
    )
    op.execute(
        f"CREATE TRIGGER IF NOT EXISTS lessons_fts_ad AFTER DELETE ON lessons BEGIN "
        f"INSERT INTO {FTS_TABLE}({FTS_TABLE}, rowid, text) VALUES ('delete', old.id, old.text); END"
    )
    op.execute(
        f"CREATE TRIGGER IF NOT EXISTS lessons_fts_au AFTER UPDATE OF text ON lessons BEGIN "
        f"INSERT INTO {FTS_TABLE}({FTS_TABLE}, rowid, text) VALUES ('delete', old.id, old.text); "
        f"INSERT INTO {FTS_TABLE}(rowid, text) VALUES (new.id, new.text); END"
    )


def drop_fts() -> None:
    if op.get_bind().dialect.name != "sqlite":
        return
    for trigger in ("lessons_fts_ai", "lessons_fts_ad", "lessons_fts_au"):
        op.execute(f"DROP TRIGGER IF EXISTS {trigger}")
    op.execute(f"DROP TABLE IF EXISTS {FTS_TABLE}_vocab")
    op.execute(f"DROP TABLE IF EXISTS {FTS_TABLE}")


def upgrade() -> None:
    op.create_table('lesson_utility',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('lesson_id', sa.Integer(), nullable=False),
    sa.Column('session_id', sa.Integer(), nullable=True),
    sa.Column('after_episodes', sa.Integer(), nullable=False),
    sa.Column('n', sa.Integer(), nullable=False),
    sa.Column('pass_with', sa.Float(), nullable=False),
    sa.Column('pass_without', sa.Float(), nullable=False),
    sa.Column('effect', sa.Float(), nullable=False),
    sa.Column('ci_lo', sa.Float(), nullable=False),
    sa.Column('ci_hi', sa.Float(), nullable=False),
    sa.Column('task_keys', sa.JSON(), nullable=False),
    sa.Column('created_at', UTCDateTime, nullable=False),
    sa.ForeignKeyConstraint(['lesson_id'], ['lessons.id'], name=op.f('fk_lesson_utility_lesson_id_lessons'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['session_id'], ['sessions.id'], name=op.f('fk_lesson_utility_session_id_sessions'), ondelete='SET NULL'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_lesson_utility'))
    )
    with op.batch_alter_table('lesson_events', schema=None) as batch_op:
        batch_op.add_column(sa.Column('target_lesson_id', sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column('origin', sa.JSON(), nullable=True))
        batch_op.create_index(batch_op.f('ix_lesson_events_target_lesson_id'), ['target_lesson_id'], unique=False)
        batch_op.create_foreign_key(batch_op.f('fk_lesson_events_target_lesson_id_lessons'), 'lessons', ['target_lesson_id'], ['id'], ondelete='SET NULL')

    with op.batch_alter_table('lessons', schema=None) as batch_op:
        batch_op.add_column(sa.Column('tokens', sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column('utility', sa.Float(), nullable=True))
        batch_op.add_column(sa.Column('utility_lo', sa.Float(), nullable=True))
        batch_op.add_column(sa.Column('utility_hi', sa.Float(), nullable=True))
        batch_op.add_column(sa.Column('utility_n', sa.Integer(), server_default='0', nullable=False))
        batch_op.add_column(sa.Column('rank_score', sa.Float(), server_default='0', nullable=False))
        batch_op.create_index('ix_lessons_scope_rank', ['scope', 'rank_score'], unique=False)

    op.execute("UPDATE lessons SET rank_score = helpful - harmful")
    create_fts()



def downgrade() -> None:
    drop_fts()
    with op.batch_alter_table('lessons', schema=None) as batch_op:
        batch_op.drop_index('ix_lessons_scope_rank')
        batch_op.drop_column('rank_score')
        batch_op.drop_column('utility_n')
        batch_op.drop_column('utility_hi')
        batch_op.drop_column('utility_lo')
        batch_op.drop_column('utility')
        batch_op.drop_column('tokens')

    with op.batch_alter_table('lesson_events', schema=None) as batch_op:
        batch_op.drop_constraint(batch_op.f('fk_lesson_events_target_lesson_id_lessons'), type_='foreignkey')
        batch_op.drop_index(batch_op.f('ix_lesson_events_target_lesson_id'))
        batch_op.drop_column('origin')
        batch_op.drop_column('target_lesson_id')

    op.drop_table('lesson_utility')
