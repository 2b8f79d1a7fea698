"""Alembic revisions of the lesson library, oldest first (``0001_initial``, ...)."""
