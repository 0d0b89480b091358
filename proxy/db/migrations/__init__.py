"""Alembic migrations of the gateway's schema, run by :meth:`proxy.db.Database.open`.

Each module of ``versions/`` is one migration, named ``NNNN_what.py`` with ``revision = "NNNN"``
and ``down_revision`` the one before; adding a table group is one migration plus its module
under ``proxy/db/``. Migrations are frozen: they spell their columns out instead of importing
:mod:`proxy.db.schema`, which describes the newest state.
"""
