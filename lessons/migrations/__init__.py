"""Alembic environment and revisions of the lesson library (see :func:`lessons.db.alembic_config`)."""
