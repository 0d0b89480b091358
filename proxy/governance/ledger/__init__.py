"""The spend ledger: one record per request, written to the database off the request path.

:mod:`proxy.governance.ledger.records` is the record and how a finished request becomes one;
:mod:`proxy.governance.ledger.writer` batches records into the database and falls back to
:mod:`proxy.governance.ledger.journal`, an append-only local file, when the database is slow or
down, replaying it (without duplicates) once the database is back.
"""
