"""The lesson library: SQLAlchemy models, store, curation ops, migrations."""
