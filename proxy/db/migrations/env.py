"""Alembic's environment: migrate the connection that :mod:`proxy.db` hands over."""

from alembic import context

from proxy.db.schema import METADATA, VERSION_TABLE

context.configure(
    connection=context.config.attributes["connection"],
    target_metadata=METADATA,
    version_table=VERSION_TABLE,
    render_as_batch=True,  # SQLite alters tables by copying them
)
with context.begin_transaction():
    context.run_migrations()
