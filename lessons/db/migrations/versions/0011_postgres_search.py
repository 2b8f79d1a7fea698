"""Lesson retrieval on PostgreSQL: a ``tsvector`` of each lesson's text kept by the database, and its GIN index.

SQLite searches ``lessons_fts`` (FTS5, revision 0003). PostgreSQL gets the same index in its
own full-text search (PostgreSQL docs, chapter 12): ``lessons.search_vector``, a stored
generated column ``to_tsvector('english', text)`` (Snowball English stemmer and stop words),
so every INSERT and UPDATE of the text keeps it current without triggers, and
``ix_lessons_search_vector``, a GIN index over it (``fastupdate = off``: see below). :class:`lessons.library.search.SearchRepository`
ranks its matches with ``ts_rank_cd``. Neither exists on SQLite, and the models do not declare
them (:func:`lessons.db.schema.include_name` keeps them out of autogenerate).

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

# revision identifiers, used by Alembic.
revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SEARCH_COLUMN = "search_vector"
SEARCH_INDEX = "ix_lessons_search_vector"
SEARCH_CONFIG = "english"  # lessons.library.search.PG_SEARCH_CONFIG must name the same configuration


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(
        f"ALTER TABLE lessons ADD COLUMN {SEARCH_COLUMN} tsvector "
        f"GENERATED ALWAYS AS (to_tsvector('{SEARCH_CONFIG}'::regconfig, text)) STORED"
    )
    # fastupdate off: a new lesson goes straight into the index instead of a pending list that every
    # search scans linearly until VACUUM merges it (lessons are written rarely and searched per task)
    op.execute(f"CREATE INDEX {SEARCH_INDEX} ON lessons USING gin ({SEARCH_COLUMN}) WITH (fastupdate = off)")


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(f"DROP INDEX IF EXISTS {SEARCH_INDEX}")
    op.execute(f"ALTER TABLE lessons DROP COLUMN IF EXISTS {SEARCH_COLUMN}")
