"""Alembic's entry point for the registry's migrations.

grpoctl runs them itself (grpoctl/registry/schema.py), on a connection it has already
opened and locked, inside its own transaction: so this file only hands that connection
to Alembic. There is no alembic.ini and no offline (SQL script) mode.
"""

from alembic import context

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=None)
with context.begin_transaction():
    context.run_migrations()
