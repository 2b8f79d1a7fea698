"""Alembic environment of the lesson library.

Configured programmatically by :func:`lessons.db.schema.alembic_config` (there is no
``alembic.ini``). Runs on the connection passed as ``config.attributes["connection"]``
when there is one (that is how :class:`lessons.db.engine.Database` migrates on open, inside
its own ``BEGIN IMMEDIATE`` transaction), otherwise on a new engine for
``sqlalchemy.url``. SQLite uses batch mode (``render_as_batch``), so ALTERs become table
rebuilds (as in mealie's migrations).
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection, create_engine, pool

from lessons.db.schema import Base, include_name

config = context.config
target_metadata = Base.metadata


def _configure(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
        include_name=include_name,
    )


def run_migrations_offline() -> None:
    """Emit the migration SQL to stdout instead of running it (``alembic upgrade --sql``)."""
    url = config.get_main_option("sqlalchemy.url")
    context.configure(
        url=url,
        target_metadata=target_metadata,
        literal_binds=True,
        dialect_opts={"paramstyle": "named"},
        render_as_batch=bool(url and url.startswith("sqlite")),
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    """Run the migrations on the given connection, or on a new engine for the URL."""
    connection = config.attributes.get("connection")
    if connection is not None:
        _configure(connection)
        with context.begin_transaction():
            context.run_migrations()
        return
    engine = create_engine(config.get_main_option("sqlalchemy.url"), poolclass=pool.NullPool)
    try:
        with engine.connect() as conn:
            _configure(conn)
            with context.begin_transaction():
                context.run_migrations()
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
