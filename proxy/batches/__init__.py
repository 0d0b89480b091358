"""Files and batches: ``/v1/files`` and ``/v1/batches`` (OpenAI's shapes), run by the gateway
line by line through the whole plugin chain, resumable after a restart (see ``docs/batches.md``)."""
