"""Request logs: what the gateway keeps of each request, per key, team or globally.

``telemetry.request_logs`` (:mod:`~proxy.request_logs.config`) says what is kept — nothing, the
metadata, or the payloads too — and a key's or team's own ``request_logs`` overrides it. The
chain link :mod:`~proxy.request_logs.capture` takes the payloads just inside the masking plugin
(so that a masked value is never kept) and builds each request's record
(:mod:`~proxy.request_logs.records`, secrets redacted, payloads bounded) when it is over;
:mod:`~proxy.request_logs.service` queues it off the request path for the database
(:mod:`~proxy.request_logs.logs_db`, with the spend ledger's batching writer and journal) and for
the export sinks (:mod:`~proxy.request_logs.sinks`: a JSON-lines file, an OTLP logs endpoint),
and prunes the database by age.
"""
