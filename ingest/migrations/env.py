"""Alembic's entry point for the store's migrations (run by :func:`ingest.migrations.upgrade`).

Rules: online only, on the connection the caller passes in ``config.attributes["connection"]``
(already inside the caller's locked transaction, so the whole upgrade commits or rolls back
as one); the version lives in :data:`ingest.migrations.VERSION_TABLE`.
"""

from alembic import context

from ingest.migrations import VERSION_TABLE

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=None, version_table=VERSION_TABLE,
                  render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
