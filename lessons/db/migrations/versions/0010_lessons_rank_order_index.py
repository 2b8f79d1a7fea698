"""The retrieval prior's index in the order retrieval reads it: ``(scope, rank_score DESC, id)``.

:meth:`lessons.library.lessons.LessonsRepository.top_lessons` asks for a scope's best lessons
``ORDER BY rank_score DESC, id``. The index of revision 0003, ``(scope, rank_score)``, gave the
first key only, so SQLite sorted every lesson tied at the top scores in a temporary B-tree (the
prior is ``helpful − harmful`` before utility is measured: ties are the rule). With the id in the
index the query stops after ``limit`` rows: 0.46 → 0.13 ms per scope at 100k lessons
(bench/RESULTS.md, "Issue 17 on a quiet machine, session 7").

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("lessons", schema=None) as batch_op:
        batch_op.drop_index("ix_lessons_scope_rank")
        batch_op.create_index("ix_lessons_scope_rank_id", ["scope", sa.text("rank_score DESC"), "id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("lessons", schema=None) as batch_op:
        batch_op.drop_index("ix_lessons_scope_rank_id")
        batch_op.create_index("ix_lessons_scope_rank", ["scope", "rank_score"], unique=False)
