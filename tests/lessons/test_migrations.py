"""Alembic revisions: a linear chain that builds exactly the schema of ``lessons.db``."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine, inspect

from lessons.db.schema import Base, alembic_config, include_name
from lessons.library.store import LessonStore


def _url(path: Path) -> str:
    return f"sqlite:///{path}"


def test_revision_chain_is_linear() -> None:
    script = ScriptDirectory.from_config(alembic_config("sqlite://"))
    assert len(script.get_heads()) == 1
    revisions = list(script.walk_revisions())  # head first
    assert revisions, "no revisions"
    for rev in revisions:
        assert not isinstance(rev.down_revision, (tuple, list)), f"{rev.revision} is a merge revision"
    chain = [rev.revision for rev in revisions]
    assert len(set(chain)) == len(chain)
    for newer, older in zip(revisions, revisions[1:]):
        assert newer.down_revision == older.revision
    assert revisions[-1].down_revision is None


def test_head_schema_has_no_drift(empty_library_url: str) -> None:
    """``alembic check``: autogenerate finds nothing between the migrated DB and the models (SQLite and PostgreSQL)."""
    url = empty_library_url
    command.upgrade(alembic_config(url), "head")
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            ctx = MigrationContext.configure(
                conn, opts={
                    "compare_type": True,
                    "compare_server_default": True,
                    "render_as_batch": conn.dialect.name == "sqlite",
                    "include_name": include_name,
                }
            )
            assert compare_metadata(ctx, Base.metadata) == []
    finally:
        engine.dispose()


def test_every_revision_upgrades_and_downgrades_one_step_at_a_time(empty_library_url: str) -> None:
    """Each revision's upgrade and downgrade run on SQLite and PostgreSQL: base → head one step at a
    time, back to base, and up again; PostgreSQL's search column exists exactly from revision 0011."""
    url = empty_library_url
    cfg = alembic_config(url)
    chain = [rev.revision for rev in reversed(list(ScriptDirectory.from_config(cfg).walk_revisions()))]
    engine = create_engine(url)
    try:
        for rev in chain:
            command.upgrade(cfg, rev)
        with engine.connect() as conn:
            assert MigrationContext.configure(conn).get_current_heads() == (chain[-1],)
        columns = {c["name"] for c in inspect(engine).get_columns("lessons")}
        assert ("search_vector" in columns) == (engine.dialect.name == "postgresql")
        for rev in reversed(chain[:-1]):
            command.downgrade(cfg, rev)
        command.downgrade(cfg, "base")
        engine.dispose()
        assert set(inspect(engine).get_table_names()) <= {"alembic_version"}
        command.upgrade(cfg, "head")
        engine.dispose()
        assert set(Base.metadata.tables) <= set(inspect(engine).get_table_names())
    finally:
        engine.dispose()


def test_store_open_migrates_to_head_and_downgrade_to_base_works(tmp_path: Path) -> None:
    path = tmp_path / "arena.db"
    LessonStore(str(path)).close()
    url = _url(path)
    engine = create_engine(url)
    try:
        head = ScriptDirectory.from_config(alembic_config(url)).get_current_head()
        with engine.connect() as conn:
            assert MigrationContext.configure(conn).get_current_heads() == (head,)
        assert set(Base.metadata.tables) <= set(inspect(engine).get_table_names())

        command.downgrade(alembic_config(url), "base")
        engine.dispose()
        assert set(inspect(engine).get_table_names()) <= {"alembic_version"}
        with engine.connect() as conn:
            assert MigrationContext.configure(conn).get_current_heads() == ()

        command.upgrade(alembic_config(url), "head")  # and back up again
        engine.dispose()
        assert set(Base.metadata.tables) <= set(inspect(engine).get_table_names())
    finally:
        engine.dispose()
