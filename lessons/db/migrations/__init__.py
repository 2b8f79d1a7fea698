"""Alembic environment and revisions of the lesson library (see :func:`lessons.db.schema.alembic_config`)."""
